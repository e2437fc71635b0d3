"""collect_report on recorded projects: what each section holds, its order and caps, and the
refusals; the same report from every layer."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from returns.result import Failure, Success

from runstore.layers import Container, Layer, build, in_memory, sqlite
from runstore.report import (
    MAX_REPORT_FRAMES,
    MAX_REPORT_MESSAGE_CHARS,
    MAX_REPORT_RUNS,
    MAX_REPORT_TEXT_CHARS,
    MAX_STRIP_RUNS,
    ReportCaps,
    ReportData,
    collect_report,
)
from runstore.services.errors import InvalidInput, NotFound
from runstore.services.test_runs import (
    FAILING_OUTCOMES,
    Classification,
    CollectionError,
    DataReader,
    DataStore,
    ErrorInfo,
    EvidenceRule,
    FileCoverage,
    FlakyPolicy,
    Outcome,
    Phase,
    RunId,
    RunStart,
    RunStatus,
    StackFrame,
    TestResult,
)
from runstore.testing import LayerFactory, make_item, rerun_item

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
NOW_MS = 1_800_000_000_000


def record(store: DataStore, project: str, minute: int, items: Sequence[TestResult], *,
           coverage: Sequence[FileCoverage] = (), collection: Sequence[CollectionError] = (),
           finish: bool = True) -> RunId:
    """One run of ``project`` started ``minute`` minutes after T0, finished 30 s later."""
    started = T0.replace(minute=minute)
    run: RunId = store.begin_run(RunStart(project, f"inv-{project}-{minute}", started)).unwrap()
    store.record_results(run, items).unwrap()
    if collection:
        store.record_collection_errors(run, collection).unwrap()
    if coverage:
        store.write_coverage(run, coverage).unwrap()
    if finish:
        failing = collection or any(i.outcome in FAILING_OUTCOMES for i in items)
        store.finish_run(run, RunStatus.FAILED if failing else RunStatus.PASSED,
                         started.replace(second=30)).unwrap()
    return run


LETTERS = {"P": Outcome.PASSED, "F": Outcome.FAILED, "S": Outcome.SKIPPED, "E": Outcome.ERROR}

HISTORIES = {  # oldest run first; "." the test has no item in that run
    "t.py::broken": "PPFF",
    "t.py::new": "PPPF",
    "t.py::flaky": "FPFP",
    "t.py::fixed": "PPFP",
    "t.py::gone": "F...",
    "t.py::skipped": "SSSS",
    "t.py::stable": "PPPP",
}


def record_histories(store: DataStore, histories: dict[str, str], project: str = "shop",
                     ) -> list[RunId]:
    runs = len(next(iter(histories.values())))
    return [
        record(store, project, minute, [
            make_item(nodeid, LETTERS[line[minute]], duration_ms=10.0 * (minute + 1),
                      message=f"{nodeid} broke")
            for nodeid, line in sorted(histories.items()) if line[minute] != "."
        ])
        for minute in range(runs)
    ]


@contextmanager
def opened(layer: Layer | Callable[[], Layer] = in_memory) -> Iterator[Container]:
    with build(layer() if callable(layer) else layer) as container:
        yield container


def collected(reader: DataReader, project: str = "shop", **options: Any) -> ReportData:
    result = collect_report(reader, project, now_ms=NOW_MS, **options)
    assert isinstance(result, Success), result
    data: ReportData = result.unwrap()
    return data


# -- sections and their order ------------------------------------------------------------------


def test_the_matrix_leads_with_failing_then_flaky_then_recovered_tests() -> None:
    with opened() as c:
        runs = record_histories(c.get(DataStore), HISTORIES)
        data = collected(c.get(DataReader))
    assert [r.run_id for r in data.runs] == runs
    assert data.matrix_run_ids == tuple(runs)
    assert [r.nodeid for r in data.matrix] == [
        "t.py::broken", "t.py::new", "t.py::flaky", "t.py::fixed", "t.py::gone",
        "t.py::skipped", "t.py::stable",
    ]
    verdicts = {r.nodeid: (r.classification, r.rule) for r in data.matrix}
    assert verdicts == {
        "t.py::broken": (Classification.PERSISTENT_FAILURE, EvidenceRule.FAILING_STREAK),
        "t.py::new": (Classification.NEW_FAILURE, EvidenceRule.FIRST_FAILURE),
        "t.py::flaky": (Classification.FLAKY, EvidenceRule.OSCILLATION),
        "t.py::fixed": (Classification.RECOVERED, EvidenceRule.FIXED),
        "t.py::gone": (None, None),
        "t.py::skipped": (Classification.STABLE, EvidenceRule.NOT_EXECUTED),
        "t.py::stable": (Classification.STABLE, EvidenceRule.NO_FAILURE),
    }
    assert data.matrix_omitted == 0
    broken = data.matrix[0]
    assert [c and c.outcome for c in broken.cells] == [
        Outcome.PASSED, Outcome.PASSED, Outcome.FAILED, Outcome.FAILED]
    assert [c and c.duration_ms for c in broken.cells] == [10.0, 20.0, 30.0, 40.0]
    assert broken.failing_cells == 2
    gone = next(r for r in data.matrix if r.nodeid == "t.py::gone")
    assert gone.cells[1:] == (None, None, None)


def test_runs_are_oldest_first_with_counts_duration_and_failing_node_ids() -> None:
    with opened() as c:
        runs = record_histories(c.get(DataStore), HISTORIES)
        data = collected(c.get(DataReader))
    newest = data.runs[-1]
    assert newest.run_id == runs[-1]
    assert newest.failing == ("t.py::broken", "t.py::new")
    assert newest.counts == {"passed": 3, "failed": 2, "skipped": 1, "xfailed": 0,
                             "xpassed": 0, "error": 0}
    assert newest.duration_ms == 30_000.0
    assert newest.status is RunStatus.FAILED
    assert data.runs[0].failing == ("t.py::flaky", "t.py::gone")
    assert [p.started_at_ms for p in data.runs] == sorted(p.started_at_ms for p in data.runs)


def test_failing_sections_are_the_newest_runs_failures_with_history_and_verdict() -> None:
    with opened() as c:
        record_histories(c.get(DataStore), HISTORIES)
        data = collected(c.get(DataReader))
    assert [f.nodeid for f in data.failing_tests] == ["t.py::broken", "t.py::new"]
    broken = data.failing_tests[0]
    assert broken.classification is Classification.PERSISTENT_FAILURE
    assert broken.because
    assert broken.message == "t.py::broken broke"
    assert broken.streak == 2
    assert [e.outcome for e in broken.history] == [
        Outcome.PASSED, Outcome.PASSED, Outcome.FAILED, Outcome.FAILED]
    assert [e.run_id for e in broken.history] == list(data.matrix_run_ids)
    assert [e.recorded_at_ms for e in broken.history] == [
        p.started_at_ms + 30_000 for p in data.runs]


def test_a_strip_reaches_back_over_the_newest_reported_runs() -> None:
    with opened() as c:
        record_histories(c.get(DataStore), {"t.py::a": "P" * (MAX_STRIP_RUNS + 2) + "F"})
        data = collected(c.get(DataReader))
    (section,) = data.failing_tests
    assert [e.run_id for e in section.history] == [
        p.run_id for p in data.runs[-MAX_STRIP_RUNS:]]
    assert section.history[-1].outcome is Outcome.FAILED
    assert len(data.slowest[0].durations_ms) == MAX_STRIP_RUNS


def test_signature_groups_name_the_tests_that_failed_with_them() -> None:
    with opened() as c:
        store = c.get(DataStore)
        same = [make_item(f"t.py::test_{i}", Outcome.FAILED, message="connection refused")
                for i in range(3)]
        record(store, "shop", 0, [*same, make_item("t.py::other", Outcome.FAILED,
                                                  exception_type="KeyError", message="'x'")])
        record(store, "shop", 1, same[:1])
        data = collected(c.get(DataReader))
    groups = {g.signature.exception_type: g for g in data.signatures}
    assert groups["AssertionError"].nodeids == ("t.py::test_0", "t.py::test_1", "t.py::test_2")
    assert groups["KeyError"].nodeids == ("t.py::other",)
    assert data.signatures[0].signature.exception_type == "AssertionError"  # newest last seen
    assert groups["AssertionError"].signature.first_seen_run_id == data.runs[0].run_id
    assert groups["AssertionError"].signature.last_seen_run_id == data.runs[1].run_id


def test_a_signature_whose_message_is_all_masked_carries_a_real_example() -> None:
    with opened() as c:
        store = c.get(DataStore)
        key = make_item("t.py::other", Outcome.FAILED, exception_type="KeyError",
                        message="KeyError: 'sku-9'")
        old = make_item("t.py::old", Outcome.FAILED, exception_type="KeyError",
                        message="'coupon-3'", frames=(StackFrame("t.py", 1, "old", True),))
        record(store, "shop", 0, [key, old])
        record(store, "shop", 1, [key, make_item("t.py::plain", Outcome.FAILED,
                                                 message="connection refused")])
        record(store, "shop", 2, [make_item("t.py::plain", Outcome.FAILED,
                                            message="connection refused")])
        data = collected(c.get(DataReader))
    examples = {g.nodeids[0]: g.example for g in data.signatures}
    assert examples["t.py::other"] == "KeyError: 'sku-9'"  # from an older run's failure
    assert examples["t.py::old"] == "'coupon-3'"
    assert examples["t.py::plain"] == ""  # its own message reads well


def test_the_slowest_tests_of_the_newest_run_with_their_trend() -> None:
    with opened() as c:
        record_histories(c.get(DataStore), HISTORIES)
        data = collected(c.get(DataReader))
    slowest = data.slowest[0]
    assert slowest.duration_ms == 40.0
    assert slowest.nodeid == "t.py::broken"  # ties by node id
    assert slowest.durations_ms == (10.0, 20.0, 30.0, 40.0)
    # a skipped item ran nothing: however long its skip took, it is no slow test
    assert "t.py::skipped" not in {s.nodeid for s in data.slowest}
    assert Outcome.SKIPPED not in {s.outcome for s in data.slowest}
    assert len(data.slowest) == 5  # the newest run holds 6 items, one of them skipped


def test_skipped_items_leave_the_slowest_places_to_executed_ones() -> None:
    with opened() as c:
        store = c.get(DataStore)
        record(store, "shop", 0, [
            *(make_item(f"t.py::skip_{i}", outcome=Outcome.SKIPPED, duration_ms=500.0)
              for i in range(3)),
            *(make_item(f"t.py::run_{i}", duration_ms=float(i)) for i in range(3)),
        ])
        data = collected(c.get(DataReader), caps=ReportCaps(slowest=2))
    assert [s.nodeid for s in data.slowest] == ["t.py::run_2", "t.py::run_1"]


# -- flaky verdicts carry their reason ---------------------------------------------------------


def test_a_flaky_row_carries_its_reason_and_runs() -> None:
    with opened() as c:
        store = c.get(DataStore)
        record(store, "shop", 0, [make_item("t.py::a")])
        run = record(store, "shop", 1, [rerun_item("t.py::a"), make_item("t.py::b")])
        data = collected(c.get(DataReader))
    row = data.matrix[0]
    assert (row.nodeid, row.classification, row.rule) == (
        "t.py::a", Classification.FLAKY, EvidenceRule.PASSED_ON_RERUN)
    assert row.because
    assert row.because_run_ids == (run,)
    last = row.cells[-1]
    assert last is not None
    assert last.attempts == 2


def test_a_flaky_test_the_newest_run_did_not_hold_is_judged_by_its_history() -> None:
    with opened() as c:
        store = c.get(DataStore)
        record_histories(store, {"t.py::a": "FPF", "t.py::b": "PPP"})
        record(store, "shop", 5, [make_item("t.py::b")])  # a -k run without t.py::a
        data = collected(c.get(DataReader))
    row = next(r for r in data.matrix if r.nodeid == "t.py::a")
    assert (row.classification, row.rule) == (Classification.FLAKY, EvidenceRule.OSCILLATION)
    assert row.because
    assert row.cells[-1] is None
    assert data.matrix[0] is row


# -- coverage ----------------------------------------------------------------------------------


def test_a_run_without_coverage_has_none_and_the_files_come_from_the_newest_with_some() -> None:
    files = [FileCoverage("src/a.py", 10, 5), FileCoverage("src/b.py", 10, 0),
             FileCoverage("src/c.py", 10, 5)]
    with opened() as c:
        store = c.get(DataStore)
        covered = record(store, "shop", 0, [make_item("t.py::a")], coverage=files)
        record(store, "shop", 1, [make_item("t.py::a")])
        data = collected(c.get(DataReader), caps=ReportCaps(coverage_files=2))
    assert [p.percent_covered for p in data.runs] == [pytest.approx(100 * 20 / 30), None]
    assert data.coverage_run_id == covered
    assert [f.path for f in data.coverage_files] == ["src/a.py", "src/c.py"]  # lowest first
    assert data.coverage_files_omitted == 1


def test_a_project_without_any_coverage_has_no_coverage_section() -> None:
    with opened() as c:
        record(c.get(DataStore), "shop", 0, [make_item("t.py::a")])
        data = collected(c.get(DataReader))
    assert data.coverage_run_id is None
    assert data.coverage_files == ()
    assert data.runs[0].percent_covered is None


# -- caps --------------------------------------------------------------------------------------


def test_each_cap_keeps_its_first_and_counts_the_rest() -> None:
    caps = ReportCaps(matrix_runs=2, matrix_rows=3, failing=2, run_failing=1, signatures=2,
                      slowest=2, coverage_files=1)
    with opened() as c:
        store = c.get(DataStore)
        for minute in range(4):
            record(store, "shop", minute, [
                make_item(f"t.py::test_{i}", Outcome.FAILED if i < 3 else Outcome.PASSED,
                          message=f"error kind {'abc'[i]}" if i < 3 else "")
                for i in range(6)
            ])
        data = collected(c.get(DataReader), runs=3, caps=caps)
    assert len(data.runs) == 3
    assert data.matrix_run_ids == tuple(r.run_id for r in data.runs[-2:])
    assert (len(data.matrix), data.matrix_omitted) == (3, 3)
    assert [r.nodeid for r in data.matrix] == ["t.py::test_0", "t.py::test_1", "t.py::test_2"]
    assert (len(data.failing_tests), data.failing_omitted) == (2, 1)
    assert all((len(p.failing), p.failing_omitted) == (1, 2) for p in data.runs)
    assert (len(data.signatures), data.signatures_omitted) == (2, 1)
    assert len(data.slowest) == 2
    assert (data.failing_cap, data.matrix_runs_cap, data.matrix_rows_cap) == (2, 2, 3)
    assert (data.run_failing_cap, data.signatures_cap, data.slowest_cap) == (1, 2, 2)


def test_a_long_error_is_cut_to_its_end_and_its_innermost_frames() -> None:
    text = "".join(f"line {i}\n" for i in range(2_000))
    frames = tuple(StackFrame(f"src/m{i}.py", i + 1, f"f{i}", True) for i in range(30))
    failing = attrs.evolve(make_item("t.py::a", Outcome.FAILED), errors=(ErrorInfo(
        Phase.CALL, "AssertionError", "m" * 1_000, text, frames),))
    with opened() as c:
        record(c.get(DataStore), "shop", 0, [failing])
        data = collected(c.get(DataReader))
    (section,) = data.failing_tests
    assert section.text == text[-MAX_REPORT_TEXT_CHARS:]
    assert section.message == "m" * MAX_REPORT_MESSAGE_CHARS
    assert section.text_truncated
    assert section.frames == frames[-MAX_REPORT_FRAMES:]
    assert section.frames_omitted == 30 - MAX_REPORT_FRAMES


def test_a_collection_error_has_a_section_and_is_among_its_runs_failing() -> None:
    error = CollectionError("tests/test_broken.py", "tests/test_broken.py",
                            ErrorInfo(Phase.COLLECT, "ModuleNotFoundError", "No module 'x'"))
    with opened() as c:
        record(c.get(DataStore), "shop", 0, [make_item("t.py::a")], collection=[error])
        data = collected(c.get(DataReader))
    (section,) = data.failing_tests
    assert (section.nodeid, section.phase, section.history) == (
        "tests/test_broken.py", Phase.COLLECT, ())
    assert section.classification is None
    assert data.runs[0].failing == ("tests/test_broken.py",)
    assert data.runs[0].collection_errors == 1
    assert data.signatures[0].nodeids == ("tests/test_broken.py",)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lines=st.dictionaries(st.sampled_from([f"t.py::t{i}" for i in range(8)]),
                          st.text(alphabet="PFSE.", min_size=5, max_size=5), max_size=8),
    runs=st.integers(1, 6),
    caps=st.builds(ReportCaps, matrix_runs=st.integers(1, 4), matrix_rows=st.integers(1, 5),
                   failing=st.integers(1, 3), run_failing=st.integers(1, 3),
                   signatures=st.integers(1, 3), slowest=st.integers(1, 3)),
)
def test_every_cap_and_order_holds_for_any_history(
    lines: dict[str, str], runs: int, caps: ReportCaps
) -> None:
    """For any recorded history: sections within their caps, each omitted count exactly what
    the store holds beyond it, matrix rows (the newest run's tests and those failing in a
    column) in the documented order, their cells the items ``tests`` lists, and every flaky
    verdict with a reason."""
    histories = {"t.py::anchor": "PPPPP", **lines}  # every run holds at least one item
    with opened() as c:
        record_histories(c.get(DataStore), histories)
        reader = c.get(DataReader)
        data = collected(reader, runs=runs, caps=caps)
        listed = reader.list_runs("shop", limit=runs).unwrap().items
        assert [r.run_id for r in data.runs] == [r.id for r in reversed(listed)]
        assert data.matrix_run_ids == tuple(r.run_id for r in data.runs[-caps.matrix_runs:])
        items = {run: {t.nodeid: t for t in reader.tests(run).unwrap()}
                 for run in data.matrix_run_ids}
        newest = data.runs[-1].run_id
        tested = set(items[newest]) | {
            nodeid for by_test in items.values() for nodeid, item in by_test.items()
            if item.outcome in FAILING_OUTCOMES
        }
        assert len(data.matrix) == min(caps.matrix_rows, len(tested))
        assert len(data.matrix) + data.matrix_omitted == len(tested)
        for row in data.matrix:
            for run, cell in zip(data.matrix_run_ids, row.cells, strict=True):
                item = items[run].get(row.nodeid)
                assert (cell is None) == (item is None)
                if cell is not None and item is not None:
                    assert (cell.outcome, cell.duration_ms) == (item.outcome, item.duration_ms)
            if row.classification is Classification.FLAKY:
                assert row.because, row
        keys = [(_rank(r.classification, r.failing_cells), -r.failing_cells, r.nodeid)
                for r in data.matrix]
        assert keys == sorted(keys)
        failures = reader.failures(newest).unwrap()
        assert len(data.failing_tests) + data.failing_omitted == len(failures)
        assert [f.nodeid for f in data.failing_tests] == [f.nodeid for f in failures][
            : caps.failing]
        for point in data.runs:
            failing = {t.nodeid for t in reader.tests(point.run_id).unwrap()
                       if t.outcome in FAILING_OUTCOMES}
            assert list(point.failing) == sorted(failing)[: caps.run_failing]
            assert len(point.failing) + point.failing_omitted == len(failing)
        signatures = reader.failure_signatures("shop", limit=1000).unwrap().items
        assert len(data.signatures) + data.signatures_omitted == len(signatures)
        assert [g.signature for g in data.signatures] == list(signatures[: caps.signatures])
        ran = [t for t in reader.tests(newest).unwrap() if t.outcome is not Outcome.SKIPPED]
        assert len(data.slowest) == min(caps.slowest, len(ran))


def _rank(classification: Classification | None, failing_cells: int) -> int:
    """The documented order of the matrix (``ReportData.matrix``), restated."""
    order = {Classification.NEW_FAILURE: 0, Classification.PERSISTENT_FAILURE: 0,
             Classification.FLAKY: 1, Classification.RECOVERED: 2}
    if classification in order:
        return order[classification]
    return 3 if failing_cells else 4


# -- refusals ----------------------------------------------------------------------------------


def test_a_project_without_runs_is_not_found() -> None:
    with opened() as c:
        record(c.get(DataStore), "shop", 0, [make_item("t.py::a")])
        result = collect_report(c.get(DataReader), "blog")
    assert result == Failure(NotFound("project", "blog"))


class _Counting:
    """A reader that counts the calls made to it (a refused report must read nothing)."""

    def __init__(self, inner: DataReader) -> None:
        self.inner = inner
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        self.calls.append(name)
        return getattr(self.inner, name)


@pytest.mark.parametrize(
    ("arguments", "field"),
    [({"project": 7}, "project"), ({"project": "a\ud800"}, "project"),
     ({"project": None}, "project"), ({"runs": 0}, "runs"),
     ({"runs": MAX_REPORT_RUNS + 1}, "runs"), ({"runs": True}, "runs"),
     ({"runs": 2.0}, "runs"), ({"policy": FlakyPolicy(window=0)}, "policy.window"),
     ({"policy": "strict"}, "policy"), ({"now_ms": -1}, "now_ms"), ({"now_ms": 1.5}, "now_ms"),
     ({"progress": 5}, "progress"), ({"caps": ReportCaps(matrix_rows=0)}, "caps.matrix_rows"),
     ({"caps": ReportCaps(failing=1001)}, "caps.failing"), ({"caps": {}}, "caps")],
)
def test_bad_arguments_are_refused_before_anything_is_read(
    arguments: dict[str, Any], field: str
) -> None:
    with opened() as c:
        record(c.get(DataStore), "shop", 0, [make_item("t.py::a")])
        reader = _Counting(c.get(DataReader))
        given_arguments = {"project": "shop", **arguments}
        project = given_arguments.pop("project")
        result = collect_report(reader, project, **given_arguments)
    assert isinstance(result, Failure), result
    error = result.failure()
    assert isinstance(error, InvalidInput), error
    assert error.field == field, error
    assert reader.calls == []


def test_progress_counts_each_step_up_to_its_total() -> None:
    told: list[tuple[int, int]] = []
    with opened() as c:
        record_histories(c.get(DataStore), HISTORIES)
        collected(c.get(DataReader), progress=lambda done, total: told.append((done, total)))
    total = told[0][1]
    assert told == [(done, total) for done in range(1, total + 1)]


def test_a_running_run_is_reported_without_a_duration() -> None:
    with opened() as c:
        store = c.get(DataStore)
        record(store, "shop", 0, [make_item("t.py::a")])
        running = record(store, "shop", 1, [make_item("t.py::a", Outcome.FAILED)], finish=False)
        data = collected(c.get(DataReader))
    assert (data.runs[-1].run_id, data.runs[-1].duration_ms) == (running, None)
    assert data.runs[-1].status is RunStatus.RUNNING
    assert [f.nodeid for f in data.failing_tests] == ["t.py::a"]


# -- every layer gives the same report ---------------------------------------------------------


def _parity_project(store: DataStore) -> None:
    record_histories(store, HISTORIES)
    record(store, "shop", 9, [rerun_item("t.py::flaky"), make_item("t.py::broken", Outcome.ERROR)],
           coverage=[FileCoverage("src/a.py", 10, 3, 4, 1, 1, (3, 4, 5))])


@pytest.fixture(params=["sqlite-file", "postgres"])
def other_layer(request: pytest.FixtureRequest, tmp_path: Path) -> LayerFactory:
    if request.param == "sqlite-file":
        return lambda: sqlite(tmp_path / "runstore.db")
    factory: LayerFactory = request.getfixturevalue("postgres_layers")
    return factory


def test_every_layer_collects_the_same_report(other_layer: LayerFactory) -> None:
    with ExitStack() as stack:
        model = stack.enter_context(opened(in_memory))
        other = stack.enter_context(opened(other_layer))
        for c in (model, other):
            _parity_project(c.get(DataStore))
        expected = collected(model.get(DataReader))
        assert collected(other.get(DataReader)) == expected
    assert expected.failing_tests
    assert expected.matrix
    assert expected.signatures


def test_a_test_only_an_older_column_holds_passing_has_no_row() -> None:
    with opened() as c:
        record_histories(c.get(DataStore), {"t.py::kept": "PPP", "t.py::removed": "PP.",
                                            "t.py::failed": "F.."})
        data = collected(c.get(DataReader))
    assert [r.nodeid for r in data.matrix] == ["t.py::failed", "t.py::kept"]
    assert data.matrix_omitted == 0
