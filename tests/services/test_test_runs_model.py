"""The pure rules of the test-run domain: outcome precedence, classification, failure
signatures, text bounding and coercion, retention planning, cursors."""

from __future__ import annotations

import itertools
import math
import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st
from returns.result import Failure, Success

from runstore.services._test_runs_rules import (
    MAX_CAUSES,
    MAX_SAFE_INT,
    RUNS_CURSOR,
    CaseHistory,
    PruneRun,
    Streak,
    WindowEntry,
    _case,
    _plain_case,
    check_time,
    classify,
    compare_runs,
    decode_lines,
    decode_selection,
    encode_lines,
    encode_selection,
    failure_signature,
    flaky_entry,
    judge,
    new_signatures,
    normalize_message,
    plan_prune,
    prepare_coverage,
    prepare_results,
    prepare_run_start,
    prepare_selection,
    previous_window,
    rank_matches,
    run_is_partial,
    streak_of,
    subtest_counts,
    valid_policy,
)
from runstore.services.errors import InvalidInput
from runstore.services.test_runs import (
    CLASSIFICATION_TABLE,
    DEFAULT_HISTORY_WINDOW,
    MAX_CAPTURE_CHARS,
    MAX_FRAMES,
    MAX_MESSAGE_CHARS,
    MAX_TEXT_CHARS,
    Classification,
    Environment,
    ErrorInfo,
    EvidenceRule,
    FileCoverage,
    Outcome,
    Phase,
    PhaseResult,
    RunId,
    RunRetentionPolicy,
    RunStart,
    RunStatus,
    Selection,
    StackFrame,
    SubtestResult,
    TestResult,
    derive_outcome,
)
from runstore.testing import reference_streak, reference_verdict

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


@pytest.mark.parametrize(
    ("phases", "subtests", "expected"),
    [
        ([(Phase.CALL, P)], [P, F], F),
        ([(Phase.CALL, P)], [P, E], F),
        ([(Phase.CALL, P)], [P, S, XF], P),
        ([(Phase.CALL, XP)], [F], F),
        ([(Phase.CALL, P), (Phase.TEARDOWN, F)], [F], F),
        ([(Phase.SETUP, F)], [F], E),
        ([(Phase.SETUP, S)], [F], S),
    ],
)
def test_a_failing_subtest_fails_the_item(
    phases: list[tuple[Phase, Outcome]], subtests: list[Outcome], expected: Outcome
) -> None:
    built = tuple(_phase(p, o) for p, o in phases)
    assert derive_outcome(built, subtests) == expected
    error = ErrorInfo(Phase.CALL, "AssertionError", "sub failed", "E", ())
    item = _item(phases=built, subtests=tuple(
        SubtestResult(f"i={i}", o, 0.0, error if o in (F, E) else None)
        for i, o in enumerate(subtests)
    ))
    assert item.outcome == expected
    prepared = _prepared(item)
    assert prepared.outcome == expected
    if expected in (F, E) and any(o in (F, E) for o in subtests):
        assert [e.message for e in prepared.errors] == ["sub failed"]


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
    assert check_time(1_700_000_000_000, "t") == Success(1_700_000_000_000)
    assert isinstance(check_time(True, "t"), Failure)
    assert isinstance(check_time("2024-01-01", "t"), Failure)


def test_times_range_over_every_datetime_and_safe_integers() -> None:
    assert check_time(datetime(1, 1, 1, tzinfo=UTC), "t") == Success(-62_135_596_800_000)
    assert check_time(-MAX_SAFE_INT, "t") == Success(-MAX_SAFE_INT)
    assert check_time(MAX_SAFE_INT, "t") == Success(MAX_SAFE_INT)
    for outside in (MAX_SAFE_INT + 1, -MAX_SAFE_INT - 1):
        refused = check_time(outside, "start.started_at")
        assert isinstance(refused, Failure)
        assert refused.failure().field == "start.started_at"


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


def _window(text: str, *, reruns: str = "", commits: str = "") -> list[WindowEntry]:
    """Window entries from newest-first letters (P passed, F failed, E error, X xpassed),
    run ids counting down from 100; ``reruns`` has ``r`` where an entry had failed attempts,
    ``commits`` a commit letter where its tree was clean (``.`` for none)."""
    letters = {"P": P, "F": F, "E": E, "X": XP}
    marks, clean = reruns.ljust(len(text), "."), commits.ljust(len(text), ".")
    return [
        WindowEntry(
            100 - i,
            letters[c],
            git_commit=None if clean[i] == "." else clean[i],
            git_dirty=None if clean[i] == "." else False,
            rerun_failures=1 if marks[i] == "r" else 0,
        )
        for i, c in enumerate(text)
    ]


