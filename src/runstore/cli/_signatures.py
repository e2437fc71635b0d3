"""Failure signatures across runs: ``runstore signatures`` and the quality gate of
``runstore failures --new-signatures``.

``signatures`` lists a project's signatures through ``DataReader.failure_signatures``: each
with the run that first and last recorded it, and how many runs and distinct tests it
affected (pruning changes none of these). The gate reads ``DataReader.failures``: a
signature is new in a run when no run of the project with a lower id recorded it (the
answer each run froze when it ended; a run still running computes it the same way).
JSON shapes: ``signatures.json`` and ``new-signatures.json`` in ``runstore/cli/schemas/``.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from runstore.cli._output import emit_json
from runstore.cli._settings import format_option
from runstore.cli._test_runs import (
    Services,
    _error_line,
    _limit_option,
    _plural,
    _print,
    _project,
    _row,
    _run,
    _run_document,
    _run_heading,
    _services,
    _table,
    _when,
    project_option,
)
from runstore.services._test_runs_rules import failure_signature
from runstore.services.pagination import MAX_PAGE_SIZE
from runstore.services.test_runs import (
    FailureRecord,
    FailureSignature,
    RunId,
    RunStatus,
    RunSummary,
)

__all__ = ["new_signatures_document", "signatures", "signatures_document"]


def _signature_document(found: FailureSignature) -> dict[str, Any]:
    first, last = found.first_seen_run_id, found.last_seen_run_id
    return {
        "signature": found.signature,
        "exception_type": found.exception_type,
        "message": found.message,
        "frame": found.frame,
        "first_seen_run_id": None if first is None else int(first),
        "first_seen_at_ms": found.first_seen_at_ms,
        "last_seen_run_id": None if last is None else int(last),
        "last_seen_at_ms": found.last_seen_at_ms,
        "runs": found.runs,
        "tests": found.tests,
        "occurrences": found.occurrences,
    }


def signatures_document(
    services: Services, project: str | None = None, limit: int = 20
) -> dict[str, Any]:
    """The ``signatures`` JSON document (schema ``signatures.json``, without
    ``schema_version``): the newest ``limit`` signatures of ``project`` (None: the default
    project) by last seen. An unknown project or a storage failure raises
    :class:`~runstore.cli._output.Refused` with the command's one-line reason."""
    name = _project(services, project)
    page = services.get(services.reader.failure_signatures(name, limit=limit))
    return {"project": name, "signatures": [_signature_document(s) for s in page.items],
            "has_more": page.has_more}


def _seen(run_id: RunId | None, at_ms: int) -> str:
    return f"{'pruned run' if run_id is None else f'run {run_id}'}, {_when(at_ms)}"


@click.command()
@project_option
@_limit_option(20, "Most signatures to list (newest last seen first).")
@format_option
def signatures(project: str | None, limit: int) -> None:
    """List a project's failure signatures, newest last seen first.

    A signature is one root cause: the exception type, the message with numbers, quoted
    strings, addresses and paths masked, and the failing project frame. Each has the run
    that first and last recorded it, and the passed or failed runs and distinct tests it
    affected (interrupted runs count for nothing; pruning runs changes no count).

    \b
    JSON (schema signatures.json): {"project", "signatures": [{"signature",
           "exception_type", "message", "frame", "first_seen_run_id", "first_seen_at_ms",
           "last_seen_run_id", "last_seen_at_ms", "runs", "tests", "occurrences"}],
           "has_more"} (a run id is null once that run was pruned)
    Example:
      runstore signatures --limit 5
    """
    with _services() as services:
        document = signatures_document(services, project, limit)
        if services.output_format == "json":
            emit_json(document)
            return
        name, found = document["project"], document["signatures"]
        if not found:
            _print(f"no failure signatures in {name}")
            return
        table = _table("signature", "error", "frame", "first seen", "last seen", "runs",
                       "tests")
        for s in found:
            _row(table, s["signature"], _error_line(s["exception_type"], s["message"]),
                 s["frame"] or "-", _seen(s["first_seen_run_id"], s["first_seen_at_ms"]),
                 _seen(s["last_seen_run_id"], s["last_seen_at_ms"]), s["runs"], s["tests"])
        more = " (more with --limit)" if document["has_more"] else ""
        _print(f"{_plural(len(found), 'failure signature')} in {name}, newest last seen "
               f"first{more}", table)


# -- the gate: failures --new-signatures --------------------------------------------------------


