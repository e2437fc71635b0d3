"""Recording pytest runs into runstore through the ``DataStore`` service.

``install(config)`` is what the ``runstore`` pytest plugin calls when recording is enabled:
it registers the :class:`Annotator` wherever tests run, and the :class:`Recorder` in the
process that sees every report (a plain pytest process, or the ``pytest-xdist``
controller). A ``--collect-only`` session records nothing, and imports nothing but this
module: the names below are read from their modules on first use (PEP 562), and
``install`` imports the recorder (with the services and the database layer) only for a
session it records.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runstore._lazy import lazy_exports

if TYPE_CHECKING:
    import pytest

    from runstore.recorder._annotate import Annotator, describe_exception
    from runstore.recorder._convert import (
        ItemAssembler,
        PathResolver,
        collection_record,
        error_from_report,
        split_nodeid,
    )
    from runstore.recorder._recorder import (
        BATCH_ITEMS,
        BATCH_SECONDS,
        DEFAULT_KEEP_RUNS,
        STALE_AFTER,
        PinnedClock,
        Recorder,
        RecorderSettings,
        resolve_settings,
    )

__all__ = [
    "BATCH_ITEMS",
    "BATCH_SECONDS",
    "DEFAULT_KEEP_RUNS",
    "STALE_AFTER",
    "Annotator",
    "ItemAssembler",
    "PathResolver",
    "PinnedClock",
    "Recorder",
    "RecorderSettings",
    "collection_record",
    "describe_exception",
    "error_from_report",
    "install",
    "resolve_settings",
    "split_nodeid",
]

# Where each name of ``__all__`` but ``install`` lives (module: names); read on first access.
_NAMES_OF: dict[str, tuple[str, ...]] = {
    "_annotate": ("Annotator", "describe_exception"),
    "_convert": (
        "ItemAssembler", "PathResolver", "collection_record", "error_from_report",
        "split_nodeid",
    ),
    "_recorder": (
        "BATCH_ITEMS", "BATCH_SECONDS", "DEFAULT_KEEP_RUNS", "STALE_AFTER", "PinnedClock",
        "Recorder", "RecorderSettings", "resolve_settings",
    ),
}

if not TYPE_CHECKING:  # mypy reads the imports above; an unknown name stays an error there
    __getattr__, __dir__ = lazy_exports(__name__, _NAMES_OF)


def install(config: pytest.Config) -> None:
    """Register runstore's hooks on ``config`` for this session (see the module docstring)."""
    if config.getoption("runstore_cov_context", False) or config.getini("runstore_cov_context"):
        from runstore.recorder._coverage import enable_test_contexts

        if not enable_test_contexts(config) and not hasattr(config, "workerinput"):
            import pytest

            config.issue_config_time_warning(pytest.PytestConfigWarning(
                "--runstore-cov-context: this session is not measured by coverage (run it "
                "with pytest-cov's --cov, or under coverage run): no per-test coverage"
            ), stacklevel=2)
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: the controller records
        from runstore.recorder._annotate import Annotator
        from runstore.recorder._fingerprint import Fingerprinter

        fingerprints = Fingerprinter(str(config.rootpath))
        config.pluginmanager.register(Annotator(fingerprints=fingerprints), "runstore-annotator")
        _watch_swallowed(config)
        return
    if config.getoption("collectonly", False):
        return
    from runstore.recorder._annotate import Annotator
    from runstore.recorder._fingerprint import Fingerprinter
    from runstore.recorder._recorder import Recorder, resolve_settings

    recorder = Recorder(config, resolve_settings(config))
    annotator = Annotator(recorder.note_markers, Fingerprinter(str(config.rootpath)),
                          recorder.note_fingerprint)
    config.pluginmanager.register(annotator, "runstore-annotator")
    _watch_swallowed(config)
    config.pluginmanager.register(recorder, "runstore-recorder")


def _watch_swallowed(config: pytest.Config) -> None:
    """With the ``flaky`` plugin loaded (by its entry point ``flaky`` or as a module of the
    ``flaky`` package), register the hooks that keep the attempts it runs but does not
    report (``runstore.recorder._swallowed``)."""
    names = (getattr(p, "__name__", "") for p in config.pluginmanager.get_plugins())
    if config.pluginmanager.hasplugin("flaky") or any(
        isinstance(n, str) and n.partition(".")[0] == "flaky" for n in names
    ):
        from runstore.recorder._swallowed import SwallowedReports

        config.pluginmanager.register(SwallowedReports(), "runstore-swallowed")
