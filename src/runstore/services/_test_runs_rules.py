"""The test-run domain's rules core: validators, codecs and decisions, for every backend.

Pure functions only; nothing here reads or writes storage. A layer method reads::

    validate (prepare_* / valid_*) -> unit of work -> load facts (backend)
                                   -> decide (decide_*, classify, plan_prune, ...)
                                   -> apply (backend) -> row to record (*_record, ...)

so every layer runs every input through :func:`prepare_results` (and its siblings) before it
touches storage, and builds every answer with the same functions: the layers return identical
``Result`` values for identical calls. The rules are documented on the Protocols
(:class:`~runstore.services.DataStore`, :class:`~runstore.services.DataReader`); this module
is where they are written, once.

Text rules (one place, both layers):

- *Identifiers* (project, invocation id, node ids, module paths, collection-error node ids
  and module paths, coverage file paths) must be ``str`` without lone surrogates (they could
  not be stored as UTF-8, and replacing them would make two different ids equal) and without
  NUL (U+0000: SQLite's text functions such as ``instr`` and ``LIKE`` stop at it, terminals
  render it badly, and pytest never puts one in a node id); an empty one is ``InvalidInput``
  where the field is required. Lookups (a project or node id to read, a search fragment)
  accept NUL and simply find nothing.
- *Free text* (messages, texts, captured output, names, markers, function names, skip
  reasons, environment fields, stack frame paths) has every lone surrogate replaced with
  U+FFFD, one for one, and keeps NUL exactly.
- Bounded fields keep their first N characters and carry a truncated flag
  (``MAX_MESSAGE_CHARS``, ``MAX_TEXT_CHARS``, ``MAX_CAPTURE_CHARS``); short free text (names,
  function names, reasons, exception types) is cut at ``MAX_MESSAGE_CHARS`` without a flag.
- A value of the wrong type (an object that is not ``str``, a ``bool`` where a number is
  expected) is ``InvalidInput``; runstore never calls ``str()`` on caller objects. A ``str``
  subclass is stored as a plain ``str``.

Failure signatures (:func:`failure_signature`): the first 16 hex digits of the SHA-256 of
``exception type``, the *normalized* message and the *failing frame*, joined by U+001F.
The message is normalized by taking the first 1,000 characters of its first non-blank line
and masking, in this order: quoted strings (``'...'``, ``"..."`` -> ``<str>``); hex
addresses (``0x7f3a...`` -> ``<hex>``); paths, anything with a ``/`` or ``\\`` separator
(-> ``<path>``); numbers, integers, decimals and exponents with their sign, unless glued to
a preceding letter, digit, ``_`` or ``.`` (-> ``<num>``, so ``test_1`` stays and
``after 5s`` becomes ``after <num>s``). Then whitespace runs collapse to one space and at
most 500 characters are kept. The failing frame is the innermost stored frame that is
project code, else the innermost frame, as ``path:function`` (no line number, so an edit
above the failure does not change the signature), or empty without frames. The masking
follows the seed's ``normalizeAssertionShape`` idea: values that change between runs
(counters, ids, temp paths, object addresses) must not split one failure into many.
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from operator import attrgetter
from typing import Any, NamedTuple, NoReturn, TypeGuard, TypeVar

import attrs
from returns.result import Failure, Result, Success

from runstore.services._primitives import (
    check_int,
    check_text,
    describe,
    first_failure,
    to_epoch_ms,
)
from runstore.services.errors import IllegalTransition, InvalidInput, NotFound
from runstore.services.pagination import CursorCodec, Page, check_limit, page_of
from runstore.services.test_runs import (
    CHANGED_FILE_STATUS_CODES,
    DEFAULT_FLAKY_POLICY,
    FAILING_OUTCOMES,
    FLAKY_RULES,
    HISTORY_DEPTH,
    MAX_CAPTURE_CHARS,
    MAX_CELL_RUNS,
    MAX_CHANGED_FILES,
    MAX_FINGERPRINT_CHARS,
    MAX_FRAMES,
    MAX_MESSAGE_CHARS,
    MAX_SESSION_ID_CHARS,
    MAX_TEXT_CHARS,
    AttemptSource,
    ChangedFile,
    Classification,
    CollectionError,
    CoverageReport,
    CoverageTrendPoint,
    CoveringTest,
    Environment,
    ErrorInfo,
    Evidence,
    EvidenceRule,
    FailureRecord,
    FileCoverage,
    FlakyPolicy,
    FlakyTest,
    HistoryEntry,
    Outcome,
    Phase,
    PhaseResult,
    RunComparison,
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
    TestLines,
    TestRecord,
    TestResult,
    TestsFor,
    derive_outcome,
)

__all__ = [
    "DAY_MS",
    "EXECUTED_OUTCOMES",
    "FLAKY_RULE_BODIES",
    "HISTORY_STATUSES",
    "MAX_AGE_DAYS",
    "MAX_CAUSES",
    "MAX_KEEP_RUNS",
    "MAX_SAFE_INT",
    "OUTCOME_ORDER",
    "PASSING_OUTCOMES",
    "RUNS_CURSOR",
    "SUBTEST_WORDS",
    "CaseHistory",
    "FailingItem",
    "ItemNow",
    "PreparedAttempt",
    "PreparedCase",
    "PreparedCollectionError",
    "PreparedCoverage",
    "PreparedError",
    "PreparedRun",
    "PreparedSubtest",
    "PreparedTestCoverage",
    "PrunePlan",
    "PruneRun",
    "RuleCheck",
    "RunFacts",
    "RunListing",
    "SignatureTally",
    "Streak",
    "TestsForQuery",
    "WindowEntry",
    "check_abort",
    "check_batch",
    "check_cells",
    "check_finish",
    "check_flaky_policy",
    "check_known",
    "check_lookup",
    "check_run_listing",
    "check_search",
    "check_tests_for",
    "check_time",
    "classify",
    "classify_run",
    "compare_facts",
    "compare_runs",
    "counts_of",
    "coverage_percent",
    "coverage_report",
    "coverage_trend",
    "decide_exists",
    "decide_failures",
    "decide_finish",
    "decide_history",
    "decide_running",
    "decide_tests_for",
    "decode_lines",
    "decode_selection",
    "encode_lines",
    "encode_selection",
    "error_info",
    "failing_phase",
    "failing_streaks",
    "failure_record",
    "failure_signature",
    "flaky_entry",
    "flaky_of",
    "flips_of",
    "history_entry",
    "invalid",
    "is_outage",
    "judge",
    "new_signatures",
    "no_run",
    "normalize_message",
    "plan_prune",
    "prepare_collection_errors",
    "prepare_coverage",
    "prepare_results",
    "prepare_run_start",
    "prepare_selection",
    "prepare_test_coverage",
    "previous_window",
    "rank_matches",
    "rerun_failures",
    "rule_checks",
    "run_is_partial",
    "run_page",
    "run_share",
    "session_id_problem",
    "skip_reason_of",
    "sort_failures",
    "sort_flaky",
    "streak_at",
    "streak_of",
    "subtest_counts",
    "tally_signatures",
    "test_detail",
    "test_record",
    "valid_fragment",
    "valid_identifier",
    "valid_limit",
    "valid_outcomes",
    "valid_policy",
    "valid_project",
    "valid_run_id",
    "valid_status",
    "window_entry",
]

T = TypeVar("T")

DAY_MS = 86_400_000
"""Milliseconds in a day (retention ages)."""

MAX_CAUSES = 32
"""Most causes stored per error chain; a deeper chain keeps its nearest ``MAX_CAUSES``."""

EXECUTED_OUTCOMES = frozenset({Outcome.PASSED, Outcome.FAILED, Outcome.XPASSED, Outcome.ERROR})
"""Outcomes history keeps (every outcome but ``skipped`` and ``xfailed``)."""

PASSING_OUTCOMES = frozenset({Outcome.PASSED, Outcome.XPASSED})
"""Executed outcomes that are not failing."""

OUTCOME_ORDER: tuple[Outcome, ...] = tuple(Outcome)
"""Every outcome, in the order ``RunSummary.counts`` lists them."""

SUBTEST_WORDS: dict[Outcome, str] = {
    Outcome.PASSED: "passed",
    Outcome.XPASSED: "passed",
    Outcome.FAILED: "failed",
    Outcome.ERROR: "failed",
    Outcome.SKIPPED: "skipped",
    Outcome.XFAILED: "skipped",
}
"""The ``RunSummary.subtests`` key each subtest outcome counts under (pytest's words)."""

MAX_SAFE_INT = 2**53 - 1
"""The largest count, line number or (absolute) epoch ms a test-run value may hold: exact as a
JSON number and a float too."""

_PHASE_RANK = {Phase.SETUP: 0, Phase.CALL: 1, Phase.TEARDOWN: 2}


# -- failing fast inside validation -----------------------------------------------------------
#
# The item tree (a batch of results, each with phases, errors, frames, causes, attempts and
# subtests) has some forty fields; its validators abort at the first refused one with
# ``invalid()`` (or ``_must`` over a shared check's ``Result``), and each ``prepare_*`` entry
# point turns that into the one ``Failure(InvalidInput)`` it returns (``_guard``). Every leaf
# check is one of the shared primitives (``check_text``, ``check_int``, ``to_epoch_ms``).


class _Invalid(Exception):
    """Carries an ``InvalidInput`` out of deep validation to the one place that returns it."""

    def __init__(self, error: InvalidInput) -> None:
        super().__init__(str(error))
        self.error = error


def invalid(field: str, reason: str) -> NoReturn:
    """Abort the current validation with ``InvalidInput(field, reason)``."""
    raise _Invalid(InvalidInput(field, reason))


def _must(checked: Result[T, InvalidInput]) -> T:
    """The value a shared check accepted; aborts the current validation with its refusal."""
    if isinstance(checked, Failure):
        raise _Invalid(checked.failure())
    return checked.unwrap()


def _guard(fn: Any, *args: Any) -> Result[Any, InvalidInput]:
    try:
        return Success(fn(*args))
    except _Invalid as exc:
        return Failure(exc.error)


def _type_name(value: object) -> str:
    return type(value).__name__


# -- text ---------------------------------------------------------------------------------------


def valid_identifier(
    value: object, field: str, *, allow_empty: bool = False, allow_nul: bool = False
) -> str:
    """Return ``value`` as an identifier: ``str``, no lone surrogates, no NUL unless allowed
    (lookups), non-empty unless allowed (the shared :func:`check_text` with that policy).

    Aborts validation with ``InvalidInput(field, ...)`` otherwise.
    """
    return _must(
        check_text(value, field, max_chars=None, allow_empty=allow_empty, allow_nul=allow_nul)
    )


def _free_text(value: object, field: str) -> str:
    """Free text as stored: any length, NUL kept, lone surrogates replaced with U+FFFD."""
    if type(value) is str and value.isascii():
        return value
    return _must(
        check_text(
            value,
            field,
            max_chars=None,
            allow_empty=True,
            allow_nul=True,
            replace_surrogates=True,
        )
    )


def _free(value: object, field: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """Free text cut at ``limit`` characters without a flag."""
    text = _free_text(value, field)
    return text[:limit] if len(text) > limit else text


def _bounded(value: object, field: str, limit: int) -> tuple[str, bool]:
    """Free text cut at ``limit`` characters, with whether it was cut."""
    text = _free_text(value, field)
    if len(text) > limit:
        return text[:limit], True
    return text, False


def _optional_free(value: object, field: str) -> str | None:
    return None if value is None else _free(value, field)


# -- numbers and times ------------------------------------------------------------------------


def _duration(value: object, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        invalid(field, f"must be a number of milliseconds, got {_type_name(value)}")
    number = float(value)
    if not math.isfinite(number) or number < 0:
        invalid(field, f"must be finite and >= 0, got {describe(value)}")
    return number + 0.0  # -0.0 -> 0.0


def _count(value: object, field: str) -> int:
    return _must(check_int(value, field, minimum=0, maximum=MAX_SAFE_INT))


def _line(value: object, field: str) -> int | None:
    return None if value is None else _line_number(value, field)


def _line_number(value: object, field: str) -> int:
    return _must(check_int(value, field, minimum=1, maximum=MAX_SAFE_INT))


def check_time(value: object, field: str) -> Result[int, InvalidInput]:
    """Return an aware datetime (floored to the ms) or an epoch-ms ``int`` as epoch ms UTC.

    The shared :func:`to_epoch_ms` over the test-run range, ``-MAX_SAFE_INT..MAX_SAFE_INT``
    ms (every instant a ``datetime`` can name). ``InvalidInput(field, ...)`` for a naive
    datetime, a ``bool``, any other type, or an ``int`` out of that range.
    """
    return to_epoch_ms(value, field, minimum=-MAX_SAFE_INT, maximum=MAX_SAFE_INT)


def _enum(kind: type[T], value: object, field: str) -> T:
    if isinstance(value, kind):
        return value
    if isinstance(value, str):
        try:
            return kind(value)  # type: ignore[call-arg]
        except ValueError:
            pass
    names = ", ".join(str(v) for v in kind)  # type: ignore[attr-defined]
    invalid(field, f"must be one of {names}, got {describe(value)}")


def _sequence(value: object, field: str) -> Sequence[Any]:
    if type(value) is tuple or type(value) is list:
        return value
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        invalid(field, f"must be a sequence (tuple or list), got {_type_name(value)}")
    return value


# -- prepared values --------------------------------------------------------------------------


@attrs.frozen
class PreparedError:
    """One stored error: bounded texts, bounded frames (outermost first), its cause chain
    (nearest cause first, causes have no causes of their own) and, for a chain head, its
    failure signature with the failing frame it was made from."""

    phase: Phase
    exception_type: str
    message: str
    message_truncated: bool
    text: str
    text_truncated: bool
    frames: tuple[StackFrame, ...]
    causes: tuple[PreparedError, ...] = ()
    signature: str = ""
    signature_frame: str = ""

    def chain(self) -> tuple[PreparedError, ...]:
        """The error followed by its causes (depth 0, 1, ...)."""
        return (self, *self.causes)

    def paths(self) -> Iterator[str]:
        """The file of every frame of the error and its causes."""
        for link in self.chain():
            for frame in link.frames:
                yield frame.path

    def as_info(self) -> ErrorInfo:
        """This error (without its causes) as the ``ErrorInfo`` a reader returns."""
        return ErrorInfo(
            self.phase, self.exception_type, self.message, self.text, self.frames, None
        )


@attrs.frozen
class PreparedAttempt:
    """An earlier rerun attempt of an item: its phases, outcome, total duration and errors."""

    phases: tuple[PhaseResult, ...]
    outcome: Outcome
    duration_ms: float
    errors: tuple[PreparedError, ...]
    source: AttemptSource = AttemptSource.RERUN


@attrs.frozen
class PreparedSubtest:
    """One subtest: description, outcome, duration (ms) and its error, if any."""

    description: str
    outcome: Outcome
    duration_ms: float
    error: PreparedError | None


@attrs.define
class PreparedCase:
    """One validated item, ready to store: every text normalized and bounded.

    Never changed once made (not frozen only because frozen construction costs twice as much
    on the write path, which makes one per item).
    """

    nodeid: str
    module_path: str
    name: str
    parametrize_id: str | None
    line: int | None
    markers: tuple[str, ...]
    phases: tuple[PhaseResult, ...]
    outcome: Outcome
    duration_ms: float
    skip_reason: str | None
    errors: tuple[PreparedError, ...]
    stdout: str
    stdout_truncated: bool
    stderr: str
    stderr_truncated: bool
    log: str
    log_truncated: bool
    attempts: tuple[PreparedAttempt, ...]
    subtests: tuple[PreparedSubtest, ...]
    fingerprint: str | None = None

    def owned_errors(self) -> Iterator[tuple[int, int | None, int, PreparedError]]:
        """Every error of the item as ``(attempt, subtest, ordinal, error)``: attempt 0 is
        the final result, ``k >= 1`` the k-th earlier attempt; ``subtest`` is the subtest's
        position (or None); ``ordinal`` the error's position among its owner's errors."""
        for ordinal, error in enumerate(self.errors):
            yield 0, None, ordinal, error
        for number, attempt in enumerate(self.attempts, start=1):
            for ordinal, error in enumerate(attempt.errors):
                yield number, None, ordinal, error
        for position, subtest in enumerate(self.subtests):
            if subtest.error is not None:
                yield 0, position, 0, subtest.error

    def paths(self) -> Iterator[str]:
        """Every file path the stored item refers to: its module and every frame's file."""
        yield self.module_path
        for _, _, _, error in self.owned_errors():
            yield from error.paths()


@attrs.frozen
class PreparedCollectionError:
    """One validated collection error."""

    nodeid: str
    module_path: str
    error: PreparedError

    def paths(self) -> Iterator[str]:
        """The module path and every frame's file."""
        yield self.module_path
        yield from self.error.paths()


@attrs.frozen
class PreparedRun:
    """A validated ``RunStart``."""

    project: str
    invocation_id: str
    started_at_ms: int
    environment: Environment
    selection: Selection
    session_id: str | None = None


@attrs.frozen
class PreparedCoverage:
    """Validated coverage of one run: files sorted by path, ``missing_lines`` sorted unique."""

    files: tuple[FileCoverage, ...]


# -- errors, frames, signatures ---------------------------------------------------------------

_QUOTED = re.compile(r"'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\"")
_HEX = re.compile(r"\b0[xX][0-9a-fA-F]+\b")
_PATH = re.compile(r"(?<![\w.~\-])(?:[A-Za-z]:)?[\w.~\-]*(?:[/\\][\w.~\-]*)+")
_NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_SPACE = re.compile(r"\s+")
_NORMALIZED_LIMIT = 500
_NORMALIZED_INPUT = 1_000


def normalize_message(message: str) -> str:
    """Normalize a message for signatures (module docstring): first non-blank line (its first
    1,000 characters), masks
    for quoted strings, hex addresses, paths and numbers, whitespace collapsed, <= 500 chars."""
    line = next((part for part in message.splitlines() if part.strip()), "")
    line = line.strip()[:_NORMALIZED_INPUT]
    line = _QUOTED.sub("<str>", line)
    line = _HEX.sub("<hex>", line)
    line = _PATH.sub(lambda m: "<path>" if len(m.group(0)) > 1 else m.group(0), line)
    line = _NUMBER.sub("<num>", line)
    line = _SPACE.sub(" ", line).strip()
    return line[:_NORMALIZED_LIMIT]


def _failing_frame(frames: Sequence[StackFrame]) -> str:
    for frame in reversed(frames):
        if frame.is_project:
            return f"{frame.path}:{frame.function}"
    if frames:
        return f"{frames[-1].path}:{frames[-1].function}"
    return ""


def failure_signature(
    exception_type: str, message: str, frames: Sequence[StackFrame]
) -> tuple[str, str, str]:
    """Return ``(signature, normalized message, failing frame)`` (module docstring rule)."""
    import hashlib  # only a failure is signed: a passing run or a read never loads it

    normalized = normalize_message(message)
    frame = _failing_frame(frames)
    digest = hashlib.sha256(
        "\x1f".join((exception_type, normalized, frame)).encode("utf-8")
    ).hexdigest()
    return digest[:16], normalized, frame


def _frame(value: object, field: str) -> StackFrame:
    if not isinstance(value, StackFrame):
        invalid(field, f"must be a StackFrame, got {_type_name(value)}")
    is_project = value.is_project
    if not isinstance(is_project, bool):
        invalid(f"{field}.is_project", f"must be a bool, got {_type_name(is_project)}")
    return StackFrame(
        _free(value.path, f"{field}.path", MAX_TEXT_CHARS),
        _line(value.line, f"{field}.line"),
        _free(value.function, f"{field}.function"),
        is_project,
    )


def _one_error(value: object, field: str) -> PreparedError:
    if not isinstance(value, ErrorInfo):
        invalid(field, f"must be an ErrorInfo, got {_type_name(value)}")
    frames_in = _sequence(value.frames, f"{field}.frames")
    start = max(0, len(frames_in) - MAX_FRAMES)
    frames = tuple(
        _frame(frames_in[i], f"{field}.frames[{i}]") for i in range(start, len(frames_in))
    )
    message, message_cut = _bounded(value.message, f"{field}.message", MAX_MESSAGE_CHARS)
    text, text_cut = _bounded(value.text, f"{field}.text", MAX_TEXT_CHARS)
    return PreparedError(
        phase=_enum(Phase, value.phase, f"{field}.phase"),
        exception_type=_free(value.exception_type, f"{field}.exception_type"),
        message=message,
        message_truncated=message_cut,
        text=text,
        text_truncated=text_cut,
        frames=frames,
    )


def _signed(head: PreparedError, causes: Sequence[PreparedError]) -> PreparedError:
    """A chain head with its causes and its failure signature (:func:`failure_signature`)."""
    signature, _, frame = failure_signature(head.exception_type, head.message, head.frames)
    return attrs.evolve(head, causes=tuple(causes), signature=signature, signature_frame=frame)


def _error(value: object, field: str) -> PreparedError:
    head = _one_error(value, field)
    causes: list[PreparedError] = []
    cause = value.cause  # type: ignore[attr-defined]
    depth = 1
    while cause is not None and depth <= MAX_CAUSES:
        causes.append(_one_error(cause, f"{field}.cause" + ".cause" * (depth - 1)))
        cause = cause.cause
        depth += 1
    return _signed(head, causes)


# -- items ------------------------------------------------------------------------------------


def _phases(value: object, field: str) -> tuple[PhaseResult, ...]:
    items = _sequence(value, field)
    if not items:
        invalid(field, "an item needs at least one phase (setup, call or teardown)")
    phases: list[PhaseResult] = []
    last_rank = -1
    for i, phase in enumerate(items):
        where = f"{field}[{i}]"
        if not isinstance(phase, PhaseResult):
            invalid(where, f"must be a PhaseResult, got {_type_name(phase)}")
        kind = _enum(Phase, phase.phase, f"{where}.phase")
        rank = _PHASE_RANK.get(kind)
        if rank is None:
            invalid(f"{where}.phase", "must be setup, call or teardown")
        if rank <= last_rank:
            invalid(f"{where}.phase", "phases must be in order setup, call, teardown, each once")
        last_rank = rank
        reason = phase.skip_reason
        phases.append(
            PhaseResult(
                kind,
                _enum(Outcome, phase.outcome, f"{where}.outcome"),
                _duration(phase.duration_ms, f"{where}.duration_ms"),
                None if reason is None else _free(reason, f"{where}.skip_reason"),
            )
        )
    return tuple(phases)


def _errors(value: object, field: str) -> tuple[PreparedError, ...]:
    items = _sequence(value, field)
    return tuple(_error(e, f"{field}[{i}]") for i, e in enumerate(items))


def _total(phases: Sequence[PhaseResult]) -> float:
    return sum(p.duration_ms for p in phases) + 0.0


def _attempt(value: object, field: str) -> PreparedAttempt:
    if not isinstance(value, TestResult):
        invalid(field, f"must be a TestResult, got {_type_name(value)}")
    if _sequence(value.attempts, f"{field}.attempts"):
        invalid(f"{field}.attempts", "an attempt cannot have attempts of its own")
    phases = _phases(value.phases, f"{field}.phases")
    return PreparedAttempt(
        phases=phases,
        outcome=derive_outcome(phases),
        duration_ms=_total(phases),
        errors=_errors(value.errors, f"{field}.errors"),
        source=_enum(AttemptSource, value.source, f"{field}.source"),
    )


def _subtest(value: object, field: str) -> PreparedSubtest:
    if not isinstance(value, SubtestResult):
        invalid(field, f"must be a SubtestResult, got {_type_name(value)}")
    error = value.error
    return PreparedSubtest(
        description=_free(value.description, f"{field}.description"),
        outcome=_enum(Outcome, value.outcome, f"{field}.outcome"),
        duration_ms=_duration(value.duration_ms, f"{field}.duration_ms"),
        error=None if error is None else _error(error, f"{field}.error"),
    )


def _markers(value: object, field: str) -> tuple[str, ...]:
    items = _sequence(value, field)
    return tuple(_free(m, f"{field}[{i}]") for i, m in enumerate(items))


def _case(value: object, field: str) -> PreparedCase:
    if not isinstance(value, TestResult):
        invalid(field, f"must be a TestResult, got {_type_name(value)}")
    phases = _phases(value.phases, f"{field}.phases")
    stdout, stdout_cut = _bounded(value.stdout, f"{field}.stdout", MAX_CAPTURE_CHARS)
    stderr, stderr_cut = _bounded(value.stderr, f"{field}.stderr", MAX_CAPTURE_CHARS)
    log, log_cut = _bounded(value.log, f"{field}.log", MAX_CAPTURE_CHARS)
    attempts_in = _sequence(value.attempts, f"{field}.attempts")
    subtests_in = _sequence(value.subtests, f"{field}.subtests")
    errors_in = _sequence(value.errors, f"{field}.errors")
    parametrize_id = value.parametrize_id
    subtests = (
        tuple(_subtest(s, f"{field}.subtests[{i}]") for i, s in enumerate(subtests_in))
        if subtests_in
        else ()
    )
    errors = (
        tuple(_error(e, f"{field}.errors[{i}]") for i, e in enumerate(errors_in))
        if errors_in
        else ()
    )
    outcome = derive_outcome(phases, (t.outcome for t in subtests))
    if not errors and outcome in FAILING_OUTCOMES:
        errors = _subtest_error(subtests)
    return PreparedCase(
        nodeid=valid_identifier(value.nodeid, f"{field}.nodeid"),
        module_path=valid_identifier(value.module_path, f"{field}.module_path"),
        name=_free(value.name, f"{field}.name"),
        parametrize_id=None
        if parametrize_id is None
        else _free(parametrize_id, f"{field}.parametrize_id"),
        line=_line(value.line, f"{field}.line"),
        markers=_markers(value.markers, f"{field}.markers"),
        phases=phases,
        outcome=outcome,
        duration_ms=_total(phases),
        skip_reason=skip_reason_of(phases),
        errors=errors,
        stdout=stdout,
        stdout_truncated=stdout_cut,
        stderr=stderr,
        stderr_truncated=stderr_cut,
        log=log,
        log_truncated=log_cut,
        attempts=tuple(_attempt(a, f"{field}.attempts[{i}]") for i, a in enumerate(attempts_in))
        if attempts_in
        else (),
        subtests=subtests,
        fingerprint=_fingerprint(value.fingerprint, f"{field}.fingerprint"),
    )


def is_fingerprint(value: object) -> TypeGuard[str]:
    """Whether ``value`` is a code fingerprint ``TestResult.fingerprint`` accepts: 1 to
    ``MAX_FINGERPRINT_CHARS`` lowercase hex digits."""
    return (
        type(value) is str
        and 0 < len(value) <= MAX_FINGERPRINT_CHARS
        and value.isascii()
        and all(c in _HEX_DIGITS for c in value)
    )


_HEX_DIGITS = frozenset("0123456789abcdef")


def _fingerprint(value: object, field: str) -> str | None:
    if value is None or is_fingerprint(value):
        return value
    invalid(field, f"must be 1 to {MAX_FINGERPRINT_CHARS} lowercase hex digits or None")


def _subtest_error(subtests: Sequence[PreparedSubtest]) -> tuple[PreparedError, ...]:
    """The error a failing item without errors of its own is stored with: that of its first
    failing subtest that has one (so ``failures`` shows the subtest's message and frames)."""
    for subtest in subtests:
        if subtest.outcome in FAILING_OUTCOMES and subtest.error is not None:
            return (subtest.error,)
    return ()


_INF = math.inf


def _short_ascii(value: object) -> bool:
    """Plain ASCII ``str`` within ``MAX_MESSAGE_CHARS``: needs no normalization."""
    return type(value) is str and value.isascii() and len(value) <= MAX_MESSAGE_CHARS


def _capture_ready(value: object) -> bool:
    return value == "" or (
        type(value) is str and len(value) <= MAX_CAPTURE_CHARS and value.isascii()
    )


_FAILING = frozenset({Outcome.FAILED, Outcome.ERROR})
_SKIPPING = frozenset({Outcome.SKIPPED, Outcome.XFAILED})
_CALL_KEPT = frozenset({Outcome.XFAILED, Outcome.XPASSED, Outcome.SKIPPED})
_SETUP, _CALL, _TEARDOWN = Phase.SETUP, Phase.CALL, Phase.TEARDOWN


def _plain_frames(frames: object) -> bool:
    if type(frames) is not tuple or len(frames) > MAX_FRAMES:
        return False
    for frame in frames:
        if type(frame) is not StackFrame:
            return False
        path, line = frame.path, frame.line
        if not (type(path) is str and path.isascii() and len(path) <= MAX_TEXT_CHARS):
            return False
        if not _short_ascii(frame.function) or type(frame.is_project) is not bool:
            return False
        if line is not None and not (type(line) is int and 1 <= line <= MAX_SAFE_INT):
            return False
    return True


def _plain_link(value: object) -> PreparedError | None:
    if type(value) is not ErrorInfo:
        return None
    phase, message, text, frames = value.phase, value.message, value.text, value.frames
    if type(phase) is not Phase or not _short_ascii(value.exception_type):
        return None
    if not (type(message) is str and message.isascii() and len(message) <= MAX_MESSAGE_CHARS):
        return None
    if not (type(text) is str and text.isascii() and len(text) <= MAX_TEXT_CHARS):
        return None
    if not _plain_frames(frames):
        return None
    return PreparedError(phase, value.exception_type, message, False, text, False, frames)


def _plain_error(value: object) -> PreparedError | None:
    """The prepared form of an error chain that needs no normalization (see _plain_case)."""
    head = _plain_link(value)
    if head is None:
        return None
    causes: list[PreparedError] = []
    cause = value.cause  # type: ignore[attr-defined]
    while cause is not None:
        if len(causes) == MAX_CAUSES:
            return None
        link = _plain_link(cause)
        if link is None:
            return None
        causes.append(link)
        cause = cause.cause
    return _signed(head, causes)


def _plain_case(value: object) -> PreparedCase | None:
    """The prepared form of an item that needs no normalization, built without the field
    bookkeeping of :func:`_case`; None when any part needs the careful path (which gives the
    same result for every item this accepts: same phases, same outcome by
    ``derive_outcome``'s precedence, same total duration summed in the same order)."""
    if type(value) is not TestResult:
        return None
    nodeid, module_path = value.nodeid, value.module_path
    if not (type(nodeid) is str and nodeid and nodeid.isascii() and "\x00" not in nodeid):
        return None
    if not (
        type(module_path) is str
        and module_path
        and module_path.isascii()
        and "\x00" not in module_path
    ):
        return None
    name, parametrize_id = value.name, value.parametrize_id
    if not _short_ascii(name) or (parametrize_id is not None and not _short_ascii(parametrize_id)):
        return None
    line, markers = value.line, value.markers
    if line is not None and not (type(line) is int and 1 <= line <= MAX_SAFE_INT):
        return None
    if type(markers) is not tuple or (markers and not all(_short_ascii(m) for m in markers)):
        return None
    if value.attempts != () or value.subtests != ():
        return None
    fingerprint = value.fingerprint
    if fingerprint is not None and not is_fingerprint(fingerprint):
        return None
    errors_in = value.errors
    errors: tuple[PreparedError, ...] = ()
    if errors_in != ():
        if type(errors_in) is not tuple:
            return None
        plain = [_plain_error(e) for e in errors_in]
        if None in plain:
            return None
        errors = tuple(plain)  # type: ignore[arg-type]
    stdout, stderr, log = value.stdout, value.stderr, value.log
    if not (_capture_ready(stdout) and _capture_ready(stderr) and _capture_ready(log)):
        return None
    phases = value.phases
    if type(phases) is not tuple or not phases:
        return None
    setup = call = teardown = None
    total: float = 0
    reason_of_item = None
    last = -1
    for phase in phases:
        if type(phase) is not PhaseResult:
            return None
        kind, outcome, duration, reason = (
            phase.phase,
            phase.outcome,
            phase.duration_ms,
            phase.skip_reason,
        )
        if type(outcome) is not Outcome or type(duration) is not float:
            return None
        if kind is _SETUP and last < 0:
            setup, last = outcome, 0
        elif kind is _CALL and last < 1:
            call, last = outcome, 1
        elif kind is _TEARDOWN and last < 2:
            teardown, last = outcome, 2
        else:
            return None
        if not 0.0 < duration < _INF and (duration != 0.0 or math.copysign(1.0, duration) < 0):
            return None
        total += duration
        if reason is not None:
            if not _short_ascii(reason):
                return None
            if reason_of_item is None:
                reason_of_item = reason
    # derive_outcome's precedence (module docstring of runstore.services.test_runs)
    if setup in _FAILING:
        derived = Outcome.ERROR
    elif call is None and setup in _SKIPPING:
        derived = setup
    elif call in _FAILING:
        derived = Outcome.FAILED
    elif teardown in _FAILING:
        derived = Outcome.ERROR
    elif call in _CALL_KEPT:
        derived = call
    else:
        derived = Outcome.PASSED
    return PreparedCase(
        nodeid,
        module_path,
        name,
        parametrize_id,
        line,
        markers,
        phases,
        derived,
        total + 0.0,
        reason_of_item,
        errors,
        stdout,
        False,
        stderr,
        False,
        log,
        False,
        (),
        (),
        fingerprint,
    )


def _last_wins(items: Sequence[T], key: Any) -> tuple[T, ...]:
    """Keep the last item per key, in the order of those last occurrences."""
    if len({key(item) for item in items}) == len(items):
        return tuple(items)
    chosen: dict[Any, T] = {}
    for item in items:
        k = key(item)
        chosen.pop(k, None)
        chosen[k] = item
    return tuple(chosen.values())


def _results(results: object) -> tuple[PreparedCase, ...]:
    items = _sequence(results, "results")
    cases = [_plain_case(item) or _case(item, f"results[{i}]") for i, item in enumerate(items)]
    return _last_wins(cases, lambda c: c.nodeid)


def prepare_results(results: object) -> Result[tuple[PreparedCase, ...], InvalidInput]:
    """Validate and normalize a batch of ``TestResult``; a node id given twice keeps the last.

    ``InvalidInput`` (naming the offending field, e.g. ``results[3].phases[0].duration_ms``)
    for: a batch that is not a sequence; an item that is not a ``TestResult``; an empty or
    invalid node id or module path (a lone surrogate or NUL); no phases, a phase given twice
    or out of order (setup, call, teardown), a ``collect`` phase; a non-finite or negative
    duration; a line that is not a positive int; nested attempts; any value of the wrong type.
    """
    return _guard(_results, results)


def _collection_errors(errors: object) -> tuple[PreparedCollectionError, ...]:
    items = _sequence(errors, "errors")
    prepared: list[PreparedCollectionError] = []
    for i, item in enumerate(items):
        field = f"errors[{i}]"
        if not isinstance(item, CollectionError):
            invalid(field, f"must be a CollectionError, got {_type_name(item)}")
        prepared.append(
            PreparedCollectionError(
                nodeid=valid_identifier(item.nodeid, f"{field}.nodeid"),
                module_path=valid_identifier(item.module_path, f"{field}.module_path"),
                error=_error(item.error, f"{field}.error"),
            )
        )
    return _last_wins(prepared, lambda c: c.nodeid)


def prepare_collection_errors(
    errors: object,
) -> Result[tuple[PreparedCollectionError, ...], InvalidInput]:
    """Validate collection errors; a collector node id given twice keeps the last.

    ``InvalidInput`` as :func:`prepare_results` for the node id, module path and error.
    """
    return _guard(_collection_errors, errors)


def _environment(value: object) -> Environment:
    if not isinstance(value, Environment):
        invalid("start.environment", f"must be an Environment, got {_type_name(value)}")
    pid = value.pid
    if pid is not None:
        pid = _must(check_int(pid, "start.environment.pid"))
    command = _sequence(value.command_line, "start.environment.command_line")
    return Environment(
        python_version=_free(value.python_version, "start.environment.python_version"),
        pytest_version=_free(value.pytest_version, "start.environment.pytest_version"),
        platform=_free(value.platform, "start.environment.platform"),
        git_commit=_optional_free(value.git_commit, "start.environment.git_commit"),
        git_branch=_optional_free(value.git_branch, "start.environment.git_branch"),
        command_line=tuple(
            _free(a, f"start.environment.command_line[{i}]", MAX_TEXT_CHARS)
            for i, a in enumerate(command)
        ),
        host=_free(value.host, "start.environment.host"),
        pid=pid,
        git_dirty=_optional_flag(value.git_dirty, "start.environment.git_dirty"),
        **_changed_files(value),
    )


def _optional_flag(value: object, field: str) -> bool | None:
    if value is not None and type(value) is not bool:
        invalid(field, f"must be True, False or None, got {_type_name(value)}")
    return None if value is None else bool(value)


def _flag(value: object, field: str) -> bool:
    if type(value) is not bool:
        invalid(field, f"must be True or False, got {_type_name(value)}")
    return bool(value)


def _selection(value: object, field: str) -> Selection:
    if not isinstance(value, Selection):
        invalid(field, f"must be a Selection, got {_type_name(value)}")
    args = _sequence(value.args, f"{field}.args")
    keyword, markexpr, collected = value.keyword, value.markexpr, value.collected
    return Selection(
        args=tuple(_free(a, f"{field}.args[{i}]", MAX_TEXT_CHARS) for i, a in enumerate(args)),
        keyword=None if keyword is None else _free(keyword, f"{field}.keyword", MAX_TEXT_CHARS),
        markexpr=None if markexpr is None else _free(markexpr, f"{field}.markexpr", MAX_TEXT_CHARS),
        last_failed=_flag(value.last_failed, f"{field}.last_failed"),
        failed_first=_flag(value.failed_first, f"{field}.failed_first"),
        maxfail=_count(value.maxfail, f"{field}.maxfail"),
        deselected=_count(value.deselected, f"{field}.deselected"),
        collected=None if collected is None else _count(collected, f"{field}.collected"),
    )


def prepare_selection(selection: object) -> Result[Selection, InvalidInput]:
    """Validate a ``Selection`` (``record_selection``): free text normalized and cut at
    ``MAX_TEXT_CHARS``, flags ``bool``, counts integers ``>= 0``; ``InvalidInput`` naming
    the field (``selection.maxfail``) otherwise."""
    return _guard(_selection, selection, "selection")


_SELECTION_DEFAULT = Selection()


def encode_selection(selection: Selection) -> str | None:
    """A validated selection as stored: a JSON object, or None for the default one."""
    if selection == _SELECTION_DEFAULT:
        return None
    return json.dumps(
        {
            "args": list(selection.args),
            "keyword": selection.keyword,
            "markexpr": selection.markexpr,
            "last_failed": selection.last_failed,
            "failed_first": selection.failed_first,
            "maxfail": selection.maxfail,
            "deselected": selection.deselected,
            "collected": selection.collected,
        },
        ensure_ascii=False,
        separators=(",", ":"),
    )


def decode_selection(text: str | None) -> Selection:
    """The inverse of :func:`encode_selection` (NULL is the default selection)."""
    if text is None:
        return _SELECTION_DEFAULT
    data = json.loads(text)
    return Selection(
        args=tuple(data["args"]),
        keyword=data["keyword"],
        markexpr=data["markexpr"],
        last_failed=data["last_failed"],
        failed_first=data["failed_first"],
        maxfail=data["maxfail"],
        deselected=data["deselected"],
        collected=data["collected"],
    )


def _run_start(start: object) -> PreparedRun:
    if not isinstance(start, RunStart):
        invalid("start", f"must be a RunStart, got {_type_name(start)}")
    return PreparedRun(
        project=valid_identifier(start.project, "start.project"),
        invocation_id=valid_identifier(start.invocation_id, "start.invocation_id"),
        started_at_ms=_must(check_time(start.started_at, "start.started_at")),
        environment=_environment(start.environment),
        selection=_selection(start.selection, "start.selection"),
        session_id=_session_id(start.session_id),
    )


def prepare_run_start(start: object) -> Result[PreparedRun, InvalidInput]:
    """Validate a ``RunStart``: non-empty identifiers, an aware ``started_at``, a well-typed
    environment and selection (free text normalized). ``InvalidInput`` otherwise."""
    return _guard(_run_start, start)


def _coverage(files: object) -> PreparedCoverage:
    items = _sequence(files, "files")
    seen: set[str] = set()
    prepared: list[FileCoverage] = []
    for i, item in enumerate(items):
        field = f"files[{i}]"
        if not isinstance(item, FileCoverage):
            invalid(field, f"must be a FileCoverage, got {_type_name(item)}")
        path = valid_identifier(item.path, f"{field}.path")
        if path in seen:
            invalid(f"{field}.path", f"duplicate path {path!r}")
        seen.add(path)
        statements = _count(item.statements, f"{field}.statements")
        missing = _count(item.missing_statements, f"{field}.missing_statements")
        branches = _count(item.branches, f"{field}.branches")
        partial = _count(item.partial_branches, f"{field}.partial_branches")
        missing_branches = _count(item.missing_branches, f"{field}.missing_branches")
        if missing > statements:
            invalid(f"{field}.missing_statements", f"{missing} > statements {statements}")
        if missing_branches > branches:
            invalid(f"{field}.missing_branches", f"{missing_branches} > branches {branches}")
        if partial > branches:
            invalid(f"{field}.partial_branches", f"{partial} > branches {branches}")
        lines_in = _sequence(item.missing_lines, f"{field}.missing_lines")
        lines = sorted(
            {_line_number(n, f"{field}.missing_lines[{j}]") for j, n in enumerate(lines_in)}
        )
        prepared.append(
            FileCoverage(
                path, statements, missing, branches, partial, missing_branches, tuple(lines)
            )
        )
    prepared.sort(key=lambda f: f.path)
    return PreparedCoverage(tuple(prepared))


def prepare_coverage(files: object) -> Result[PreparedCoverage, InvalidInput]:
    """Validate per-file coverage: counts are ints >= 0, missing <= total, partial branches
    <= branches, a path at most once, missing lines ints >= 1 (stored sorted, unique).

    ``InvalidInput`` otherwise.
    """
    return _guard(_coverage, files)


def encode_lines(lines: Sequence[int]) -> str:
    """Encode sorted unique line numbers compactly as ranges: ``(1, 2, 3, 7)`` -> ``"1-3,7"``.

    The breaks between ranges are found in one comprehension (per-test coverage encodes
    millions of lines per run; see ``benchmarks/per_test_coverage.py``)."""
    if not lines:
        return ""
    ends = [i for i in range(1, len(lines)) if lines[i] != lines[i - 1] + 1]
    starts = [0, *ends]
    stops = [*ends, len(lines)]
    return ",".join(
        str(lines[a]) if b - a == 1 else f"{lines[a]}-{lines[b - 1]}"
        for a, b in zip(starts, stops, strict=True)
    )


def decode_lines(text: str) -> tuple[int, ...]:
    """Decode :func:`encode_lines` output."""
    if not text:
        return ()
    lines: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        if high:
            lines.extend(range(int(low), int(high) + 1))
        else:
            lines.append(int(low))
    return tuple(lines)


# -- simple arguments -------------------------------------------------------------------------


def valid_run_id(value: object, field: str = "run_id") -> Result[RunId, InvalidInput]:
    """A run id must be an ``int`` (not ``bool``) that fits in 64 bits; unknown ones are
    ``NotFound`` later."""
    return check_int(value, field).map(RunId)


def valid_limit(value: object) -> Result[int, InvalidInput]:
    """The shared pagination limit rule (``check_limit``)."""
    return check_limit(value)  # type: ignore[arg-type]


def valid_fragment(value: object) -> Result[str, InvalidInput]:
    """A search fragment: ``str`` without lone surrogates (may be empty, may hold NUL)."""
    return valid_project(value, "fragment")


def valid_project(value: object, field: str = "project") -> Result[str, InvalidInput]:
    """A project name (or node id) to look up: ``str`` without lone surrogates (empty, or
    holding NUL, it finds nothing)."""
    return check_text(value, field, max_chars=None, allow_empty=True, allow_nul=True)


def valid_status(value: object) -> Result[RunStatus | None, InvalidInput]:
    """``None`` or a ``RunStatus`` (its value given as text is accepted)."""
    if value is None:
        return Success(None)
    return _guard(_enum, RunStatus, value, "status")


def valid_outcomes(value: object) -> Result[frozenset[Outcome] | None, InvalidInput]:
    """``None`` or a set of outcomes (values given as text are accepted)."""
    if value is None:
        return Success(None)

    def check() -> frozenset[Outcome]:
        if not isinstance(value, set | frozenset):
            invalid("outcomes", f"must be a set of Outcome or None, got {_type_name(value)}")
        return frozenset(_enum(Outcome, o, "outcomes") for o in value)

    return _guard(check)


def check_finish(
    run_id: object, status: object, finished_at: object
) -> Result[tuple[RunId, RunStatus, int], InvalidInput]:
    """Check the arguments of ``finish_run``, in order: a run id, a ``RunStatus`` (its value
    as text accepted) and an aware datetime (epoch ms by :func:`check_time`)."""

    def check() -> tuple[RunId, RunStatus, int]:
        return (
            _must(valid_run_id(run_id)),
            _enum(RunStatus, status, "status"),
            _must(check_time(finished_at, "finished_at")),
        )

    return _guard(check)


def check_abort(project: object, older_than: object) -> Result[tuple[str, int], InvalidInput]:
    """Check the arguments of ``abort_stale_runs``: a project to look up, an aware datetime."""

    def check() -> tuple[str, int]:
        return _must(valid_project(project)), _must(check_time(older_than, "older_than"))

    return _guard(check)


def check_lookup(project: object, nodeid: object) -> Result[tuple[str, str], InvalidInput]:
    """Check a project and a node id to look up (:func:`valid_project`), in that order."""
    name = valid_project(project)
    if isinstance(name, Failure):
        return Failure(name.failure())
    return valid_project(nodeid, "nodeid").map(lambda node: (name.unwrap(), node))


def check_search(
    project: object, fragment: object, limit: object
) -> Result[tuple[str, str, int], InvalidInput]:
    """Check the arguments of ``find_tests``, in order: project, fragment, limit."""
    name, piece, size = valid_project(project), valid_fragment(fragment), valid_limit(limit)
    checked = first_failure(name, piece, size)
    if isinstance(checked, Failure):
        return Failure(checked.failure())
    return Success((name.unwrap(), piece.unwrap(), size.unwrap()))


MAX_KEEP_RUNS = 2**63 - 1
"""The largest ``keep_runs`` a policy may name (SQLite's largest integer)."""

MAX_AGE_DAYS = 1_000_000
"""The largest ``max_age_days`` a policy may name (about 2,700 years): a larger age would
overflow epoch milliseconds and means "no age limit" anyway."""


def valid_policy(policy: object) -> Result[RunRetentionPolicy, InvalidInput]:
    """``keep_runs`` an int in ``[1, MAX_KEEP_RUNS]``; ``max_age_days`` None or a finite
    number in ``(0, MAX_AGE_DAYS]``."""
    if not isinstance(policy, RunRetentionPolicy):
        return Failure(
            InvalidInput("policy", f"must be a RunRetentionPolicy, got {_type_name(policy)}")
        )
    keep = check_int(policy.keep_runs, "policy.keep_runs", minimum=1, maximum=MAX_KEEP_RUNS)
    if isinstance(keep, Failure):
        return Failure(keep.failure())
    age = policy.max_age_days
    if age is not None:
        if isinstance(age, bool) or not isinstance(age, int | float):
            return Failure(
                InvalidInput(
                    "policy.max_age_days", f"must be a number or None, got {describe(age)}"
                )
            )
        if not math.isfinite(age) or age <= 0 or age > MAX_AGE_DAYS:
            return Failure(
                InvalidInput(
                    "policy.max_age_days",
                    f"must be finite, > 0 and <= {MAX_AGE_DAYS}, got {describe(age)}",
                )
            )
    return Success(policy)


# -- cursors ----------------------------------------------------------------------------------

RUNS_CURSOR = CursorCodec("runs", 2)
"""The ``list_runs`` cursor: the position after the run ``(started_at_ms, id)`` (keys in
that order), in the one cursor format of :class:`CursorCodec`."""


class RunListing(NamedTuple):
    """A checked ``list_runs`` call: runs of ``project`` (every project when None), of
    ``status`` when given, before the position ``after`` (``(started_at_ms, id)``, None: from
    the newest), at most ``limit`` per page."""

    project: str | None
    status: RunStatus | None
    limit: int
    after: tuple[int, int] | None
    session_id: str | None = None


def check_run_listing(
    project: object, status: object, limit: object, cursor: object, session_id: object = None
) -> Result[RunListing, InvalidInput]:
    """Check the arguments of ``list_runs``, in this order: ``project`` (None or a lookup
    name, :func:`valid_project`), ``status`` (:func:`valid_status`), ``limit``
    (:func:`valid_limit`), ``cursor`` (:data:`RUNS_CURSOR`), ``session_id`` (None or a
    lookup name); the first refusal is returned."""
    name = Success(None) if project is None else valid_project(project)
    wanted = valid_status(status)
    size = valid_limit(limit)
    after = RUNS_CURSOR.decode(cursor)
    session = Success(None) if session_id is None else valid_project(session_id, "session_id")
    checked = first_failure(name, wanted, size, after, session)
    if isinstance(checked, Failure):
        return Failure(checked.failure())
    position = after.unwrap()
    return Success(
        RunListing(
            name.unwrap(),
            wanted.unwrap(),
            size.unwrap(),
            None if position is None else (position[0], position[1]),
            session.unwrap(),
        )
    )


def run_page(summaries: Sequence[RunSummary], limit: int) -> Page[RunSummary]:
    """The ``list_runs`` page of ``summaries`` fetched as ``limit + 1`` runs, newest first."""
    return page_of(summaries, limit, lambda run: RUNS_CURSOR.encode(run.started_at_ms, run.id))


# -- retention --------------------------------------------------------------------------------


@attrs.frozen
class PruneRun:
    """What retention needs to know about one run."""

    id: int
    project: str
    invocation_id: str
    status: RunStatus
    started_at_ms: int


@attrs.frozen
class PrunePlan:
    """Runs to delete (ascending) and coverage moves ``(from_run, to_run)`` to do first."""

    doomed: tuple[int, ...]
    moves: tuple[tuple[int, int], ...]


def error_info(error: PreparedError) -> ErrorInfo:
    """A stored error chain as the ``ErrorInfo`` a reader returns, causes linked."""
    info: ErrorInfo | None = None
    for link in reversed(error.chain()):
        info = attrs.evolve(link.as_info(), cause=info)
    assert info is not None
    return info


def test_detail(
    record: TestRecord,
    errors: Sequence[PreparedError],
    output: tuple[str, bool, str, bool, str, bool],
    subtests: Sequence[tuple[str, Outcome, float, PreparedError | None]],
    attempts: Sequence[tuple[tuple[PhaseResult, ...], Outcome, float, Sequence[PreparedError]]],
    sources: Sequence[AttemptSource],
) -> TestDetail:
    """Assemble a ``TestDetail`` from an item's stored parts (both layers use this);
    ``sources`` are the attempts' sources in their order (``rerun`` where missing)."""
    return TestDetail(
        test=record,
        errors=tuple(error_info(e) for e in errors),
        stdout=output[0],
        stdout_truncated=output[1],
        stderr=output[2],
        stderr_truncated=output[3],
        log=output[4],
        log_truncated=output[5],
        subtests=tuple(
            SubtestResult(d, o, ms, None if e is None else error_info(e))
            for d, o, ms, e in subtests
        ),
        attempts=tuple(
            attrs.evolve(
                record,
                phases=phases,
                outcome=outcome,
                duration_ms=ms,
                attempts=0,
                skip_reason=skip_reason_of(phases),
                source=sources[number] if number < len(sources) else AttemptSource.RERUN,
            )
            for number, (phases, outcome, ms, _) in enumerate(attempts)
        ),
        attempt_errors=tuple(tuple(error_info(e) for e in errors) for _, _, _, errors in attempts),
    )


def plan_prune(
    runs: Iterable[PruneRun],
    covered: Iterable[int],
    policy: RunRetentionPolicy,
    now_ms: int,
) -> PrunePlan:
    """Decide what ``prune_runs`` deletes and which coverage it moves (seed 000 semantics).

    Per project, runs are ranked by (start desc, id desc), running runs included; a run is
    doomed when its rank exceeds ``keep_runs`` or, with ``max_age_days``, when it started
    before ``now_ms - max_age_days`` days (truncated to whole ms); a ``running`` run is never
    doomed. For every invocation with a doomed run that has coverage (``covered`` lists the
    runs with at least one coverage row) and with a surviving run, when no survivor has
    coverage, the coverage of the lowest-id doomed run with coverage moves to the
    lowest-id survivor.
    """
    all_runs = list(runs)
    has_coverage = set(covered)
    cutoff = None if policy.max_age_days is None else now_ms - int(policy.max_age_days * DAY_MS)
    by_project: dict[str, list[PruneRun]] = {}
    for run in all_runs:
        by_project.setdefault(run.project, []).append(run)
    doomed: set[int] = set()
    for members in by_project.values():
        members.sort(key=lambda r: (r.started_at_ms, r.id), reverse=True)
        for rank, run in enumerate(members, start=1):
            if run.status == RunStatus.RUNNING:
                continue
            if rank > policy.keep_runs or (cutoff is not None and run.started_at_ms < cutoff):
                doomed.add(run.id)
    moves: list[tuple[int, int]] = []
    by_invocation: dict[str, list[PruneRun]] = {}
    for run in all_runs:
        by_invocation.setdefault(run.invocation_id, []).append(run)
    for members in by_invocation.values():
        sources = sorted(r.id for r in members if r.id in doomed and r.id in has_coverage)
        survivors = sorted(r.id for r in members if r.id not in doomed)
        if not sources or not survivors:
            continue
        if any(s in has_coverage for s in survivors):
            continue
        moves.append((sources[0], survivors[0]))
    moves.sort()
    return PrunePlan(tuple(sorted(doomed)), tuple(moves))


# -- classification, flakiness, comparison ----------------------------------------------------


@attrs.frozen
class WindowEntry:
    """One executed outcome of a test as the rules see it: its run (None once pruned), the
    outcome, the run's git commit and dirty flag, the failing attempts before the final one
    (``rerun_failures``), the first error message when failing, and the failing streak the
    history row stored (``streak``, ``streak_since``, ``streak_message``; None when passing,
    not yet stored, or written before the streak was kept)."""

    run_id: int | None
    outcome: Outcome
    git_commit: str | None = None
    git_dirty: bool | None = None
    rerun_failures: int = 0
    message: str | None = None
    streak: int | None = None
    streak_since: int | None = None
    streak_message: str | None = None
    run_executed: int | None = None
    run_failing: int | None = None
    """The run's executed and failing item counts when it finished (None: unknown), which
    tell an outage run (:func:`is_outage`)."""
    fingerprint: str | None = None
    """The item's code fingerprint in that run (None: unknown), for ``same_code``."""
    earlier_passes: int = 0
    """Passing attempts before the final one in that run (runstore's repeats), for
    ``flipped_in_run``."""


@attrs.frozen
class CaseHistory:
    """One item of a run for classification: the item now (its ``WindowEntry`` in this
    run) and the previous history entries (newest first) of runs before it."""

    nodeid: str
    now: WindowEntry
    previous: tuple[WindowEntry, ...]


@attrs.frozen
class Streak:
    """A failing streak ending at a failing entry: ``length`` runs in a row (>= 1), the
    first run of it (None when pruned) and the first error message of it ("" without one)."""

    length: int
    since: int | None
    message: str


def rerun_failures(attempts: Iterable[Outcome]) -> int:
    """Failing attempts among an item's earlier attempts (``HistoryEntry.rerun_failures``)."""
    return sum(1 for o in attempts if o in FAILING_OUTCOMES)


def earlier_passes(attempts: Iterable[Outcome]) -> int:
    """Passing (passed, xpassed) attempts among an item's earlier attempts
    (``HistoryEntry.earlier_passes``)."""
    return sum(1 for o in attempts if o in PASSING_OUTCOMES)


def streak_of(now: WindowEntry, previous: Sequence[WindowEntry]) -> Streak:
    """The failing streak ending at the failing entry ``now``, walking ``previous`` (newest
    first): each failing entry adds one run, until a passing one; an entry with a stored
    streak adds its whole streak and ends the walk (so a streak outlives the window)."""
    length, since, message = 1, now.run_id, now.message or ""
    for entry in previous:
        if entry.outcome not in FAILING_OUTCOMES:
            break
        if entry.streak is not None:
            length += entry.streak
            since, message = entry.streak_since, entry.streak_message or ""
            break
        length += 1
        since, message = entry.run_id, entry.message or ""
    return Streak(length, since, message)


def flips_of(window: Sequence[Outcome]) -> int:
    """Number of adjacent changes between failing and passing outcomes in ``window``."""
    return sum(
        1
        for a, b in itertools.pairwise(window)
        if (a in FAILING_OUTCOMES) != (b in FAILING_OUTCOMES)
    )


def _failing_streaks(window: Sequence[WindowEntry]) -> int:
    """How many separate runs of failing entries the window holds."""
    streaks, inside = 0, False
    for entry in window:
        failing = entry.outcome in FAILING_OUTCOMES
        if failing and not inside:
            streaks += 1
        inside = failing
    return streaks


def _ids(entries: Iterable[WindowEntry]) -> tuple[RunId, ...]:
    return tuple(sorted({RunId(e.run_id) for e in entries if e.run_id is not None}))


def _run_name(run_id: int | None) -> str:
    return "a pruned run" if run_id is None else f"run {run_id}"


def _runs_text(entries: Sequence[WindowEntry]) -> str:
    """``run 5``, ``runs 3, 5``, ``run 5 and 2 pruned runs``, ``a pruned run``."""
    ids = _ids(entries)
    pruned = sum(1 for e in entries if e.run_id is None)
    named = ("run " if len(ids) == 1 else "runs ") + ", ".join(map(str, ids)) if ids else ""
    gone = "" if not pruned else "a pruned run" if pruned == 1 else f"{pruned} pruned runs"
    return " and ".join(part for part in (named, gone) if part)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _same_commit(window: Sequence[WindowEntry]) -> tuple[str, tuple[WindowEntry, ...]] | None:
    """The commit (and its entries) on which the window both passed and failed with a clean
    tree; the commit of the newest such entry when several qualify."""
    clean: dict[str, list[WindowEntry]] = {}
    for entry in window:
        if entry.git_commit is not None and entry.git_dirty is False:
            clean.setdefault(entry.git_commit, []).append(entry)
    for entry in window:
        commit = entry.git_commit
        if commit is None or entry.git_dirty is not False:
            continue
        group = clean[commit]
        failing = sum(1 for e in group if e.outcome in FAILING_OUTCOMES)
        if 0 < failing < len(group):
            return commit, tuple(group)
    return None


# -- the flaky policy -------------------------------------------------------------------------


def check_flaky_policy(policy: object) -> Result[FlakyPolicy, InvalidInput]:
    """``policy`` when it is a ``FlakyPolicy`` within its ranges (see ``FlakyPolicy``), else
    ``InvalidInput`` naming the first bad field (``policy.window``, ``policy.min_runs``,
    ``policy.flip_rate``, ``policy.evidence``, ``policy.outage_share``,
    ``policy.outage_min_tests``) and what it allows."""
    if not isinstance(policy, FlakyPolicy):
        return Failure(
            InvalidInput("policy", f"must be a FlakyPolicy, got {_type_name(policy)}")
        )
    window = check_int(policy.window, "policy.window", minimum=1, maximum=HISTORY_DEPTH)
    if isinstance(window, Failure):
        return Failure(window.failure())
    least = check_int(policy.min_runs, "policy.min_runs", minimum=1, maximum=policy.window)
    if isinstance(least, Failure):
        return Failure(least.failure())
    for name in ("flip_rate", "outage_share"):
        value = getattr(policy, name)
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not 0.0 <= value <= 1.0
        ):
            return Failure(
                InvalidInput(
                    f"policy.{name}", f"must be a number in 0.0..1.0, got {describe(value)}"
                )
            )
    tests = check_int(
        policy.outage_min_tests, "policy.outage_min_tests", minimum=1, maximum=MAX_SAFE_INT
    )
    if isinstance(tests, Failure):
        return Failure(tests.failure())
    evidence = policy.evidence
    allowed = ", ".join(FLAKY_RULES)
    if not isinstance(evidence, frozenset) or any(
        not isinstance(rule, EvidenceRule) or rule not in FLAKY_RULES for rule in evidence
    ):
        return Failure(
            InvalidInput(
                "policy.evidence",
                f"must be a frozenset of flaky rules ({allowed}), got {describe(evidence)}",
            )
        )
    return Success(policy)


def is_outage(entry: WindowEntry, policy: FlakyPolicy = DEFAULT_FLAKY_POLICY) -> bool:
    """Whether ``entry``'s run was an outage under ``policy``: at least
    ``outage_min_tests`` executed items, more than ``outage_share`` of them failing. Unknown
    counts (None) are not an outage."""
    executed, failing = entry.run_executed, entry.run_failing
    if executed is None or failing is None or executed < policy.outage_min_tests:
        return False
    return failing / executed > policy.outage_share


def run_share(counts: Mapping[str, int]) -> tuple[int, int]:
    """A run's executed and failing item counts from its ``RunSummary.counts``."""
    executed = sum(counts.get(o.value, 0) for o in EXECUTED_OUTCOMES)
    return executed, sum(counts.get(o.value, 0) for o in FAILING_OUTCOMES)


@attrs.frozen
class RuleCheck:
    """One flaky rule tried on a window: whether it ``matched``, the runs it rests on when it
    did (ascending ids) and one line: its evidence when it matched, why not otherwise."""

    rule: EvidenceRule
    matched: bool
    run_ids: tuple[RunId, ...]
    summary: str


class _Hit(NamedTuple):
    """What a matching rule rests on: entries, one line, and the word before their runs."""

    entries: Sequence[WindowEntry]
    summary: str
    label: str = ""


_RuleBody = Callable[[Sequence[WindowEntry], FlakyPolicy], "_Hit | str"]


def _passed_on_rerun(evidence: Sequence[WindowEntry], policy: FlakyPolicy) -> _Hit | str:
    rerun = [e for e in evidence if e.outcome in PASSING_OUTCOMES and e.rerun_failures > 0]
    if not rerun:
        return "no entry passed after failed rerun attempts"
    attempts = sum(e.rerun_failures for e in rerun)
    return _Hit(rerun, f"passed on a rerun after {_plural(attempts, 'failed attempt')}")


def _flipped_in_run(evidence: Sequence[WindowEntry], policy: FlakyPolicy) -> _Hit | str:
    """A failing entry whose run also passed the test in an earlier attempt (runstore's
    repeats, ``earlier_passes``): its outcome changed inside one run, on one code."""
    flipped = [e for e in evidence if e.outcome in FAILING_OUTCOMES and e.earlier_passes > 0]
    if not flipped:
        return "no failing entry passed in an earlier attempt of its run"
    passes = sum(e.earlier_passes for e in flipped)
    return _Hit(flipped, f"failed after passing {_plural(passes, 'earlier attempt')} "
                         "in the same run")


def _same_code(evidence: Sequence[WindowEntry], policy: FlakyPolicy) -> _Hit | str:
    """A failing and a passing entry with one non-null code fingerprint (the test ran the
    same code and its outcome changed: no git needed, a dirty tree is fine); the group of
    the newest such entry when several qualify."""
    groups: dict[str, list[WindowEntry]] = {}
    for entry in evidence:
        if entry.fingerprint is not None:
            groups.setdefault(entry.fingerprint, []).append(entry)
    for entry in evidence:
        if entry.fingerprint is None:
            continue
        group = groups[entry.fingerprint]
        failing = sum(1 for e in group if e.outcome in FAILING_OUTCOMES)
        if 0 < failing < len(group):
            return _Hit(group, f"passed and failed on code fingerprint {entry.fingerprint[:12]}")
    if not groups:
        return "no entry has a code fingerprint"
    return "no failing and passing entry share a code fingerprint"


def _same_commit_rule(evidence: Sequence[WindowEntry], policy: FlakyPolicy) -> _Hit | str:
    same = _same_commit(evidence)
    if same is None:
        return "no clean commit has both a failing and a passing entry"
    commit, entries = same
    return _Hit(entries, f"passed and failed on commit {commit[:12]} with a clean tree")


def _oscillation(evidence: Sequence[WindowEntry], policy: FlakyPolicy) -> _Hit | str:
    streaks = _failing_streaks(evidence)
    if streaks < 2:
        return f"{_plural(streaks, 'failing streak')} in the window, 2 needed"
    flips = flips_of([e.outcome for e in evidence])
    rate = flips / (len(evidence) - 1)
    if rate < policy.flip_rate:
        return (
            f"flip rate {rate:.2f} ({flips} of {len(evidence) - 1}) is below "
            f"flip_rate {policy.flip_rate:g}"
        )
    failing = [e for e in evidence if e.outcome in FAILING_OUTCOMES]
    return _Hit(
        failing,
        f"{streaks} separate failing streaks in the last {_plural(len(evidence), 'run')}",
        "failed in ",
    )


FLAKY_RULE_BODIES: dict[EvidenceRule, tuple[bool, _RuleBody]] = {
    EvidenceRule.PASSED_ON_RERUN: (False, _passed_on_rerun),
    EvidenceRule.FLIPPED_IN_RUN: (False, _flipped_in_run),
    EvidenceRule.SAME_CODE: (True, _same_code),
    EvidenceRule.SAME_COMMIT: (True, _same_commit_rule),
    EvidenceRule.OSCILLATION: (True, _oscillation),
}
"""Each flaky rule of ``FLAKY_RULES``: whether it compares runs (``FlakyPolicy.min_runs``
applies) and its body over the evidence entries (the window without outage entries): a
``_Hit`` when it matches, else why not."""


def rule_checks(
    window: Sequence[WindowEntry], policy: FlakyPolicy = DEFAULT_FLAKY_POLICY
) -> Iterator[RuleCheck]:
    """Try each flaky rule on ``window`` (newest first) in ``FLAKY_RULES`` order under
    ``policy``, lazily: a rule left out of ``policy.evidence`` and a history rule with fewer
    than ``min_runs`` evidence entries do not match, saying so; outage entries are never
    evidence (:func:`is_outage`)."""
    evidence = [e for e in window if not is_outage(e, policy)]
    outages = len(window) - len(evidence)
    for rule in FLAKY_RULES:
        history, body = FLAKY_RULE_BODIES[rule]
        if rule not in policy.evidence:
            yield RuleCheck(rule, False, (), "not in the policy's evidence")
            continue
        if history and len(evidence) < policy.min_runs:
            left = f" ({_plural(outages, 'outage run')} left out)" if outages else ""
            yield RuleCheck(
                rule,
                False,
                (),
                f"{_plural(len(evidence), 'evidence run')}{left}, "
                f"fewer than min_runs {policy.min_runs}",
            )
            continue
        hit = body(evidence, policy)
        if isinstance(hit, str):
            yield RuleCheck(rule, False, (), hit)
            continue
        yield RuleCheck(
            rule, True, _ids(hit.entries), f"{hit.summary} ({hit.label}{_runs_text(hit.entries)})"
        )


_SHARED_FIELDS = tuple(
    name for name in attrs.fields_dict(WindowEntry) if name in attrs.fields_dict(HistoryEntry)
)


def window_entry(entry: HistoryEntry) -> WindowEntry:
    """The ``WindowEntry`` of a ``HistoryEntry`` (``DataReader.history``): every field the
    two records share (run, outcome, commit, dirty flag, rerun failures, message, the run's
    counts, ...); the stored streak, which ``history`` does not return, stays None."""
    return WindowEntry(**{name: getattr(entry, name) for name in _SHARED_FIELDS})


def judge(
    window: Sequence[WindowEntry], policy: FlakyPolicy = DEFAULT_FLAKY_POLICY
) -> tuple[Classification, Evidence]:
    """Decide the verdict and its evidence for a window of executed entries, newest first,
    ``window[0]`` being the item now (the rules and table of ``Classification``), under
    ``policy`` (``FlakyPolicy``; the caller cuts the window to ``policy.window``).

    Flaky evidence anywhere in the window wins, by the precedence of ``FLAKY_RULES``
    (:func:`rule_checks`); otherwise the verdict follows the item now.
    """
    for check in rule_checks(window, policy):
        if check.matched:
            return Classification.FLAKY, Evidence(check.rule, check.run_ids, check.summary)
    now = window[0]
    size = len(window)
    streaks = _failing_streaks(window)
    if now.outcome in FAILING_OUTCOMES:
        if size == 1 or window[1].outcome not in FAILING_OUTCOMES:
            earlier = len(list(
                itertools.takewhile(lambda e: e.outcome not in FAILING_OUTCOMES, window[1:])
            ))
            summary = (
                "first recorded run of this test"
                if size == 1
                else f"first failure after {_plural(earlier, 'passing run')}"
            )
            return Classification.NEW_FAILURE, Evidence(
                EvidenceRule.FIRST_FAILURE, _ids(window[:1]), summary
            )
        streak = streak_of(now, window[1:])
        members = list(itertools.takewhile(lambda e: e.outcome in FAILING_OUTCOMES, window))
        return Classification.PERSISTENT_FAILURE, Evidence(
            EvidenceRule.FAILING_STREAK,
            _ids(members),
            f"failing since {_run_name(streak.since)}, {streak.length} runs in a row",
        )
    if size > 1 and window[1].outcome in FAILING_OUTCOMES:
        streak = streak_of(window[1], window[2:])
        members = [now, *itertools.takewhile(lambda e: e.outcome in FAILING_OUTCOMES, window[1:])]
        return Classification.RECOVERED, Evidence(
            EvidenceRule.FIXED,
            _ids(members),
            f"passed after failing {_plural(streak.length, 'run')} in a row "
            f"since {_run_name(streak.since)}",
        )
    if streaks == 0:
        summary = f"no failure in the last {_plural(size, 'run')}"
    else:
        passing = list(itertools.takewhile(lambda e: e.outcome not in FAILING_OUTCOMES, window))
        summary = f"passing {len(passing)} runs in a row since {_run_name(passing[-1].run_id)}"
    return Classification.STABLE, Evidence(EvidenceRule.NO_FAILURE, (), summary)


def classify(
    run_id: int, item: CaseHistory, policy: FlakyPolicy = DEFAULT_FLAKY_POLICY
) -> TestClassification:
    """Classify one item of run ``run_id`` (see ``Classification``): an item that did not
    execute is ``stable`` because ``not_executed``; otherwise :func:`judge` decides over
    its window under ``policy`` (``item.previous`` already cut by :func:`previous_window`)."""
    now = item.now
    if now.outcome not in EXECUTED_OUTCOMES:
        return TestClassification(
            item.nodeid,
            now.outcome,
            Classification.STABLE,
            tuple(e.outcome for e in item.previous),
            Evidence(
                EvidenceRule.NOT_EXECUTED,
                (),
                f"{now.outcome.value} in {_run_name(run_id)}, so not judged",
            ),
        )
    window = (now, *item.previous)
    verdict, because = judge(window, policy)
    return TestClassification(
        item.nodeid, now.outcome, verdict, tuple(e.outcome for e in window), because
    )


def previous_window(
    entries: Iterable[WindowEntry], run_id: int, policy: FlakyPolicy = DEFAULT_FLAKY_POLICY
) -> tuple[WindowEntry, ...]:
    """The previous entries of run ``run_id`` from history entries newest first: those of
    runs with a lower id or of pruned runs (None), at most ``policy.window - 1``."""
    wanted = policy.window - 1
    chosen: list[WindowEntry] = []
    if wanted < 1:
        return ()
    for entry in entries:
        if entry.run_id is None or entry.run_id < run_id:
            chosen.append(entry)
            if len(chosen) == wanted:
                break
    return tuple(chosen)


def flaky_entry(
    nodeid: str, entries: Sequence[WindowEntry], policy: FlakyPolicy = DEFAULT_FLAKY_POLICY
) -> FlakyTest | None:
    """A ``FlakyTest`` when the newest window of history entries (newest first, at most
    ``policy.window``) has flaky evidence under ``policy`` (:func:`judge`), else None."""
    window = tuple(entries[: policy.window])
    if not window:
        return None
    verdict, because = judge(window, policy)
    if verdict != Classification.FLAKY:
        return None
    outcomes = tuple(e.outcome for e in window)
    failures = sum(1 for o in outcomes if o in FAILING_OUTCOMES)
    last = window[0].run_id
    return FlakyTest(
        nodeid=nodeid,
        flips=flips_of(outcomes),
        failures=failures,
        passes=len(outcomes) - failures,
        window=outcomes,
        last_run_id=None if last is None else RunId(last),
        because=because,
    )


def sort_flaky(tests: Iterable[FlakyTest]) -> tuple[FlakyTest, ...]:
    """Most flips first, then by node id."""
    return tuple(sorted(tests, key=lambda t: (-t.flips, t.nodeid)))


def run_is_partial(status: RunStatus, selection: Selection, recorded: int | None = None) -> bool:
    """Whether a run may have left tests out: a narrowing selection, a run that is still
    running or ended early (``interrupted``, ``aborted``), or one that recorded fewer items
    (``recorded``) than pytest collected (a collection error that stopped the session, a
    crash of the runner)."""
    if recorded is not None and selection.collected is not None and recorded < (
        selection.collected
    ):
        return True
    return selection.is_partial or status in (
        RunStatus.RUNNING,
        RunStatus.INTERRUPTED,
        RunStatus.ABORTED,
    )


def compare_runs(
    run_a: RunId,
    run_b: RunId,
    a: Mapping[str, Outcome],
    b: Mapping[str, Outcome],
    b_partial: bool = False,
) -> RunComparison:
    """Compare two runs' items (node id -> outcome).

    ``newly_failing``: in both, failing in ``b`` and not in ``a``; ``fixed``: in both,
    failing in ``a`` and passed or xpassed in ``b``; ``added``: only in ``b``; only in
    ``a``: ``not_run`` when ``b_partial`` (:func:`run_is_partial`), else ``removed``. Each
    sorted.
    """
    both = a.keys() & b.keys()
    missing = tuple(sorted(a.keys() - b.keys()))
    return RunComparison(
        run_a=run_a,
        run_b=run_b,
        newly_failing=tuple(
            sorted(n for n in both if b[n] in FAILING_OUTCOMES and a[n] not in FAILING_OUTCOMES)
        ),
        fixed=tuple(
            sorted(n for n in both if a[n] in FAILING_OUTCOMES and b[n] in PASSING_OUTCOMES)
        ),
        added=tuple(sorted(b.keys() - a.keys())),
        removed=() if b_partial else missing,
        not_run=missing if b_partial else (),
    )


def counts_of(outcomes: Iterable[Outcome]) -> dict[str, int]:
    """Every outcome value mapped to how many of ``outcomes`` have it (zeros included)."""
    tally = Counter(outcomes)
    return {o.value: tally.get(o, 0) for o in OUTCOME_ORDER}


def subtest_counts(outcomes: Iterable[Outcome]) -> dict[str, int]:
    """``RunSummary.subtests``: subtest outcomes counted under pytest's words
    (:data:`SUBTEST_WORDS`), every key present."""
    tally = Counter(SUBTEST_WORDS[o] for o in outcomes)
    return {word: tally.get(word, 0) for word in ("passed", "failed", "skipped")}


def failing_phase(phases: Sequence[PhaseResult]) -> Phase:
    """The phase that made an item fail (for failures without a recorded error)."""
    for phase in phases:
        if phase.outcome in FAILING_OUTCOMES:
            return phase.phase
    return phases[0].phase if phases else Phase.CALL


def new_signatures(
    signatures: Iterable[str],
    first_seen: Mapping[str, int | None],
    earlier_running: AbstractSet[str],
    run_id: int,
) -> frozenset[str]:
    """Which of a run's failure ``signatures`` are new in run ``run_id``: recorded by no run
    of the project with a lower id.

    ``first_seen`` maps each signature the project's finished runs recorded to the lowest
    run id that recorded it (None once that run was pruned: counted as earlier);
    ``earlier_running`` holds the signatures stored by ``running`` runs of the project with
    a lower id. Interrupted and aborted runs record no signatures and do not count. The
    answer is frozen when the run ends (``FailureRecord.is_new``).
    """
    new: set[str] = set()
    for signature in signatures:
        if signature in earlier_running:
            continue
        if signature in first_seen:
            first = first_seen[signature]
            if first is None or first < run_id:
                continue
        new.add(signature)
    return frozenset(new)


# -- records both layers build the same way ---------------------------------------------------


def failure_record(
    nodeid: str,
    outcome: Outcome,
    phases: Sequence[PhaseResult],
    head: PreparedError | None,
    new: AbstractSet[str],
    streak: Streak,
) -> FailureRecord:
    """The ``FailureRecord`` of a failing item (or collection error) from its first error;
    ``is_new`` when its signature is in ``new``; ``streak`` as :func:`streak_of` found it,
    its first run already checked against pruning.

    Without a recorded error the phase is the failing phase, the texts are empty, the
    signature is ``""`` and ``is_new`` is False.
    """
    since = None if streak.since is None else RunId(streak.since)
    if head is None:
        return FailureRecord(
            nodeid=nodeid,
            outcome=outcome,
            phase=failing_phase(phases),
            exception_type="",
            message="",
            message_truncated=False,
            text="",
            text_truncated=False,
            frames=(),
            causes=(),
            signature="",
            is_new=False,
            streak=streak.length,
            failing_since=since,
            streak_message=streak.message,
        )
    return FailureRecord(
        nodeid=nodeid,
        outcome=outcome,
        phase=head.phase,
        exception_type=head.exception_type,
        message=head.message,
        message_truncated=head.message_truncated,
        text=head.text,
        text_truncated=head.text_truncated,
        frames=head.frames,
        causes=tuple(cause.as_info() for cause in head.causes),
        signature=head.signature,
        is_new=head.signature in new,
        streak=streak.length,
        failing_since=since,
        streak_message=streak.message,
    )


def sort_failures(records: Iterable[tuple[int, FailureRecord]]) -> tuple[FailureRecord, ...]:
    """Sort ``(kind, record)`` pairs by node id, collection errors (kind 0) before items
    (kind 1) on a tie."""
    return tuple(r for _, r in sorted(records, key=lambda kr: (kr[1].nodeid, kr[0])))


def coverage_percent(statements: int, missing: int, branches: int, missing_branches: int) -> float:
    """Covered share of statements and branches, 0-100 (``CoverageReport.percent_covered``)."""
    total = statements + branches
    if total == 0:
        return 100.0
    return 100.0 * (total - missing - missing_branches) / total


def rank_matches(nodeids: set[str] | Sequence[str], fragment: str, limit: int) -> tuple[str, ...]:
    """Node ids containing ``fragment``: an exact match first, then the rest sorted; at most
    ``limit``."""
    matches = sorted(n for n in nodeids if fragment in n)
    if fragment in matches:
        matches.remove(fragment)
        matches.insert(0, fragment)
    return tuple(matches[:limit])


def skip_reason_of(phases: Iterable[PhaseResult]) -> str | None:
    """An item's skip reason: that of its first phase with one (None without)."""
    return next((p.skip_reason for p in phases if p.skip_reason is not None), None)


def test_record(
    run_id: int,
    nodeid: str,
    module_path: str,
    name: str,
    parametrize_id: str | None,
    line: int | None,
    markers: tuple[str, ...],
    outcome: Outcome,
    duration_ms: float,
    phases: tuple[PhaseResult, ...],
    attempts: int,
    fingerprint: str | None,
) -> TestRecord:
    """The ``TestRecord`` of one stored item (``attempts``: how many earlier attempts it
    has; ``fingerprint``: its code fingerprint, None when unknown); its skip reason is
    :func:`skip_reason_of` its phases."""
    return TestRecord(
        run_id=RunId(run_id),
        nodeid=nodeid,
        module_path=module_path,
        name=name,
        parametrize_id=parametrize_id,
        line=line,
        markers=markers,
        outcome=outcome,
        duration_ms=duration_ms,
        phases=phases,
        attempts=attempts,
        skip_reason=skip_reason_of(phases),
        fingerprint=fingerprint,
    )


def coverage_report(run_id: int, source: int, files: Iterable[FileCoverage]) -> CoverageReport:
    """The ``CoverageReport`` of run ``run_id`` read from run ``source``, files by path."""
    return CoverageReport(RunId(run_id), RunId(source), tuple(sorted(files, key=lambda f: f.path)))


def coverage_trend(
    points: Sequence[tuple[int, int, int]], totals: Mapping[int, tuple[int, int, int, int]]
) -> tuple[CoverageTrendPoint, ...]:
    """``coverage_trend`` from its points newest first, ``(run id, started_at_ms, source
    run)``, and the totals of each source run ``(statements, missing statements, branches,
    missing branches)``: oldest first, each with :func:`coverage_percent`."""
    return tuple(
        CoverageTrendPoint(RunId(run_id), started, coverage_percent(*totals[source]))
        for run_id, started, source in reversed(points)
    )


# -- facts a backend loads, and the decisions over them -----------------------------------------

HISTORY_STATUSES = frozenset({RunStatus.PASSED, RunStatus.FAILED})
"""The final statuses whose runs enter history and the failure signatures (``finish_run``)."""


class RunFacts(NamedTuple):
    """What the rules need to know about one stored run: who it is, its status and selection,
    its commit and dirty flag, and the failure signatures new in it, frozen when it ended
    (None while it runs)."""

    id: int
    project: str
    invocation_id: str
    status: RunStatus
    selection: Selection
    git_commit: str | None
    git_dirty: bool | None
    new_signatures: frozenset[str] | None


def no_run(run_id: int) -> NotFound:
    """The ``NotFound`` of a run id no stored run has."""
    return NotFound("run", str(run_id))


def decide_exists(run_id: int, run: RunFacts | None) -> Result[RunFacts, NotFound]:
    """The stored run ``run_id`` (what the backend found, None: nothing), else ``NotFound``."""
    if run is None:
        return Failure(no_run(run_id))
    return Success(run)


def decide_running(
    run_id: int, run: RunFacts | None
) -> Result[RunFacts, NotFound | IllegalTransition]:
    """Whether run ``run_id`` takes writes (it is ``running``): ``NotFound`` without it,
    ``IllegalTransition("run", id, status, "running")`` once it has ended."""
    if run is None:
        return Failure(no_run(run_id))
    if run.status is not RunStatus.RUNNING:
        return Failure(
            IllegalTransition("run", str(run_id), run.status.value, RunStatus.RUNNING.value)
        )
    return Success(run)


def decide_finish(
    run_id: int, run: RunFacts | None, final: RunStatus
) -> Result[RunFacts, NotFound | IllegalTransition]:
    """Whether run ``run_id`` may move to ``final``: ``NotFound`` without it,
    ``IllegalTransition("run", id, status, final)`` when it is not ``running`` or ``final``
    is ``running``."""
    if run is None:
        return Failure(no_run(run_id))
    if run.status is not RunStatus.RUNNING or final is RunStatus.RUNNING:
        return Failure(IllegalTransition("run", str(run_id), run.status.value, final.value))
    return Success(run)


def check_batch(
    run_id: object, items: object, prepare: Callable[[object], Result[T, InvalidInput]]
) -> Result[tuple[RunId, T], InvalidInput]:
    """Check a write's run id, then its ``items`` with ``prepare`` (``prepare_results``,
    ``prepare_collection_errors``, ``prepare_selection``, ``prepare_coverage``)."""
    checked = valid_run_id(run_id)
    if isinstance(checked, Failure):
        return Failure(checked.failure())
    prepared = prepare(items)
    if isinstance(prepared, Failure):
        return Failure(prepared.failure())
    return Success((checked.unwrap(), prepared.unwrap()))


def streak_at(run_id: int, message: str | None, history: Iterable[WindowEntry]) -> Streak:
    """The failing streak a failing item of run ``run_id`` (first error ``message``) ends,
    over its history entries newest first (:func:`previous_window` picks those before it)."""
    now = WindowEntry(run_id, Outcome.FAILED, message=message)
    return streak_of(now, previous_window(history, run_id))


class SignatureTally(NamedTuple):
    """A run's count of one failure signature, with what the signature table keeps of it."""

    exception_type: str
    message: str
    """The normalized message (:func:`normalize_message`)."""
    frame: str
    occurrences: int


def tally_signatures(heads: Iterable[tuple[str, str, str, str]]) -> dict[str, SignatureTally]:
    """Count a finished run's failure signatures from its first errors ``(signature,
    exception type, message, failing frame)``, in order of first appearance."""
    tally: dict[str, SignatureTally] = {}
    for signature, exception_type, message, frame in heads:
        seen = tally.get(signature)
        tally[signature] = (
            SignatureTally(exception_type, normalize_message(message), frame, 1)
            if seen is None
            else seen._replace(occurrences=seen.occurrences + 1)
        )
    return tally


class FailingItem(NamedTuple):
    """A failing item of a run as ``failures`` reads it: its first error (None when it was
    stored without one) and its history entries newest first."""

    nodeid: str
    outcome: Outcome
    phases: tuple[PhaseResult, ...]
    head: PreparedError | None
    history: Sequence[WindowEntry]


def failing_streaks(run_id: int, items: Sequence[FailingItem]) -> list[Streak]:
    """The streak each failing item of run ``run_id`` ends (:func:`streak_at`)."""
    return [
        streak_at(run_id, None if item.head is None else item.head.message, item.history)
        for item in items
    ]


def decide_failures(
    run_id: int,
    items: Sequence[FailingItem],
    streaks: Sequence[Streak],
    alive: AbstractSet[int],
    collection: Iterable[tuple[str, PreparedError | None]],
    new: AbstractSet[str],
) -> tuple[FailureRecord, ...]:
    """``failures`` of run ``run_id``: each failing item with its streak (whose first run is
    None unless ``alive`` holds it, the stored runs among the streaks' first runs), each
    collection error ``(node id, first error)`` as a streak of one; ``is_new`` when the
    signature is in ``new``; sorted (:func:`sort_failures`)."""
    records: list[tuple[int, FailureRecord]] = []
    for item, streak in zip(items, streaks, strict=True):
        since = streak.since
        if since is not None and since != run_id and since not in alive:
            streak = attrs.evolve(streak, since=None)
        records.append(
            (1, failure_record(item.nodeid, item.outcome, item.phases, item.head, new, streak))
        )
    for nodeid, head in collection:
        alone = Streak(1, run_id, "" if head is None else head.message)
        records.append((0, failure_record(nodeid, Outcome.ERROR, (), head, new, alone)))
    return sort_failures(records)


class ItemNow(NamedTuple):
    """An item of a run as ``classify`` reads it: its outcome, its failed earlier attempts
    and its history entries newest first."""

    nodeid: str
    outcome: Outcome
    rerun_failures: int
    history: Sequence[WindowEntry]
    fingerprint: str | None = None
    earlier_passes: int = 0


def classify_run(
    run: RunFacts,
    items: Iterable[ItemNow],
    policy: FlakyPolicy = DEFAULT_FLAKY_POLICY,
    share: tuple[int, int] | None = None,
) -> tuple[TestClassification, ...]:
    """``classify`` of a run under ``policy``: each item now (with the run's commit and dirty
    flag, and ``share``, its executed and failing item counts now, :func:`run_share`) against
    the previous window of its history (:func:`classify`), sorted by node id."""
    executed, failing = (None, None) if share is None else share
    return tuple(
        classify(
            run.id,
            CaseHistory(
                item.nodeid,
                WindowEntry(
                    run.id,
                    item.outcome,
                    git_commit=run.git_commit,
                    git_dirty=run.git_dirty,
                    rerun_failures=item.rerun_failures,
                    run_executed=executed,
                    run_failing=failing,
                    fingerprint=item.fingerprint,
                    earlier_passes=item.earlier_passes,
                ),
                previous_window(item.history, run.id, policy),
            ),
            policy,
        )
        for item in sorted(items, key=lambda i: i.nodeid)
    )


def flaky_of(
    histories: Iterable[tuple[str, Sequence[WindowEntry]]],
    policy: FlakyPolicy = DEFAULT_FLAKY_POLICY,
) -> tuple[FlakyTest, ...]:
    """``flaky_tests`` from each test's history entries newest first (:func:`flaky_entry`
    under ``policy``), most flips first (:func:`sort_flaky`)."""
    found = (flaky_entry(nodeid, entries, policy) for nodeid, entries in histories)
    return sort_flaky(f for f in found if f is not None)


def decide_history(
    nodeid: str, entries: tuple[HistoryEntry, ...]
) -> Result[tuple[HistoryEntry, ...], NotFound]:
    """``history`` of a test from its stored entries, ``NotFound("test", nodeid)`` without."""
    if not entries:
        return Failure(NotFound("test", nodeid))
    return Success(entries)


def compare_facts(
    a: RunFacts, b: RunFacts, outcomes_a: Mapping[str, Outcome], outcomes_b: Mapping[str, Outcome]
) -> RunComparison:
    """``compare`` of two stored runs from their items' outcomes (:func:`compare_runs`),
    ``b`` partial by :func:`run_is_partial`."""
    partial = run_is_partial(b.status, b.selection, len(outcomes_b))
    return compare_runs(RunId(a.id), RunId(b.id), outcomes_a, outcomes_b, partial)


def history_entry(
    run_id: int | None,
    outcome: Outcome,
    duration_ms: float,
    recorded_at_ms: int,
    message: str | None,
    git_commit: str | None,
    git_dirty: bool | None,
    rerun_failures: int,
    run_executed: int | None = None,
    run_failing: int | None = None,
    fingerprint: str | None = None,
    earlier_passes: int = 0,
) -> HistoryEntry:
    """The ``HistoryEntry`` of one stored history row (``run_id`` None once pruned)."""
    return HistoryEntry(
        run_id=None if run_id is None else RunId(run_id),
        outcome=outcome,
        duration_ms=duration_ms,
        recorded_at_ms=recorded_at_ms,
        message=message,
        git_commit=git_commit,
        git_dirty=git_dirty,
        rerun_failures=rerun_failures,
        run_executed=run_executed,
        run_failing=run_failing,
        fingerprint=fingerprint,
        earlier_passes=earlier_passes,
    )


# -- per-test coverage (``write_test_coverage``, ``tests_for``) -------------------------------


@attrs.frozen
class PreparedTestCoverage:
    """Validated per-test coverage of one run: rows sorted by (path, node id), each with its
    lines sorted and unique."""

    rows: tuple[TestLines, ...]

    def paths(self) -> list[str]:
        """The distinct file paths of the rows, sorted."""
        return sorted({row.path for row in self.rows})

    def nodeids(self) -> list[str]:
        """The distinct node ids of the rows, sorted."""
        return sorted({row.nodeid for row in self.rows})


@attrs.frozen
class TestsForQuery:
    """Checked arguments of ``tests_for``."""

    __test__ = False  # not a pytest test class

    project: str
    path: str
    line: int | None
    runs: int
    limit: int


_JUST_INT = {int}


def _covered_lines(value: object, field: str) -> tuple[int, ...]:
    """Sorted unique line numbers of ``value``; the common case (a tuple or list of plain
    ints in range) is checked without a call per line."""
    lines = _sequence(value, field)
    if not lines:
        invalid(field, "must not be empty")
    if set(map(type, lines)) == _JUST_INT:
        ordered = tuple(sorted(set(lines)))
        if ordered[0] >= 1 and ordered[-1] <= MAX_SAFE_INT:
            return ordered
    return tuple(sorted({_line_number(n, f"{field}[{j}]") for j, n in enumerate(lines)}))


def _test_coverage(tests: object) -> PreparedTestCoverage:
    items = _sequence(tests, "tests")
    names: dict[object, str] = {}  # one check per distinct node id or path
    seen: set[tuple[str, str]] = set()
    prepared: list[TestLines] = []
    for i, item in enumerate(items):
        field = f"tests[{i}]"
        if type(item) is not TestLines and not isinstance(item, TestLines):
            invalid(field, f"must be a TestLines, got {_type_name(item)}")
        nodeid = names.get(item.nodeid) if type(item.nodeid) is str else None
        if nodeid is None:
            nodeid = names[item.nodeid] = valid_identifier(item.nodeid, f"{field}.nodeid")
        path = names.get(item.path) if type(item.path) is str else None
        if path is None:
            path = names[item.path] = valid_identifier(item.path, f"{field}.path")
        key = (nodeid, path)
        if key in seen:
            invalid(field, f"repeats test {nodeid!r} in file {path!r}")
        seen.add(key)
        lines = _covered_lines(item.lines, f"{field}.lines")
        unchanged = (type(item) is TestLines and lines == item.lines
                     and nodeid is item.nodeid and path is item.path)
        prepared.append(item if unchanged else TestLines(nodeid, path, lines))
    prepared.sort(key=attrgetter("path", "nodeid"))
    return PreparedTestCoverage(tuple(prepared))


def prepare_test_coverage(tests: object) -> Result[PreparedTestCoverage, InvalidInput]:
    """Validate the rows of ``write_test_coverage``: each a ``TestLines`` with an identifier
    node id and path, a non-empty sequence of ``int`` line numbers in ``1..MAX_SAFE_INT``,
    each ``(node id, path)`` at most once. ``InvalidInput`` naming the field otherwise."""
    return _guard(_test_coverage, tests)


def _tests_for_query(
    project: object, path: object, line: object, runs: object, limit: object
) -> TestsForQuery:
    name = _must(valid_project(project))
    wanted = _must(valid_project(path, "path"))
    if not wanted:
        invalid("path", "must not be empty")
    at = _line(line, "line")
    window = _must(check_limit(runs, field="runs"))  # type: ignore[arg-type]
    return TestsForQuery(name, wanted, at, window, _must(valid_limit(limit)))


def check_tests_for(
    project: object, path: object, line: object, runs: object, limit: object
) -> Result[TestsForQuery, InvalidInput]:
    """Check the arguments of ``tests_for``, in order: project and path (lookups: ``str``
    without lone surrogates; the path not empty), ``line`` (None or an ``int`` in
    ``1..MAX_SAFE_INT``), ``runs`` and ``limit`` (``1..1000``, the page-limit rule)."""
    return _guard(_tests_for_query, project, path, line, runs, limit)


def decide_tests_for(
    query: TestsForQuery,
    run_ids: Sequence[int],
    rows: Iterable[tuple[int, str, Sequence[int] | None]],
) -> Result[TestsFor, NotFound]:
    """The ``tests_for`` answer from the runs read (newest first) and their ``(run id, node
    id, lines)`` rows: ``lines`` of the file, or None where the test ran in that run (an item
    not skipped, or lines of another file) without executing the file. Each test is judged
    by the newest run in which it ran: listed when that run's lines of the file hold
    ``query.line`` (any lines without a line), newest run first, then by node id, at most
    ``query.limit``; a test whose newest run executed nothing of the file is not listed,
    whatever an older run shows. ``NotFound("test_coverage", project)`` without runs."""
    if not run_ids:
        return Failure(NotFound("test_coverage", query.project))
    rank = {run_id: i for i, run_id in enumerate(run_ids)}
    newest: dict[str, tuple[int, int, Sequence[int] | None]] = {}
    for run_id, nodeid, lines in rows:
        order = rank[run_id]
        known = newest.get(nodeid)
        if known is None or order < known[0] or (order == known[0] and lines is not None):
            newest[nodeid] = (order, run_id, lines)
    line = query.line
    hits = sorted(
        (order, nodeid, run_id, lines)
        for nodeid, (order, run_id, lines) in newest.items()
        if lines is not None and (line is None or _holds(lines, line))
    )
    tests = tuple(
        CoveringTest(nodeid, RunId(run_id), tuple(lines))
        for _, nodeid, run_id, lines in hits[: query.limit]
    )
    return Success(
        TestsFor(
            project=query.project,
            path=query.path,
            line=line,
            runs=tuple(RunId(i) for i in run_ids),
            tests=tests,
            has_more=len(hits) > query.limit,
        )
    )


def _holds(lines: Sequence[int], line: int) -> bool:
    """Whether the sorted ``lines`` hold ``line`` (a binary search)."""
    at = bisect.bisect_left(lines, line)
    return at < len(lines) and lines[at] == line


# -- run links: changed files and the agent session ------------------------------------------

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
"""Unicode's control characters (category ``Cc``): C0, DEL and C1."""


_STATUS_CODES = frozenset(
    x + y for x in CHANGED_FILE_STATUS_CODES for y in CHANGED_FILE_STATUS_CODES
)
"""Every two-letter status a ``ChangedFile`` may have."""


def _changed_files(value: Environment) -> dict[str, Any]:
    """The ``git_changed_files`` fields of a validated environment: each path an identifier
    given once, each status two porcelain letters; cut at ``MAX_CHANGED_FILES`` (marked
    truncated); truncated without files refused."""
    given, truncated = value.git_changed_files, value.git_changed_files_truncated
    field = "start.environment.git_changed_files"
    flag = _flag(truncated, f"{field}_truncated")
    if given is None:
        if flag:
            invalid(f"{field}_truncated", "must be False when git_changed_files is None")
        return {"git_changed_files": None, "git_changed_files_truncated": False}
    items = _sequence(given, field)
    kept: list[ChangedFile] = []
    seen: set[str] = set()
    for i, item in enumerate(items):
        if type(item) is not ChangedFile and not isinstance(item, ChangedFile):
            invalid(f"{field}[{i}]", f"must be a ChangedFile, got {_type_name(item)}")
        path = item.path
        if not (type(path) is str and path.isascii() and path and "\x00" not in path):
            path = valid_identifier(path, f"{field}[{i}].path")  # the slow, general check
        status = item.status
        if type(status) is not str or status not in _STATUS_CODES:
            invalid(f"{field}[{i}].status",
                    f"must be two porcelain status letters, got {describe(status)}")
        if path in seen:
            invalid(f"{field}[{i}].path", f"{path!r} is given twice")
        seen.add(path)
        if len(kept) < MAX_CHANGED_FILES:
            kept.append(ChangedFile(path, status))
    return {
        "git_changed_files": tuple(kept),
        "git_changed_files_truncated": flag or len(items) > MAX_CHANGED_FILES,
    }


def check_known(
    project: object, nodeids: object
) -> Result[tuple[str, tuple[str, ...]], InvalidInput]:
    """Check the arguments of ``known_tests``: the project (:func:`valid_project`), then the
    node ids (any iterable but a ``str``, of ``str`` only); those to look up deduplicated in
    their order, without the ones no write could store (NUL, a lone surrogate)."""
    name = valid_project(project)
    if isinstance(name, Failure):
        return Failure(name.failure())
    if isinstance(nodeids, str | bytes) or not isinstance(nodeids, Iterable):
        return Failure(InvalidInput("nodeids", f"must be node ids, got {_type_name(nodeids)}"))
    given = list(nodeids)
    for index, nodeid in enumerate(given):
        if not isinstance(nodeid, str):
            return Failure(InvalidInput(f"nodeids[{index}]",
                                        f"must be a str, got {_type_name(nodeid)}"))
    storable = (n for n in given if "\x00" not in n and (n.isascii() or _encodes(n)))
    return Success((name.unwrap(), tuple(dict.fromkeys(storable))))


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_cells(
    run_ids: object, nodeids: object, outcomes: object
) -> Result[
    tuple[tuple[RunId, ...], tuple[str, ...] | None, frozenset[Outcome] | None], InvalidInput
]:
    """Check the arguments of ``run_cells``: the run ids (any iterable but a ``str``, of run
    ids only, :func:`valid_run_id`; at most ``MAX_CELL_RUNS`` distinct), the node ids (None,
    or as :func:`check_known` checks them), then the outcomes (:func:`valid_outcomes`); the
    run ids to read deduplicated and ascending, the node ids deduplicated without those no
    write could store."""
    if isinstance(run_ids, str | bytes) or not isinstance(run_ids, Iterable):
        return Failure(InvalidInput("run_ids", f"must be run ids, got {_type_name(run_ids)}"))
    wanted: set[RunId] = set()
    for index, run_id in enumerate(run_ids):
        checked = valid_run_id(run_id, f"run_ids[{index}]")
        if isinstance(checked, Failure):
            return Failure(checked.failure())
        wanted.add(checked.unwrap())
    if len(wanted) > MAX_CELL_RUNS:
        return Failure(InvalidInput(
            "run_ids", f"must name at most {MAX_CELL_RUNS} runs, got {len(wanted)}"
        ))
    tests: tuple[str, ...] | None = None
    if nodeids is not None:
        known = check_known("", nodeids)
        if isinstance(known, Failure):
            return Failure(known.failure())
        tests = known.unwrap()[1]
    return valid_outcomes(outcomes).map(lambda only: (tuple(sorted(wanted)), tests, only))


def session_id_problem(value: object, field: str = "start.session_id") -> InvalidInput | None:
    """Why ``value`` cannot name a run's agent session, or None when it can: it must be a
    ``str`` of 1 to ``MAX_SESSION_ID_CHARS`` characters, not blank (white space only, as
    ``str.strip`` sees it: no query could name it), without a lone surrogate or a control
    character (category ``Cc``: NUL, tab, newline, escape, DEL, C1). The one rule for a
    recorded id (``RunStart.session_id``), the plugin's and the CLI's ``--session``."""
    checked = check_text(value, field, max_chars=MAX_SESSION_ID_CHARS)
    if isinstance(checked, Failure):
        refused: InvalidInput = checked.failure()
        return refused
    if not checked.unwrap().strip():
        return InvalidInput(field, "must not be blank")
    control = _CONTROL.search(checked.unwrap())
    if control is not None:
        return InvalidInput(
            field, f"must not hold a control character, found U+{ord(control.group()):04X}"
        )
    return None


def _session_id(value: object) -> str | None:
    if value is None:
        return None
    problem = session_id_problem(value)
    if problem is not None:
        raise _Invalid(problem)
    return _must(check_text(value, "start.session_id", max_chars=MAX_SESSION_ID_CHARS))
