"""The ``runstore`` pytest plugin: record test runs with ``pytest --runstore``.

Loaded by pytest through the ``pytest11`` entry point. It only registers its options here;
everything else (the recorder, the database layer) is imported when recording is enabled,
so an installed but disabled plugin costs one module of option definitions.

Options:

- ``--runstore`` or the ini value ``runstore = true``: record this run.
- ``--runstore-db PATH``: the database file, or a ``postgresql://`` URL (the password never
  appears in pytest's output) (default: ``$RUNSTORE_DB``, else the project's
  ``.runstore/runstore.db`` at pytest's rootdir, whichever folder pytest runs from; the
  CLI finds it walking up). A blank path or a directory is a usage error, worded as the
  CLI's. A ``.runstore`` folder the plugin creates gets a ``.gitignore`` holding ``*``.
- ``--runstore-project NAME``: the project the run belongs to (default: the ini value
  ``runstore_project``, else the name of pytest's rootdir).
- ``--runstore-keep-runs N`` or ini ``runstore_keep_runs``: after each recorded run keep
  the newest N runs per project (default 400, a year of daily CI with room to spare; 0
  keeps every run). ``--runstore-max-age-days DAYS`` or ini ``runstore_max_age_days``: also
  drop runs older than that (default: no age limit; 0 is none). A running run is never
  pruned; ``-v`` prints what was removed.
- ``--runstore-session ID`` (default: ``$RUNSTORE_SESSION_ID``; empty is unset): the agent
  session the run is recorded for (``runstore runs --session ID`` lists them). A blank id,
  one longer than 256 characters or holding a control character is a usage error.
- ``--runstore-cov-context`` or ini ``runstore_cov_context = true``: record which tests
  executed which lines (``runstore tests-for``) in a session measured with pytest-cov
  (``--cov``) or ``coverage run``, by turning on a coverage context per test: pytest-cov's
  own ``--cov-context=test``, which this sets when it was not given.
- The quarantine (``.runstore-quarantine.toml`` at the rootdir, see ``runstore.quarantine``):
  in a recorded session a quarantined test runs and is recorded as before, and when every
  failure is quarantined the exit status becomes 0 (see ``runstore.recorder._quarantine``).
- ``--runstore-repeat N``: run each selected test N times in one process (recorded or
  not); every execution but the last is reported ``rerun`` and stored as an earlier
  attempt of source ``repeat``. A test whose executions flipped fails the session. A
  usage error with pytest-rerunfailures' ``--reruns`` (see ``runstore.recorder._repeat``).
- ``--runstore-efd`` or ini ``runstore_efd = true``: early flake detection. Tests the
  database has no record of in this project are repeated after their first execution,
  by Datadog's table of executions per duration, at most ``--runstore-efd-max K`` (ini
  ``runstore_efd_max``, default 10) executions each and within ``--runstore-efd-budget
  SECONDS`` (ini ``runstore_efd_budget``) for the session; a new test that flips fails the
  session. It stands down when more than 30 % of the selected tests are new.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest

__all__ = ["pytest_addoption", "pytest_configure"]


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register runstore's command-line options and ini values."""
    group = parser.getgroup("runstore", "record test runs into a runstore database")
    group.addoption(
        "--runstore",
        action="store_true",
        default=False,
        dest="runstore",
        help="record this run into the runstore database (ini: runstore = true).",
    )
    group.addoption(
        "--runstore-db",
        action="store",
        default=None,
        dest="runstore_db",
        metavar="PATH",
        help="runstore database file or postgresql:// URL (default: $RUNSTORE_DB, else "
        ".runstore/runstore.db "
        "under the invocation directory).",
    )
    group.addoption(
        "--runstore-project",
        action="store",
        default=None,
        dest="runstore_project",
        metavar="NAME",
        help="project name for the recorded run (default: ini runstore_project, else the "
        "rootdir name).",
    )
    group.addoption(
        "--runstore-keep-runs",
        action="store",
        default=None,
        dest="runstore_keep_runs",
        metavar="N",
        help="after the run keep the newest N runs per project (default: ini "
        "runstore_keep_runs, else 400; 0 keeps every run).",
    )
    group.addoption(
        "--runstore-max-age-days",
        action="store",
        default=None,
        dest="runstore_max_age_days",
        metavar="DAYS",
        help="after the run also drop runs older than DAYS (default: ini "
        "runstore_max_age_days, else no age limit).",
    )
    group.addoption(
        "--runstore-session",
        action="store",
        default=None,
        dest="runstore_session",
        metavar="ID",
        help="the agent session this run belongs to (default: $RUNSTORE_SESSION_ID).",
    )
    group.addoption(
        "--runstore-cov-context",
        action="store_true",
        default=False,
        dest="runstore_cov_context",
        help="record per-test coverage: turn on pytest-cov's --cov-context=test (ini: "
        "runstore_cov_context = true).",
    )
    group.addoption(
        "--runstore-repeat",
        action="store",
        default=None,
        dest="runstore_repeat",
        metavar="N",
        help="run each selected test N times in one process; a test whose executions "
        "flipped fails the session.",
    )
    group.addoption(
        "--runstore-efd",
        action="store_true",
        default=False,
        dest="runstore_efd",
        help="early flake detection: repeat the tests new to the database, and fail the "
        "session when one flips (ini: runstore_efd = true).",
    )
    group.addoption(
        "--runstore-efd-max",
        action="store",
        default=None,
        dest="runstore_efd_max",
        metavar="K",
        help="most executions of one new test (default: ini runstore_efd_max, else 10).",
    )
    group.addoption(
        "--runstore-efd-budget",
        action="store",
        default=None,
        dest="runstore_efd_budget",
        metavar="SECONDS",
        help="seconds the session may spend repeating new tests (default: ini "
        "runstore_efd_budget, else 60 plus 5 times the new tests' first executions).",
    )
    parser.addini("runstore", "record every run into the runstore database", type="bool",
                  default=False)
    parser.addini("runstore_cov_context", "record per-test coverage (a coverage context "
                  "per test)", type="bool", default=False)
    parser.addini("runstore_efd", "early flake detection: repeat the tests new to the "
                  "database", type="bool", default=False)
    parser.addini("runstore_efd_max", "most executions of one new test", default="")
    parser.addini("runstore_efd_budget", "seconds a session may spend repeating new tests",
                  default="")
    parser.addini("runstore_project", "project name for recorded runs", default="")
    parser.addini("runstore_keep_runs", "runs kept per project after each recorded run "
                  "(0 keeps every run)", default="")
    parser.addini("runstore_max_age_days", "drop recorded runs older than this many days "
                  "after each recorded run", default="")


def pytest_configure(config: pytest.Config) -> None:
    """Install the repeats and the recorder when enabled; do nothing otherwise.

    Raises ``pytest.UsageError`` for ``--runstore-efd-max`` or ``--runstore-efd-budget``
    given while early flake detection is off (the ini values are defaults for when it is
    on, and are not checked then)."""
    import pytest

    efd = config.getoption("runstore_efd", False) or config.getini("runstore_efd")
    for dest, flag in (("runstore_efd_max", "--runstore-efd-max"),
                       ("runstore_efd_budget", "--runstore-efd-budget")):
        if not efd and config.getoption(dest, None) is not None:
            raise pytest.UsageError(f"'{flag}' sets early flake detection, which is off: add "
                                    "'--runstore-efd' (or ini runstore_efd = true)")
    if config.getoption("runstore_repeat", None) is not None or efd:
        from runstore.recorder._repeat import install_repeats

        install_repeats(config)
    if not (config.getoption("runstore", False) or config.getini("runstore")):
        return
    from runstore.recorder import install

    install(config)