@pytest.mark.parametrize(
    ("window", "reruns", "commits", "verdict", "rule"),
    [
        ("F", "", "", Classification.NEW_FAILURE, EvidenceRule.FIRST_FAILURE),
        ("FPP", "", "", Classification.NEW_FAILURE, EvidenceRule.FIRST_FAILURE),
        ("EPP", "", "", Classification.NEW_FAILURE, EvidenceRule.FIRST_FAILURE),
        ("FF", "", "", Classification.PERSISTENT_FAILURE, EvidenceRule.FAILING_STREAK),
        ("FEF", "", "", Classification.PERSISTENT_FAILURE, EvidenceRule.FAILING_STREAK),
        ("FFP", "", "", Classification.PERSISTENT_FAILURE, EvidenceRule.FAILING_STREAK),
        ("FPF", "", "", Classification.FLAKY, EvidenceRule.OSCILLATION),
        ("PF", "", "", Classification.RECOVERED, EvidenceRule.FIXED),
        ("XF", "", "", Classification.RECOVERED, EvidenceRule.FIXED),
        ("PFF", "", "", Classification.RECOVERED, EvidenceRule.FIXED),
        ("PFP", "", "", Classification.RECOVERED, EvidenceRule.FIXED),
        ("PFFP", "", "", Classification.RECOVERED, EvidenceRule.FIXED),
        ("PFPF", "", "", Classification.FLAKY, EvidenceRule.OSCILLATION),
        ("PPFPF", "", "", Classification.FLAKY, EvidenceRule.OSCILLATION),
        ("PPF", "", "", Classification.STABLE, EvidenceRule.NO_FAILURE),
        ("PPX", "", "", Classification.STABLE, EvidenceRule.NO_FAILURE),
        ("P", "", "", Classification.STABLE, EvidenceRule.NO_FAILURE),
        ("P", "r", "", Classification.FLAKY, EvidenceRule.PASSED_ON_RERUN),
        ("PP", ".r", "", Classification.FLAKY, EvidenceRule.PASSED_ON_RERUN),
        ("F", "r", "", Classification.NEW_FAILURE, EvidenceRule.FIRST_FAILURE),
        ("FP", "", "aa", Classification.FLAKY, EvidenceRule.SAME_COMMIT),
        ("FP", "", "ab", Classification.NEW_FAILURE, EvidenceRule.FIRST_FAILURE),
        ("FP", "", "a.", Classification.NEW_FAILURE, EvidenceRule.FIRST_FAILURE),
        ("FPF", "", "a.a", Classification.FLAKY, EvidenceRule.OSCILLATION),
        ("FPF", ".r", "aa", Classification.FLAKY, EvidenceRule.PASSED_ON_RERUN),
        ("FPF", "", "aa", Classification.FLAKY, EvidenceRule.SAME_COMMIT),
    ],
)
def test_classification_rules(
    window: str, reruns: str, commits: str, verdict: Classification, rule: EvidenceRule
) -> None:
    got, because = judge(_window(window, reruns=reruns, commits=commits))
    assert (got, because.rule) == (verdict, rule)
    assert because.summary
    clean = [None if c == "." else c for c in commits.ljust(len(window), ".")]
    simple = window.replace("E", "F").replace("X", "P")
    assert reference_verdict(simple, reruns, clean) == (verdict, rule)


def test_an_item_that_did_not_execute_is_not_judged() -> None:
    for outcome in (S, XF):
        item = classify(7, CaseHistory("t", WindowEntry(7, outcome), tuple(_window("FPF"))))
        assert (item.classification, item.because.rule) == (
            Classification.STABLE, EvidenceRule.NOT_EXECUTED
        )
        assert item.window == (F, P, F)
        assert item.because.run_ids == ()


def test_every_row_of_the_published_table_holds() -> None:
    """``CLASSIFICATION_TABLE`` rows whose window is plain letters, judged by the rules."""
    rows = [line.split(" | ") for line in CLASSIFICATION_TABLE.splitlines()
            if line.startswith("| `")]
    checked = 0
    for window_cell, verdict, because in rows:
        window = window_cell.strip("| `")
        if not re.fullmatch("[FP]( [FP])*", window):
            continue
        got, evidence = judge(_window(window.replace(" ", "")))
        assert (got.value, evidence.rule.value) == (verdict, because.split(" ")[0]), window
        checked += 1
    assert checked >= 8


_WINDOW_ENTRIES = st.lists(
    st.tuples(
        st.sampled_from([P, F, E, XP]),
        st.booleans(),
        st.sampled_from([None, "a", "b"]),
        st.sampled_from([None, False, True]),
    ),
    min_size=1,
    max_size=DEFAULT_HISTORY_WINDOW,
)


