"""Facts about a test that only the process running it knows, attached to its reports.

pytest's report objects carry the structure of an error (crash location, traceback entries,
the cause chain) but not the qualified exception type, the function of each frame, or the
item's markers. The process that runs the test (the only process without ``pytest-xdist``,
a worker with it) adds them to the report as plain data, which ``pytest-xdist`` serializes
along with the report, so the controller that records sees the same facts as a serial run:

- ``report.runstore_markers``: sorted marker names of the item (on the setup report, when it
  has any; a recording process takes them through a callback instead, because pytest keeps
  every report until the session ends and one more attribute costs each of them memory);
- ``report.runstore_exc``: the exception chain of a failing report, oldest cause first, as a
  list of ``{"type": str, "message": str, "frames": [[path, line, function], ...]}``
  (frames outermost first, at most ``MAX_FRAMES`` innermost ones; ``message`` is the
  exception-only line as ``traceback`` formats it, which survives a ``__str__`` that raises;
  for a ``SyntaxError`` without the location lines before it). On a test report (a phase
  or a subtest) these are the facts of the exception itself, never of the text pytest
  formatted under ``--tb``: ``frames`` are the ones pytest's long report shows for the
  item (its own traceback filter: cut to the test, without pytest's frames and those
  marked ``__tracebackhide__``; every frame under ``--fulltrace``), and each exception
  with a traceback also has ``"crash": str``, pytest's crash message
  (``ExceptionInfo.exconly(tryshort=True)``, the text of ``longrepr.reprcrash`` and of
  ``--junitxml``'s ``message``). So the error, its frames and its failure signature are
  the same under every ``--tb`` style, although ``--tb=line``, ``no`` and ``native`` print
  no frame location and ``native`` no cause;
- ``report.runstore_fingerprint``: the code fingerprint of the item when it finished (on the
  teardown report; ``runstore.recorder._fingerprint``), given to a recording process
  through a callback instead, as the markers are.
"""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Callable, Generator
from types import TracebackType
from typing import Any

import pytest

from runstore.recorder._fingerprint import Fingerprinter
from runstore.recorder._text import safe_str
from runstore.services.test_runs import MAX_FRAMES

__all__ = [
    "EXC_ATTR",
    "FINGERPRINT_ATTR",
    "MARKERS_ATTR",
    "REPEAT_ATTR",
    "Annotator",
    "MarkersSink",
    "describe_exception",
    "type_name",
]

MARKERS_ATTR = "runstore_markers"
EXC_ATTR = "runstore_exc"
FINGERPRINT_ATTR = "runstore_fingerprint"
REPEAT_ATTR = "runstore_repeat"
"""Set by runstore's own repeats (``runstore.recorder._repeat``): on each report of an
earlier execution ``{"outcome": <pytest's outcome>, "execution": k}`` (its ``outcome`` is
then ``rerun``), on the last execution's teardown report ``{"execution": k, "planned": p,
"new": bool}``."""

_MAX_CHAIN = 16
"""Most exceptions of one cause chain described (the innermost ones are kept)."""


def type_name(cls: type[BaseException]) -> str:
    """The exception type as ``traceback`` prints it: ``module.QualName``, builtins bare."""
    module = getattr(cls, "__module__", None)
    qualname = getattr(cls, "__qualname__", None) or getattr(cls, "__name__", "?")
    if module in (None, "builtins", "__main__"):
        return str(qualname)
    return f"{module}.{qualname}"


def _frames(tb: TracebackType | None) -> list[list[Any]]:
    frames: list[list[Any]] = []
    while tb is not None:
        code = tb.tb_frame.f_code
        frames.append([safe_str(code.co_filename), tb.tb_lineno, safe_str(code.co_name)])
        tb = tb.tb_next
    return frames[-MAX_FRAMES:]


def _exception_only(exc: BaseException) -> str:
    """The exception-only text as ``traceback`` formats it, without the location display
    that leads a ``SyntaxError``'s (``  File "...", line 1``, the source line, the caret):
    the message is the error line, ``SyntaxError: invalid syntax``, and its notes."""
    try:
        lines = traceback.format_exception_only(type(exc), exc)
        if isinstance(exc, SyntaxError):
            text = "".join(lines).splitlines(keepends=True)
            while len(text) > 1 and text[0][:1].isspace():
                text.pop(0)
            lines = text
        return safe_str("".join(lines).rstrip("\n"))
    except Exception:
        return type_name(type(exc))


