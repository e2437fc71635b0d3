"""The pure rules of the test-run domain: outcome precedence, classification, failure
signatures, text bounding and coercion, retention planning, cursors."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st
from returns.result import Failure, Success

from runstore.layers._testruns_shared import (
    MAX_CAUSES,
    PruneRun,
    _case,
    _plain_case,
    classify,
    decode_cursor,
    decode_lines,
    encode_cursor,
    encode_lines,
    failure_signature,
    flaky_entry,
    normalize_message,
    plan_prune,
    prepare_coverage,
    prepare_results,
    prepare_run_start,
    previous_window,
    rank_matches,
    to_epoch_ms,
    valid_policy,
    window_of,
)
from runstore.services.errors import InvalidInput
from runstore.services.testruns import (
    DEFAULT_HISTORY_WINDOW,
    MAX_CAPTURE_CHARS,
    MAX_FRAMES,
    MAX_MESSAGE_CHARS,
    MAX_TEXT_CHARS,
    Classification,
    ErrorInfo,
    FileCoverage,
    Outcome,
    Phase,
    PhaseResult,
    RunRetentionPolicy,
    RunStart,
    RunStatus,
    StackFrame,
    TestResult,
    derive_outcome,
)

P, F, E, S, XF, XP = (
    Outcome.PASSED,
    Outcome.FAILED,
    Outcome.ERROR,
    Outcome.SKIPPED,
    Outcome.XFAILED,
    Outcome.XPASSED,
)


def _phase(phase: Phase, outcome: Outcome, ms: float = 1.0) -> PhaseResult:
    return PhaseResult(phase, outcome, ms)


def _item(nodeid: str = "t.py::a", **changes: Any) -> TestResult:
    base = TestResult(nodeid, "t.py", "a", (_phase(Phase.CALL, P),))
    return attrs.evolve(base, **changes)


def _prepared(item: TestResult) -> Any:
    result = prepare_results([item])
    assert isinstance(result, Success), result
    return result.unwrap()[0]


def _refused(item: TestResult) -> InvalidInput:
    result = prepare_results([item])
    assert isinstance(result, Failure), result
    error = result.failure()
    assert isinstance(error, InvalidInput)
    return error


# -- derive_outcome -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("phases", "expected"),
    [
        ([(Phase.SETUP, F)], E),
        ([(Phase.SETUP, F), (Phase.TEARDOWN, F)], E),
        ([(Phase.SETUP, S)], S),
        ([(Phase.SETUP, XF)], XF),
        ([(Phase.SETUP, P), (Phase.CALL, F), (Phase.TEARDOWN, F)], F),
        ([(Phase.SETUP, P), (Phase.CALL, P), (Phase.TEARDOWN, F)], E),
        ([(Phase.CALL, XF)], XF),
        ([(Phase.CALL, XP)], XP),
        ([(Phase.CALL, S)], S),
        ([(Phase.CALL, P)], P),
        ([(Phase.SETUP, P), (Phase.TEARDOWN, P)], P),
    ],
)
def test_derive_outcome_follows_the_documented_precedence(
    phases: list[tuple[Phase, Outcome]], expected: Outcome
) -> None:
    built = tuple(_phase(p, o) for p, o in phases)
    assert derive_outcome(built) == expected
    assert _prepared(_item(phases=built)).outcome == expected


_OUTCOMES = st.sampled_from(list(Outcome))


@st.composite
def _phase_tuples(draw: st.DrawFn) -> tuple[PhaseResult, ...]:
    chosen = draw(st.lists(st.sampled_from([Phase.SETUP, Phase.CALL, Phase.TEARDOWN]),
                           min_size=1, max_size=3, unique=True))
    order = {Phase.SETUP: 0, Phase.CALL: 1, Phase.TEARDOWN: 2}
    return tuple(
        PhaseResult(p, draw(_OUTCOMES), draw(st.integers(0, 10_000)) / 8,
                    draw(st.none() | st.sampled_from(["why", "x" * 5])))
        for p in sorted(chosen, key=order.__getitem__)
    )


@given(phases=_phase_tuples())
def test_the_plain_path_agrees_with_the_careful_path(phases: tuple[PhaseResult, ...]) -> None:
    item = _item(phases=phases, markers=("slow",), stdout="out", parametrize_id="p1", line=3)
    fast = _plain_case(item)
    assert fast is not None
    assert fast == _case(item, "results[0]")
    assert fast.outcome == derive_outcome(phases)
    assert fast.duration_ms == item.duration_ms


@given(
    message=st.text(max_size=40),
    frames=st.lists(
        st.builds(StackFrame, st.sampled_from(["a.py", "b/c.py"]), st.none() | st.integers(1, 9),
                  st.sampled_from(["f", "g"]), st.booleans()),
        max_size=3,
    ).map(tuple),
    causes=st.integers(0, 3),
)
def test_plain_and_careful_paths_agree_on_errors(
    message: str, frames: tuple[StackFrame, ...], causes: int
) -> None:
    error: ErrorInfo | None = None
    for depth in range(causes, -1, -1):
        error = ErrorInfo(Phase.CALL, f"E{depth}", message, "text", frames, error)
    assert error is not None
    item = _item(phases=(_phase(Phase.CALL, F),), errors=(error,))
    careful = _case(item, "results[0]")
    fast = _plain_case(item)
    if fast is not None:
        assert fast == careful
    assert len(careful.errors[0].causes) == causes


# -- validation and text ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"phases": ()}, "results[0].phases"),
        ({"phases": (_phase(Phase.CALL, P, math.nan),)}, "results[0].phases[0].duration_ms"),
        ({"phases": (_phase(Phase.CALL, P, math.inf),)}, "results[0].phases[0].duration_ms"),
        ({"phases": (_phase(Phase.CALL, P, -0.5),)}, "results[0].phases[0].duration_ms"),
        ({"phases": (PhaseResult(Phase.CALL, P, True),)}, "results[0].phases[0].duration_ms"),
        ({"phases": (_phase(Phase.CALL, P), _phase(Phase.SETUP, P))}, "results[0].phases[1].phase"),
        ({"phases": (_phase(Phase.COLLECT, P),)}, "results[0].phases[0].phase"),
        ({"phases": (PhaseResult(Phase.CALL, "nope", 1.0),)}, "results[0].phases[0].outcome"),  # type: ignore[arg-type]
        ({"nodeid": ""}, "results[0].nodeid"),
        ({"nodeid": "t.py::\ud800"}, "results[0].nodeid"),
        ({"module_path": 7}, "results[0].module_path"),
        ({"line": 0}, "results[0].line"),
        ({"line": True}, "results[0].line"),
        ({"attempts": (_item(attempts=(_item(),)),)}, "results[0].attempts[0].attempts"),
        ({"errors": ("boom",)}, "results[0].errors[0]"),
    ],
)
def test_bad_items_name_the_offending_field(change: dict[str, Any], field: str) -> None:
    assert _refused(_item(**change)).field == field


def test_objects_are_never_stringified() -> None:
    class Loud:
        def __str__(self) -> str:
            raise RuntimeError("never call me")

    class LoudText(str):
        def __str__(self) -> str:
            raise RuntimeError("never call me")

    assert _refused(_item(name=Loud())).field == "results[0].name"
    prepared = _prepared(_item(name=LoudText("a name")))
    assert type(prepared.name) is str
    assert prepared.name == "a name"


def test_free_text_replaces_surrogates_and_keeps_nul() -> None:
    error = ErrorInfo(Phase.CALL, "E", "a\ud800b\x00c", "\udfff")
    prepared = _prepared(_item(phases=(_phase(Phase.CALL, F),), errors=(error,),
                               stdout="o\udc00\x00"))
    head = prepared.errors[0]
    assert head.message == "a\ufffdb\x00c"
    assert head.text == "\ufffd"
    assert prepared.stdout == "o\ufffd\x00"


def test_identifiers_keep_any_unicode_but_refuse_nul() -> None:
    nodeid = "tests/t ü.py::Test::test_x[a\tb-😀]"
    assert _prepared(_item(nodeid=nodeid)).nodeid == nodeid
    for plain in ("t.py::a\x00b", "\x00"):  # the ASCII fast path refuses it too
        result = prepare_results([_item(nodeid=plain)])
        assert isinstance(result, Failure)
        assert result.failure().field == "results[0].nodeid"
    result = prepare_results([_item(module_path="t\x00.py")])
    assert isinstance(result, Failure)
    assert result.failure().field == "results[0].module_path"


def test_bounded_texts_keep_their_head_and_say_so() -> None:
    frames = tuple(StackFrame(f"f{i}.py", i + 1, "f", True) for i in range(MAX_FRAMES + 7))
    error = ErrorInfo(Phase.CALL, "E", "m" * (MAX_MESSAGE_CHARS + 1), "t" * MAX_TEXT_CHARS,
                      frames)
    prepared = _prepared(_item(phases=(_phase(Phase.CALL, F),), errors=(error,),
                               stderr="e" * (MAX_CAPTURE_CHARS + 3)))
    head = prepared.errors[0]
    assert (head.message, head.message_truncated) == ("m" * MAX_MESSAGE_CHARS, True)
    assert (len(head.text), head.text_truncated) == (MAX_TEXT_CHARS, False)
    assert head.frames == frames[-MAX_FRAMES:]
    assert (len(prepared.stderr), prepared.stderr_truncated) == (MAX_CAPTURE_CHARS, True)


def test_a_deep_cause_chain_keeps_its_nearest_causes() -> None:
    error: ErrorInfo | None = None
    for depth in range(MAX_CAUSES + 5, -1, -1):
        error = ErrorInfo(Phase.CALL, f"E{depth}", "m", "", (), error)
    assert error is not None
    head = _prepared(_item(errors=(error,))).errors[0]
    assert [c.exception_type for c in head.causes] == [f"E{d}" for d in range(1, MAX_CAUSES + 1)]


def test_a_node_id_given_twice_in_a_batch_keeps_the_last() -> None:
    first = _item(phases=(_phase(Phase.CALL, F),))
    second = _item(phases=(_phase(Phase.CALL, P),))
    other = _item("t.py::b")
    result = prepare_results([first, other, second]).unwrap()
    assert [(c.nodeid, c.outcome) for c in result] == [("t.py::b", P), ("t.py::a", P)]


def test_run_start_needs_aware_times_and_identifiers() -> None:
    naive = datetime(2024, 1, 1)
    assert isinstance(prepare_run_start(RunStart("p", "i", naive)), Failure)
    assert isinstance(prepare_run_start(RunStart("", "i", datetime.now(UTC))), Failure)
    assert isinstance(prepare_run_start("not a start"), Failure)
    india = timezone(timedelta(hours=5, minutes=30))
    started = datetime(2024, 3, 1, 12, 0, 0, 250_999, tzinfo=india)
    run = prepare_run_start(RunStart("p", "i", started)).unwrap()
    assert run.started_at_ms == 1_709_274_600_250  # floored to whole ms


def test_epoch_ms_accepts_ints_and_refuses_bools() -> None:
    assert to_epoch_ms(1_700_000_000_000, "t") == Success(1_700_000_000_000)
    assert isinstance(to_epoch_ms(True, "t"), Failure)
    assert isinstance(to_epoch_ms("2024-01-01", "t"), Failure)


def test_coverage_validation_and_normalized_lines() -> None:
    good = prepare_coverage([FileCoverage("b.py", 4, 1, 2, 1, 0, (9, 3, 3)),
                             FileCoverage("a.py", 0, 0)])
    assert [(f.path, f.missing_lines) for f in good.unwrap().files] == [("a.py", ()),
                                                                       ("b.py", (3, 9))]
    for bad in (
        [FileCoverage("a.py", 1, 2)],
        [FileCoverage("a.py", 1, 0, 1, 2, 0)],
        [FileCoverage("a.py", 1, 0, missing_lines=(0,))],
        [FileCoverage("a.py", -1, 0)],
        [FileCoverage("a.py", 1, 0), FileCoverage("a.py", 2, 0)],
        [FileCoverage("", 1, 0)],
    ):
        assert isinstance(prepare_coverage(bad), Failure), bad


@given(st.sets(st.integers(1, 5_000), max_size=60))
def test_missing_lines_round_trip(lines: set[int]) -> None:
    ordered = tuple(sorted(lines))
    assert decode_lines(encode_lines(ordered)) == ordered


# -- failure signatures -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "normalized"),
    [
        ("assert 3 == 4", "assert <num> == <num>"),
        ("Object at 0x7f3a9c2b1d90 is gone", "Object at <hex> is gone"),
        ("cannot open '/tmp/pytest-of-u/x1/a.txt'", "cannot open <str>"),
        ("No such file: /tmp/pytest-of-u/x1/a.txt", "No such file: <path>"),
        ("timeout after 5s (limit -1.5e3)", "timeout after <num>s (limit <num>)"),
        ("test_1 and v2 stay", "test_1 and v2 stay"),
        ("\n\n  first   line 7\nsecond line 8", "first line <num>"),
        ('KeyError: "user 42"', "KeyError: <str>"),
    ],
)
def test_messages_are_normalized(message: str, normalized: str) -> None:
    assert normalize_message(message) == normalized


def test_normalizing_a_huge_message_is_fast_and_bounded() -> None:
    for message in ("x" * 100_000, "'" * 100_000, "/" * 100_000, "1." * 50_000):
        assert len(normalize_message(message)) <= 500


def test_signatures_ignore_changing_values_but_not_the_failing_frame() -> None:
    project = StackFrame("src/app.py", 10, "load", True)
    library = StackFrame("/usr/lib/json.py", 3, "decode", False)
    a = failure_signature("ValueError", "bad id 17 at 0x1", (project, library))
    b = failure_signature("ValueError", "bad id 99 at 0xff", (project, library))
    moved = failure_signature(
        "ValueError", "bad id 17 at 0x1", (attrs.evolve(project, line=99), library)
    )
    other = failure_signature(
        "ValueError", "bad id 17 at 0x1", (attrs.evolve(project, function="x"), library)
    )
    assert a[0] == b[0] == moved[0]
    assert a[2] == "src/app.py:load"
    assert other[0] != a[0]
    assert failure_signature("KeyError", "bad id 17 at 0x1", (project, library))[0] != a[0]
    assert failure_signature("E", "m", ())[2] == ""
    assert failure_signature("E", "m", (library,))[2] == "/usr/lib/json.py:decode"
    assert len(a[0]) == 16
    assert int(a[0], 16) >= 0


# -- classification and flakiness -----------------------------------------------------------------


def _history(text: str) -> list[Outcome]:
    """Previous entries from oldest-first letters (P passed, F failed, E error, X xpassed),
    returned newest first."""
    letters = {"P": P, "F": F, "E": E, "X": XP}
    return [letters[c] for c in reversed(text)]


@pytest.mark.parametrize(
    ("before", "now", "expected"),
    [
        ("", F, Classification.NEW_FAILURE),
        ("PP", F, Classification.NEW_FAILURE),
        ("PP", E, Classification.NEW_FAILURE),
        ("F", F, Classification.PERSISTENT_FAILURE),
        ("FE", F, Classification.PERSISTENT_FAILURE),
        ("FP", F, Classification.FLAKY),  # newest first F P F: two flips
        ("PF", F, Classification.PERSISTENT_FAILURE),  # F F P: one flip
        ("PPFF", F, Classification.PERSISTENT_FAILURE),
        ("F", P, Classification.RECOVERED),
        ("PFF", P, Classification.FLAKY),  # P F F P: two flips
        ("FF", P, Classification.RECOVERED),  # P F F
        ("PPF", P, Classification.FLAKY),  # P F P P: two flips
        ("FP", P, Classification.STABLE),  # P P F: recovered earlier
        ("FPP", P, Classification.STABLE),
        ("", P, Classification.STABLE),
        ("PX", P, Classification.STABLE),
        ("F", XP, Classification.RECOVERED),
        ("FFF", S, Classification.STABLE),
        ("FFF", XF, Classification.STABLE),
    ],
)
def test_classification_rules(before: str, now: Outcome, expected: Classification) -> None:
    assert classify(now, _history(before)) == expected


def test_previous_window_skips_later_runs_and_keeps_pruned_ones() -> None:
    entries = [(9, F), (7, P), (None, F), (5, P)] + [(4 - i, P) for i in range(20)]
    previous = previous_window(entries, 7)
    assert previous[:2] == (F, P)  # run 9 and run 7 itself are left out
    assert len(previous) == DEFAULT_HISTORY_WINDOW - 1
    assert window_of(P, previous) == (P, *previous)
    assert window_of(S, previous) == previous


def test_flaky_entries_count_flips() -> None:
    assert flaky_entry("t", [(1, P), (2, P)]) is None
    entry = flaky_entry("t", [(4, F), (3, P), (None, F), (1, F)])
    assert entry is not None
    assert (entry.flips, entry.failures, entry.passes, entry.last_run_id) == (2, 3, 1, 4)
    only_window = flaky_entry("t", [(i, F if i == 0 else P) for i in range(30)])
    assert only_window is not None
    assert len(only_window.window) == DEFAULT_HISTORY_WINDOW


def test_find_ranks_an_exact_match_first() -> None:
    ids = ["b::t", "a::t", "t", "x%t", "a_t"]
    assert rank_matches(ids, "t", 10) == ("t", "a::t", "a_t", "b::t", "x%t")
    assert rank_matches(ids, "%", 10) == ("x%t",)
    assert rank_matches(ids, "t", 2) == ("t", "a::t")


# -- retention ----------------------------------------------------------------------------------

DAY = 86_400_000


def _run(run_id: int, project: str = "p", invocation: str = "i", started: int = 0,
         status: RunStatus = RunStatus.PASSED) -> PruneRun:
    return PruneRun(run_id, project, invocation, status, started)


def test_prune_keeps_the_newest_per_project_with_ties_broken_by_id() -> None:
    runs = [_run(1, started=10), _run(2, started=10), _run(3, started=5), _run(4, "q", started=1)]
    plan = plan_prune(runs, (), RunRetentionPolicy(1), now_ms=100)
    assert plan.doomed == (1, 3)


def test_prune_by_age_never_takes_running_runs() -> None:
    now = 10 * DAY
    runs = [
        _run(1, started=now - 3 * DAY),
        _run(2, started=now - 3 * DAY, status=RunStatus.RUNNING),
        _run(3, started=now - DAY // 2),
        _run(4, started=now - 5 * DAY, status=RunStatus.RUNNING),
    ]
    plan = plan_prune(runs, (), RunRetentionPolicy(10, max_age_days=1), now_ms=now)
    assert plan.doomed == (1,)
    ranked = plan_prune(runs, (), RunRetentionPolicy(1), now_ms=now)
    assert ranked.doomed == (1,)  # run 3 is newest; running runs stay


def test_prune_moves_coverage_to_the_lowest_survivor_unless_one_has_some() -> None:
    runs = [
        _run(1, "a", "inv", 0),
        _run(2, "a", "inv", 0),
        _run(3, "b", "inv", 1),
        _run(4, "c", "inv", 2),
        _run(5, "a", "later", 9),
    ]
    policy = RunRetentionPolicy(1)
    assert plan_prune(runs, (1, 2), policy, 10).moves == ((1, 3),)
    assert plan_prune(runs, (1, 4), policy, 10).moves == ()  # a survivor has coverage
    lone = [_run(1, "a", "solo", 0), _run(2, "a", "other", 5)]
    assert plan_prune(lone, (1,), policy, 10).moves == ()  # no survivor in its invocation


def test_policies_are_validated() -> None:
    assert isinstance(valid_policy(RunRetentionPolicy(1)), Success)
    assert isinstance(valid_policy(RunRetentionPolicy(1, 0.5)), Success)
    for bad in (RunRetentionPolicy(0), RunRetentionPolicy(True), RunRetentionPolicy(1, 0),
                RunRetentionPolicy(1, math.nan), RunRetentionPolicy(1, math.inf), "x"):
        assert isinstance(valid_policy(bad), Failure), bad


# -- cursors ------------------------------------------------------------------------------------


@given(started=st.integers(-(2**52), 2**52), run_id=st.integers(0, 2**62))
def test_cursors_round_trip(started: int, run_id: int) -> None:
    assert decode_cursor(encode_cursor(started, run_id)) == Success((started, run_id))


@pytest.mark.parametrize("cursor", ["", "garbage", "r1.1", "r1.x.2", "\x00", 7, "r1.1.2 "])
def test_foreign_cursors_are_invalid_input(cursor: object) -> None:
    result = decode_cursor(cursor)
    assert isinstance(result, Failure)
    assert result.failure().field == "cursor"
