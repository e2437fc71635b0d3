"""The rules of the test-run services' quarantine and fix-check methods, shared by every
layer: ``DataStore.mark_quarantined``, ``DataStore.record_fix_check``,
``DataReader.quarantined`` and ``DataReader.fix_checks``.

Each check returns the prepared value or the ``InvalidInput`` naming the field at fault;
each decision takes the facts a backend loaded (see ``_test_runs_shared``).
"""

from __future__ import annotations

from collections.abc import Sequence

from returns.result import Failure, Result, Success

from runstore.services._primitives import check_int
from runstore.services._test_runs_rules import (
    RunFacts,
    _guard,
    _must,
    _type_name,
    invalid,
    no_run,
    valid_identifier,
    valid_limit,
    valid_project,
    valid_run_id,
)
from runstore.services.errors import InvalidInput, NotFound
from runstore.services.test_runs import FixCheckResult, QuarantinedItem, RunId

MAX_SAFE_INT = 2**53 - 1
"""The largest count a fix check stores (JSON's, and so every reader's, exact integers)."""

__all__ = [
    "MAX_SAFE_INT",
    "check_fix_check",
    "check_fix_checks",
    "decide_fix_check",
    "decide_quarantined",
    "prepare_quarantined",
]


def prepare_quarantined(items: object) -> Result[tuple[QuarantinedItem, ...], InvalidInput]:
    """``mark_quarantined``'s items, checked: a sequence of ``QuarantinedItem`` whose node
    ids and entries are identifiers (not empty, no NUL, no lone surrogate), each node id
    once; sorted by node id."""

    def check() -> tuple[QuarantinedItem, ...]:
        if isinstance(items, str | bytes) or not isinstance(items, Sequence):
            invalid("items", f"must be a sequence of QuarantinedItem, got {_type_name(items)}")
        seen: set[str] = set()
        prepared: list[QuarantinedItem] = []
        for index, item in enumerate(items):
            where = f"items[{index}]"
            if not isinstance(item, QuarantinedItem):
                invalid(where, f"must be a QuarantinedItem, got {_type_name(item)}")
            nodeid = valid_identifier(item.nodeid, f"{where}.nodeid")
            entry = valid_identifier(item.entry, f"{where}.entry")
            if nodeid in seen:
                invalid(f"{where}.nodeid", f"{nodeid!r} is given twice")
            seen.add(nodeid)
            prepared.append(QuarantinedItem(nodeid, entry))
        return tuple(sorted(prepared, key=lambda i: i.nodeid))

    return _guard(check)


def decide_quarantined(
    items: tuple[QuarantinedItem, ...], recorded: frozenset[str]
) -> Result[tuple[QuarantinedItem, ...], NotFound]:
    """``items`` when the run recorded an item of each node id (``recorded``: the node ids
    of those the backend found), else ``NotFound("test", nodeid)`` for the first missing."""
    missing = next((i.nodeid for i in items if i.nodeid not in recorded), None)
    if missing is not None:
        return Failure(NotFound("test", missing))
    return Success(items)


def check_fix_check(result: object) -> Result[FixCheckResult, InvalidInput]:
    """``record_fix_check``'s argument, checked (see ``DataStore.record_fix_check``)."""

    def check() -> FixCheckResult:
        if not isinstance(result, FixCheckResult):
            invalid("result", f"must be a FixCheckResult, got {_type_name(result)}")
        project = valid_identifier(result.project, "result.project")
        nodeid = valid_identifier(result.nodeid, "result.nodeid")
        run_id = None if result.run_id is None else _must(
            valid_run_id(result.run_id, "result.run_id"))
        executions = _must(check_int(result.executions, "result.executions", minimum=1,
                                     maximum=MAX_SAFE_INT))
        passed = _must(check_int(result.passed, "result.passed", minimum=0,
                                 maximum=MAX_SAFE_INT))
        failed = _must(check_int(result.failed, "result.failed", minimum=0,
                                 maximum=MAX_SAFE_INT))
        if passed + failed > executions:
            invalid("result.failed", f"passed ({passed}) and failed ({failed}) add up to more "
                    f"than executions ({executions})")
        if not isinstance(result.released, bool):
            invalid("result.released", f"must be a bool, got {_type_name(result.released)}")
        if result.released and passed != executions:
            invalid("result.released", f"a check may release a test only when every execution "
                    f"passed ({passed} of {executions} did)")
        return FixCheckResult(project, nodeid, None if run_id is None else RunId(run_id),
                              executions, passed, failed, result.released)

    return _guard(check)


def decide_fix_check(
    result: FixCheckResult, run: RunFacts | None
) -> Result[FixCheckResult, NotFound | InvalidInput]:
    """``result`` when its run (the facts the backend found for ``result.run_id``; None:
    nothing) exists and is of its project, or it names no run."""
    if result.run_id is None:
        return Success(result)
    if run is None:
        return Failure(no_run(result.run_id))
    if run.project != result.project:
        return Failure(InvalidInput("result.run_id", f"run {result.run_id} is of project "
                                    f"{run.project!r}, not {result.project!r}"))
    return Success(result)


def check_fix_checks(
    project: object, nodeid: object, limit: object
) -> Result[tuple[str, str | None, int], InvalidInput]:
    """``fix_checks``' arguments, checked in order: project, node id (None: every test),
    limit."""
    name = valid_project(project)
    if isinstance(name, Failure):
        return Failure(name.failure())
    node: Result[str | None, InvalidInput] = (
        Success(None) if nodeid is None else valid_project(nodeid, "nodeid"))
    if isinstance(node, Failure):
        return Failure(node.failure())
    size = valid_limit(limit)
    if isinstance(size, Failure):
        return Failure(size.failure())
    return Success((name.unwrap(), node.unwrap(), size.unwrap()))
