"""The contract every ``DataStore`` / ``DataReader`` layer must meet, shipped for third parties.

Three parts:

- **Strategies** (``node_ids``, ``error_infos``, ``item_results``, ...) that generate the awkward
  inputs a real test runner produces: node ids with ``::``, brackets, spaces, any Unicode and
  NUL; messages with lone surrogates or far beyond ``MAX_MESSAGE_CHARS``; deep cause chains.
- **The state machine** (:func:`test_runs_state_machine`): a hypothesis ``RuleBasedStateMachine``
  that drives the layer under test beside the in-memory layer (the model) with the same calls
  and compares the whole ``Result`` of every call, and after every step the whole result of
  every reader query. Run ids are opaque: the machine maps the layer's ids onto the model's
  (and checks they are never reused and grow with creation order) instead of demanding equal
  numbers.
- **Contract base classes** (:class:`TestRunsStoreContract`, :class:`TestRunsReaderContract`):
  pytest classes with example tests of the documented semantics, parametrized by a factory fixture.
  A test module subclasses them and says how to make the layer::

      class TestSqliteDataStore(TestRunsStoreContract):
          def make_layer(self) -> Layer:
              return sqlite(":memory:")

  or overrides the ``layer_factory`` fixture when the factory needs other fixtures
  (``tmp_path`` for a file database). The factory is called once per test and once per
  hypothesis example, and must return a layer providing ``DataStore`` and ``DataReader`` on a
  fresh, empty store. The contract provides its own ``Clock`` (a ``FixedClock``) on top.
"""

from __future__ import annotations

import functools
import itertools
import math
import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, TypeVar

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)
from returns.result import Failure, Result, Success

from runstore.layers import Container, Layer, build, in_memory, merge
from runstore.services.clock import Clock, FixedClock
from runstore.services.errors import IllegalTransition, InvalidInput, NotFound
from runstore.services.pagination import MAX_PAGE_SIZE, Page
from runstore.services.test_runs import (
    DEFAULT_HISTORY_WINDOW,
    FAILING_OUTCOMES,
    HISTORY_DEPTH,
    MAX_CAPTURE_CHARS,
    MAX_FRAMES,
    MAX_MESSAGE_CHARS,
    MAX_TEXT_CHARS,
    AttemptSource,
    Classification,
    CollectionError,
    DataReader,
    DataStore,
    Environment,
    ErrorInfo,
    EvidenceRule,
    FileCoverage,
    Outcome,
    Phase,
    PhaseResult,
    PruneRunsResult,
    RunId,
    RunRetentionPolicy,
    RunStart,
    RunStatus,
    RunSummary,
    Selection,
    StackFrame,
    SubtestResult,
    TestClassification,
    TestDetail,
    TestRecord,
    TestResult,
    derive_outcome,
)
from runstore.testing._shared import LayerFactory
from runstore.testing._test_runs_attempts import AttemptsContract
from runstore.testing._test_runs_cells import CellsContract
from runstore.testing._test_runs_coverage import (
    COVERED_PATHS,
    TestCoverageContract,
    lines_per_test,
)
from runstore.testing._test_runs_fingerprint import FingerprintContract, code_fingerprints
from runstore.testing._test_runs_links import (
    RunLinksReaderContract,
    RunLinksStoreContract,
    changed_file_lists,
    session_ids,
)
from runstore.testing._test_runs_policy import FlakyPolicyContract
from runstore.testing._test_runs_prune import PruneProgressContract, check_progress_calls
from runstore.testing._test_runs_quarantine import QuarantineContract
from runstore.testing._test_runs_signatures import (
    SignaturesReaderContract,
    SignaturesStoreContract,
)

__all__ = [
    "DAY_MS",
    "T0_MS",
    "TestRunsMachine",
    "TestRunsReaderContract",
    "TestRunsStoreContract",
    "collection_errors",
    "environments",
    "error_infos",
    "file_coverages",
    "free_text",
    "git_states",
    "huge_text",
    "item_results",
    "make_item",
    "node_ids",
    "phases_for",
    "reference_streak",
    "reference_verdict",
    "rerun_item",
    "selections",
    "stack_frames",
    "test_runs_state_machine",
    "utc",
]

T = TypeVar("T")


_EVERYTHING = Selection()
"""The selection of a run that narrowed nothing."""

_NO_GIT = Environment()
"""An environment without git information (nor anything else)."""

T0_MS = 1_700_000_000_000
"""Where the contract's clock starts (epoch ms, 2023-11-14T22:13:20Z)."""

DAY_MS = 86_400_000
HOUR_MS = 3_600_000


def utc(ms: int) -> datetime:
    """Return the aware UTC datetime of epoch milliseconds ``ms``."""
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)


# -- strategies --------------------------------------------------------------------------------

_ODD_PIECES = (
    "::", "[", "]", " ", "/", "-", ".", "_", "%", "*", "?", "\\", "'", '"', "\t",
    "ß", "é", "e\u0301", "ǅ", "İ", "😀", "👩‍👩‍👧", "中文", "\u200b", "\u202e", "\ufeff",
    "A", "a", "test", "Test", "::()", "[1-2]", "[a b]",
)
"""Pieces of identifiers: no NUL, which identifiers may not hold (free text adds it)."""

_IDENTIFIER_TEXT = st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00")


@functools.cache
def _pieces(min_size: int = 1, max_size: int = 4) -> st.SearchStrategy[str]:
    piece = st.one_of(
        st.sampled_from(_ODD_PIECES), st.text(_IDENTIFIER_TEXT, min_size=1, max_size=3)
    )
    return st.lists(piece, min_size=min_size, max_size=max_size).map("".join)


@functools.cache
def node_ids() -> st.SearchStrategy[str]:
    """Pytest-like node ids, stored verbatim: ``path::Class::name[param]`` built from odd
    pieces (``::`` inside names, brackets, spaces, combining marks, emoji, bidi controls,
    ``%`` and ``_`` that a careless LIKE would treat as wildcards), plus plain text.
    Never empty and never with lone surrogates or NUL (those make an invalid identifier)."""
    structured = st.builds(
        lambda path, names, param: path + "".join("::" + n for n in names)
        + ("" if param is None else f"[{param}]"),
        _pieces(),
        st.lists(_pieces(), min_size=0, max_size=2),
        st.none() | _pieces(max_size=3),
    )
    return st.one_of(structured, st.text(_IDENTIFIER_TEXT, min_size=1, max_size=20))


@functools.cache
def free_text(max_size: int = 30) -> st.SearchStrategy[str]:
    """Free text (messages, output): any Unicode including NUL and lone surrogates."""
    surrogate = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
    return st.one_of(
        st.text(max_size=max_size),
        st.lists(
            st.one_of(st.sampled_from((*_ODD_PIECES, "\x00")), surrogate), max_size=6
        ).map("".join),
    )


@functools.cache
def huge_text(limit: int) -> st.SearchStrategy[str]:
    """Text right around ``limit`` characters (just under, at, and beyond it), built cheaply."""
    return st.builds(
        lambda unit, n: (unit * n)[: max(n, 0)],
        st.sampled_from(["x", "é", "😀", "ab\n"]),
        st.integers(limit - 2, limit + 40),
    )


@functools.cache
def _messages() -> st.SearchStrategy[str]:
    numbered = st.builds(
        lambda a, b, addr: f"assert {a} == {b} at 0x{addr:x} in '/tmp/t{a}.py'",
        st.integers(0, 10_000), st.integers(0, 10_000), st.integers(0, 2**48),
    )
    return st.one_of(
        st.sampled_from(["", "assert False", "boom", "expected 1 got 2"]),
        numbered,
        free_text(),
        huge_text(MAX_MESSAGE_CHARS),
    )


@functools.cache
def stack_frames() -> st.SearchStrategy[StackFrame]:
    """Stack frames from a small pool of paths (so files repeat across runs)."""
    return st.builds(
        StackFrame,
        path=st.sampled_from(["src/app/a.py", "src/app/b.py", "tests/test_x.py", "/usr/lib/x.py"])
        | _pieces(max_size=2),
        line=st.none() | st.integers(1, 10_000),
        function=st.sampled_from(["f", "<module>", "test_it", "__call__"]) | _pieces(max_size=2),
        is_project=st.booleans(),
    )


@functools.cache
def error_infos(
    phase: Phase | None = None, *, max_causes: int = 2, max_frames: int = 4
) -> st.SearchStrategy[ErrorInfo]:
    """Errors with frames (outermost first) and a cause chain of up to ``max_causes``."""
    one = st.builds(
        ErrorInfo,
        phase=st.just(phase) if phase is not None else st.sampled_from(list(Phase)),
        exception_type=st.sampled_from(
            ["AssertionError", "ValueError", "pkg.mod.Error", "KeyError", "Ünïcode.Err"]
        ),
        message=_messages(),
        text=st.one_of(free_text(), huge_text(MAX_TEXT_CHARS)),
        frames=st.one_of(
            st.lists(stack_frames(), max_size=max_frames).map(tuple),
            st.builds(
                lambda f, n: (f,) * n, stack_frames(), st.integers(MAX_FRAMES - 1, MAX_FRAMES + 3)
            ),
        ),
    )

    def chain(errors: list[ErrorInfo]) -> ErrorInfo:
        cause: ErrorInfo | None = None
        for error in reversed(errors):
            cause = attrs.evolve(error, cause=cause)
        assert cause is not None
        return cause

    return st.lists(one, min_size=1, max_size=1 + max_causes).map(chain)


@functools.cache
def _durations() -> st.SearchStrategy[float]:
    # Multiples of 1/8 ms: sums of a few are exact in binary floating point, so a layer that
    # adds durations in another order still gets the same total.
    return st.integers(0, 8 * 100_000).map(lambda k: k / 8)


@functools.cache
def phases_for(outcome: Outcome) -> st.SearchStrategy[tuple[PhaseResult, ...]]:
    """Phases (setup, call, teardown) from which ``derive_outcome`` gives ``outcome``."""
    d = _durations()

    def p(phase: Phase, o: Outcome, reason: str | None = None) -> st.SearchStrategy[PhaseResult]:
        return st.builds(PhaseResult, st.just(phase), st.just(o), d, st.just(reason))

    ok_setup, ok_call, ok_down = (
        p(Phase.SETUP, Outcome.PASSED), p(Phase.CALL, Outcome.PASSED),
        p(Phase.TEARDOWN, Outcome.PASSED),
    )
    options: dict[Outcome, list[st.SearchStrategy[tuple[PhaseResult, ...]]]] = {
        Outcome.PASSED: [st.tuples(ok_setup, ok_call, ok_down), st.tuples(ok_call)],
        Outcome.FAILED: [st.tuples(ok_setup, p(Phase.CALL, Outcome.FAILED), ok_down)],
        Outcome.ERROR: [
            st.tuples(p(Phase.SETUP, Outcome.FAILED), ok_down),
            st.tuples(ok_setup, ok_call, p(Phase.TEARDOWN, Outcome.FAILED)),
        ],
        Outcome.SKIPPED: [
            st.tuples(p(Phase.SETUP, Outcome.SKIPPED, "skip marker"), ok_down),
            st.tuples(ok_setup, p(Phase.CALL, Outcome.SKIPPED, "skipped inside"), ok_down),
        ],
        Outcome.XFAILED: [
            st.tuples(ok_setup, p(Phase.CALL, Outcome.XFAILED, "known bug"), ok_down),
            st.tuples(p(Phase.SETUP, Outcome.XFAILED, "run=False"), ok_down),
        ],
        Outcome.XPASSED: [st.tuples(ok_setup, p(Phase.CALL, Outcome.XPASSED), ok_down)],
    }
    return st.one_of(options[outcome])


def _module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0] or nodeid


def item_results(
    nodeid: st.SearchStrategy[str] | None = None,
    outcome: st.SearchStrategy[Outcome] | None = None,
    *,
    attempts: bool = True,
) -> st.SearchStrategy[TestResult]:
    """Valid test results: phases consistent with the outcome, errors on failing phases,
    bounded-or-huge captured output, rerun attempts and subtests now and then."""
    node = nodeid if nodeid is not None else node_ids()
    outcomes = outcome if outcome is not None else st.sampled_from(list(Outcome))
    params = st.none() | _pieces(max_size=2)
    lines = st.none() | st.integers(1, 5_000)
    markers = st.lists(st.sampled_from(["slow", "db", "ünï", "a b", "x[1]"]), unique=True)
    output = st.one_of(st.just(""), free_text(), huge_text(MAX_CAPTURE_CHARS))
    earlier_items = (
        st.lists(item_results(st.just("-"), attempts=False), max_size=2)
        if attempts else st.just([])
    )
    subtest_lists = st.lists(
        st.builds(
            SubtestResult,
            description=_pieces(max_size=2),
            outcome=st.sampled_from([Outcome.PASSED, Outcome.FAILED, Outcome.SKIPPED]),
            duration_ms=_durations(),
            error=st.none() | error_infos(Phase.CALL, max_causes=0),
        ),
        max_size=2,
    )
    one_in_six = st.integers(0, 5)

    @st.composite
    def build_one(draw: st.DrawFn) -> TestResult:
        nid = draw(node)
        out = draw(outcomes)
        phases = draw(phases_for(out))
        failing = [ph for ph in phases if ph.outcome == Outcome.FAILED]
        errors = tuple(draw(error_infos(ph.phase)) for ph in failing)
        name = nid.split("::", 1)[1] if "::" in nid else nid
        module = _module_of(nid)
        earlier: tuple[TestResult, ...] = ()
        if attempts and draw(one_in_six) == 0:
            earlier = tuple(
                attrs.evolve(a, nodeid=nid, module_path=module, name=name,
                             source=draw(st.sampled_from(list(AttemptSource))))
                for a in draw(earlier_items)
            )
        subtests = tuple(draw(subtest_lists)) if draw(one_in_six) == 0 else ()
        return TestResult(
            nodeid=nid,
            module_path=module,
            name=name,
            phases=phases,
            parametrize_id=draw(params),
            line=draw(lines),
            markers=tuple(draw(markers)),
            errors=errors,
            stdout=draw(output),
            stderr=draw(st.sampled_from(["", "warning\n"])),
            log=draw(st.sampled_from(["", "INFO x\n"])),
            attempts=earlier,
            subtests=subtests,
            fingerprint=draw(code_fingerprints()),
        )

    return build_one()


