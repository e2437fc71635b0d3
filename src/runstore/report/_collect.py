"""Collect a :class:`ReportData` from a ``DataReader``: what ``runstore report`` draws.

:func:`collect_report` reads through the public ``DataReader`` methods only, so every layer
(memory, SQLite, PostgreSQL, a third party's) gives the same report. Each read is its own
snapshot: a report of a project whose runs are still being written may show parts of
different moments; a finished project's report is the same on every call (``generated_at_ms``
aside). The rules it adds (which rows lead the matrix, what each cap keeps) are in the
docstrings of :mod:`runstore.report._model`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence

import attrs
from returns.result import Failure, Result, Success

import runstore
from runstore.report._model import (
    DEFAULT_REPORT_CAPS,
    DEFAULT_REPORT_RUNS,
    MAX_REPORT_FRAMES,
    MAX_REPORT_MESSAGE_CHARS,
    MAX_REPORT_RUNS,
    MAX_REPORT_TEXT_CHARS,
    MAX_STRIP_RUNS,
    FailingTest,
    HistoryStrip,
    MatrixCell,
    MatrixRow,
    ReportCaps,
    ReportData,
    RunPoint,
    SignatureGroup,
    SlowTest,
    StripEntry,
)
from runstore.services._compose import composed, stop, value
from runstore.services._primitives import check_int
from runstore.services._test_runs_rules import (
    EXECUTED_OUTCOMES,
    check_flaky_policy,
    valid_project,
)
from runstore.services.errors import InvalidInput, NotFound
from runstore.services.pagination import MAX_PAGE_SIZE
from runstore.services.test_runs import (
    DEFAULT_FLAKY_POLICY,
    FAILING_OUTCOMES,
    Classification,
    DataReader,
    DataReaderError,
    Evidence,
    EvidenceRule,
    FailureRecord,
    FailureSignature,
    FlakyPolicy,
    Outcome,
    Phase,
    RunId,
    RunSummary,
    TestCell,
    TestClassification,
)

__all__ = ["collect_report"]

Progress = Callable[[int, int], None]
"""Told ``(done, total)`` after each step of a collection (``total`` is fixed per call)."""

_STEPS = 7
"""The steps :func:`collect_report` reports: the runs, their failing items, the verdicts,
the matrix, the signatures, coverage and the slowest, the failing tests."""

_FAILING_NOW = frozenset({Classification.NEW_FAILURE, Classification.PERSISTENT_FAILURE})

_RANKS = {Classification.FLAKY: 1, Classification.RECOVERED: 2}
"""A matrix row's place after the tests failing now (0): flaky, recovered; then 3 for tests
with a failing cell and 4 for the rest."""


def collect_report(
    reader: DataReader,
    project: str,
    *,
    runs: int = DEFAULT_REPORT_RUNS,
    policy: FlakyPolicy = DEFAULT_FLAKY_POLICY,
    now_ms: int | None = None,
    progress: Progress | None = None,
    caps: ReportCaps = DEFAULT_REPORT_CAPS,
) -> Result[ReportData, DataReaderError]:
    """Read the report of ``project``'s newest ``runs`` runs (1 to ``MAX_REPORT_RUNS``) from
    ``reader``, its verdicts judged under ``policy``, each section cut by ``caps`` (see
    :class:`ReportData` for what each section holds and its order).

    ``now_ms`` (epoch ms, >= 0) is the report's ``generated_at_ms``, the clock's time when
    None. ``progress(done, total)``, when given, is called after each step, ``done`` from 1
    to ``total``.

    Failures: ``InvalidInput`` (checked first, nothing read) for a project that is not a
    ``str`` or holds a lone surrogate, ``runs`` outside ``1..MAX_REPORT_RUNS``, a policy out
    of its ranges (``policy.<field>``), a ``now_ms`` that is not an ``int >= 0`` or None, a
    ``progress`` that is not callable or None, caps that are not a ``ReportCaps`` of ints in
    ``1..1000`` (``caps.<field>``); ``NotFound("project", project)`` when the project has no
    run; ``Busy`` and ``StorageFailure`` from the reader.
    """
    checked = _check(project, runs, policy, now_ms, progress, caps)
    if isinstance(checked, Failure):
        return Failure(checked.failure())
    name, count, chosen, generated = checked.unwrap()
    tell: Progress = progress if progress is not None else _silent
    return composed(lambda: _Collector(reader, name, chosen, caps, tell).collect(count, generated))


def _silent(done: int, total: int) -> None:
    """The progress of a caller that asked for none."""


def _check(
    project: object,
    runs: object,
    policy: object,
    now_ms: object,
    progress: object,
    caps: object,
) -> Result[tuple[str, int, FlakyPolicy, int], InvalidInput]:
    """The checked arguments (project, run count, policy, the report's epoch ms), or the
    first refusal in argument order."""
    name = valid_project(project)
    if isinstance(name, Failure):
        return Failure(name.failure())
    count = check_int(runs, "runs", minimum=1, maximum=MAX_REPORT_RUNS)
    if isinstance(count, Failure):
        return Failure(count.failure())
    chosen = check_flaky_policy(policy)
    if isinstance(chosen, Failure):
        return Failure(chosen.failure())
    generated = (
        Success(int(time.time() * 1000)) if now_ms is None
        else check_int(now_ms, "now_ms", minimum=0)
    )
    if isinstance(generated, Failure):
        return Failure(generated.failure())
    if progress is not None and not callable(progress):
        return Failure(InvalidInput("progress", "must be callable or None"))
    refused = _check_caps(caps)
    if refused is not None:
        return Failure(refused)
    return Success((name.unwrap(), count.unwrap(), chosen.unwrap(), generated.unwrap()))


def _check_caps(caps: object) -> InvalidInput | None:
    """Why ``caps`` is no ``ReportCaps`` of ints in ``1..MAX_PAGE_SIZE``, or None."""
    if not isinstance(caps, ReportCaps):
        return InvalidInput("caps", f"must be a ReportCaps, got {type(caps).__name__}")
    for field in attrs.fields(ReportCaps):
        checked: Result[int, InvalidInput] = check_int(
            getattr(caps, field.name), f"caps.{field.name}", minimum=1, maximum=MAX_PAGE_SIZE
        )
        if isinstance(checked, Failure):
            refusal: InvalidInput = checked.failure()
            return refusal
    return None


class _Collector:
    """One collection: the reader, the project, the policy and caps, and the steps done."""

    def __init__(
        self, reader: DataReader, project: str, policy: FlakyPolicy, caps: ReportCaps,
        progress: Progress,
    ) -> None:
        self.reader = reader
        self.project = project
        self.policy = policy
        self.caps = caps
        self.progress = progress
        self.done = 0

    def step(self) -> None:
        self.done += 1
        self.progress(self.done, _STEPS)

    def collect(self, count: int, generated_at_ms: int) -> ReportData:
        caps = self.caps
        summaries = self.summaries(count)
        covered = self.coverage_trend(count)
        self.step()
        newest = summaries[-1]
        collection = {
            run.id: value(self.reader.failures(run.id)) for run in summaries
            if run.collection_errors or (run.id == newest.id and _has_failing(run))
        }
        failing_items = value(self.reader.run_cells(
            [r.id for r in summaries if _has_failing(r)], outcomes=FAILING_OUTCOMES
        ))
        failing = _failing_by_run(summaries, failing_items, collection)
        self.step()
        matrix_runs = tuple(r.id for r in summaries[-caps.matrix_runs:])
        verdicts = {
            v.nodeid: v
            for v in value(self.reader.classify_unstable(newest.id, policy=self.policy))
        }
        self.step()
        rows, rows_omitted = self.matrix(newest.id, matrix_runs, failing_items, verdicts)
        self.step()
        signatures, signatures_omitted = self.signatures(failing, collection)
        self.step()
        coverage_run = next((r.id for r in reversed(summaries) if r.id in covered), None)
        files = () if coverage_run is None else tuple(sorted(
            value(self.reader.coverage(coverage_run)).files,
            key=lambda f: (f.percent_covered, f.path),
        ))
        # a skipped item ran no test body, however long its skip took: ask for as many more
        # as the run skipped, so they never take an executed item's place
        skipped = newest.counts.get(Outcome.SKIPPED, 0)
        slowest = tuple(
            t for t in value(self.reader.slowest(newest.id, limit=caps.slowest + skipped))
            if t.outcome is not Outcome.SKIPPED
        )[: caps.slowest]
        failures_now = collection.get(newest.id, ())
        sections = failures_now[: caps.failing]
        strips = self.strips(summaries[-MAX_STRIP_RUNS:], [
            *(r.nodeid for r in sections if r.phase is not Phase.COLLECT),
            *(t.nodeid for t in slowest),
        ])
        self.step()
        failing_tests = tuple(
            self.failing_test(record, verdicts.get(record.nodeid), strips)
            for record in sections
        )
        self.step()
        return ReportData(
            project=self.project,
            generated_at_ms=generated_at_ms,
            runstore_version=runstore.__version__,
            runs=tuple(self.point(run, covered.get(run.id), failing[run.id]) for run in summaries),
            matrix_run_ids=matrix_runs,
            matrix=tuple(rows),
            matrix_omitted=rows_omitted,
            signatures=signatures,
            slowest=tuple(
                SlowTest(t.nodeid, t.duration_ms,
                         tuple(e.duration_ms for e in strips.get(t.nodeid, ())), t.outcome)
                for t in slowest
            ),
            coverage_run_id=coverage_run,
            coverage_files=files[: caps.coverage_files],
            failing_tests=failing_tests,
            failing_omitted=max(0, len(failures_now) - caps.failing),
            failing_cap=caps.failing,
            matrix_runs_cap=caps.matrix_runs,
            matrix_rows_cap=caps.matrix_rows,
            signatures_omitted=signatures_omitted,
            coverage_files_omitted=max(0, len(files) - caps.coverage_files),
            run_failing_cap=caps.run_failing,
            signatures_cap=caps.signatures,
            slowest_cap=caps.slowest,
            coverage_files_cap=caps.coverage_files,
            policy_window=self.policy.window,
        )

    # -- reads ------------------------------------------------------------------------------

    def summaries(self, count: int) -> list[RunSummary]:
        """The newest ``count`` runs, oldest first; ``NotFound`` for a project without runs."""
        newest: list[RunSummary] = []
        cursor: str | None = None
        while len(newest) < count:
            page = value(self.reader.list_runs(
                self.project, limit=min(MAX_PAGE_SIZE, count - len(newest)), cursor=cursor
            ))
            newest.extend(page.items)
            if not page.has_more:
                break
            cursor = page.next_cursor
        if not newest:
            stop(NotFound("project", self.project))
        return newest[::-1]

    def coverage_trend(self, count: int) -> dict[RunId, float]:
        return {
            p.run_id: p.percent_covered
            for p in value(self.reader.coverage_trend(self.project, limit=count))
        }

    def matrix(
        self,
        newest: RunId,
        run_ids: Sequence[RunId],
        failing: Sequence[TestCell],
        verdicts: dict[str, TestClassification],
    ) -> tuple[list[MatrixRow], int]:
        """The first ``caps.matrix_rows`` rows of the matrix in the report's order (see
        ``ReportData.matrix``) and how many more there are. The rows are chosen from the
        newest run's cells and the failing items of the reported runs (``failing``); then
        the cells of the chosen rows alone are read, in one read."""
        held = {c.nodeid: c.outcome for c in value(self.reader.run_cells([newest]))}
        failing_cells: dict[str, int] = dict.fromkeys(held, 0)
        columns = set(run_ids)
        for cell in failing:
            if cell.run_id in columns:
                failing_cells[cell.nodeid] = failing_cells.get(cell.nodeid, 0) + 1
        flaky = {} if len(held) == len(failing_cells) else {
            f.nodeid: f.because
            for f in value(self.reader.flaky_tests(self.project, policy=self.policy))
        }
        judged: list[tuple[int, int, str, Classification | None, Evidence | None]] = []
        for nodeid, count in failing_cells.items():
            classification, evidence = _verdict(nodeid, verdicts, held, flaky)
            judged.append((_rank(classification, count), -count, nodeid, classification,
                           evidence))
        judged.sort(key=lambda j: j[:3])
        kept = judged[: self.caps.matrix_rows]
        column = {run_id: i for i, run_id in enumerate(run_ids)}
        lines: dict[str, list[MatrixCell | None]] = {
            j[2]: [None] * len(run_ids) for j in kept
        }
        for cell in value(self.reader.run_cells(run_ids, nodeids=list(lines))) if kept else ():
            lines[cell.nodeid][column[cell.run_id]] = MatrixCell(
                cell.outcome, cell.duration_ms, cell.attempts + 1
            )
        rows = [
            MatrixRow(
                nodeid=nodeid,
                classification=classification,
                rule=None if evidence is None else evidence.rule,
                because="" if evidence is None else evidence.summary,
                cells=tuple(lines[nodeid]),
                because_run_ids=() if evidence is None else evidence.run_ids,
                failing_cells=-count,
            )
            for _, count, nodeid, classification, evidence in kept
        ]
        return rows, len(judged) - len(kept)

    def signatures(
        self,
        failing: dict[RunId, list[tuple[str, str]]],
        read: dict[RunId, tuple[FailureRecord, ...]],
    ) -> tuple[tuple[SignatureGroup, ...], int]:
        """The newest ``caps.signatures`` signature groups and how many older ones there are;
        ``failing`` is each reported run's ``(node id, signature)`` of its failing items,
        ``read`` the failure records of the runs already read (each group's example comes
        from there, or from one more read of the newest run that failed with it)."""
        wanted = self.caps.signatures
        kept: list[FailureSignature] = []
        omitted = 0
        cursor: str | None = None
        while True:
            page = value(self.reader.failure_signatures(
                self.project, limit=MAX_PAGE_SIZE, cursor=cursor
            ))
            room = max(0, wanted - len(kept))
            kept.extend(page.items[:room])
            omitted += max(0, len(page.items) - room)
            if not page.has_more:
                break
            cursor = page.next_cursor
        tests: dict[str, set[str]] = {}
        newest_run: dict[str, RunId] = {}
        for run_id, pairs in sorted(failing.items()):
            for nodeid, hashed in pairs:
                if hashed:
                    tests.setdefault(hashed, set()).add(nodeid)
                    newest_run[hashed] = run_id
        read = dict(read)
        cap = self.caps.run_failing
        groups = []
        for found in kept:
            nodeids = sorted(tests.get(found.signature, ()))
            example = ""
            if _says_nothing(found.exception_type, found.message):
                example = self.example(found.signature, newest_run.get(found.signature), read)
            groups.append(SignatureGroup(found, tuple(nodeids[:cap]), max(0, len(nodeids) - cap),
                                         example))
        return tuple(groups), omitted

    def example(self, signature: str, run_id: RunId | None,
                read: dict[RunId, tuple[FailureRecord, ...]]) -> str:
        """A stored message of a failure with ``signature``: from the records in ``read``,
        else from those of ``run_id`` (read once, kept in ``read``); ``""`` without one."""
        if run_id is not None and run_id not in read:
            read[run_id] = value(self.reader.failures(run_id))
        ordered = sorted(read.items(), reverse=True)  # the newest run first
        return next((r.message[:MAX_REPORT_MESSAGE_CHARS] for _, records in ordered
                     for r in records if r.signature == signature and r.message), "")

    def strips(self, runs: Sequence[RunSummary], nodeids: Sequence[str]) -> dict[
        str, HistoryStrip
    ]:
        """The strip of each of ``nodeids`` over ``runs`` (oldest first), in one read."""
        if not nodeids:
            return {}
        ended = {r.id: r.started_at_ms if r.finished_at_ms is None else r.finished_at_ms
                 for r in runs}
        strips: dict[str, list[StripEntry]] = {}
        for cell in value(self.reader.run_cells(list(ended), nodeids=nodeids)):
            strips.setdefault(cell.nodeid, []).append(
                StripEntry(cell.run_id, cell.outcome, cell.duration_ms, ended[cell.run_id])
            )
        order = {run_id: i for i, run_id in enumerate(ended)}
        return {
            nodeid: tuple(sorted(entries, key=lambda e: order[e.run_id]))  # type: ignore[index]
            for nodeid, entries in strips.items()
        }

    # -- records ----------------------------------------------------------------------------

    def point(
        self, run: RunSummary, covered: float | None, failing: Sequence[tuple[str, str]]
    ) -> RunPoint:
        nodeids = sorted({nodeid for nodeid, _ in failing})
        cap = self.caps.run_failing
        return RunPoint(
            run_id=run.id,
            started_at_ms=run.started_at_ms,
            duration_ms=(
                None if run.finished_at_ms is None
                else float(run.finished_at_ms - run.started_at_ms)
            ),
            status=run.status,
            counts={o.value: run.counts.get(o.value, 0) for o in Outcome},
            collection_errors=run.collection_errors,
            percent_covered=covered,
            git_commit=run.environment.git_commit,
            failing=tuple(nodeids[:cap]),
            failing_omitted=max(0, len(nodeids) - cap),
        )

    def failing_test(
        self,
        record: FailureRecord,
        verdict: TestClassification | None,
        strips: dict[str, HistoryStrip],
    ) -> FailingTest:
        collection = record.phase is Phase.COLLECT
        text = record.text[-MAX_REPORT_TEXT_CHARS:]
        frames = record.frames[-MAX_REPORT_FRAMES:]
        because = None if verdict is None or collection else verdict.because
        return FailingTest(
            nodeid=record.nodeid,
            outcome=record.outcome,
            classification=None if because is None or verdict is None
            else verdict.classification,
            because="" if because is None else because.summary,
            exception_type=record.exception_type,
            message=record.message[:MAX_REPORT_MESSAGE_CHARS],
            text=text,
            frames=frames,
            signature=record.signature,
            streak=record.streak,
            history=() if collection else strips.get(record.nodeid, ()),
            phase=record.phase,
            rule=None if because is None else because.rule,
            text_truncated=(
                record.text_truncated or record.message_truncated or len(text) < len(record.text)
                or len(record.message) > MAX_REPORT_MESSAGE_CHARS
            ),
            frames_omitted=len(record.frames) - len(frames),
            is_new=record.is_new,
            failing_since=record.failing_since,
        )


def _has_failing(run: RunSummary) -> bool:
    return any(run.counts.get(o.value, 0) for o in FAILING_OUTCOMES)


_MASKS = re.compile(r"<(?:str|num|path|hex)>")
"""The masks of a normalised message (``runstore.services._test_runs_rules``)."""


def _says_nothing(exception_type: str, message: str) -> bool:
    """Whether a signature's normalised ``message`` has no word left but masks (and its
    exception type's name before a ``:``): ``<str>``, ``KeyError: <str>``, ``<num> != <num>``."""
    head, sep, rest = message.partition(":")
    if sep and head.strip().rpartition(".")[2] == exception_type.rpartition(".")[2]:
        message = rest
    return re.search(r"\w", _MASKS.sub("", message)) is None