@given(entries=_WINDOW_ENTRIES)
def test_the_rules_match_the_reference_on_any_window(
    entries: list[tuple[Outcome, bool, str | None, bool | None]],
) -> None:
    window = [
        WindowEntry(50 - i, o, git_commit=c, git_dirty=d, rerun_failures=int(r))
        for i, (o, r, c, d) in enumerate(entries)
    ]
    letters = "".join("F" if o in (F, E) else "P" for o, _, _, _ in entries)
    reruns = "".join("r" if r else "." for _, r, _, _ in entries)
    clean = [c if d is False else None for _, _, c, d in entries]
    verdict, because = judge(window)
    assert (verdict, because.rule) == reference_verdict(letters, reruns, clean)
    assert list(because.run_ids) == sorted(set(because.run_ids))
    assert set(because.run_ids) <= {e.run_id for e in window}
    flaky = flaky_entry("t", window)
    assert (flaky is not None) == (verdict == Classification.FLAKY)
    if flaky is not None:
        assert flaky.because == because
        assert flaky.flips == sum(1 for a, b in itertools.pairwise(letters) if a != b)


@given(letters=st.text("FP", min_size=1, max_size=3 * DEFAULT_HISTORY_WINDOW))
def test_streaks_carried_by_history_rows_match_counting_the_letters(letters: str) -> None:
    """Streaks stored row by row (each from the window before it) count every failing run in
    a row, even beyond the window; oldest-first letters, run ids 1, 2, ..."""
    stored: list[WindowEntry] = []  # newest first, trimmed like history
    for run_id, letter in enumerate(letters, start=1):
        outcome = F if letter == "F" else P
        now = WindowEntry(run_id, outcome, message=f"m{run_id}")
        if outcome == F:
            streak = streak_of(now, previous_window(stored, run_id))
            assert streak.length == reference_streak(letters[:run_id])
            first = run_id - streak.length + 1
            assert (streak.since, streak.message) == (first, f"m{first}")
            now = attrs.evolve(now, streak=streak.length, streak_since=streak.since,
                               streak_message=streak.message)
        stored = [now, *stored][:DEFAULT_HISTORY_WINDOW]


def test_old_history_rows_without_a_stored_streak_are_walked() -> None:
    previous = [WindowEntry(9, F, message="b"), WindowEntry(8, F, message="a"),
                WindowEntry(7, P), WindowEntry(6, F)]
    assert streak_of(WindowEntry(10, F, message="c"), previous) == Streak(3, 8, "a")
    pruned = [WindowEntry(None, F, message=None), WindowEntry(4, P)]
    assert streak_of(WindowEntry(10, E), pruned) == Streak(2, None, "")


def test_previous_window_skips_later_runs_and_keeps_pruned_ones() -> None:
    entries = [WindowEntry(r, o) for r, o in [(9, F), (7, P), (None, F), (5, P)]] + [
        WindowEntry(4 - i, P) for i in range(20)
    ]
    previous = previous_window(entries, 7)
    assert [e.outcome for e in previous[:2]] == [F, P]  # run 9 and run 7 itself are left out
    assert previous[0].run_id is None
    assert len(previous) == DEFAULT_HISTORY_WINDOW - 1


def test_flaky_entries_list_only_flaky_windows() -> None:
    assert flaky_entry("t", _window("PP")) is None
    assert flaky_entry("t", _window("FFPP")) is None  # a clean break
    assert flaky_entry("t", _window("PFF")) is None  # a clean fix
    entry = flaky_entry("t", _window("FPFF"))
    assert entry is not None
    assert (entry.flips, entry.failures, entry.passes, entry.last_run_id) == (2, 3, 1, 100)
    assert entry.because.rule == EvidenceRule.OSCILLATION
    assert entry.because.run_ids == (97, 98, 100)
    only_window = flaky_entry("t", _window("FP" + "P" * 7 + "F" + "F" * 20))
    assert only_window is not None
    assert len(only_window.window) == DEFAULT_HISTORY_WINDOW
    assert flaky_entry("t", _window("F" + "P" * DEFAULT_HISTORY_WINDOW + "F")) is None


def test_new_signatures_follow_run_start_order() -> None:
    # a: first recorded by run 3; b: by run 9; c: first run pruned; d: never; e: running run 2
    first_seen = {"a": 3, "b": 9, "c": None}
    assert new_signatures({"a", "b", "c", "d", "e"}, first_seen, {"e"}, 5) == {"b", "d"}
    assert new_signatures({"a"}, first_seen, set(), 3) == {"a"}  # its own run: still new
    assert new_signatures({"a"}, first_seen, set(), 2) == {"a"}  # a lower id ended later
    assert new_signatures(set(), first_seen, set(), 5) == frozenset()