@functools.cache
def collection_errors(nodeid: st.SearchStrategy[str] | None = None) -> st.SearchStrategy[
    CollectionError
]:
    """Collection errors of modules (phase ``collect``)."""
    node = nodeid if nodeid is not None else st.sampled_from(
        ["tests/test_broken.py", "tests/sub dir/test_ü.py", "tests/test_[x].py"]
    )
    return st.builds(
        lambda nid, err: CollectionError(nid, _module_of(nid), err),
        node,
        error_infos(Phase.COLLECT, max_causes=1),
    )


def file_coverages(paths: Sequence[str] = ("src/app/a.py", "src/app/b.py", "src/ü x.py")) -> (
    st.SearchStrategy[tuple[FileCoverage, ...]]
):
    """Valid coverage of distinct files from ``paths``."""

    @st.composite
    def one(draw: st.DrawFn, path: str) -> FileCoverage:
        statements = draw(st.integers(0, 500))
        branches = draw(st.integers(0, 100))
        missing_lines = tuple(sorted(draw(st.sets(st.integers(1, 2_000), max_size=5))))
        return FileCoverage(
            path=path,
            statements=statements,
            missing_statements=draw(st.integers(0, statements)),
            branches=branches,
            partial_branches=draw(st.integers(0, branches)),
            missing_branches=draw(st.integers(0, branches)),
            missing_lines=missing_lines,
        )

    return st.lists(st.sampled_from(list(paths)), unique=True, max_size=len(paths)).flatmap(
        lambda chosen: st.tuples(*(one(p) for p in chosen))
    )


@functools.cache
def environments() -> st.SearchStrategy[Environment]:
    """Environments, with and without git information (a commit from a pool of two, so
    runs share commits, and a clean, dirty or unknown tree)."""
    return st.builds(
        Environment,
        python_version=st.sampled_from(["3.11.9", "3.13.0", ""]),
        pytest_version=st.sampled_from(["8.3.4", "9.0.0"]),
        platform=st.sampled_from(["linux", "darwin", "win32"]),
        git_commit=st.none() | st.sampled_from(["0" * 40, "abc123"]),
        git_branch=st.none() | st.sampled_from(["main", "feature/ü x"]),
        command_line=st.lists(_pieces(max_size=2), max_size=3).map(tuple),
        host=st.sampled_from(["", "ci-1"]),
        pid=st.none() | st.integers(1, 2**22),
        git_dirty=st.sampled_from([None, False, False, True]),
        git_changed_files=st.none() | changed_file_lists(4),
        git_changed_files_truncated=st.just(False),
    ).flatmap(
        lambda env: st.just(env) if env.git_changed_files is None else st.builds(
            attrs.evolve, st.just(env), git_changed_files_truncated=st.booleans()
        )
    )


@functools.cache
def git_states() -> st.SearchStrategy[Environment]:
    """Small environments that only differ in git state: a commit from a pool of two (or
    none) and a clean, dirty or unknown tree; whole runs use them so that the same-commit
    rule has runs to compare."""
    return st.builds(
        Environment,
        git_commit=st.sampled_from([None, "c0ffee", "c0ffee", "decade"]),
        git_dirty=st.sampled_from([None, False, False, True]),
    )


@functools.cache
def selections() -> st.SearchStrategy[Selection]:
    """What a run was asked to run: mostly everything, sometimes narrowed (paths, ``-k``,
    ``-m``, ``--lf``, ``-x``, deselected items), with odd free text."""
    return st.one_of(
        st.just(Selection()),
        st.builds(
            Selection,
            args=st.lists(st.sampled_from(["tests", "tests/test_a.py::test_one", "x y"])
                          | free_text(8), max_size=2).map(tuple),
            keyword=st.none() | st.sampled_from(["slow", "not db"]) | free_text(6),
            markexpr=st.none() | st.sampled_from(["smoke"]),
            last_failed=st.booleans(),
            failed_first=st.booleans(),
            maxfail=st.sampled_from([0, 0, 1, 3]),
            deselected=st.sampled_from([0, 0, 2]),
            collected=st.none() | st.integers(0, 50),
        ),
    )


# -- comparing results across layers --------------------------------------------------------------

_RUN_ID_FIELDS = frozenset({"id", "run_id", "run_a", "run_b", "source_run_id", "last_run_id",
                            "first_seen_run_id", "last_seen_run_id"})
_RUN_KEYED_ENTITIES = frozenset({"run", "coverage", "test_run", "runs"})


def _translate(value: Any, ids: dict[int, int]) -> Any:
    """Rewrite every run id inside ``value`` (a Result, record, tuple) through ``ids``.

    Ids missing from ``ids`` are left as they are (unknown ids are passed to both layers
    unchanged).
    """
    if isinstance(value, Success):
        return Success(_translate(value.unwrap(), ids))
    if isinstance(value, Failure):
        return Failure(_translate(value.failure(), ids))
    if isinstance(value, NotFound | IllegalTransition):
        if value.entity in _RUN_KEYED_ENTITIES and value.key.isdigit():
            return attrs.evolve(value, key=str(ids.get(int(value.key), int(value.key))))
        return value
    if isinstance(value, Page):
        return Page(_translate(value.items, ids), value.has_more, value.next_cursor)
    if isinstance(value, tuple):
        return tuple(_translate(v, ids) for v in value)
    if attrs.has(type(value)):
        changes = {}
        for field in attrs.fields(type(value)):
            current = getattr(value, field.name)
            if field.name in _RUN_ID_FIELDS and isinstance(current, int):
                changes[field.name] = ids.get(current, current)
            elif field.name == "runs" and isinstance(current, tuple):  # TestsFor.runs
                changes[field.name] = _run_ids(current, ids)
            elif isinstance(current, tuple) and current and attrs.has(type(current[0])):
                changes[field.name] = _translate(current, ids)
        return attrs.evolve(value, **changes) if changes else value
    return value


def _run_ids(values: tuple[Any, ...], ids: dict[int, int]) -> Any:
    """A tuple of run ids (``TestsFor.runs``) rewritten through ``ids``."""
    return tuple(ids.get(v, v) for v in values)


def _page_shape(result: Result[Any, Any]) -> Result[Any, Any]:
    """A page result with its opaque cursor reduced to whether there is one."""
    if isinstance(result, Success) and isinstance(result.unwrap(), Page):
        page = result.unwrap()
        return Success(Page(page.items, page.has_more, None if page.next_cursor is None else "+"))
    return result


# -- the state machine ----------------------------------------------------------------------------

PROJECTS = ("alpha", "bêta")
INVOCATIONS = ("inv-1", "inv-2", "inv-3")
SESSIONS = ("s-1", "s-2")
"""Agent sessions the machine's runs name (and ``list_runs`` filters by)."""
UNKNOWN_RUN = RunId(987_654_321)


def _open(stack: ExitStack, factory: LayerFactory, clock: FixedClock) -> Container:
    clock_layer = Layer.value(Clock, clock)
    return stack.enter_context(build(merge(factory(), clock_layer)))