def _failing_by_run(
    runs: Sequence[RunSummary],
    cells: Sequence[TestCell],
    failures: dict[RunId, tuple[FailureRecord, ...]],
) -> dict[RunId, list[tuple[str, str]]]:
    """Each run's failing items (``cells``) and collection errors (from ``failures``) as
    ``(node id, signature)``."""
    failing: dict[RunId, list[tuple[str, str]]] = {run.id: [] for run in runs}
    for cell in cells:
        failing[cell.run_id].append((cell.nodeid, cell.signature))
    for run_id, records in failures.items():
        failing[run_id].extend(
            (f.nodeid, f.signature) for f in records if f.phase is Phase.COLLECT
        )
    return failing


def _verdict(
    nodeid: str,
    unstable: dict[str, TestClassification],
    held: dict[str, Outcome],
    flaky: dict[str, Evidence],
) -> tuple[Classification | None, Evidence | None]:
    """A matrix row's verdict (see ``MatrixRow``): ``unstable`` are the newest run's verdicts
    that are not stable, ``held`` the outcome of each of its items, ``flaky`` the project's
    flaky tests' evidence."""
    if nodeid in unstable:
        return unstable[nodeid].classification, unstable[nodeid].because
    if nodeid in held:  # every other verdict of the run is stable, by the rule it names
        executed = held[nodeid] in EXECUTED_OUTCOMES
        return Classification.STABLE, Evidence(
            EvidenceRule.NO_FAILURE if executed else EvidenceRule.NOT_EXECUTED
        )
    if nodeid in flaky:
        return Classification.FLAKY, flaky[nodeid]
    return None, None


def _rank(classification: Classification | None, failing_cells: int) -> int:
    """A matrix row's place: failing now 0, flaky 1, recovered 2, a failing cell 3, else 4."""
    if classification in _FAILING_NOW:
        return 0
    if classification is not None and classification in _RANKS:
        return _RANKS[classification]
    return 3 if failing_cells else 4