def _shown(item: pytest.Item, exc: BaseException) -> dict[str, Any]:
    """The frames pytest's long report shows of ``exc`` raised in ``item``, and its crash
    message (module docstring); ``{}`` for an exception without a traceback."""
    if exc.__traceback__ is None:
        return {}
    excinfo = pytest.ExceptionInfo.from_exception(exc)
    entries = item._traceback_filter(excinfo)  # what ``Node._repr_failure_py`` shows
    frames = [[safe_str(str(e.path)), e.lineno + 1, safe_str(e.name)] for e in entries]
    return {"frames": frames[-MAX_FRAMES:], "crash": safe_str(excinfo.exconly(tryshort=True))}


def describe_exception(
    exc: BaseException, item: pytest.Item | None = None
) -> list[dict[str, Any]]:
    """Describe ``exc`` and the exceptions it was raised from, oldest cause first.

    The chain follows ``__cause__``, else ``__context__`` unless suppressed, as pytest's own
    report does. With the ``item`` whose test raised it, each exception's frames are the
    ones pytest's report of the item shows, with the crash message (module docstring); when
    reading them fails, the frames are the whole traceback's. Never raises.
    """
    chain: list[dict[str, Any]] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(chain) < _MAX_CHAIN:
        seen.add(id(current))
        fact = {"type": type_name(type(current)), "message": _exception_only(current)}
        shown: dict[str, Any] = {}
        if item is not None:
            with contextlib.suppress(Exception):
                shown = _shown(item, current)
        fact.update(shown or {"frames": _frames(current.__traceback__)})
        chain.append(fact)
        if current.__cause__ is not None:
            current = current.__cause__
        elif current.__context__ is not None and not current.__suppress_context__:
            current = current.__context__
        else:
            current = None
    chain.reverse()
    return chain


MarkersSink = Callable[[str, list[str]], None]
"""Takes (node id, sorted marker names) of an item about to report its setup."""

FingerprintSink = Callable[[str, str | None], None]
"""Takes (node id, code fingerprint or None) of an item about to report its teardown."""


class Annotator:
    """pytest hooks that attach :data:`MARKERS_ATTR` and :data:`EXC_ATTR` to reports.

    Registered wherever tests run while recording is enabled; it never changes an outcome.
    With ``on_markers`` (in the process that records) markers go there instead of onto the
    report.
    """

    def __init__(
        self,
        on_markers: MarkersSink | None = None,
        fingerprints: Fingerprinter | None = None,
        on_fingerprint: FingerprintSink | None = None,
    ) -> None:
        self._on_markers = on_markers
        self._fingerprints = fingerprints
        self._on_fingerprint = on_fingerprint

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        try:
            if call.when == "setup":
                names = sorted({m.name for m in item.iter_markers()})
                if self._on_markers is not None:
                    self._on_markers(report.nodeid, names)
                elif names:
                    setattr(report, MARKERS_ATTR, names)
            if call.excinfo is not None and report.outcome == "failed":
                setattr(report, EXC_ATTR, describe_exception(call.excinfo.value, item))
            if call.when == "teardown" and self._fingerprints is not None:
                fingerprint = self._fingerprints.cheap(str(item.path))
                if self._on_fingerprint is not None:
                    self._on_fingerprint(report.nodeid, fingerprint)
                elif fingerprint is not None:
                    setattr(report, FINGERPRINT_ATTR, fingerprint)
        except Exception:  # never let describing a report break the run
            pass
        return report

    def pytest_exception_interact(
        self,
        node: pytest.Item | pytest.Collector,
        call: pytest.CallInfo[Any],
        report: pytest.CollectReport | pytest.TestReport,
    ) -> None:
        # The one public hook that sees the exception of a failed collector, called before
        # ``pytest_collectreport`` (and before a worker sends the report on).
        if not isinstance(report, pytest.CollectReport) or call.excinfo is None:
            return
        with contextlib.suppress(Exception):
            setattr(report, EXC_ATTR, describe_exception(call.excinfo.value))