class TestRunsMachine(RuleBasedStateMachine):
    """Drives the layer under test beside the model with the same calls; see the module doc.

    Use :func:`test_runs_state_machine` to bind a layer factory; ``model_factory`` defaults to
    the in-memory layer.
    """

    __test__ = False

    layer_factory: ClassVar[LayerFactory]
    model_factory: ClassVar[LayerFactory] = staticmethod(in_memory)
    projects: ClassVar[tuple[str, ...]] = PROJECTS
    """Projects the machine writes to (a subclass may narrow them to reach deep states)."""
    invocations: ClassVar[tuple[str, ...]] = INVOCATIONS
    """Invocation ids the machine uses; shared by projects, so coverage has siblings."""
    max_nodeids: ClassVar[int] = 6
    """The most node ids in the machine's pool."""

    def __init__(self) -> None:
        super().__init__()
        self._stack = ExitStack()
        self.clock = FixedClock(T0_MS)
        try:
            sut = _open(self._stack, type(self).layer_factory, self.clock)
            model = _open(self._stack, type(self).model_factory, self.clock)
        except BaseException:
            self._stack.close()
            raise
        self.store: DataStore = sut.get(DataStore)
        self.reader: DataReader = sut.get(DataReader)
        self.model_store: DataStore = model.get(DataStore)
        self.model_reader: DataReader = model.get(DataReader)
        self.ids: dict[int, int] = {}  # layer's run id -> model's run id
        self.runs: list[RunId] = []  # model ids, creation order
        self.nodeids: list[str] = ["tests/test_a.py::test_one"]
        self.items = item_results(st.sampled_from(self.nodeids))
        self.max_sut_id = -1
        self.frozen: dict[RunId, Result[Any, Any]] = {}  # model id -> failures() at its end

    def teardown(self) -> None:
        self._stack.close()

    # -- plumbing --------------------------------------------------------------------------------

    def _sut_id(self, model_id: RunId) -> RunId:
        for sut, model in self.ids.items():
            if model == model_id:
                return RunId(sut)
        return model_id

    def _same(self, what: str, sut: Result[Any, Any], model: Result[Any, Any]) -> Any:
        same_ids = all(k == v for k, v in self.ids.items())
        translated = _page_shape(sut if same_ids else _translate(sut, self.ids))
        expected = _page_shape(model)
        assert translated == expected, (
            f"{what}: the layer returned\n  {translated!r}\nbut the model returned\n  {expected!r}"
        )
        return model

    def _project(self, name: str) -> str:
        """``name`` when the machine uses it, else the project standing in for it."""
        if name in self.projects:
            return name
        return self.projects[PROJECTS.index(name) % len(self.projects)]

    def _invocation(self, name: str) -> str:
        if name in self.invocations:
            return name
        return self.invocations[INVOCATIONS.index(name) % len(self.invocations)]

    def _pick(self, pick: int) -> RunId:
        if not self.runs or pick % 11 == 10:
            return UNKNOWN_RUN
        return self.runs[pick % len(self.runs)]

    # -- rules -----------------------------------------------------------------------------------

    @initialize(nodeids=st.lists(node_ids(), min_size=2, max_size=6, unique=True))
    def choose_nodeids(self, nodeids: list[str]) -> None:
        nodeids = nodeids[: max(type(self).max_nodeids, 1)]
        self.nodeids = nodeids
        self.items = item_results(st.sampled_from(nodeids))

    @rule(
        project=st.sampled_from(PROJECTS),
        invocation=st.sampled_from(INVOCATIONS),
        offset=st.sampled_from([0, 0, 1, -HOUR_MS, -2 * DAY_MS, -10 * DAY_MS]),
        environment=environments(),
        selection=selections(),
        session=st.sampled_from(SESSIONS) | st.none() | session_ids(),
    )
    def begin_run(
        self,
        project: str,
        invocation: str,
        offset: int,
        environment: Environment,
        selection: Selection = _EVERYTHING,
        session: str | None = None,
    ) -> None:
        start = RunStart(
            self._project(project),
            self._invocation(invocation),
            utc(self.clock.now + offset),
            environment,
            selection,
            session,
        )
        sut = self.store.begin_run(start)
        model = self.model_store.begin_run(start)
        if isinstance(sut, Success) and isinstance(model, Success):
            sut_id, model_id = int(sut.unwrap()), int(model.unwrap())
            assert sut_id not in self.ids, f"run id {sut_id} was handed out twice"
            assert sut_id > self.max_sut_id, (
                f"run id {sut_id} is not greater than the earlier {self.max_sut_id}; "
                "ties in start time are broken by id, so ids must grow with creation"
            )
            self.max_sut_id = sut_id
            self.ids[sut_id] = model_id
            self.runs.append(RunId(model_id))
            return
        self._same("begin_run", sut, model)

    @rule(
        which=st.sampled_from(["naive", "empty project", "empty invocation"]),
    )
    def begin_run_invalid(self, which: str) -> None:
        started = utc(self.clock.now)
        start = {
            "naive": RunStart("alpha", "inv-1", started.replace(tzinfo=None)),
            "empty project": RunStart("", "inv-1", started),
            "empty invocation": RunStart("alpha", "", started),
        }[which]
        sut = self.store.begin_run(start)
        assert isinstance(sut, Failure), sut
        assert isinstance(sut.failure(), InvalidInput), sut
        self._same(f"begin_run ({which})", sut, self.model_store.begin_run(start))

    @rule(pick=st.integers(0, 1_000), data=st.data(), poison=st.sampled_from([None] * 6 + [
        "nan", "negative", "no phases", "empty nodeid", "inf",
    ]))
    def record_results(self, pick: int, data: st.DataObject, poison: str | None) -> None:
        self.record_batch(self._pick(pick), data, poison)

    def record_batch(self, run: RunId, data: st.DataObject, poison: str | None) -> None:
        """Record a drawn batch into ``run`` on both sides; with ``poison`` one item of the
        batch is made invalid (so the whole batch must be refused)."""
        batch = data.draw(st.lists(self.items, min_size=0, max_size=4), label="batch")
        if poison is not None:
            victim = data.draw(self.items, label="victim")
            phases = victim.phases
            bad = {
                "nan": lambda: attrs.evolve(
                    victim, phases=(attrs.evolve(phases[0], duration_ms=math.nan), *phases[1:])
                ),
                "inf": lambda: attrs.evolve(
                    victim, phases=(attrs.evolve(phases[0], duration_ms=math.inf), *phases[1:])
                ),
                "negative": lambda: attrs.evolve(
                    victim, phases=(attrs.evolve(phases[0], duration_ms=-1.0), *phases[1:])
                ),
                "no phases": lambda: attrs.evolve(victim, phases=()),
                "empty nodeid": lambda: attrs.evolve(victim, nodeid=""),
            }[poison]()
            at = data.draw(st.integers(0, len(batch)), label="position")
            batch = [*batch[:at], bad, *batch[at:]]
        sut = self.store.record_results(self._sut_id(run), batch)
        model = self.model_store.record_results(run, batch)
        self._same(f"record_results(run {run}, {len(batch)} items)", sut, model)

    @rule(pick=st.integers(0, 1_000), selection=selections())
    def record_selection(self, pick: int, selection: Selection) -> None:
        run = self._pick(pick)
        sut = self.store.record_selection(self._sut_id(run), selection)
        model = self.model_store.record_selection(run, selection)
        self._same(f"record_selection(run {run})", sut, model)

    @rule(pick=st.integers(0, 1_000), errors=st.lists(collection_errors(), max_size=2))
    def record_collection_errors(self, pick: int, errors: list[CollectionError]) -> None:
        run = self._pick(pick)
        sut = self.store.record_collection_errors(self._sut_id(run), errors)
        model = self.model_store.record_collection_errors(run, errors)
        self._same("record_collection_errors", sut, model)

    @rule(
        pick=st.integers(0, 1_000),
        status=st.sampled_from(
            [RunStatus.PASSED, RunStatus.FAILED, RunStatus.FAILED, RunStatus.INTERRUPTED,
             RunStatus.ABORTED, RunStatus.RUNNING]
        ),
        naive=st.sampled_from([False] * 9 + [True]),
    )
    def finish_run(self, pick: int, status: RunStatus, naive: bool) -> None:
        run = self._pick(pick)
        finished = utc(self.clock.now)
        if naive:
            finished = finished.replace(tzinfo=None)
        sut = self.store.finish_run(self._sut_id(run), status, finished)
        model = self.model_store.finish_run(run, status, finished)
        self._same(f"finish_run(run {run}, {status})", sut, model)
        if isinstance(model, Success):
            self._freeze(run)

    def _freeze(self, run: RunId) -> None:
        """Remember what ``failures`` said of a run right after it ended: "new" must never
        change afterwards (checked by :meth:`new_is_frozen`)."""
        self.frozen[run] = self._same(
            f"failures({run}) at its end",
            self.reader.failures(self._sut_id(run)),
            self.model_reader.failures(run),
        )

    @rule(project=st.sampled_from(PROJECTS), offset=st.sampled_from([0, HOUR_MS, DAY_MS, -1]))
    def abort_stale_runs(self, project: str, offset: int) -> None:
        project = self._project(project)
        older_than = utc(self.clock.now - offset)
        sut = self.store.abort_stale_runs(project, older_than=older_than)
        model = self.model_store.abort_stale_runs(project, older_than=older_than)
        self._same("abort_stale_runs", sut, model)
        for run in model.value_or(()):
            self._freeze(run)

    @rule(pick=st.integers(0, 1_000), files=file_coverages())
    def write_coverage(self, pick: int, files: tuple[FileCoverage, ...]) -> None:
        run = self._pick(pick)
        sut = self.store.write_coverage(self._sut_id(run), files)
        model = self.model_store.write_coverage(run, files)
        self._same("write_coverage", sut, model)

    @rule(pick=st.integers(0, 1_000), data=st.data())
    def write_test_coverage(self, pick: int, data: st.DataObject) -> None:
        run = self._pick(pick)
        rows = data.draw(lines_per_test(st.sampled_from(self.nodeids)), label="tests")
        sut = self.store.write_test_coverage(self._sut_id(run), rows)
        model = self.model_store.write_test_coverage(run, rows)
        self._same("write_test_coverage", sut, model)

    @rule(
        keep_runs=st.integers(0, 4),
        max_age_days=st.sampled_from([None, None, None, 1.0, 0.5, 3, 0, -1.0]),
    )
    def prune_runs(self, keep_runs: int, max_age_days: float | None) -> None:
        policy = RunRetentionPolicy(keep_runs, max_age_days)
        sut_plan = self.store.plan_prune(policy)
        model_plan = self.model_store.plan_prune(policy)
        self._same(f"plan_prune({policy})", sut_plan, model_plan)
        calls: list[tuple[int, int]] = []
        sut = self.store.prune_runs(policy, progress=lambda d, t: calls.append((d, t)))
        model = self.model_store.prune_runs(policy)
        self._same(f"prune_runs({policy})", sut, model)
        assert sut == sut_plan, f"plan_prune({policy}) said {sut_plan}, prune_runs did {sut}"
        if isinstance(sut, Success):
            check_progress_calls(calls, sut.unwrap().pruned_runs)
        else:
            assert calls == [], f"prune_runs({policy}) failed after reporting {calls}"

    def whole_run_arguments(self) -> st.SearchStrategy[dict[str, Any]]:
        """Arguments of :meth:`whole_run`: a run begun, given one batch and finished."""
        return st.fixed_dictionaries(
            {
                "project": st.sampled_from(PROJECTS),
                "invocation": st.sampled_from(INVOCATIONS),
                "offset": st.sampled_from([0, 0, 1, -HOUR_MS, -2 * DAY_MS]),
                "batch": st.lists(self.items, max_size=4),
                "status": st.sampled_from(
                    [RunStatus.PASSED, RunStatus.FAILED, RunStatus.INTERRUPTED]
                ),
                "environment": git_states(),
            }
        )

    def whole_run(
        self,
        project: str,
        invocation: str,
        offset: int,
        batch: list[TestResult],
        status: RunStatus,
        environment: Environment = _NO_GIT,
    ) -> None:
        """Begin a run, record one batch, finish it, comparing every step."""
        before = len(self.runs)
        self.begin_run(project, invocation, offset, environment)
        if len(self.runs) == before:
            return
        run = self.runs[-1]
        self._same(
            f"record_results(run {run}, {len(batch)} items)",
            self.store.record_results(self._sut_id(run), batch),
            self.model_store.record_results(run, batch),
        )
        finished = utc(self.clock.now)
        model = self._same(
            f"finish_run(run {run}, {status})",
            self.store.finish_run(self._sut_id(run), status, finished),
            self.model_store.finish_run(run, status, finished),
        )
        if isinstance(model, Success):
            self._freeze(run)
        self.clock.advance(1_000)

    @rule(data=st.data())
    def record_whole_run(self, data: st.DataObject) -> None:
        self.whole_run(**data.draw(self.whole_run_arguments(), label="whole_run"))

    @rule(data=st.data(), n=st.integers(2, DEFAULT_HISTORY_WINDOW + 2))
    def record_many_whole_runs(self, data: st.DataObject, n: int) -> None:
        """Several whole runs in one step: hypothesis rarely takes enough steps on its own to
        fill a history window, trim it, and prune past it."""
        for _ in range(n):
            self.whole_run(**data.draw(self.whole_run_arguments(), label="whole_run"))

    @rule(ms=st.sampled_from([1, 1_000, HOUR_MS, DAY_MS, 3 * DAY_MS]))
    def advance_clock(self, ms: int) -> None:
        self.clock.advance(ms)

    # -- invariants ------------------------------------------------------------------------------

    @invariant()
    def readers_agree(self) -> None:
        r, m = self.reader, self.model_reader
        self._same("projects()", r.projects(), m.projects())
        self._same("list_runs(None)", r.list_runs(None, limit=MAX_PAGE_SIZE),
                   m.list_runs(None, limit=MAX_PAGE_SIZE))
        for session in SESSIONS:
            self._same(f"list_runs(None, session_id={session!r})",
                       r.list_runs(None, session_id=session, limit=MAX_PAGE_SIZE),
                       m.list_runs(None, session_id=session, limit=MAX_PAGE_SIZE))
        for project in (*self.projects, "never-seen"):
            self._same(f"latest_run({project!r})", r.latest_run(project), m.latest_run(project))
            self._walk_pages(project)
            for status in RunStatus:
                self._same(f"list_runs({project!r}, status={status.value})",
                           r.list_runs(project, status=status, limit=MAX_PAGE_SIZE),
                           m.list_runs(project, status=status, limit=MAX_PAGE_SIZE))
            self._same(f"flaky_tests({project!r})", r.flaky_tests(project),
                       m.flaky_tests(project))
            self._same(f"failure_signatures({project!r})",
                       r.failure_signatures(project, limit=MAX_PAGE_SIZE),
                       m.failure_signatures(project, limit=MAX_PAGE_SIZE))
            self._same(f"coverage_trend({project!r})", r.coverage_trend(project),
                       m.coverage_trend(project, limit=50))
            self._same(f"coverage_trend({project!r}, limit=2)",
                       r.coverage_trend(project, limit=2), m.coverage_trend(project, limit=2))
            for nodeid in self.nodeids:
                self._same(f"history({project!r}, {nodeid!r})", r.history(project, nodeid),
                           m.history(project, nodeid))
            for fragment in {self.nodeids[0][:3], "%", "t"}:
                self._same(f"find_tests({project!r}, {fragment!r})",
                           r.find_tests(project, fragment), m.find_tests(project, fragment))
            for path in COVERED_PATHS:
                self._same(f"tests_for({project!r}, {path!r})", r.tests_for(project, path),
                           m.tests_for(project, path))
                self._same(f"tests_for({project!r}, {path!r}, line=3, runs=2, limit=1)",
                           r.tests_for(project, path, line=3, runs=2, limit=1),
                           m.tests_for(project, path, line=3, runs=2, limit=1))
        for run in (*self.runs, UNKNOWN_RUN):
            s = self._sut_id(run)
            summary = self._same(f"get_run({run})", r.get_run(s), m.get_run(run))
            tests = self._same(f"tests({run})", r.tests(s), m.tests(run))
            failing = frozenset({Outcome.FAILED, Outcome.ERROR})
            self._same(f"tests({run}, failing)", r.tests(s, outcomes=failing),
                       m.tests(run, outcomes=failing))
            self._same(f"failures({run})", r.failures(s), m.failures(run))
            details = [
                self._same(f"test_detail({run}, {nodeid!r})", r.test_detail(s, nodeid),
                           m.test_detail(run, nodeid))
                for nodeid in self.nodeids
            ]
            classified = self._same(f"classify({run})", r.classify(s), m.classify(run))
            unstable = self._same(f"classify_unstable({run})", r.classify_unstable(s),
                                  m.classify_unstable(run))
            if isinstance(classified, Success):
                assert unstable.unwrap() == _unstable(classified.unwrap()), run
            if isinstance(summary, Success):
                _check_subtest_totals(run, summary.unwrap(), tests.unwrap(), details)
                _check_rules(run, classified.unwrap())
            self._same(f"slowest({run}, 2)", r.slowest(s, limit=2), m.slowest(run, limit=2))
            self._same(f"coverage({run})", r.coverage(s), m.coverage(run))
        every = [*self.runs, UNKNOWN_RUN]
        for only in (None, FAILING_OUTCOMES, frozenset({Outcome.SKIPPED})):
            self._same(f"run_cells(every run, outcomes={only})",
                       r.run_cells([self._sut_id(run) for run in every], outcomes=only),
                       m.run_cells(every, outcomes=only))
        some = self.nodeids[::2]
        self._same(f"run_cells(every run, nodeids={some})",
                   r.run_cells([self._sut_id(run) for run in every], nodeids=some),
                   m.run_cells(every, nodeids=some))
        if len(self.runs) >= 2:
            a, b = self.runs[-2], self.runs[-1]
            self._same(f"compare({a}, {b})", r.compare(self._sut_id(a), self._sut_id(b)),
                       m.compare(a, b))

    def _walk_pages(self, project: str) -> None:
        r_cursor: str | None = None
        m_cursor: str | None = None
        for page_no in itertools.count():
            sut = self.reader.list_runs(project, limit=2, cursor=r_cursor)
            model = self.model_reader.list_runs(project, limit=2, cursor=m_cursor)
            self._same(f"list_runs({project!r}, limit=2) page {page_no}", sut, model)
            if not isinstance(model, Success) or not model.unwrap().has_more:
                return
            r_cursor = sut.unwrap().next_cursor
            m_cursor = model.unwrap().next_cursor

    @invariant()
    def counts_come_from_stored_rows(self) -> None:
        for run in self.runs:
            summary = self.reader.get_run(self._sut_id(run))
            tests = self.reader.tests(self._sut_id(run))
            if isinstance(summary, Failure) or isinstance(tests, Failure):
                continue
            stored = Counter(t.outcome.value for t in tests.unwrap())
            counts = summary.unwrap().counts
            assert set(counts) == {o.value for o in Outcome}, counts
            assert {k: v for k, v in counts.items() if v} == dict(stored), (
                f"counts of run {run} {counts} differ from its stored rows {dict(stored)}"
            )

    @invariant()
    def new_is_frozen(self) -> None:
        """What ``failures`` said of an ended run at its end still holds (``is_new``
        included), unless the run was pruned since."""
        for run, then in self.frozen.items():
            now = self.reader.failures(self._sut_id(run))
            if isinstance(now, Failure):
                continue
            translated = now if all(k == v for k, v in self.ids.items()) else _translate(
                now, self.ids
            )
            was = {(f.nodeid, f.signature): f.is_new for f in then.unwrap()}
            still = {(f.nodeid, f.signature): f.is_new for f in translated.unwrap()}
            assert still == was, (
                f"failures({run}) said is_new {was} when the run ended, now {still}"
            )

    @invariant()
    def history_is_bounded(self) -> None:
        for project in self.projects:
            for nodeid in self.nodeids:
                entries = self.reader.history(project, nodeid)
                if isinstance(entries, Success):
                    n = len(entries.unwrap())
                    assert n <= HISTORY_DEPTH, (
                        f"history({project!r}, {nodeid!r}) has {n} entries, more than the "
                        f"depth of {HISTORY_DEPTH}"
                    )


def _check_subtest_totals(
    run: RunId,
    summary: RunSummary,
    tests: Sequence[TestRecord],
    details: Sequence[Result[TestDetail, Any]],
) -> None:
    """A run's subtest totals are those of its stored subtests, and every item's outcome
    is what its phases and subtests say (``derive_outcome``)."""
    words = {Outcome.PASSED: "passed", Outcome.XPASSED: "passed", Outcome.FAILED: "failed",
             Outcome.ERROR: "failed", Outcome.SKIPPED: "skipped", Outcome.XFAILED: "skipped"}
    stored: Counter[str] = Counter()
    found = {d.unwrap().test.nodeid: d.unwrap() for d in details if isinstance(d, Success)}
    assert set(found) == {t.nodeid for t in tests}, (run, sorted(found))
    for detail in found.values():
        stored.update(words[t.outcome] for t in detail.subtests)
        derived = derive_outcome(detail.test.phases, (t.outcome for t in detail.subtests))
        assert detail.test.outcome == derived, (
            f"{detail.test.nodeid} of run {run} is {detail.test.outcome}, its phases and "
            f"subtests say {derived}"
        )
    assert summary.subtests == {w: stored[w] for w in ("passed", "failed", "skipped")}, (
        f"subtests of run {run} {summary.subtests} differ from its stored rows {dict(stored)}"
    )


def _check_rules(run: RunId, classified: Sequence[TestClassification]) -> None:
    """Every verdict rests on a rule of its kind and says why in words."""
    for item in classified:
        assert item.because.rule in _RULES_OF[item.classification], (
            f"{item.nodeid} of run {run} is {item.classification} because {item.because.rule}"
        )
        assert item.because.summary, item


