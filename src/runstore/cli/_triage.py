"""``runstore triage``: one answer about a run, for a person (text) or an agent (JSON).

The answer is :func:`runstore.services.triage.triage_run`'s, with the files changed since
the last green run's commit read from git in the folder the command runs in
(:func:`runstore._git.changed_since`). :func:`triage_document` returns exactly the JSON
document the command prints (without ``schema_version``), so other front ends (an MCP
server) can serve the same answer; it refuses the way every query command does
(``services.fail`` / ``services.get``).

**Size bound** (``--max-tokens N``): tokens are estimated as the characters of the JSON
document as ``--format json`` prints it (indented, ``schema_version`` and the final line
break included), divided by 4 and rounded up: OpenAI's rule of thumb that one token is
about four characters of English text ("What are tokens and how to count them", OpenAI
Help Center). A more compact serialization of the same document is shorter, so the bound
holds for it too. While the estimate exceeds N, the list that takes the most characters
loses items from its end (each list is ordered most important first), in three tiers,
the longest list of a tier first each time: first the node ids inside groups and the
tests newly failing or added since the last green run (each failure names its own),
flaky suspects, slowest items, and the run's own ``environment.git_changed_files`` (up to
1,000 files git status listed when the run started) and ``environment.command_line``
(a trimmed ``git_changed_files`` sets ``git_changed_files_truncated``); once those are
empty, the failures (the least urgent first: flaky ones before persistent and new ones)
and the files changed since the green run; last, the groups. ``trimmed`` says what was
left out: ``omitted`` counts the items removed from each list (``group_nodeids`` summed over
the groups, each group also says its own ``nodeids_omitted``; a group's ``count`` stays the
full count). A bound too small even for the document with every list empty is refused
(exit 1), naming the least bound that fits. Text output renders the same (trimmed)
document; the bound is measured on its JSON form.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import click

from runstore._git import changed_since
from runstore.cli._output import SCHEMA_VERSION, emit_json, visible
from runstore.cli._params import MAX_ID
from runstore.cli._settings import format_option
from runstore.cli._test_runs import (
    _SYMBOL,
    RUN,
    Services,
    _because,
    _error_line,
    _evidence_document,
    _plural,
    _print,
    _row,
    _run,
    _run_document,
    _run_heading,
    _seconds,
    _services,
    _table,
    project_option,
)
from runstore.services.pagination import MAX_PAGE_SIZE
from runstore.services.test_runs import StackFrame
from runstore.services.triage import (
    DEFAULT_SLOWEST,
    FailureGroup,
    FlakySuspect,
    SinceGreen,
    Triage,
    TriageFailure,
    triage_run,
)

__all__ = ["bounded_document", "estimated_tokens", "triage", "triage_document"]

CHARS_PER_TOKEN = 4
"""Characters per token of the size estimate (OpenAI's rule of thumb, see the module)."""

_OMITTED_KEYS = ("failures", "groups", "group_nodeids", "flaky", "slowest", "newly_failing",
                 "added_failing", "changed_files", "git_changed_files", "command_line")


# -- the document -----------------------------------------------------------------------------


def _where(frame: StackFrame | None) -> dict[str, Any]:
    if frame is None:
        return {"location": None, "function": None}
    where = f"{frame.path}:{frame.line}" if frame.line else frame.path
    return {"location": where, "function": frame.function or None}


def _failure(failure: TriageFailure) -> dict[str, Any]:
    return {
        "nodeid": failure.nodeid,
        "outcome": failure.outcome.value,
        "phase": failure.phase.value,
        "collection_error": failure.is_collection_error,
        "classification": None if failure.classification is None
        else failure.classification.value,
        "because": None if failure.because is None else _evidence_document(failure.because),
        "window": None if failure.window is None else [o.value for o in failure.window],
        "is_new": failure.is_new,
        "streak": failure.streak,
        "failing_since": None if failure.failing_since is None else int(failure.failing_since),
        "error": _error_line(failure.exception_type, failure.message),
        "exception_type": failure.exception_type,
        **_where(failure.location),
        "signature": failure.signature,
    }


def _group(group: FailureGroup) -> dict[str, Any]:
    return {
        "signature": group.signature,
        "count": group.count,
        "is_new": group.is_new,
        "error": _error_line(group.exception_type, group.message),
        "exception_type": group.exception_type,
        **_where(group.location),
        "nodeids": list(group.nodeids),
        "nodeids_omitted": 0,
    }


def _flaky(suspect: FlakySuspect) -> dict[str, Any]:
    return {
        "nodeid": suspect.nodeid,
        "outcome": suspect.outcome.value,
        "window": [o.value for o in suspect.window],
        "because": _evidence_document(suspect.because),
    }


def _since(since: SinceGreen | None) -> dict[str, Any] | None:
    if since is None:
        return None
    green = since.green
    return {
        "run": {"id": int(green.id), "status": green.status.value,
                "started_at_ms": green.started_at_ms,
                "git_commit": green.environment.git_commit,
                "git_branch": green.environment.git_branch},
        "newly_failing": list(since.newly_failing),
        "added_failing": list(since.added_failing),
        "changed_files": None if since.changed_files is None else list(since.changed_files),
    }


def document_of(answer: Triage, max_tokens: int | None = None) -> dict[str, Any] | None:
    """The JSON document of ``answer`` (without ``schema_version``), trimmed to
    ``max_tokens`` when given; None when even every list emptied exceeds the bound."""
    document: dict[str, Any] = {
        "run": _run_document(answer.run),
        "partial": answer.partial,
        "failures": [_failure(f) for f in answer.failures],
        "groups": [_group(g) for g in answer.groups],
        "flaky": [_flaky(f) for f in answer.flaky],
        "slowest": [{"nodeid": t.nodeid, "outcome": t.outcome.value,
                     "duration_ms": t.duration_ms} for t in answer.slowest],
        "since_green": _since(answer.since_green),
        "trimmed": {"max_tokens": max_tokens, "estimated_tokens": 0,
                    "omitted": dict.fromkeys(_OMITTED_KEYS, 0)},
    }
    return _bounded(document, max_tokens)


_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
"""The C-accelerated encoder (``indent`` would make ``json`` encode in Python)."""


def _layout(value: Any, depth: int) -> int:
    """What ``indent=2`` adds to the compact form of ``value`` at nesting ``depth``: a
    line break and indentation before each member and before the closing bracket of a
    non-empty container, and a space after each key's colon."""
    if isinstance(value, dict):
        members: Any = value.values()
        extra = len(value)  # ": " for ":"
    elif isinstance(value, list):
        members, extra = value, 0
    else:
        return 0
    if not value:
        return 0
    extra += len(value) * (1 + 2 * (depth + 1)) + 1 + 2 * depth
    return extra + sum(_layout(member, depth + 1) for member in members)


def _length(value: Any, depth: int = 0) -> int:
    """The characters of ``json.dumps(value, ensure_ascii=False, indent=2)`` at ``depth``
    (the same, computed from the compact C encoding and the layout)."""
    return len(_COMPACT.encode(value)) + _layout(value, depth)


def estimated_tokens(document: dict[str, Any]) -> int:
    """Tokens of ``document`` as ``--format json`` prints it (``emit_json``: indented, with
    ``schema_version`` first and a final line break): its characters divided by
    ``CHARS_PER_TOKEN``, rounded up."""
    printed = _length({"schema_version": SCHEMA_VERSION, **document}) + 1
    return math.ceil(printed / CHARS_PER_TOKEN)


def _settle(document: dict[str, Any]) -> int:
    """Write the document's own estimate into ``trimmed.estimated_tokens`` (its digits count
    too) and return it."""
    trimmed = document["trimmed"]
    while True:
        estimate = estimated_tokens(document)
        if trimmed["estimated_tokens"] == estimate:
            return estimate
        trimmed["estimated_tokens"] = estimate


def _lists(
    document: dict[str, Any],
) -> Iterator[tuple[int, str, list[Any], dict[str, Any] | None]]:
    """Every list that trimming may shorten: (tier, omitted key, the list, the group holding
    it or None). Tier 0 goes first: node ids inside groups and the tests newly failing or
    added since the last green run (the failures name them too), flaky suspects, slowest
    items, and the run environment's changed files and command line; then tier 1, the
    failures and the files changed since the green run; then tier 2, the groups."""
    for group in document["groups"]:
        yield 0, "group_nodeids", group["nodeids"], group
    for key in ("flaky", "slowest"):
        yield 0, key, document[key], None
    environment = document["run"]["environment"]
    for key in ("git_changed_files", "command_line"):
        if environment[key] is not None:
            yield 0, key, environment[key], None
    since = document["since_green"]
    if since is not None:
        for key, tier in (("newly_failing", 0), ("added_failing", 0), ("changed_files", 1)):
            if since[key] is not None:
                yield tier, key, since[key], None
    yield 1, "failures", document["failures"], None
    yield 2, "groups", document["groups"], None


def _cut(items: list[Any], excess_chars: int) -> int:
    """Remove items from the end of ``items`` until about ``excess_chars`` characters are
    gone (at least one item); return how many were removed."""
    removed = gone = 0
    while items and (removed == 0 or gone < excess_chars):
        gone += _length(items.pop(), 2) + 2  # the item (inside a list inside the
        # document, at least), its comma and line break
        removed += 1
    return removed


def _bounded(document: dict[str, Any], max_tokens: int | None) -> dict[str, Any] | None:
    estimate = _settle(document)
    if max_tokens is None:
        return document
    omitted = document["trimmed"]["omitted"]
    while estimate > max_tokens:
        candidates = [(tier, -_length(items), key, items, group)
                      for tier, key, items, group in _lists(document) if items]
        if not candidates:
            return None
        _, _, key, items, group = min(candidates, key=lambda c: (c[0], c[1]))
        removed = _cut(items, (estimate - max_tokens) * CHARS_PER_TOKEN)
        _mark_cut(document, key)
        if group is not None:
            group["nodeids_omitted"] += removed
        omitted[key] += removed
        estimate = _settle(document)
    return document


def _mark_cut(document: dict[str, Any], key: str) -> None:
    """Say in the run's ``git_changed_files_truncated`` that its changed files were cut."""
    if key == "git_changed_files":
        document["run"]["environment"]["git_changed_files_truncated"] = True


def _least_bound(answer: Triage) -> int:
    """The least ``max_tokens`` that ``answer``'s document fits: every list emptied, the
    bound's own digits counted (the estimate of a bound of ``d`` digits is the same for
    every bound of ``d`` digits)."""
    empty = document_of(answer)
    assert empty is not None
    for _, key, items, group in list(_lists(empty)):
        empty["trimmed"]["omitted"][key] += len(items)
        _mark_cut(empty, key)
        if group is not None:
            group["nodeids_omitted"] = len(items)
        items.clear()
    for digits in range(1, len(str(MAX_ID)) + 1):
        smallest = int("1" + "0" * (digits - 1))
        empty["trimmed"]["max_tokens"] = smallest
        least = max(_settle(empty), smallest)
        if least < smallest * 10:
            return least
    return MAX_ID


def _answer(
    services: Services,
    project: str | None,
    run: int | str,
    slowest: int,
    max_tokens: int | None,
    repository: Path | None,
) -> tuple[Triage, dict[str, Any]]:
    """The triage of the run ``run`` names and its document, trimmed to ``max_tokens``; a
    refusal ends the command."""
    summary = _run(services, project, run)
    answer = services.get(triage_run(services.reader, run_id=summary.id, slowest=slowest,
                                     changed_files=functools.partial(changed_since,
                                                                     cwd=repository),
                                     policy=services.policy))
    return answer, bounded_document(services, answer, max_tokens)


def bounded_document(
    services: Services, answer: Triage, max_tokens: int | None
) -> dict[str, Any]:
    """The JSON document of ``answer`` (without ``schema_version``) trimmed to
    ``max_tokens`` (:func:`document_of`); a bound too small even for every list left out
    raises :class:`~runstore.cli._output.Refused` (``services.fail``) naming the least
    bound that fits."""
    document = document_of(answer, max_tokens)
    if document is None:
        services.fail(f"--max-tokens {max_tokens} is too small for this answer: it needs at "
                      f"least {_least_bound(answer)} with every list left out")
    return document


def triage_document(
    services: Services,
    run: int | str = "latest",
    project: str | None = None,
    *,
    slowest: int = DEFAULT_SLOWEST,
    max_tokens: int | None = None,
    repository: Path | None = None,
) -> dict[str, Any]:
    """The JSON document ``runstore triage`` prints (without ``schema_version``).

    ``run`` is a run id, ``"latest"`` or ``"latest~N"`` (as the ``RUN`` argument converts
    them); ``project`` as ``--project``; ``slowest`` how many slowest items (1-1000);
    ``max_tokens`` the size bound (see the module docstring); ``repository`` the folder
    whose git repository says which files changed (default: the current folder). An
    unknown project or run, a run of another project than ``project``, a storage problem
    or a bound too small for the answer raises :class:`~runstore.cli._output.Refused` with
    the command's one-line reason (``services.fail`` / ``services.get``).
    """
    return _answer(services, project, run, slowest, max_tokens, repository)[1]


# -- text -------------------------------------------------------------------------------------


def _shown(answer: Triage, document: dict[str, Any]) -> Triage:
    """``answer`` cut to what ``document`` kept (trimming only ever removes list ends)."""
    since = answer.since_green
    kept = document["since_green"]
    if since is not None and kept is not None:
        files = since.changed_files
        since = attrs.evolve(
            since,
            newly_failing=since.newly_failing[: len(kept["newly_failing"])],
            added_failing=since.added_failing[: len(kept["added_failing"])],
            changed_files=None if files is None else files[: len(kept["changed_files"])],
        )
    return attrs.evolve(
        answer,
        failures=answer.failures[: len(document["failures"])],
        groups=tuple(attrs.evolve(g, nodeids=g.nodeids[: len(d["nodeids"])])
                     for g, d in zip(answer.groups, document["groups"], strict=False)),
        flaky=answer.flaky[: len(document["flaky"])],
        slowest=answer.slowest[: len(document["slowest"])],
        since_green=since,
    )


def _more(count: int, indent: str = "  ") -> None:
    if count:
        _print(f"{indent}... {count} left out by --max-tokens")


def _streak(failure: TriageFailure) -> str:
    if failure.is_collection_error:
        return ""
    if failure.streak <= 1:
        return "1 run"
    since = "" if failure.failing_since is None else f" since run {failure.failing_since}"
    return f"{failure.streak} runs{since}"


def _print_text(full: Triage, document: dict[str, Any]) -> None:
    answer = _shown(full, document)
    omitted = document["trimmed"]["omitted"]
    _print(_run_heading(answer.run))
    if answer.partial:
        _print("partial run: it may have left tests out, so these may not be all its failures")
    if full.failures:
        _print("", f"{_plural(len(full.failures), 'failure')}, most urgent first:")
        table = _table("test", "verdict", "because", "failing", "error", "at")
        for f in answer.failures:
            _row(table, f.nodeid,
                 "collection error" if f.classification is None else f.classification.value,
                 "" if f.because is None else _because(f.because), _streak(f),
                 _error_line(f.exception_type, f.message), _where(f.location)["location"])
        if answer.failures:
            _print(table)
        _more(omitted["failures"])
    else:
        _print("", "no failures")
    if full.groups:
        _print("", f"root causes ({_plural(len(full.groups), 'failure signature')}):")
        for group, shown in zip(answer.groups, document["groups"], strict=False):
            at = _where(group.location)["location"]
            error = visible(_error_line(group.exception_type, group.message))
            _print(f"  {shown['count']} x {error}"
                   + (f"  at {at}" if at else "") + ("  (new)" if group.is_new else ""))
            for nodeid in group.nodeids:
                _print(f"      {nodeid}")
            _more(shown["nodeids_omitted"], "      ")
        _more(omitted["groups"])
    if full.flaky:
        _print("", f"flaky suspects ({len(full.flaky)}):")
        table = _table("test", "outcome", "because", "recent (newest first)")
        for suspect in answer.flaky:
            _row(table, suspect.nodeid, suspect.outcome.value, _because(suspect.because),
                 " ".join(_SYMBOL.get(o, "?") for o in suspect.window))
        if answer.flaky:
            _print(table)
        _more(omitted["flaky"])
    if full.slowest:
        _print("", "slowest:")
        table = _table("took", "outcome", "test")
        for test in answer.slowest:
            _row(table, _seconds(test.duration_ms), test.outcome.value, test.nodeid)
        if answer.slowest:
            _print(table)
        _more(omitted["slowest"])
    _print_since(answer.since_green, omitted)


def _print_since(since: SinceGreen | None, omitted: dict[str, int]) -> None:
    if since is None:
        _print("", "no earlier green run (passed, complete, without failures) to compare with")
        return
    green = since.green
    commit = green.environment.git_commit
    _print("", f"since the last green run (run {green.id}"
               + (f", commit {commit[:12]}" if commit else "") + "):")
    for key, title, names in (("newly_failing", "newly failing", since.newly_failing),
                              ("added_failing", "added and failing", since.added_failing)):
        _print(f"  {title}: {len(names) + omitted[key]}")
        for nodeid in names:
            _print(f"    {nodeid}")
        _more(omitted[key], "    ")
    if since.changed_files is None:
        _print("  files changed: unknown (no git here, no commit recorded, or the commit is "
               "not in this repository)")
        return
    _print(f"  files changed: {len(since.changed_files) + omitted['changed_files']}")
    for path in since.changed_files:
        _print(f"    {visible(path)}")
    _more(omitted["changed_files"], "    ")


# -- the command ------------------------------------------------------------------------------


@click.command()
@click.argument("run", type=RUN, default="latest")
@project_option
@click.option("--slowest", type=click.IntRange(1, MAX_PAGE_SIZE), default=DEFAULT_SLOWEST,
              show_default=True, help="How many of the slowest items to list.")
@click.option("--max-tokens", type=click.IntRange(1, MAX_ID), default=None, metavar="N",
              help="Bound the JSON answer to about N tokens (characters / 4), leaving out "
                   "the ends of the longest lists first and saying how many.")
@format_option
def triage(run: int | str, project: str | None, slowest: int, max_tokens: int | None) -> None:
    """Say what a run (default: the latest) needs looked at, in one answer.

    Status and counts; every failure with its verdict (new_failure, persistent_failure
    with its streak and since-run, flaky) and the reason (the rule and its runs), its first
    error line and where it was raised (the deepest frame in the project); the failures
    grouped by failure signature (one root cause is one group); flaky suspects; the
    slowest items; and, since the last green run (the newest earlier run that passed
    complete, with no failure: partial, interrupted and aborted runs never count), the
    tests newly failing and the files git says changed since that run's commit (null
    without git or when the commit is not in this repository).

    \b
    JSON (schema triage.json): {"run": RUN, "partial", "failures": [{"nodeid", "outcome",
      "phase", "collection_error", "classification", "because", "window", "is_new",
      "streak", "failing_since", "error", "exception_type", "location", "function",
      "signature"}], "groups": [{"signature", "count", "is_new", "error", "exception_type",
      "location", "function", "nodeids", "nodeids_omitted"}], "flaky": [{"nodeid",
      "outcome", "window", "because"}], "slowest": [{"nodeid", "outcome", "duration_ms"}],
      "since_green": {"run", "newly_failing", "added_failing", "changed_files"} | null,
      "trimmed": {"max_tokens", "estimated_tokens", "omitted": {LIST: N}}}
    Example:
      runstore triage --format json --max-tokens 2000
    """
    with _services() as services:
        answer, document = _answer(services, project, run, slowest, max_tokens, None)
        if services.output_format == "json":
            emit_json(document)
            return
        _print_text(answer, document)