def test_compare_calls_missing_tests_not_run_in_a_partial_run() -> None:
    a, b = {"x": P, "y": F, "gone": P}, {"x": F, "y": P, "new": P}
    whole = compare_runs(RunId(1), RunId(2), a, b)
    assert (whole.removed, whole.not_run, whole.newly_failing, whole.fixed, whole.added) == (
        ("gone",), (), ("x",), ("y",), ("new",)
    )
    partial = compare_runs(RunId(1), RunId(2), a, b, b_partial=True)
    assert (partial.removed, partial.not_run) == ((), ("gone",))
    assert run_is_partial(RunStatus.PASSED, Selection(keyword="k"))
    assert not run_is_partial(RunStatus.FAILED, Selection(failed_first=True, collected=3))
    for status in (RunStatus.RUNNING, RunStatus.INTERRUPTED, RunStatus.ABORTED):
        assert run_is_partial(status, Selection())


@pytest.mark.parametrize(
    "selection",
    [Selection(args=("a",)), Selection(keyword="k"), Selection(markexpr="m"),
     Selection(last_failed=True), Selection(maxfail=1), Selection(deselected=2)],
)
def test_any_narrowing_makes_a_selection_partial(selection: Selection) -> None:
    assert selection.is_partial
    assert not Selection(failed_first=True, collected=10, keyword="").is_partial


@given(
    selection=st.builds(
        Selection,
        args=st.lists(st.text(max_size=5), max_size=3).map(tuple),
        keyword=st.none() | st.text(max_size=5),
        markexpr=st.none() | st.text(max_size=5),
        last_failed=st.booleans(),
        failed_first=st.booleans(),
        maxfail=st.integers(0, 10),
        deselected=st.integers(0, 10),
        collected=st.none() | st.integers(0, 10),
    )
)
def test_selections_round_trip_through_their_codec(selection: Selection) -> None:
    prepared = prepare_selection(selection).unwrap()
    assert prepared == selection  # text without lone surrogates is kept as given
    assert decode_selection(encode_selection(prepared)) == prepared


def test_bad_selections_name_the_field() -> None:
    assert encode_selection(Selection()) is None
    assert decode_selection(None) == Selection()
    for bad, field in (
        (Selection(maxfail=-1), "selection.maxfail"),
        (Selection(collected=True), "selection.collected"),
        (Selection(failed_first=1), "selection.failed_first"),  # type: ignore[arg-type]
        (Selection(args=("ok", 3)), "selection.args[1]"),  # type: ignore[arg-type]
        (Selection(keyword=b"k"), "selection.keyword"),  # type: ignore[arg-type]
    ):
        failure = prepare_selection(bad)
        assert isinstance(failure, Failure)
        assert failure.failure().field == field
    started = prepare_run_start(
        RunStart("p", "i", datetime(2024, 1, 1, tzinfo=UTC), selection=Selection(maxfail=-3))
    )
    assert isinstance(started, Failure)
    assert started.failure().field == "start.selection.maxfail"
    dirty = prepare_run_start(
        RunStart("p", "i", datetime(2024, 1, 1, tzinfo=UTC),
                 Environment(git_dirty="yes"))  # type: ignore[arg-type]
    )
    assert isinstance(dirty, Failure)
    assert dirty.failure().field == "start.environment.git_dirty"


def test_subtest_outcomes_count_under_pytests_words() -> None:
    assert subtest_counts([P, XP, F, E, S, XF, P]) == {"passed": 3, "failed": 2, "skipped": 2}
    assert subtest_counts([]) == {"passed": 0, "failed": 0, "skipped": 0}


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
    assert RUNS_CURSOR.decode(RUNS_CURSOR.encode(started, run_id)) == Success((started, run_id))


_EDITED = RUNS_CURSOR.encode(5, 7).replace(".7.", ".8.")
_OTHER_LISTING = "executions.1.5.7." + RUNS_CURSOR.encode(5, 7).rsplit(".", 1)[1]


@pytest.mark.parametrize(
    "cursor",
    ["", "garbage", "r1.1", "r1.x.2", "\x00", 7, "r1.1.2 ", "r1.1.2", _EDITED, _OTHER_LISTING],
)
def test_foreign_cursors_are_invalid_input(cursor: object) -> None:
    result = RUNS_CURSOR.decode(cursor)
    assert isinstance(result, Failure)
    assert result.failure().field == "cursor"