_RULES_OF: dict[Classification, frozenset[EvidenceRule]] = {
    Classification.FLAKY: frozenset(
        {EvidenceRule.PASSED_ON_RERUN, EvidenceRule.SAME_COMMIT, EvidenceRule.OSCILLATION,
         EvidenceRule.SAME_CODE, EvidenceRule.FLIPPED_IN_RUN}
    ),
    Classification.NEW_FAILURE: frozenset({EvidenceRule.FIRST_FAILURE}),
    Classification.PERSISTENT_FAILURE: frozenset({EvidenceRule.FAILING_STREAK}),
    Classification.RECOVERED: frozenset({EvidenceRule.FIXED}),
    Classification.STABLE: frozenset({EvidenceRule.NO_FAILURE, EvidenceRule.NOT_EXECUTED}),
}
"""The evidence rules each verdict may rest on."""


def _unstable(classified: Sequence[TestClassification]) -> tuple[TestClassification, ...]:
    """What ``classify_unstable`` returns given what ``classify`` returned."""
    return tuple(c for c in classified if c.classification is not Classification.STABLE)


def test_runs_state_machine(
    layer_factory: LayerFactory,
    model_factory: LayerFactory = in_memory,  # noqa: PT028 (not a test: see __test__ below)
) -> type[TestRunsMachine]:
    """Return a :class:`TestRunsMachine` subclass bound to ``layer_factory`` (the layer under
    test) and ``model_factory`` (the reference, the in-memory layer by default).

    Run it with ``hypothesis.stateful.run_state_machine_as_test(machine, settings=...)``.
    """

    class BoundMachine(TestRunsMachine):
        pass

    BoundMachine.layer_factory = staticmethod(layer_factory)
    BoundMachine.model_factory = staticmethod(model_factory)
    return BoundMachine


# pytest collects a function named ``test*`` that a test module imports; this one is not a test.
vars(test_runs_state_machine)["__test__"] = False


# -- example-based contract -----------------------------------------------------------------------


def make_item(
    nodeid: str,
    outcome: Outcome = Outcome.PASSED,
    *,
    duration_ms: float = 1.0,
    message: str = "assert 1 == 2",
    exception_type: str = "AssertionError",
    frames: tuple[StackFrame, ...] = (),
    module_path: str | None = None,
) -> TestResult:
    """A plain item of ``outcome`` whose call phase took ``duration_ms`` (failing ones carry
    one error with ``message``)."""
    phase_outcome = {Outcome.ERROR: Outcome.FAILED}.get(outcome, outcome)
    error_phase = Phase.SETUP if outcome == Outcome.ERROR else Phase.CALL
    phases = (
        (PhaseResult(Phase.SETUP, Outcome.FAILED, duration_ms),)
        if outcome == Outcome.ERROR
        else (PhaseResult(Phase.CALL, phase_outcome, duration_ms),)
    )
    errors = (
        (ErrorInfo(error_phase, exception_type, message, f"E   {message}", frames),)
        if outcome in (Outcome.FAILED, Outcome.ERROR)
        else ()
    )
    return TestResult(
        nodeid=nodeid,
        module_path=module_path or _module_of(nodeid),
        name=nodeid.split("::", 1)[-1],
        phases=phases,
        errors=errors,
    )


def rerun_item(nodeid: str, *, failed_attempts: int = 1, final: Outcome = Outcome.PASSED) -> (
    TestResult
):
    """An item that failed ``failed_attempts`` times, each with its error, and then ended
    ``final`` on a rerun (pytest-rerunfailures)."""
    failed = make_item(nodeid, Outcome.FAILED, message="flaky timeout")
    return attrs.evolve(make_item(nodeid, final), attempts=(failed,) * failed_attempts)


def reference_verdict(
    window: str, reruns: str = "", commits: Sequence[str | None] = ()
) -> tuple[Classification, EvidenceRule]:
    """The verdict ``Classification`` documents, computed over letters, as a reference.

    ``window`` is newest first: ``F`` failing, ``P`` passing; a leading ``S`` means the item
    did not execute now (the rest is the earlier window). ``reruns`` has an ``r`` at each
    entry that had failed rerun attempts; ``commits`` names each entry's commit when its
    tree was clean (None otherwise). Written apart from the layers' rules on purpose.
    """
    if window.startswith("S"):
        return Classification.STABLE, EvidenceRule.NOT_EXECUTED
    marks = reruns.ljust(len(window), ".")
    if any(letter == "P" and mark == "r" for letter, mark in zip(window, marks, strict=True)):
        return Classification.FLAKY, EvidenceRule.PASSED_ON_RERUN
    clean = list(commits) + [None] * (len(window) - len(commits))
    for commit in {c for c in clean if c is not None}:
        if {window[i] for i, c in enumerate(clean) if c == commit} == {"F", "P"}:
            return Classification.FLAKY, EvidenceRule.SAME_COMMIT
    if len(re.findall("F+", window)) >= 2:
        return Classification.FLAKY, EvidenceRule.OSCILLATION
    if re.fullmatch("FP*", window):
        return Classification.NEW_FAILURE, EvidenceRule.FIRST_FAILURE
    if window.startswith("F"):
        return Classification.PERSISTENT_FAILURE, EvidenceRule.FAILING_STREAK
    if window.startswith("PF"):
        return Classification.RECOVERED, EvidenceRule.FIXED
    return Classification.STABLE, EvidenceRule.NO_FAILURE


def reference_streak(outcomes: str) -> int:
    """How many runs in a row end failing in ``outcomes`` (oldest first, ``F``/``P``)."""
    match = re.search("F*$", outcomes)
    assert match is not None
    return len(match.group())


class _Contract:
    """Fixtures shared by the two contract classes.

    pytest collects a class named ``Test*``, and so a contract imported into a test module:
    the contracts of this module are not collected (``__test__`` is false), a subclass
    defined elsewhere is, unless it sets ``__test__`` itself.
    """

    __test__: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__test__" not in vars(cls):
            cls.__test__ = cls.__module__ != __name__

    def make_layer(self) -> Layer:
        """Return a layer providing ``DataStore`` and ``DataReader`` on a fresh, empty store.

        Override this, or the ``layer_factory`` fixture when the factory needs fixtures.
        """
        raise NotImplementedError(f"{type(self).__name__} must define make_layer()")

    @pytest.fixture
    def layer_factory(self) -> LayerFactory:
        """The factory under test (``make_layer`` unless a subclass overrides this fixture)."""
        return self.make_layer

    @pytest.fixture
    def clock(self) -> FixedClock:
        """The clock every service of the layer reads (starts at ``T0_MS``)."""
        return FixedClock(T0_MS)

    @pytest.fixture
    def container(self, layer_factory: LayerFactory, clock: FixedClock) -> Iterator[Container]:
        """The built layer under test, with the contract's clock."""
        with ExitStack() as stack:
            yield _open(stack, layer_factory, clock)

    @pytest.fixture
    def store(self, container: Container) -> DataStore:
        store: DataStore = container.get(DataStore)
        return store

    @pytest.fixture
    def reader(self, container: Container) -> DataReader:
        reader: DataReader = container.get(DataReader)
        return reader

    # helpers -------------------------------------------------------------------------------------

    @staticmethod
    def begin(
        store: DataStore,
        project: str = "alpha",
        at_ms: int = T0_MS,
        invocation: str = "inv-1",
        environment: Environment = _NO_GIT,
        selection: Selection = _EVERYTHING,
    ) -> RunId:
        """Begin a run and return its id (fails the test on a Failure)."""
        start = RunStart(project, invocation, utc(at_ms), environment, selection)
        return _ok(store.begin_run(start))

    @classmethod
    def whole_run(
        cls,
        store: DataStore,
        items: Sequence[TestResult],
        *,
        project: str = "alpha",
        at_ms: int = T0_MS,
        status: RunStatus | None = None,
        invocation: str = "inv-1",
        environment: Environment = _NO_GIT,
        selection: Selection = _EVERYTHING,
    ) -> RunId:
        """Begin, record ``items`` and finish a run (``failed`` when any item fails)."""
        run = cls.begin(store, project, at_ms, invocation, environment, selection)
        _ok(store.record_results(run, items))
        if status is None:
            failing = any(i.outcome in (Outcome.FAILED, Outcome.ERROR) for i in items)
            status = RunStatus.FAILED if failing else RunStatus.PASSED
        _ok(store.finish_run(run, status, utc(at_ms + 1_000)))
        return run


def _ok(result: Result[T, Any]) -> T:
    assert isinstance(result, Success), f"expected Success, got {result!r}"
    value: T = result.unwrap()
    return value


def _err(result: Result[Any, Any], kind: type[T]) -> T:
    assert isinstance(result, Failure), f"expected Failure({kind.__name__}), got {result!r}"
    error = result.failure()
    assert isinstance(error, kind), f"expected {kind.__name__}, got {error!r}"
    return error


def _snapshot(reader: DataReader) -> Any:
    """Everything a reader shows about every run, for "nothing was written" checks."""
    page = _ok(reader.list_runs(None, limit=MAX_PAGE_SIZE))
    return (
        _ok(reader.projects()),
        page,
        tuple(
            (reader.tests(s.id), reader.failures(s.id), reader.coverage(s.id))
            for s in page.items
        ),
    )


_BAD_ITEMS: dict[str, Callable[[TestResult], TestResult]] = {
    "nan duration": lambda r: attrs.evolve(
        r, phases=(attrs.evolve(r.phases[0], duration_ms=math.nan),)
    ),
    "infinite duration": lambda r: attrs.evolve(
        r, phases=(attrs.evolve(r.phases[0], duration_ms=math.inf),)
    ),
    "negative duration": lambda r: attrs.evolve(
        r, phases=(attrs.evolve(r.phases[0], duration_ms=-0.5),)
    ),
    "no phases": lambda r: attrs.evolve(r, phases=()),
    "empty node id": lambda r: attrs.evolve(r, nodeid=""),
    "surrogate in node id": lambda r: attrs.evolve(r, nodeid="tests/t.py::test_\ud800"),
}


