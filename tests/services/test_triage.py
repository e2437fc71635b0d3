"""The triage rules over generated run histories, and the same answer on every layer.

Each example records one history (runs with passing, failing, erroring, skipped and
rerun-passed items, a few root causes shared by several tests, collection errors, runs that
were interrupted, aborted, left running or ran a selection, clean and dirty commits) into
the in-memory layer and SQLite (PostgreSQL in its own test), triages one of its runs on
each, checks the answer against rules written here apart from the triage code, and demands
equal answers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from returns.result import Failure

from runstore.layers import CLOCK, DATA_READER, DATA_STORE, Layer, build, in_memory, merge, sqlite
from runstore.services import (
    FailureGroup,
    InvalidInput,
    NotFound,
    SinceGreen,
    Triage,
    is_green,
    triage_run,
)
from runstore.services.clock import FixedClock
from runstore.services.pagination import MAX_PAGE_SIZE
from runstore.services.test_runs import (
    Classification,
    CollectionError,
    DataReader,
    DataStore,
    Environment,
    ErrorInfo,
    Outcome,
    Phase,
    RunId,
    RunStart,
    RunStatus,
    RunSummary,
    Selection,
    StackFrame,
    TestResult,
)
from runstore.testing import T0_MS, LayerFactory, make_item, rerun_item, utc

NODEIDS = ("tests/test_a.py::test_one", "tests/test_a.py::test_two", "tests/test_b.py::test_x[1]",
           "tests/test_b.py::test_x[2]", "tests/test_c.py::Test::test_y")

CAUSES = (
    # one root cause in the project's helper: every test it fails shares the signature
    ("ConnectionError", "database at port 5432 refused",
     (StackFrame("src/app/db.py", 12, "connect", True),
      StackFrame("/usr/lib/python3.11/socket.py", 850, "create_connection", False))),
    # an assertion in the test itself: one signature per test
    ("AssertionError", "assert 3 == 4", ()),
    ("KeyError", "'user'", (StackFrame("src/app/load.py", 40, "load", True),)),
)


@attrs.frozen
class RunPlan:
    """One run of a generated history: its items as (node id, letter, cause), how it ended
    and where it ran. Letters: P passed, F failed, E error, S skipped, R passed on a rerun."""

    items: tuple[tuple[str, str, int], ...]
    ending: str  # "auto" (passed/failed by the items), "failed", "interrupted", "aborted",
    # "running"
    selection: str  # "all", "keyword" or "fewer" (fewer items recorded than collected)
    commit: str | None
    dirty: bool | None
    collection_error: bool
    step_minutes: int


def _item(nodeid: str, letter: str, cause: int) -> TestResult:
    if letter == "P":
        return make_item(nodeid, duration_ms=float(len(nodeid)))
    if letter == "S":
        return make_item(nodeid, Outcome.SKIPPED)
    if letter == "R":
        return rerun_item(nodeid)
    exception_type, message, frames = CAUSES[cause]
    if not frames:
        frames = (StackFrame(nodeid.split("::")[0], 7, nodeid.rsplit("::")[-1], True),)
    return make_item(nodeid, Outcome.FAILED if letter == "F" else Outcome.ERROR,
                     message=message, exception_type=exception_type, frames=frames,
                     duration_ms=float(cause + 1))


@st.composite
def run_plans(draw: st.DrawFn) -> RunPlan:
    chosen = draw(st.lists(st.sampled_from(NODEIDS), min_size=1, max_size=len(NODEIDS),
                           unique=True))
    items = tuple((n, draw(st.sampled_from("PPPFFESR")), draw(st.integers(0, len(CAUSES) - 1)))
                  for n in chosen)
    commit = draw(st.sampled_from([None, "a" * 40, "b" * 40]))
    return RunPlan(
        items=items,
        ending=draw(st.sampled_from(["auto"] * 6 + ["failed", "interrupted", "aborted",
                                                     "running"])),
        selection=draw(st.sampled_from(["all"] * 4 + ["keyword", "fewer"])),
        commit=commit,
        dirty=None if commit is None else draw(st.sampled_from([False, False, True, None])),
        collection_error=draw(st.integers(0, 9)) == 0,
        step_minutes=draw(st.sampled_from([1, 1, 1, 0, 2])),
    )


histories = st.lists(run_plans(), min_size=1, max_size=7)


def record(store: DataStore, history: Sequence[RunPlan]) -> list[RunId]:
    """Record ``history`` (oldest first) and return the run ids."""
    ids = []
    at = T0_MS
    for number, plan in enumerate(history):
        at += plan.step_minutes * 60_000
        selection = {"all": Selection(), "keyword": Selection(keyword="test_x"),
                     "fewer": Selection(collected=len(plan.items) + 1)}[plan.selection]
        run = store.begin_run(RunStart(
            "proj", f"inv-{number}", utc(at),
            Environment(git_commit=plan.commit, git_dirty=plan.dirty), selection,
        )).unwrap()
        store.record_results(run, [_item(*i) for i in plan.items]).unwrap()
        if plan.collection_error:
            store.record_collection_errors(run, [CollectionError(
                "tests/test_broken.py", "tests/test_broken.py",
                ErrorInfo(Phase.COLLECT, "SyntaxError", "invalid syntax"))]).unwrap()
        if plan.ending != "running":
            failing = plan.collection_error or any(letter in "FE" for _, letter, _ in plan.items)
            status = {"auto": RunStatus.FAILED if failing else RunStatus.PASSED,
                      "failed": RunStatus.FAILED,  # by the runner, with or without
                      "interrupted": RunStatus.INTERRUPTED,
                      "aborted": RunStatus.ABORTED}[plan.ending]
            store.finish_run(run, status, utc(at + 1_000)).unwrap()
        ids.append(run)
    return ids


def changed_files(commit: str) -> tuple[str, ...] | None:
    """A stand-in for git: a file named after the commit, none known for commit ``b...``."""
    return None if commit.startswith("b") else (f"src/{commit[:4]}.py", "README.md")


# -- the rules, written apart from the triage code --------------------------------------------


def reference_green(reader: DataReader, run: RunSummary) -> RunSummary | None:
    """The newest run listed after ``run`` that finished passed with items, no
    failing item, no collection error, no keyword selection and no fewer items than
    collected."""
    listed = reader.list_runs("proj", limit=MAX_PAGE_SIZE).unwrap().items
    after = listed[[r.id for r in listed].index(run.id) + 1:]
    for candidate in after:
        collected = candidate.selection.collected
        if (candidate.status is RunStatus.PASSED and candidate.total
                and not candidate.counts["failed"] and not candidate.counts["error"]
                and not candidate.collection_errors and candidate.selection.keyword is None
                and (collected is None or candidate.total >= collected)):
            return candidate
    return None


def check_rules(reader: DataReader, answer: Triage) -> None:
    run = answer.run
    records = reader.failures(run.id).unwrap()
    verdicts = {v.nodeid: v for v in reader.classify(run.id).unwrap()}
    # every failure once, with the reader's verdict and streak, collection errors first
    assert sorted(f.nodeid for f in answer.failures) == sorted(r.nodeid for r in records)
    by_node = {r.nodeid: r for r in records}
    for failure in answer.failures:
        record_ = by_node[failure.nodeid]
        assert (failure.signature, failure.is_new, failure.streak, failure.failing_since) == (
            record_.signature, record_.is_new, record_.streak, record_.failing_since)
        if failure.phase is Phase.COLLECT:
            assert failure.classification is None
            assert failure.because is None
        else:
            verdict = verdicts[failure.nodeid]
            assert failure.classification is verdict.classification
            assert failure.because == verdict.because
            assert failure.classification in (Classification.NEW_FAILURE,
                                               Classification.PERSISTENT_FAILURE,
                                               Classification.FLAKY)
        own = [f for f in record_.frames if f.is_project]  # never a frame outside it
        assert failure.location == (own[-1] if own else None)
    rank = {None: 0, Classification.NEW_FAILURE: 1, Classification.PERSISTENT_FAILURE: 2,
            Classification.FLAKY: 3}
    keys = [(rank[f.classification], f.nodeid) for f in answer.failures]
    assert keys == sorted(keys)
    # groups: a partition of the failures that have a signature, by signature
    signed = {f.nodeid: f.signature for f in answer.failures if f.signature}
    assert sorted(n for g in answer.groups for n in g.nodeids) == sorted(signed)
    for group in answer.groups:
        assert {signed[n] for n in group.nodeids} == {group.signature}
        assert list(group.nodeids) == sorted(group.nodeids)
    assert len({g.signature for g in answer.groups}) == len(answer.groups)
    assert [g.count for g in answer.groups] == sorted((g.count for g in answer.groups),
                                                       reverse=True)
    # flaky suspects: the run's items classify calls flaky
    assert [s.nodeid for s in answer.flaky] == sorted(
        n for n, v in verdicts.items() if v.classification is Classification.FLAKY)
    assert answer.slowest == reader.slowest(run.id).unwrap()
    # since the last green run
    green = reference_green(reader, run)
    if green is None:
        assert answer.since_green is None
        return
    since = answer.since_green
    assert since is not None
    assert since.green == green
    assert is_green(green)
    then = {t.nodeid: t.outcome for t in reader.tests(green.id).unwrap()}
    now = {t.nodeid: t.outcome for t in reader.tests(run.id).unwrap()}
    failing = {Outcome.FAILED, Outcome.ERROR}
    assert list(since.newly_failing) == sorted(
        n for n, o in now.items() if o in failing and n in then and then[n] not in failing)
    assert list(since.added_failing) == sorted(
        n for n, o in now.items() if o in failing and n not in then)
    commit = green.environment.git_commit
    expected = None if commit is None else changed_files(commit)
    assert since.changed_files == (None if expected is None else tuple(sorted(expected)))


# -- every layer, one answer ------------------------------------------------------------------


@contextmanager
def opened(layer: Layer) -> Iterator[tuple[DataStore, DataReader]]:
    with build(merge(layer, Layer.value(CLOCK, FixedClock(T0_MS)))) as container:
        yield container.get(DATA_STORE), container.get(DATA_READER)


def answers(factories: dict[str, Callable[[], Layer]], history: Sequence[RunPlan],
            pick: int) -> dict[str, Any]:
    """Record ``history`` on each layer, triage its run number ``pick`` (modulo its length)
    and the latest run, check the rules on each and return the answers by layer."""
    found: dict[str, Any] = {}
    for name, factory in factories.items():
        with opened(factory()) as (store, reader):
            ids = record(store, history)
            chosen = triage_run(reader, run_id=ids[pick % len(ids)],
                                changed_files=changed_files).unwrap()
            latest = triage_run(reader, "proj", changed_files=changed_files).unwrap()
            check_rules(reader, chosen)
            check_rules(reader, latest)
            found[name] = (chosen, latest)
    return found


LOCAL: dict[str, Callable[[], Layer]] = {"memory": in_memory,
                                         "sqlite": lambda: sqlite(":memory:")}


@settings(deadline=None)
@given(history=histories, pick=st.integers(0, 6))
def test_triage_follows_its_rules_and_every_layer_agrees(history: list[RunPlan],
                                                         pick: int) -> None:
    found = answers(LOCAL, history, pick)
    assert found["sqlite"] == found["memory"]


@settings(deadline=None, max_examples=15,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=histories, pick=st.integers(0, 6))
def test_postgresql_gives_the_same_answer(postgres_layers: LayerFactory,
                                          history: list[RunPlan], pick: int) -> None:
    found = answers({"memory": in_memory, "postgresql": postgres_layers}, history, pick)
    assert found["postgresql"] == found["memory"]


# -- examples ---------------------------------------------------------------------------------


EVERYTHING = Selection()


def _whole(store: DataStore, items: list[TestResult], minute: int,
           selection: Selection = EVERYTHING, commit: str | None = None) -> RunId:
    run = store.begin_run(RunStart("proj", f"inv-{minute}", utc(T0_MS + minute * 60_000),
                                   Environment(git_commit=commit, git_dirty=False),
                                   selection)).unwrap()
    store.record_results(run, items).unwrap()
    failing = any(i.outcome in (Outcome.FAILED, Outcome.ERROR) for i in items)
    store.finish_run(run, RunStatus.FAILED if failing else RunStatus.PASSED,
                     utc(T0_MS + minute * 60_000 + 1_000)).unwrap()
    return run


def test_one_root_cause_failing_forty_tests_is_one_group() -> None:
    db_error = CAUSES[0]
    with opened(in_memory()) as (store, reader):
        nodeids = [f"tests/test_db.py::test_query[{i}]" for i in range(40)]
        _whole(store, [make_item(n) for n in nodeids], 1, commit="c" * 40)
        _whole(store, [make_item(n, Outcome.FAILED, message=f"{db_error[1]} after {i} ms",
                                 exception_type=db_error[0], frames=db_error[2])
                       for i, n in enumerate(nodeids)]
               + [make_item("tests/test_x.py::test_other", Outcome.FAILED)], 2)
        answer = triage_run(reader, "proj").unwrap()
    big, small = answer.groups
    assert (big.count, big.exception_type, big.nodeids) == (40, "ConnectionError",
                                                             tuple(sorted(nodeids)))
    assert big.location == StackFrame("src/app/db.py", 12, "connect", True)
    assert big.is_new
    assert small.nodeids == ("tests/test_x.py::test_other",)
    assert isinstance(answer.since_green, SinceGreen)
    assert answer.since_green.green.id == 1
    assert answer.since_green.newly_failing == tuple(sorted(nodeids))
    assert answer.since_green.added_failing == ("tests/test_x.py::test_other",)
    assert answer.since_green.changed_files is None  # no git function given


def test_a_partial_or_unfinished_run_is_never_the_green_one() -> None:
    with opened(sqlite(":memory:")) as (store, reader):
        green = _whole(store, [make_item("t.py::a"), make_item("t.py::b")], 1)
        _whole(store, [make_item("t.py::a")], 2, Selection(keyword="a"))
        _whole(store, [make_item("t.py::a")], 3, Selection(collected=2))
        interrupted = store.begin_run(RunStart("proj", "i", utc(T0_MS + 4 * 60_000))).unwrap()
        store.record_results(interrupted, [make_item("t.py::a"), make_item("t.py::b")]).unwrap()
        store.finish_run(interrupted, RunStatus.INTERRUPTED,
                         utc(T0_MS + 5 * 60_000)).unwrap()
        _whole(store, [make_item("t.py::a"), make_item("t.py::b", Outcome.FAILED)], 6)
        answer = triage_run(reader, "proj").unwrap()
    assert answer.since_green is not None
    assert answer.since_green.green.id == green
    assert answer.since_green.newly_failing == ("t.py::b",)


def test_refusals_are_typed_values() -> None:
    with opened(in_memory()) as (store, reader):
        run = _whole(store, [make_item("t.py::a")], 1)
        assert triage_run(reader, "nope") == Failure(NotFound("project", "nope"))
        assert triage_run(reader, run_id=RunId(99)) == Failure(NotFound("run", "99"))
        assert isinstance(triage_run(reader).failure(), InvalidInput)
        assert isinstance(triage_run(reader, "other", run_id=run).failure(), InvalidInput)
        refused = triage_run(reader, "proj", slowest=0).failure()
        assert isinstance(refused, InvalidInput)
        assert refused.field == "slowest"


def test_groups_leave_out_failures_stored_without_an_error() -> None:
    bare = attrs.evolve(make_item("t.py::bare", Outcome.FAILED), errors=())
    with opened(in_memory()) as (store, reader):
        _whole(store, [bare, make_item("t.py::b", Outcome.FAILED)], 1)
        answer = triage_run(reader, "proj").unwrap()
    assert [f.nodeid for f in answer.failures] == ["t.py::b", "t.py::bare"]
    assert [g.nodeids for g in answer.groups] == [("t.py::b",)]
    assert all(isinstance(g, FailureGroup) for g in answer.groups)


@pytest.mark.parametrize("letters", ["PFP", "FPF"])
def test_flaky_suspects_are_judged_as_of_the_run(letters: str) -> None:
    with opened(in_memory()) as (store, reader):
        ids = [_whole(store, [make_item("t.py::a", Outcome.FAILED if c == "F" else
                                        Outcome.PASSED)], m) for m, c in enumerate(letters, 1)]
        _whole(store, [make_item("t.py::a")], 9)
        older = triage_run(reader, run_id=ids[-1]).unwrap()
        newest = triage_run(reader, "proj").unwrap()
    assert [s.nodeid for s in older.flaky] == (["t.py::a"] if letters == "FPF" else [])
    assert [s.nodeid for s in newest.flaky] == (["t.py::a"] if letters == "FPF" else [])