def _gated_runs(services: Services, summary: RunSummary) -> list[RunSummary]:
    """``summary`` and the other runs its invocation recorded for its project, by id: the
    plugin records one run per project per invocation, but a harness writing through the
    API (one run per shard) may record several, and a signature new in any of them is new
    in the invocation."""
    runs = {summary.id: summary}
    cursor: str | None = None
    while True:
        page = services.get(services.reader.list_runs(
            summary.project, limit=MAX_PAGE_SIZE, cursor=cursor))
        runs.update((r.id, r) for r in page.items if r.invocation_id == summary.invocation_id)
        if page.next_cursor is None:
            return [runs[i] for i in sorted(runs)]
        cursor = page.next_cursor


def _new_signature_entries(failures: list[FailureRecord]) -> list[dict[str, Any]]:
    """One entry per new signature in ``failures`` (their order of first appearance): what
    it was made from and the node ids it hit."""
    entries: dict[str, dict[str, Any]] = {}
    for failure in failures:
        if not failure.is_new:
            continue
        entry = entries.get(failure.signature)
        if entry is None:
            _, message, frame = failure_signature(
                failure.exception_type, failure.message, failure.frames)
            entry = entries[failure.signature] = {
                "signature": failure.signature, "exception_type": failure.exception_type,
                "message": message, "frame": frame, "tests": []}
        if failure.nodeid not in entry["tests"]:
            entry["tests"].append(failure.nodeid)
    return list(entries.values())


def _gate(
    services: Services, run: int | str, project: str | None
) -> tuple[list[RunSummary], list[dict[str, Any]], bool]:
    """The gated runs (:func:`_gated_runs` of the run ``run`` names), the signatures new in
    them, and whether one of them did not finish every test."""
    gated = _gated_runs(services, _run(services, project, run))
    failures: list[FailureRecord] = []
    for one in gated:
        failures.extend(services.get(services.reader.failures(one.id)))
    partial = any(r.status not in (RunStatus.PASSED, RunStatus.FAILED) for r in gated)
    return gated, _new_signature_entries(failures), partial


def _gate_json(gated: list[RunSummary], new: list[dict[str, Any]], partial: bool) -> dict[str, Any]:
    return {"runs": [_run_document(r) for r in gated], "new_signatures": new,
            "partial": partial, "passed": not new}


def new_signatures_document(
    services: Services, run: int | str = "latest", project: str | None = None
) -> dict[str, Any]:
    """The ``failures --new-signatures`` JSON document (schema ``new-signatures.json``,
    without ``schema_version``): the run ``run`` names (a run id, ``"latest"`` or
    ``"latest~N"``) and the other runs of its invocation in its project
    (:func:`_gated_runs`), the failure signatures new in them (never recorded by a run of
    the project with a lower id: ``signature``, ``exception_type``, the normalized
    ``message``, ``frame`` and the node ids hit, ``tests``), and ``passed``: whether there
    are none. ``partial`` says that a gated run was interrupted, aborted or is still
    running, so a test it did not reach may yet fail with a new signature. Refusals as
    :func:`signatures_document`."""
    return _gate_json(*_gate(services, run, project))


def gate(run: int | str, project: str | None) -> None:
    """Run ``failures --new-signatures``: print (or emit) what
    :func:`new_signatures_document` says, then exit 1 when a signature is new."""
    with _services() as services:
        gated, new, partial = _gate(services, run, project)
        if services.output_format == "json":
            emit_json(_gate_json(gated, new, partial))
        else:
            _print_gate(gated, new, partial)
    if new:
        sys.exit(1)


def _print_gate(gated: list[RunSummary], new: list[dict[str, Any]], partial: bool) -> None:
    for one in gated:
        _print(_run_heading(one))
    where = f"run{'s' if len(gated) > 1 else ''} {', '.join(str(r.id) for r in gated)}"
    if partial:
        _print(f"note: {where} did not finish every test; a test not reached may yet fail")
    if not new:
        _print(f"no new failure signatures in {where}")
        return
    _print(f"{_plural(len(new), 'new failure signature')} in {where} (never seen before):")
    for entry in new:
        _print("", f"{entry['signature']}  "
                   f"{_error_line(entry['exception_type'], entry['message'])}")
        if entry["frame"]:
            _print(f"  at {entry['frame']}")
        _print(f"  {_plural(len(entry['tests']), 'test')}: {', '.join(entry['tests'])}")