class TestRunsStoreContract(
    SignaturesStoreContract, RunLinksStoreContract, PruneProgressContract, _Contract
):
    """What every ``DataStore`` layer must do; subclass and define ``make_layer``.

    Includes the state machine (:meth:`test_state_machine_agrees_with_the_model`), run with
    the loaded hypothesis profile unless ``state_machine_settings`` is set.
    """

    state_machine_settings: ClassVar[settings | None] = None

    def test_state_machine_agrees_with_the_model(self, layer_factory: LayerFactory) -> None:
        machine = test_runs_state_machine(layer_factory)
        run_state_machine_as_test(machine, settings=self.state_machine_settings)

    # begin_run -----------------------------------------------------------------------------------

    def test_begin_run_starts_a_running_run(self, store: DataStore, reader: DataReader) -> None:
        env = Environment("3.12.1", "9.0.0", "linux", "abc", "main", ("pytest", "-x"), "h", 7,
                          git_dirty=True)
        chosen = Selection(args=("tests/test_a.py",), keyword="not slow", maxfail=1)
        start_ms = T0_MS + 123
        run = _ok(store.begin_run(RunStart("alpha", "inv-1", utc(start_ms), env, chosen)))
        summary = _ok(reader.get_run(run))
        assert summary.selection == chosen
        assert summary.selection.is_partial
        assert summary.subtests == {"passed": 0, "failed": 0, "skipped": 0}
        assert (summary.id, summary.project, summary.invocation_id) == (run, "alpha", "inv-1")
        assert summary.status == RunStatus.RUNNING
        assert (summary.started_at_ms, summary.finished_at_ms) == (start_ms, None)
        assert summary.counts == {o.value: 0 for o in Outcome}
        assert summary.collection_errors == 0
        assert summary.environment == env
        assert _ok(reader.projects()) == ("alpha",)

    def test_begin_run_reads_aware_datetimes_in_any_zone(
        self, store: DataStore, reader: DataReader
    ) -> None:
        from datetime import timezone

        started = datetime(2024, 3, 1, 12, 0, 0, 250_000, tzinfo=timezone(timedelta(hours=5.5)))
        run = _ok(store.begin_run(RunStart("alpha", "inv-1", started)))
        assert _ok(reader.get_run(run)).started_at_ms == int(started.timestamp() * 1000)

    @pytest.mark.parametrize(
        "start",
        [
            RunStart("alpha", "inv-1", datetime(2024, 1, 1)),
            RunStart("", "inv-1", utc(T0_MS)),
            RunStart("alpha", "", utc(T0_MS)),
            RunStart("al\ud800pha", "inv-1", utc(T0_MS)),
        ],
        ids=["naive", "empty project", "empty invocation", "surrogate in project"],
    )
    def test_begin_run_refuses_bad_input(
        self, store: DataStore, reader: DataReader, start: RunStart
    ) -> None:
        _err(store.begin_run(start), InvalidInput)
        assert _ok(reader.projects()) == ()

    def test_run_ids_grow_and_are_never_reused(self, store: DataStore) -> None:
        first = self.whole_run(store, [make_item("t.py::a")], at_ms=T0_MS)
        newest_id = self.whole_run(store, [make_item("t.py::a")], at_ms=T0_MS - DAY_MS)
        assert first < newest_id
        assert _ok(store.prune_runs(RunRetentionPolicy(keep_runs=1))).pruned_runs == 1
        assert self.begin(store) > newest_id  # the highest id was pruned; it is not reused

    # record_results ------------------------------------------------------------------------------

    def test_counts_come_from_the_stored_rows(self, store: DataStore, reader: DataReader) -> None:
        run = self.begin(store)
        batch = [
            make_item("t.py::a"),
            make_item("t.py::b", Outcome.FAILED),
            make_item("t.py::c", Outcome.SKIPPED),
        ]
        assert _ok(store.record_results(run, batch)) == 3
        assert _ok(store.record_results(run, [make_item("t.py::b")])) == 1  # a rerun passed
        counts = _ok(reader.get_run(run)).counts
        assert counts == {**{o.value: 0 for o in Outcome}, "passed": 2, "skipped": 1}
        assert [t.nodeid for t in _ok(reader.tests(run))] == ["t.py::a", "t.py::b", "t.py::c"]
        assert _ok(reader.failures(run)) == ()

    @pytest.mark.parametrize("bad", sorted(_BAD_ITEMS))
    def test_a_bad_item_rejects_the_whole_batch(
        self, store: DataStore, reader: DataReader, bad: str
    ) -> None:
        run = self.begin(store)
        _ok(store.record_results(run, [make_item("t.py::kept")]))
        before = _snapshot(reader)
        batch = [make_item("t.py::a"), _BAD_ITEMS[bad](make_item("t.py::b")), make_item("t.py::c")]
        _err(store.record_results(run, batch), InvalidInput)
        assert _snapshot(reader) == before
        assert _ok(store.record_results(run, [make_item("t.py::a")])) == 1  # next write works

    def test_record_results_needs_a_running_run(self, store: DataStore) -> None:
        assert _err(store.record_results(UNKNOWN_RUN, [make_item("t.py::a")]), NotFound) == (
            NotFound("run", str(UNKNOWN_RUN))
        )
        run = self.whole_run(store, [make_item("t.py::a")])
        _err(store.record_results(run, [make_item("t.py::b")]), IllegalTransition)
        _err(store.record_collection_errors(run, []), IllegalTransition)

    @settings(
        max_examples=15,
        # The factory fixture is only called inside the test; subclasses share the method.
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.differing_executors,
        ],
    )
    @given(item=item_results())
    def test_items_round_trip(self, layer_factory: LayerFactory, item: TestResult) -> None:
        with ExitStack() as stack:
            c = _open(stack, layer_factory, FixedClock(T0_MS))
            store: DataStore = c.get(DataStore)
            reader: DataReader = c.get(DataReader)
            run = self.begin(store)
            _ok(store.record_results(run, [item]))
            (record,) = _ok(reader.tests(run))
            assert record.nodeid == item.nodeid
            assert (record.module_path, record.name) == (item.module_path, item.name)
            assert (record.parametrize_id, record.line) == (item.parametrize_id, item.line)
            assert sorted(record.markers) == sorted(item.markers)
            assert record.outcome == item.outcome
            assert record.phases == item.phases
            assert record.duration_ms == item.duration_ms
            assert record.attempts == len(item.attempts)
            failures = _ok(reader.failures(run))
            assert [f.nodeid for f in failures] == (
                [item.nodeid] if item.outcome in (Outcome.FAILED, Outcome.ERROR) else []
            )
            assert _ok(reader.find_tests("alpha", item.nodeid))[:1] == (item.nodeid,)

    def test_messages_texts_and_frames_are_bounded(
        self, store: DataStore, reader: DataReader
    ) -> None:
        frames = tuple(StackFrame(f"src/m{i}.py", i + 1, f"f{i}", True) for i in range(150))
        run = self.begin(store)
        long_item = attrs.evolve(
            make_item("t.py::long", Outcome.FAILED),
            errors=(
                ErrorInfo(Phase.CALL, "E", "m" * (MAX_MESSAGE_CHARS + 5),
                          "t" * (MAX_TEXT_CHARS + 1), frames),
            ),
        )
        exact_item = attrs.evolve(
            make_item("t.py::exact", Outcome.FAILED),
            errors=(ErrorInfo(Phase.CALL, "E", "é" * MAX_MESSAGE_CHARS, "t" * MAX_TEXT_CHARS),),
        )
        _ok(store.record_results(run, [long_item, exact_item]))
        exact, long = _ok(reader.failures(run))
        assert (long.message, long.message_truncated) == ("m" * MAX_MESSAGE_CHARS, True)
        assert (len(long.text), long.text_truncated) == (MAX_TEXT_CHARS, True)
        assert long.frames == frames[-MAX_FRAMES:]
        assert (exact.message, exact.message_truncated) == ("é" * MAX_MESSAGE_CHARS, False)
        assert (exact.text_truncated, len(exact.text)) == (False, MAX_TEXT_CHARS)

    def test_lone_surrogates_in_free_text_are_replaced(
        self, store: DataStore, reader: DataReader
    ) -> None:
        run = self.begin(store)
        item = make_item("t.py::s", Outcome.FAILED, message="a\ud800b\udfffc")
        _ok(store.record_results(run, [item]))
        (failure,) = _ok(reader.failures(run))
        failure.message.encode("utf-8")  # storable: no lone surrogate survives
        assert failure.message.startswith("a")
        assert failure.message.endswith("c")
        assert len(failure.message) == 5

    def test_error_details_and_cause_chain_are_kept(
        self, store: DataStore, reader: DataReader
    ) -> None:
        frames = (
            StackFrame("tests/t.py", 3, "test_x", True),
            StackFrame("/usr/x.py", 9, "g", False),
        )
        root = ErrorInfo(Phase.CALL, "OSError", "disk", "", ())
        error = ErrorInfo(Phase.CALL, "ValueError", "bad", "E bad", frames, root)
        run = self.begin(store)
        _ok(store.record_results(run, [attrs.evolve(make_item("t.py::x", Outcome.FAILED),
                                                    errors=(error,))]))
        (failure,) = _ok(reader.failures(run))
        assert (failure.nodeid, failure.outcome, failure.phase) == ("t.py::x", Outcome.FAILED,
                                                                    Phase.CALL)
        assert (failure.exception_type, failure.message, failure.text) == ("ValueError", "bad",
                                                                           "E bad")
        assert failure.frames == frames
        assert [c.exception_type for c in failure.causes] == ["OSError"]
        assert failure.signature
        assert all(ch in "0123456789abcdef" for ch in failure.signature)

    def test_test_detail_returns_every_error_output_subtest_and_attempt(
        self, store: DataStore, reader: DataReader
    ) -> None:
        run = self.begin(store)
        frames = (StackFrame("src/a.py", 3, "f", True), StackFrame("/usr/lib/x.py", 9, "g", False))
        cause = ErrorInfo(Phase.CALL, "OSError", "disk", "E disk", (frames[1],))
        call_error = ErrorInfo(Phase.CALL, "ValueError", "bad", "E bad", frames, cause)
        teardown_error = ErrorInfo(Phase.TEARDOWN, "RuntimeError", "close", "E close")
        sub_error = ErrorInfo(Phase.CALL, "AssertionError", "sub", "E sub")
        first = attrs.evolve(make_item("t.py::x", Outcome.FAILED), errors=(call_error,))
        item = TestResult(
            nodeid="t.py::x",
            module_path="t.py",
            name="x",
            phases=(PhaseResult(Phase.CALL, Outcome.FAILED, 2.0),
                    PhaseResult(Phase.TEARDOWN, Outcome.FAILED, 1.0)),
            errors=(call_error, teardown_error),
            stdout="out\x00",
            stderr="e" * (MAX_CAPTURE_CHARS + 1),
            log="log",
            attempts=(first,),
            subtests=(SubtestResult("i=1", Outcome.PASSED, 0.5),
                      SubtestResult("i=2", Outcome.FAILED, 0.5, sub_error)),
        )
        _ok(store.record_results(run, [item, make_item("t.py::plain")]))
        detail = _ok(reader.test_detail(run, "t.py::x"))
        assert isinstance(detail, TestDetail)
        (record,) = [t for t in _ok(reader.tests(run)) if t.nodeid == "t.py::x"]
        assert detail.test == record
        assert record.attempts == 1
        assert detail.errors == (call_error, teardown_error)
        assert (detail.stdout, detail.stdout_truncated) == ("out\x00", False)
        assert (len(detail.stderr), detail.stderr_truncated) == (MAX_CAPTURE_CHARS, True)
        assert (detail.log, detail.log_truncated) == ("log", False)
        assert detail.subtests == item.subtests
        (earlier,) = detail.attempts
        assert (earlier.nodeid, earlier.outcome, earlier.attempts) == ("t.py::x", Outcome.FAILED, 0)
        assert earlier.phases == first.phases
        assert detail.attempt_errors == ((call_error,),)
        plain = _ok(reader.test_detail(run, "t.py::plain"))
        assert (plain.errors, plain.stdout, plain.subtests, plain.attempts) == ((), "", (), ())
        assert plain.attempt_errors == ()
        missing = _err(reader.test_detail(run, "t.py::nope"), NotFound)
        assert missing == NotFound("test", "t.py::nope")
        _err(reader.test_detail(UNKNOWN_RUN, "t.py::x"), NotFound)

    def test_collection_errors_count_and_show_as_failures(
        self, store: DataStore, reader: DataReader
    ) -> None:
        run = self.begin(store)
        error = ErrorInfo(Phase.COLLECT, "ImportError", "no module x")
        ce = CollectionError("tests/test_broken.py", "tests/test_broken.py", error)
        assert _ok(store.record_collection_errors(run, [ce, ce])) >= 1
        summary = _ok(reader.get_run(run))
        assert summary.collection_errors == 1
        (failure,) = _ok(reader.failures(run))
        assert (failure.nodeid, failure.phase, failure.exception_type) == (
            "tests/test_broken.py", Phase.COLLECT, "ImportError"
        )

    # subtests, reruns, selection --------------------------------------------------------------

    def test_a_failing_subtest_fails_its_item(self, store: DataStore, reader: DataReader) -> None:
        frames = (StackFrame("tests/t.py", 7, "test_x", True),)
        sub_error = ErrorInfo(Phase.CALL, "AssertionError", "i=2: 3 != 4", "E   3 != 4", frames)
        own_error = ErrorInfo(Phase.CALL, "ValueError", "own", "E own")
        subtests = (
            SubtestResult("i=1", Outcome.PASSED, 0.5),
            SubtestResult("i=2", Outcome.FAILED, 0.5, sub_error),
            SubtestResult("i=3", Outcome.SKIPPED, 0.0),
        )
        quiet = attrs.evolve(make_item("t.py::x"), subtests=subtests)
        loud = attrs.evolve(make_item("t.py::y", Outcome.FAILED), errors=(own_error,),
                            subtests=subtests[1:2])
        assert quiet.outcome == Outcome.FAILED  # the call passed; a subtest did not
        run = self.begin(store)
        _ok(store.record_results(run, [quiet, loud, make_item("t.py::z")]))
        summary = _ok(reader.get_run(run))
        assert (summary.counts["failed"], summary.counts["passed"]) == (2, 1)
        assert summary.subtests == {"passed": 1, "failed": 2, "skipped": 1}
        x, y = _ok(reader.failures(run))
        assert (x.nodeid, x.outcome, x.exception_type, x.message, x.frames) == (
            "t.py::x", Outcome.FAILED, "AssertionError", "i=2: 3 != 4", frames
        )
        assert (y.nodeid, y.message) == ("t.py::y", "own")  # its own error comes first
        assert [t.outcome for t in _ok(reader.tests(run))] == [
            Outcome.FAILED, Outcome.FAILED, Outcome.PASSED
        ]
        # a rerun replaces the item and its subtests; the totals follow the stored rows
        fixed = attrs.evolve(quiet, subtests=(SubtestResult("i=2", Outcome.PASSED, 0.5),))
        _ok(store.record_results(run, [fixed]))
        summary = _ok(reader.get_run(run))
        assert summary.subtests == {"passed": 1, "failed": 1, "skipped": 0}
        assert summary.counts["failed"] == 1
        _ok(store.finish_run(run, RunStatus.FAILED, utc(T0_MS + 1_000)))
        (entry,) = _ok(reader.history("alpha", "t.py::y"))
        assert (entry.outcome, entry.message) == (Outcome.FAILED, "own")

    def test_record_selection_replaces_the_selection_of_a_running_run(
        self, store: DataStore, reader: DataReader
    ) -> None:
        first = Selection(args=("tests/test_a.py",), keyword="slow")
        run = self.begin(store, selection=first)
        assert _ok(reader.get_run(run)).selection == first
        later = Selection(args=("tests/test_a.py",), keyword="sl\ud800w\x00", deselected=3,
                          collected=10)
        summary = _ok(store.record_selection(run, later))
        assert summary == _ok(reader.get_run(run))
        assert summary.selection == attrs.evolve(later, keyword="sl\ufffdw\x00")
        before = _snapshot(reader)
        for bad, field in (
            (Selection(maxfail=-1), "selection.maxfail"),
            (Selection(deselected=-2), "selection.deselected"),
            (Selection(last_failed="yes"), "selection.last_failed"),  # type: ignore[arg-type]
            (Selection(args="tests"), "selection.args"),  # type: ignore[arg-type]
            ("everything", "selection"),
        ):
            error = _err(store.record_selection(run, bad), InvalidInput)  # type: ignore[arg-type]
            assert error.field == field
        assert _snapshot(reader) == before
        assert _ok(reader.get_run(run)).selection == summary.selection
        _err(store.record_selection(UNKNOWN_RUN, Selection()), NotFound)
        _ok(store.finish_run(run, RunStatus.PASSED, utc(T0_MS + 1)))
        _err(store.record_selection(run, Selection()), IllegalTransition)
        everything = self.begin(store)
        assert not _ok(reader.get_run(everything)).selection.is_partial

    def test_history_keeps_message_commit_and_reruns(
        self, store: DataStore, reader: DataReader
    ) -> None:
        clean = Environment(git_commit="c0ffee", git_dirty=False)
        failing = self.whole_run(store, [make_item("t.py::x", Outcome.FAILED, message="boom")],
                                 environment=clean)
        flaky = rerun_item("t.py::x", failed_attempts=2)
        rerun = self.whole_run(store, [flaky], at_ms=T0_MS + 1,
                               environment=Environment(git_commit="decade", git_dirty=True))
        newest, oldest = _ok(reader.history("alpha", "t.py::x"))
        assert (newest.run_id, newest.outcome, newest.message) == (rerun, Outcome.PASSED, None)
        assert (newest.git_commit, newest.git_dirty, newest.rerun_failures) == ("decade", True, 2)
        assert (oldest.run_id, oldest.message, oldest.rerun_failures) == (failing, "boom", 0)
        assert (oldest.git_commit, oldest.git_dirty) == ("c0ffee", False)
        _ok(store.prune_runs(RunRetentionPolicy(keep_runs=1)))
        newest, oldest = _ok(reader.history("alpha", "t.py::x"))
        assert (oldest.run_id, oldest.message, oldest.git_commit) == (None, "boom", "c0ffee")

    def test_failures_carry_their_streak_beyond_the_window_and_pruning(
        self, store: DataStore, reader: DataReader
    ) -> None:
        self.whole_run(store, [make_item("t.py::x")])
        runs = [
            self.whole_run(store, [make_item("t.py::x", Outcome.FAILED, message=f"boom {i}"),
                                   make_item("t.py::y", Outcome.FAILED)],
                           at_ms=T0_MS + (i + 1) * HOUR_MS)
            for i in range(DEFAULT_HISTORY_WINDOW + 2)
        ]
        x, y = _ok(reader.failures(runs[-1]))
        assert (x.streak, x.failing_since, x.streak_message) == (
            DEFAULT_HISTORY_WINDOW + 2, runs[0], "boom 0"
        )
        assert (y.streak, y.failing_since) == (DEFAULT_HISTORY_WINDOW + 2, runs[0])
        (first,) = [f for f in _ok(reader.failures(runs[0])) if f.nodeid == "t.py::x"]
        assert (first.streak, first.failing_since, first.streak_message) == (1, runs[0], "boom 0")
        _ok(store.prune_runs(RunRetentionPolicy(keep_runs=3)))
        x = _ok(reader.failures(runs[-1]))[0]
        assert (x.streak, x.failing_since, x.streak_message) == (
            DEFAULT_HISTORY_WINDOW + 2, None, "boom 0"
        )
        running = self.begin(store, at_ms=T0_MS + 99 * HOUR_MS)
        _ok(store.record_results(running, [make_item("t.py::x", Outcome.FAILED, message="b")]))
        assert _ok(reader.failures(running))[0].streak == DEFAULT_HISTORY_WINDOW + 3
        _ok(store.finish_run(running, RunStatus.FAILED, utc(T0_MS + 99 * HOUR_MS)))
        self.whole_run(store, [make_item("t.py::x")], at_ms=T0_MS + 100 * HOUR_MS)
        again = self.whole_run(store, [make_item("t.py::x", Outcome.FAILED, message="anew")],
                               at_ms=T0_MS + 101 * HOUR_MS)
        (x,) = _ok(reader.failures(again))
        assert (x.streak, x.failing_since, x.streak_message) == (1, again, "anew")

    def test_new_is_decided_by_start_order_and_frozen_at_the_end(
        self, store: DataStore, reader: DataReader
    ) -> None:
        """Eight concurrent runs of one project: "new" never changes after a run ends."""
        runs = [self.begin(store, at_ms=T0_MS + i) for i in range(8)]
        r1, r2, r3, r4, r5, r6, r7, r8 = runs
        boom = [make_item("t.py::x", Outcome.FAILED, message="boom")]
        told: dict[RunId, tuple[bool, ...]] = {}

        def finish(run: RunId, items: Sequence[TestResult] = ()) -> None:
            if items:
                _ok(store.record_results(run, items))
            _ok(store.finish_run(run, RunStatus.FAILED, utc(T0_MS + 10)))
            told[run] = tuple(f.is_new for f in _ok(reader.failures(run)))

        finish(r3, boom)  # nothing lower recorded it yet
        _ok(store.record_results(r1, boom))  # r1 is still running
        assert [f.is_new for f in _ok(reader.failures(r1))] == [True]
        finish(r5, boom)  # r1 (running) and r3 (finished) have lower ids
        finish(r2, boom)
        finish(r1)  # the lowest id: new
        _ok(store.record_results(r6, boom))
        finish(r4, boom)
        finish(r8, [make_item("t.py::x")])
        finish(r7, [make_item("t.py::y", Outcome.FAILED, message="other", exception_type="E")])
        finish(r6)
        assert told == {r1: (True,), r2: (False,), r3: (True,), r4: (False,), r5: (False,),
                        r6: (False,), r7: (True,), r8: ()}
        for run in runs:
            assert tuple(f.is_new for f in _ok(reader.failures(run))) == told[run], run
        late = self.begin(store, at_ms=T0_MS + 20)
        _ok(store.record_results(late, boom))
        assert [f.is_new for f in _ok(reader.failures(late))] == [False]

    @settings(
        max_examples=20,
        deadline=None,
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.differing_executors,
        ],
    )
    @given(
        order=st.permutations([(run, step) for run in range(8) for step in ("record", "end")]),
        kinds=st.lists(st.sampled_from(["AError", "BError", "CError"]), min_size=8,
                       max_size=8),
        statuses=st.lists(st.sampled_from([RunStatus.FAILED, RunStatus.FAILED,
                                           RunStatus.INTERRUPTED]), min_size=8, max_size=8),
    )
    def test_new_never_changes_however_eight_runs_interleave(
        self,
        layer_factory: LayerFactory,
        order: list[tuple[int, str]],
        kinds: list[str],
        statuses: list[RunStatus],
    ) -> None:
        """Eight runs of one project begin in order; their records and ends interleave in
        any order. Each run's "new" answers, read right after it ends, are those of the
        rule (no lower-id run, running or finished, recorded the signature at that time)
        and are still the answers once every run has ended."""
        with ExitStack() as stack:
            c = _open(stack, layer_factory, FixedClock(T0_MS))
            store: DataStore = c.get(DataStore)
            reader: DataReader = c.get(DataReader)
            runs = [self.begin(store, at_ms=T0_MS + i) for i in range(8)]
            recorded: dict[int, str] = {}
            ended: dict[int, RunStatus] = {}
            told: dict[int, tuple[bool, ...]] = {}
            for index, step in order:
                run = runs[index]
                if step == "record" and index not in ended:
                    item = make_item("t.py::x", Outcome.FAILED, exception_type=kinds[index])
                    _ok(store.record_results(run, [item]))
                    recorded[index] = kinds[index]
                    continue
                if index in ended:
                    continue
                counted = {
                    recorded[i] for i in range(index) if i in recorded
                    and ended.get(i, RunStatus.RUNNING) in (
                        RunStatus.RUNNING, RunStatus.PASSED, RunStatus.FAILED)
                }
                _ok(store.finish_run(run, statuses[index], utc(T0_MS + 100)))
                ended[index] = statuses[index]
                told[index] = tuple(f.is_new for f in _ok(reader.failures(run)))
                expected = () if index not in recorded else (recorded[index] not in counted,)
                assert told[index] == expected, (index, recorded, ended)
            for index, answer in told.items():
                assert tuple(f.is_new for f in _ok(reader.failures(runs[index]))) == answer

    def test_aborted_runs_freeze_new_too(
        self, store: DataStore, reader: DataReader, clock: FixedClock
    ) -> None:
        boom = [make_item("t.py::x", Outcome.FAILED, message="boom")]
        low, high = self.begin(store), self.begin(store)
        _ok(store.record_results(high, boom))
        clock.advance(2 * HOUR_MS)
        _ok(store.record_results(low, boom))
        assert _ok(store.abort_stale_runs("alpha", older_than=utc(clock.now - HOUR_MS))) == (
            high,
        )
        assert [f.is_new for f in _ok(reader.failures(high))] == [False]  # low runs, lower id
        _ok(store.finish_run(low, RunStatus.FAILED, utc(clock.now)))
        assert [f.is_new for f in _ok(reader.failures(low))] == [True]
        assert [f.is_new for f in _ok(reader.failures(high))] == [False]

    # finish_run ----------------------------------------------------------------------------------

    def test_finish_run_moves_a_running_run_once(
        self, store: DataStore, reader: DataReader
    ) -> None:
        run = self.begin(store)
        _ok(store.record_results(run, [make_item("t.py::a", Outcome.FAILED)]))
        _err(store.finish_run(run, RunStatus.RUNNING, utc(T0_MS)), IllegalTransition)
        _err(store.finish_run(run, RunStatus.FAILED, datetime(2024, 1, 1)), InvalidInput)
        assert _ok(reader.get_run(run)).status == RunStatus.RUNNING
        summary = _ok(store.finish_run(run, RunStatus.FAILED, utc(T0_MS + 5_000)))
        assert summary == _ok(reader.get_run(run))
        assert (summary.status, summary.finished_at_ms) == (RunStatus.FAILED, T0_MS + 5_000)
        again = _err(store.finish_run(run, RunStatus.PASSED, utc(T0_MS)), IllegalTransition)
        assert (again.from_status, again.to_status) == ("failed", "passed")
        _err(store.finish_run(UNKNOWN_RUN, RunStatus.PASSED, utc(T0_MS)), NotFound)

    def test_history_keeps_the_newest_window_of_executed_outcomes(
        self, store: DataStore, reader: DataReader
    ) -> None:
        runs = []
        for i in range(HISTORY_DEPTH + 2):
            outcome = Outcome.FAILED if i % 3 == 0 else Outcome.PASSED
            runs.append(self.whole_run(store, [make_item("t.py::a", outcome, duration_ms=i),
                                               make_item("t.py::s", Outcome.SKIPPED)],
                                       at_ms=T0_MS + i * HOUR_MS))
        entries = _ok(reader.history("alpha", "t.py::a"))
        assert [e.run_id for e in entries] == runs[::-1][:HISTORY_DEPTH]
        assert [e.duration_ms for e in entries] == [
            float(i) for i in range(len(runs) - 1, len(runs) - 1 - HISTORY_DEPTH, -1)
        ]
        assert [e.outcome for e in entries[:4]] == [Outcome.FAILED, Outcome.PASSED,
                                                    Outcome.PASSED, Outcome.FAILED]
        _err(reader.history("alpha", "t.py::s"), NotFound)  # skipped never executed
        _err(reader.history("beta", "t.py::a"), NotFound)

    @pytest.mark.parametrize("status", [RunStatus.INTERRUPTED, RunStatus.ABORTED])
    def test_unfinished_runs_leave_history_alone(
        self, store: DataStore, reader: DataReader, status: RunStatus
    ) -> None:
        done = self.whole_run(store, [make_item("t.py::a")])
        self.whole_run(store, [make_item("t.py::a", Outcome.FAILED)], status=status,
                       at_ms=T0_MS + 1)
        assert [e.run_id for e in _ok(reader.history("alpha", "t.py::a"))] == [done]

    # abort_stale_runs ----------------------------------------------------------------------------

    def test_abort_stale_runs_marks_runs_written_before_the_cutoff(
        self, store: DataStore, reader: DataReader, clock: FixedClock
    ) -> None:
        stale = self.begin(store)
        busy = self.begin(store)
        other_project = self.begin(store, "beta")
        finished = self.whole_run(store, [make_item("t.py::a")])
        clock.advance(2 * HOUR_MS)
        _ok(store.record_results(busy, [make_item("t.py::a")]))  # written recently
        fresh = self.begin(store, at_ms=clock.now)
        cutoff = utc(clock.now - HOUR_MS)
        _err(store.abort_stale_runs("alpha", older_than=datetime(2024, 1, 1)), InvalidInput)
        assert _ok(store.abort_stale_runs("alpha", older_than=cutoff)) == (stale,)
        status = {r: _ok(reader.get_run(r)).status for r in (stale, busy, other_project,
                                                              finished, fresh)}
        assert status == {stale: RunStatus.ABORTED, busy: RunStatus.RUNNING,
                          other_project: RunStatus.RUNNING, finished: RunStatus.PASSED,
                          fresh: RunStatus.RUNNING}
        _err(store.record_results(stale, [make_item("t.py::b")]), IllegalTransition)
        assert _ok(store.abort_stale_runs("alpha", older_than=cutoff)) == ()

    # write_coverage ------------------------------------------------------------------------------

    def test_write_coverage_replaces_and_validates(
        self, store: DataStore, reader: DataReader
    ) -> None:
        run = self.begin(store)
        first = (FileCoverage("src/b.py", 10, 2, 4, 1, 1, (3, 4)), FileCoverage("src/a.py", 5, 0))
        assert _ok(store.write_coverage(run, first)) == 2
        report = _ok(reader.coverage(run))
        assert (report.run_id, report.source_run_id) == (run, run)
        assert report.files == tuple(sorted(first, key=lambda f: f.path))
        for bad in (
            (FileCoverage("src/a.py", -1, 0),),
            (FileCoverage("src/a.py", 3, 4),),
            (FileCoverage("src/a.py", 3, 0, 2, 0, 3),),
            (FileCoverage("src/a.py", 3, 0), FileCoverage("src/a.py", 4, 0)),
        ):
            _err(store.write_coverage(run, bad), InvalidInput)
        assert _ok(reader.coverage(run)).files == report.files
        assert _ok(store.write_coverage(run, (FileCoverage("src/c.py", 1, 1),))) == 1
        assert [f.path for f in _ok(reader.coverage(run)).files] == ["src/c.py"]
        _err(store.write_coverage(UNKNOWN_RUN, first), NotFound)

    # prune_runs ----------------------------------------------------------------------------------

    @pytest.mark.parametrize(
        "policy",
        [RunRetentionPolicy(0), RunRetentionPolicy(-1), RunRetentionPolicy(1, 0),
         RunRetentionPolicy(1, -2.0), RunRetentionPolicy(1, math.nan)],
        ids=["keep 0", "keep -1", "age 0", "age -2", "age nan"],
    )
    def test_prune_refuses_bad_policies(
        self, store: DataStore, reader: DataReader, policy: RunRetentionPolicy
    ) -> None:
        self.whole_run(store, [make_item("t.py::a")])
        self.whole_run(store, [make_item("t.py::a")], at_ms=T0_MS + 1)
        before = _snapshot(reader)
        _err(store.plan_prune(policy), InvalidInput)
        _err(store.prune_runs(policy), InvalidInput)
        assert _snapshot(reader) == before

    def test_prune_keeps_the_newest_runs_per_project(
        self, store: DataStore, reader: DataReader
    ) -> None:
        old = self.whole_run(store, [make_item("tests/test_old.py::t", Outcome.FAILED,
                                               frames=(StackFrame("src/old.py", 1, "f", True),))],
                             at_ms=T0_MS, invocation="inv-old")
        _ok(store.write_coverage(old, (FileCoverage("src/old_cov.py", 1, 0),)))
        tie_low = self.whole_run(store, [make_item("tests/test_a.py::t")], at_ms=T0_MS + 10)
        tie_high = self.whole_run(store, [make_item("tests/test_a.py::t")], at_ms=T0_MS + 10)
        running = self.begin(store, at_ms=T0_MS - DAY_MS)
        beta = self.whole_run(store, [make_item("tests/test_a.py::t")], project="beta",
                              at_ms=T0_MS - 5 * DAY_MS)
        before = _snapshot(reader)
        plan = _ok(store.plan_prune(RunRetentionPolicy(keep_runs=1)))
        assert _snapshot(reader) == before  # planning changes nothing
        result = _ok(store.prune_runs(RunRetentionPolicy(keep_runs=1)))
        assert result == plan == PruneRunsResult(pruned_runs=2, pruned_files=3)
        alive = {s.id for s in _ok(reader.list_runs(None, limit=MAX_PAGE_SIZE)).items}
        assert alive == {tie_high, running, beta}
        for gone in (old, tie_low):
            assert _err(reader.get_run(gone), NotFound) == NotFound("run", str(gone))
        history = _ok(reader.history("alpha", "tests/test_a.py::t"))
        assert [e.run_id for e in history] == [tie_high, None]
        assert [e.run_id for e in _ok(reader.history("alpha", "tests/test_old.py::t"))] == [None]
        assert _ok(store.plan_prune(RunRetentionPolicy(keep_runs=1))) == PruneRunsResult(0, 0)
        assert _ok(store.prune_runs(RunRetentionPolicy(keep_runs=1))) == PruneRunsResult(0, 0)

    def test_prune_by_age_keeps_running_runs(
        self, store: DataStore, reader: DataReader, clock: FixedClock
    ) -> None:
        ancient = self.whole_run(store, [make_item("t.py::a")], at_ms=clock.now - 3 * DAY_MS)
        running = self.begin(store, at_ms=clock.now - 3 * DAY_MS)
        recent = self.whole_run(store, [make_item("t.py::a")], at_ms=clock.now - DAY_MS // 2)
        result = _ok(store.prune_runs(RunRetentionPolicy(keep_runs=10, max_age_days=1)))
        assert result.pruned_runs == 1
        alive = {s.id for s in _ok(reader.list_runs(None, limit=MAX_PAGE_SIZE)).items}
        assert alive == {running, recent}
        _err(reader.get_run(ancient), NotFound)

    def test_prune_moves_coverage_to_a_surviving_sibling(
        self, store: DataStore, reader: DataReader
    ) -> None:
        files = (FileCoverage("src/a.py", 10, 1),)
        holder = self.whole_run(store, [make_item("t.py::a")], project="alpha", invocation="i1")
        _ok(store.write_coverage(holder, files))
        sibling = self.whole_run(store, [make_item("t.py::a")], project="beta", invocation="i1",
                                 at_ms=T0_MS + 5)
        report = _ok(reader.coverage(sibling))
        assert (report.run_id, report.source_run_id, report.files) == (sibling, holder, files)
        self.whole_run(store, [make_item("t.py::a")], project="alpha", invocation="i2",
                       at_ms=T0_MS + 10)
        assert _ok(store.prune_runs(RunRetentionPolicy(keep_runs=1))) == PruneRunsResult(1, 0)
        moved = _ok(reader.coverage(sibling))
        assert (moved.run_id, moved.source_run_id, moved.files) == (sibling, sibling, files)


class TestRunsReaderContract(
    FingerprintContract,
    AttemptsContract,
    CellsContract,
    QuarantineContract,
    FlakyPolicyContract,
    SignaturesReaderContract,
    TestCoverageContract,
    RunLinksReaderContract,
    _Contract,
):
    """What every ``DataReader`` layer must answer; subclass and define ``make_layer``.

    The reader is exercised through the ``DataStore`` of the same layer.
    """

    # runs ----------------------------------------------------------------------------------------

    def test_latest_run_is_newest_by_start_then_id(
        self, store: DataStore, reader: DataReader
    ) -> None:
        _err(reader.latest_run("alpha"), NotFound)
        self.begin(store, at_ms=T0_MS + 10)
        tie_low = self.begin(store, at_ms=T0_MS + 20)
        tie_high = self.begin(store, at_ms=T0_MS + 20)
        self.begin(store, at_ms=T0_MS)  # created last, started earliest
        self.begin(store, "beta", at_ms=T0_MS + 99)
        assert tie_low < tie_high
        assert _ok(reader.latest_run("alpha")).id == tie_high
        assert _ok(reader.projects()) == ("alpha", "beta")
        assert _err(reader.get_run(UNKNOWN_RUN), NotFound) == NotFound("run", str(UNKNOWN_RUN))

    @pytest.mark.parametrize("limit", [0, -1, MAX_PAGE_SIZE + 1])
    def test_list_runs_refuses_bad_limits(self, reader: DataReader, limit: int) -> None:
        assert _err(reader.list_runs(None, limit=limit), InvalidInput).field == "limit"

    def test_list_runs_refuses_foreign_cursors(self, store: DataStore, reader: DataReader) -> None:
        self.begin(store)
        for cursor in ("garbage", "", "-1", "\x00", "9" * 400):
            _err(reader.list_runs("alpha", limit=1, cursor=cursor), InvalidInput)

    def test_list_runs_pages_newest_first_without_overlap(
        self, store: DataStore, reader: DataReader
    ) -> None:
        runs = [self.begin(store, at_ms=T0_MS + (i % 3) * 10) for i in range(7)]
        self.begin(store, "beta")
        expected = sorted(runs, key=lambda r: (_ok(reader.get_run(r)).started_at_ms, r),
                          reverse=True)
        first = _ok(reader.list_runs("alpha", limit=3))
        assert [s.id for s in first.items] == expected[:3]
        assert first.has_more
        assert first.next_cursor is not None
        self.begin(store, at_ms=T0_MS + 1_000)  # a newer run arrives between pages
        second = _ok(reader.list_runs("alpha", limit=3, cursor=first.next_cursor))
        assert [s.id for s in second.items] == expected[3:6]
        third = _ok(reader.list_runs("alpha", limit=3, cursor=second.next_cursor))
        assert [s.id for s in third.items] == expected[6:]
        assert (third.has_more, third.next_cursor) == (False, None)
        exact = _ok(reader.list_runs("beta", limit=1))
        assert (len(exact.items), exact.has_more, exact.next_cursor) == (1, False, None)
        assert len(_ok(reader.list_runs(None, limit=MAX_PAGE_SIZE)).items) == 9
        assert _ok(reader.list_runs("nobody")) == Page((), False, None)

    def test_list_runs_filters_by_status(self, store: DataStore, reader: DataReader) -> None:
        done = self.whole_run(store, [make_item("t.py::a")])
        running = [self.begin(store, at_ms=T0_MS + i) for i in range(1, 4)]
        other = self.begin(store, "beta", at_ms=T0_MS + 9)
        first = _ok(reader.list_runs("alpha", status=RunStatus.RUNNING, limit=2))
        assert [s.id for s in first.items] == running[:0:-1]
        assert first.has_more
        rest = _ok(reader.list_runs("alpha", status=RunStatus.RUNNING, limit=2,
                                    cursor=first.next_cursor))
        assert [s.id for s in rest.items] == [running[0]]
        assert not rest.has_more
        assert [s.id for s in _ok(reader.list_runs("alpha", status=RunStatus.PASSED)).items] == [
            done
        ]
        every = _ok(reader.list_runs(None, status=RunStatus.RUNNING, limit=MAX_PAGE_SIZE))
        assert {s.id for s in every.items} == {*running, other}
        assert _ok(reader.list_runs("alpha", status=RunStatus.ABORTED)).items == ()
        bad = _err(reader.list_runs("alpha", status="done"), InvalidInput)  # type: ignore[arg-type]
        assert bad.field == "status"

    # tests, failures, slowest ---------------------------------------------------------------------

    def test_tests_are_sorted_and_filtered(self, store: DataStore, reader: DataReader) -> None:
        run = self.begin(store)
        _ok(store.record_results(run, [make_item("t.py::b", Outcome.FAILED), make_item("t.py::a"),
                                       make_item("t.py::c", Outcome.ERROR),
                                       make_item("t.py::d", Outcome.XFAILED)]))
        assert [t.nodeid for t in _ok(reader.tests(run))] == ["t.py::a", "t.py::b", "t.py::c",
                                                              "t.py::d"]
        failing = _ok(reader.tests(run, outcomes=frozenset({Outcome.FAILED, Outcome.ERROR})))
        assert [(t.nodeid, t.outcome) for t in failing] == [
            ("t.py::b", Outcome.FAILED), ("t.py::c", Outcome.ERROR)
        ]
        assert _ok(reader.tests(run, outcomes=frozenset())) == ()
        _err(reader.tests(UNKNOWN_RUN), NotFound)
        _err(reader.failures(UNKNOWN_RUN), NotFound)

    def test_slowest_orders_by_duration_then_node_id(
        self, store: DataStore, reader: DataReader
    ) -> None:
        run = self.begin(store)
        _ok(store.record_results(run, [make_item("t.py::a", duration_ms=5.0),
                                       make_item("t.py::b", duration_ms=9.5),
                                       make_item("t.py::c", duration_ms=5.0),
                                       make_item("t.py::d", duration_ms=0.25)]))
        assert [t.nodeid for t in _ok(reader.slowest(run, limit=3))] == [
            "t.py::b", "t.py::a", "t.py::c"
        ]
        assert len(_ok(reader.slowest(run))) == 4
        _err(reader.slowest(run, limit=0), InvalidInput)
        _err(reader.slowest(run, limit=-3), InvalidInput)
        _err(reader.slowest(UNKNOWN_RUN), NotFound)

    def test_signatures_ignore_volatile_details(
        self, store: DataStore, reader: DataReader
    ) -> None:
        frame = (StackFrame("src/app.py", 10, "f", True),)
        run = self.begin(store)
        _ok(store.record_results(run, [
            make_item("t.py::a", Outcome.FAILED, message="expected 3 got 4 at 0x7f01",
                      frames=frame),
            make_item("t.py::b", Outcome.FAILED, message="expected 5 got 90 at 0x7aa2",
                      frames=frame),
            make_item("t.py::c", Outcome.FAILED, message="expected 3 got 4", exception_type="E",
                      frames=frame),
        ]))
        a, b, c = _ok(reader.failures(run))
        assert a.signature == b.signature
        assert a.signature != c.signature

    def test_find_tests_matches_literally_exact_first(
        self, store: DataStore, reader: DataReader
    ) -> None:
        ids = ["t.py::test_a", "t.py::test_a[x]", "t.py::Test_A", "t.py::test%b", "u.py::a_b"]
        self.whole_run(store, [make_item(n) for n in ids])
        assert _ok(reader.find_tests("alpha", "t.py::test_a[x]")) == ("t.py::test_a[x]",)
        assert _ok(reader.find_tests("alpha", "t.py::test_a")) == ("t.py::test_a",
                                                                    "t.py::test_a[x]")
        assert _ok(reader.find_tests("alpha", "%")) == ("t.py::test%b",)
        assert _ok(reader.find_tests("alpha", "a_b")) == ("u.py::a_b",)
        assert _ok(reader.find_tests("alpha", "Test_A")) == ("t.py::Test_A",)
        assert len(_ok(reader.find_tests("alpha", "::", limit=2))) == 2
        assert _ok(reader.find_tests("beta", "t")) == ()
        _err(reader.find_tests("alpha", "t", limit=0), InvalidInput)

    # classification and flakiness -----------------------------------------------------------------

    def _history_of(self, store: DataStore, outcomes: str, nodeid: str = "t.py::x") -> RunId:
        """Finish one run per letter of ``outcomes`` (P passed, F failed, S skipped), oldest
        first; return the last run."""
        letters = {"P": Outcome.PASSED, "F": Outcome.FAILED, "S": Outcome.SKIPPED}
        run = UNKNOWN_RUN
        for i, letter in enumerate(outcomes):
            run = self.whole_run(store, [make_item(nodeid, letters[letter])],
                                 at_ms=T0_MS + i * HOUR_MS)
        return run

    @pytest.mark.parametrize(
        ("window", "verdict", "rule"),
        [
            # newest first, as Classification's table reads
            ("F", Classification.NEW_FAILURE, EvidenceRule.FIRST_FAILURE),
            ("FPP", Classification.NEW_FAILURE, EvidenceRule.FIRST_FAILURE),
            ("FF", Classification.PERSISTENT_FAILURE, EvidenceRule.FAILING_STREAK),
            ("FFP", Classification.PERSISTENT_FAILURE, EvidenceRule.FAILING_STREAK),
            ("FFPP", Classification.PERSISTENT_FAILURE, EvidenceRule.FAILING_STREAK),
            ("PFF", Classification.RECOVERED, EvidenceRule.FIXED),
            ("PF", Classification.RECOVERED, EvidenceRule.FIXED),
            ("PFP", Classification.RECOVERED, EvidenceRule.FIXED),  # a clean break and fix
            ("PFFP", Classification.RECOVERED, EvidenceRule.FIXED),
            ("PPF", Classification.STABLE, EvidenceRule.NO_FAILURE),
            ("PPP", Classification.STABLE, EvidenceRule.NO_FAILURE),
            ("P", Classification.STABLE, EvidenceRule.NO_FAILURE),
            ("FPF", Classification.FLAKY, EvidenceRule.OSCILLATION),
            ("PFPF", Classification.FLAKY, EvidenceRule.OSCILLATION),
            ("FFPF", Classification.FLAKY, EvidenceRule.OSCILLATION),
            ("PPFPF", Classification.FLAKY, EvidenceRule.OSCILLATION),
            ("SPF", Classification.STABLE, EvidenceRule.NOT_EXECUTED),
            ("SFF", Classification.STABLE, EvidenceRule.NOT_EXECUTED),
        ],
    )
    def test_classify(
        self,
        store: DataStore,
        reader: DataReader,
        window: str,
        verdict: Classification,
        rule: EvidenceRule,
    ) -> None:
        assert reference_verdict(window) == (verdict, rule)
        run = self._history_of(store, window[::-1])
        (item,) = _ok(reader.classify(run))
        assert (item.nodeid, item.classification, item.because.rule) == ("t.py::x", verdict, rule)
        assert item.outcome == _ok(reader.tests(run))[0].outcome
        assert "".join(o.value[0].upper() for o in item.window) == window.lstrip("S")

    def test_evidence_names_its_runs(self, store: DataStore, reader: DataReader) -> None:
        p1 = self.whole_run(store, [make_item("t.py::x")])
        f2 = self.whole_run(store, [make_item("t.py::x", Outcome.FAILED)], at_ms=T0_MS + 1)
        (new,) = _ok(reader.classify(f2))
        assert (new.because.run_ids, new.because.summary) == (
            (f2,), "first failure after 1 passing run"
        )
        f3 = self.whole_run(store, [make_item("t.py::x", Outcome.FAILED)], at_ms=T0_MS + 2)
        (broken,) = _ok(reader.classify(f3))
        assert broken.because.run_ids == (f2, f3)
        assert broken.because.summary == f"failing since run {f2}, 2 runs in a row"
        p4 = self.whole_run(store, [make_item("t.py::x")], at_ms=T0_MS + 3)
        (fixed,) = _ok(reader.classify(p4))
        assert (fixed.classification, fixed.because.run_ids) == (
            Classification.RECOVERED, (f2, f3, p4)
        )
        assert fixed.because.summary == f"passed after failing 2 runs in a row since run {f2}"
        f5 = self.whole_run(store, [make_item("t.py::x", Outcome.FAILED)], at_ms=T0_MS + 4)
        (flaky,) = _ok(reader.classify(f5))
        assert (flaky.classification, flaky.because.rule, flaky.because.run_ids) == (
            Classification.FLAKY, EvidenceRule.OSCILLATION, (f2, f3, f5)
        )
        (earlier,) = _ok(reader.classify(p1))  # later runs do not change an earlier verdict
        assert (earlier.classification, earlier.because.rule) == (
            Classification.STABLE, EvidenceRule.NO_FAILURE
        )
        assert _ok(reader.classify(f2))[0] == new

    def test_a_pass_on_a_rerun_is_flaky(self, store: DataStore, reader: DataReader) -> None:
        self.whole_run(store, [make_item("t.py::x"), make_item("t.py::y")])
        rerun = self.whole_run(
            store,
            [rerun_item("t.py::x"), rerun_item("t.py::y", final=Outcome.FAILED)],
            at_ms=T0_MS + 1,
        )
        x, y = _ok(reader.classify(rerun))
        assert (x.classification, x.because.rule, x.because.run_ids) == (
            Classification.FLAKY, EvidenceRule.PASSED_ON_RERUN, (rerun,)
        )
        assert x.because.summary == f"passed on a rerun after 1 failed attempt (run {rerun})"
        assert y.classification == Classification.NEW_FAILURE  # it never passed
        (listed,) = _ok(reader.flaky_tests("alpha"))
        assert (listed.nodeid, listed.because.rule, listed.failures) == (
            "t.py::x", EvidenceRule.PASSED_ON_RERUN, 0
        )
        clean = self.whole_run(store, [make_item("t.py::x")], at_ms=T0_MS + 2)
        (x,) = _ok(reader.classify(clean))  # the evidence stays while in the window
        assert (x.classification, x.because.run_ids) == (Classification.FLAKY, (rerun,))

    @pytest.mark.parametrize(
        ("environments", "verdict"),
        [
            (((None, False), (None, False)), Classification.NEW_FAILURE),
            ((("c0ffee", False), ("c0ffee", False)), Classification.FLAKY),
            ((("c0ffee", False), ("c0ffee", True)), Classification.NEW_FAILURE),
            ((("c0ffee", None), ("c0ffee", False)), Classification.NEW_FAILURE),
            ((("c0ffee", False), ("decade", False)), Classification.NEW_FAILURE),
        ],
        ids=["no commit", "one clean commit", "dirty", "unknown tree", "two commits"],
    )
    def test_same_commit_needs_one_clean_commit(
        self,
        store: DataStore,
        reader: DataReader,
        environments: tuple[tuple[str | None, bool | None], ...],
        verdict: Classification,
    ) -> None:
        (c1, d1), (c2, d2) = environments
        passed = self.whole_run(store, [make_item("t.py::x")],
                                environment=Environment(git_commit=c1, git_dirty=d1))
        failed = self.whole_run(store, [make_item("t.py::x", Outcome.FAILED)], at_ms=T0_MS + 1,
                                environment=Environment(git_commit=c2, git_dirty=d2))
        (item,) = _ok(reader.classify(failed))
        assert item.classification == verdict
        flaky = _ok(reader.flaky_tests("alpha"))
        if verdict == Classification.FLAKY:
            assert (item.because.rule, item.because.run_ids) == (
                EvidenceRule.SAME_COMMIT, (passed, failed)
            )
            assert [f.because for f in flaky] == [item.because]
        else:
            assert flaky == ()

    @settings(
        max_examples=25,
        deadline=None,
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.differing_executors,
        ],
    )
    @given(windows=st.lists(st.text("PFR", min_size=1, max_size=12), min_size=1, max_size=4))
    def test_classify_unstable_is_classify_without_the_stable(
        self, layer_factory: LayerFactory, windows: list[str]
    ) -> None:
        """Each test follows its own letters, oldest run first (``R``: passed on a rerun);
        every run's unstable verdicts are its verdicts that are not ``stable``."""
        with ExitStack() as stack:
            container = _open(stack, layer_factory, FixedClock(T0_MS))
            store, reader = container.get(DataStore), container.get(DataReader)
            runs = []
            for at in range(max(len(w) for w in windows)):
                items = [
                    rerun_item(f"t.py::w{n}") if w[at] == "R" else make_item(
                        f"t.py::w{n}", Outcome.FAILED if w[at] == "F" else Outcome.PASSED)
                    for n, w in enumerate(windows) if at < len(w)
                ]
                runs.append(self.whole_run(store, items, at_ms=T0_MS + at * 60_000,
                                           invocation=f"inv-{at}"))
            for run in runs:
                assert _ok(reader.classify_unstable(run)) == _unstable(_ok(reader.classify(run)))
            _err(reader.classify_unstable(UNKNOWN_RUN), NotFound)

    def test_classify_judges_only_the_newest_window(
        self, store: DataStore, reader: DataReader
    ) -> None:
        run = self._history_of(store, "F" + "P" * DEFAULT_HISTORY_WINDOW)
        (item,) = _ok(reader.classify(run))
        assert (item.classification, item.because.rule) == (
            Classification.STABLE, EvidenceRule.NO_FAILURE
        )
        assert len(item.window) <= DEFAULT_HISTORY_WINDOW
        _err(reader.classify(UNKNOWN_RUN), NotFound)

    def test_flaky_tests_list_only_flaky_evidence(
        self, store: DataStore, reader: DataReader
    ) -> None:
        pattern = [("t.py::a", "PFPF"), ("t.py::b", "FFPP"), ("t.py::c", "PPPP"),
                   ("t.py::d", "FFFF"), ("t.py::e", "PFFF"), ("t.py::f", "FPFP"),
                   ("t.py::g", "PPFP"), ("t.py::h", "FPPP")]  # oldest first
        last = UNKNOWN_RUN
        for i in range(4):
            items = [make_item(n, Outcome.PASSED if p[i] == "P" else Outcome.FAILED)
                     for n, p in pattern]
            last = self.whole_run(store, items, at_ms=T0_MS + i * HOUR_MS)
        flaky = _ok(reader.flaky_tests("alpha"))
        assert [(f.nodeid, f.flips, f.failures, f.passes) for f in flaky] == [
            ("t.py::a", 3, 2, 2), ("t.py::f", 3, 2, 2)
        ]
        assert flaky[0].window == (Outcome.FAILED, Outcome.PASSED, Outcome.FAILED, Outcome.PASSED)
        assert all(f.last_run_id == last for f in flaky)
        assert all(f.because.rule == EvidenceRule.OSCILLATION for f in flaky)
        classified = {c.nodeid: c for c in _ok(reader.classify(last))}
        for f in flaky:
            assert classified[f.nodeid].because == f.because
        assert _ok(reader.flaky_tests("beta")) == ()

    @settings(
        max_examples=25,
        deadline=None,
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.differing_executors,
        ],
    )
    @given(
        runs=st.lists(
            st.tuples(
                st.sampled_from("FFPPS"),
                st.sampled_from([False, False, False, True]),
                st.sampled_from([None, "c0ffee", "decade"]),
                st.sampled_from([None, False, False, True]),
            ),
            min_size=1,
            max_size=DEFAULT_HISTORY_WINDOW + 4,
        )
    )
    def test_verdicts_and_streaks_match_the_reference(
        self,
        layer_factory: LayerFactory,
        runs: list[tuple[str, bool, str | None, bool | None]],
    ) -> None:
        """Every run of a generated history is judged as :func:`reference_verdict` says,
        failures count the streak :func:`reference_streak` counts, and ``flaky_tests``
        lists the test exactly when the newest window is flaky."""
        with ExitStack() as stack:
            c = _open(stack, layer_factory, FixedClock(T0_MS))
            store: DataStore = c.get(DataStore)
            reader: DataReader = c.get(DataReader)
            executed: list[tuple[str, str, str | None]] = []  # oldest first
            for i, (letter, rerun, commit, dirty) in enumerate(runs):
                outcome = {"F": Outcome.FAILED, "P": Outcome.PASSED, "S": Outcome.SKIPPED}[letter]
                item = rerun_item("t.py::x", final=outcome) if rerun else make_item(
                    "t.py::x", outcome
                )
                run = self.whole_run(store, [item], at_ms=T0_MS + i,
                                     environment=Environment(git_commit=commit, git_dirty=dirty))
                mark = "r" if rerun and letter != "S" else "."
                clean = commit if dirty is False else None
                if letter != "S":
                    executed.append((letter, mark, clean))
                recent = executed[::-1][:DEFAULT_HISTORY_WINDOW]
                window = "".join(e[0] for e in recent)
                if letter == "S":
                    window = "S" + window[: DEFAULT_HISTORY_WINDOW - 1]
                    recent = recent[: DEFAULT_HISTORY_WINDOW - 1]
                expected = reference_verdict(
                    window, "".join(e[1] for e in recent), [e[2] for e in recent]
                )
                (item_now,) = _ok(reader.classify(run))
                assert (item_now.classification, item_now.because.rule) == expected, window
                if letter == "F":
                    (failure,) = _ok(reader.failures(run))
                    streak = reference_streak("".join(e[0] for e in executed))
                    assert failure.streak == streak, "".join(e[0] for e in executed)
            newest = executed[::-1][:DEFAULT_HISTORY_WINDOW]
            listed = _ok(reader.flaky_tests("alpha"))
            flaky = bool(newest) and reference_verdict(
                "".join(e[0] for e in newest), "".join(e[1] for e in newest),
                [e[2] for e in newest],
            )[0] == Classification.FLAKY
            assert [f.nodeid for f in listed] == (["t.py::x"] if flaky else [])

    # coverage -------------------------------------------------------------------------------------

    def test_coverage_reads_the_sibling_that_holds_it(
        self, store: DataStore, reader: DataReader
    ) -> None:
        a = self.begin(store, "alpha", invocation="i1")
        b = self.begin(store, "beta", invocation="i1")
        c = self.begin(store, "gamma", invocation="i2")
        _err(reader.coverage(b), NotFound)
        files = (FileCoverage("src/z.py", 4, 1, 2, 1, 1, (7,)), FileCoverage("src/a.py", 2, 0))
        _ok(store.write_coverage(b, files))
        for run in (a, b):
            report = _ok(reader.coverage(run))
            assert (report.run_id, report.source_run_id) == (run, b)
            assert report.files == tuple(sorted(files, key=lambda f: f.path))
        assert report.percent_covered == 100.0 * (6 + 2 - 1 - 1) / (6 + 2)
        assert _err(reader.coverage(c), NotFound) == NotFound("coverage", str(c))
        _err(reader.coverage(UNKNOWN_RUN), NotFound)

    def test_coverage_trend_is_oldest_first_of_the_newest(
        self, store: DataStore, reader: DataReader
    ) -> None:
        runs = []
        for i in range(5):
            run = self.begin(store, at_ms=T0_MS + i * HOUR_MS, invocation=f"i{i}")
            if i != 2:
                _ok(store.write_coverage(run, (FileCoverage("src/a.py", 10, 10 - 2 * i),)))
                runs.append((run, T0_MS + i * HOUR_MS, 20.0 * i))
        trend = _ok(reader.coverage_trend("alpha", limit=3))
        assert [(p.run_id, p.started_at_ms, p.percent_covered) for p in trend] == runs[-3:]
        assert len(_ok(reader.coverage_trend("alpha"))) == 4
        assert _ok(reader.coverage_trend("beta")) == ()
        _err(reader.coverage_trend("alpha", limit=0), InvalidInput)

    # compare --------------------------------------------------------------------------------------

    def test_compare_two_runs(self, store: DataStore, reader: DataReader) -> None:
        a = self.whole_run(store, [make_item("t.py::keep"), make_item("t.py::gone"),
                                   make_item("t.py::fixed", Outcome.FAILED),
                                   make_item("t.py::breaks")])
        b = self.whole_run(store, [make_item("t.py::keep"), make_item("t.py::new"),
                                   make_item("t.py::fixed"),
                                   make_item("t.py::breaks", Outcome.ERROR),
                                   make_item("t.py::new_bad", Outcome.FAILED)],
                           at_ms=T0_MS + 1)
        diff = _ok(reader.compare(a, b))
        assert (diff.run_a, diff.run_b) == (a, b)
        assert diff.newly_failing == ("t.py::breaks",)  # new_bad is added, not newly failing
        assert diff.fixed == ("t.py::fixed",)
        assert diff.added == ("t.py::new", "t.py::new_bad")
        assert (diff.removed, diff.not_run) == (("t.py::gone",), ())
        _err(reader.compare(a, UNKNOWN_RUN), NotFound)
        _err(reader.compare(UNKNOWN_RUN, b), NotFound)

    @pytest.mark.parametrize(
        "partial",
        ["-k", "deselected", "--lf", "-x", "path", "interrupted", "aborted", "running",
         "selection recorded", "fewer than collected"],
    )
    def test_compare_calls_unselected_tests_not_run(
        self, store: DataStore, reader: DataReader, clock: FixedClock, partial: str
    ) -> None:
        a = self.whole_run(store, [make_item("t.py::kept"), make_item("t.py::other")])
        chosen = {
            "-k": Selection(keyword="kept"),
            "deselected": Selection(deselected=1),
            "--lf": Selection(last_failed=True),
            "-x": Selection(maxfail=1),
            "path": Selection(args=("t.py::kept",)),
            # collected 3, ran 2: a collection error stopped the session, say
            "fewer than collected": Selection(collected=3),
        }.get(partial, Selection())
        b = self.begin(store, at_ms=T0_MS + 1, selection=chosen)
        _ok(store.record_results(b, [make_item("t.py::kept"), make_item("t.py::new")]))
        if partial == "selection recorded":
            _ok(store.record_selection(b, Selection(deselected=1)))
        if partial == "aborted":
            clock.advance(DAY_MS)
            _ok(store.abort_stale_runs("alpha", older_than=utc(clock.now)))
        elif partial != "running":
            status = RunStatus.INTERRUPTED if partial == "interrupted" else RunStatus.PASSED
            _ok(store.finish_run(b, status, utc(clock.now)))
        diff = _ok(reader.compare(a, b))
        assert (diff.not_run, diff.removed, diff.added) == (("t.py::other",), (), ("t.py::new",))
        whole = self.whole_run(store, [make_item("t.py::kept")], at_ms=T0_MS + 2)
        assert _ok(reader.compare(a, whole)).removed == ("t.py::other",)
