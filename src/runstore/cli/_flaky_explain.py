"""``runstore flaky --explain``: the evidence behind each flaky verdict, and a preview of a
changed policy.

For each test (the NODEIDs given, else every test the configured policy or the previewed one
calls flaky): its window (newest first) entry by entry (run, outcome, commit and dirty flag,
code fingerprint, failed rerun attempts, whether the run was an outage), the verdict of the
newest window as ``runstore flaky`` reaches it, and every flaky rule with whether it matched
and why (``runstore.services._test_runs_rules.rule_checks``). With a changed policy
(``--window``, ``--min-runs``, ``--flip-rate``, ``--outage-share``, ``--outage-min-tests``,
``--evidence``) each test is judged under it too, and the answer lists the tests of the
project it would newly flag and those it would no longer flag. JSON shape:
``schemas/flaky-explain.json``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from runstore.services._test_runs_rules import (
    is_outage,
    judge,
    rule_checks,
    window_entry,
)
from runstore.services.test_runs import FLAKY_RULES, FlakyPolicy, HistoryEntry

if TYPE_CHECKING:
    from runstore.cli._test_runs import Services

__all__ = ["explain_document", "policy_document", "render_explain"]


def policy_document(policy: FlakyPolicy) -> dict[str, Any]:
    """A ``FlakyPolicy`` as JSON (its evidence in ``FLAKY_RULES`` order)."""
    return {
        "window": policy.window,
        "min_runs": policy.min_runs,
        "flip_rate": float(policy.flip_rate),
        "evidence": [r.value for r in FLAKY_RULES if r in policy.evidence],
        "outage_share": float(policy.outage_share),
        "outage_min_tests": policy.outage_min_tests,
    }


def _judged(entries: Sequence[HistoryEntry], policy: FlakyPolicy) -> dict[str, Any]:
    """The verdict of the newest ``policy.window`` entries and every flaky rule tried."""
    window = [window_entry(e) for e in entries[: policy.window]]
    verdict, because = judge(window, policy)
    return {
        "classification": verdict.value,
        "because": {"rule": because.rule.value, "run_ids": list(because.run_ids),
                    "summary": because.summary},
        "rules": [
            {"rule": c.rule.value, "matched": c.matched, "run_ids": list(c.run_ids),
             "summary": c.summary}
            for c in rule_checks(window, policy)
        ],
    }


def _entry_document(entry: HistoryEntry, policy: FlakyPolicy) -> dict[str, Any]:
    return {
        "run_id": entry.run_id,
        "outcome": entry.outcome.value,
        "git_commit": entry.git_commit,
        "git_dirty": entry.git_dirty,
        "fingerprint": entry.fingerprint,
        "rerun_failures": entry.rerun_failures,
        "run_executed": entry.run_executed,
        "run_failing": entry.run_failing,
        "outage": is_outage(window_entry(entry), policy),
        "outage_in_preview": None,
    }


def explain_document(
    services: Services,
    project: str | None,
    nodeids: Sequence[str],
    preview: FlakyPolicy | None = None,
) -> dict[str, Any]:
    """The ``flaky --explain`` JSON document (schema ``flaky-explain.json``, without
    ``schema_version``) of ``project`` (None: the default project): each test of
    ``nodeids`` (fragments, resolved as ``history`` resolves one; none: the flaky tests under
    ``services.policy`` or ``preview``) explained under the configured policy and, with
    ``preview``, under it too; refusals as ``runstore flaky``."""
    from runstore.cli._test_runs import _project, _resolve_test

    name = _project(services, project)
    reader = services.reader
    flagged = {f.nodeid for f in services.get(reader.flaky_tests(name, policy=services.policy))}
    would: set[str] | None = None
    if preview is not None:
        would = {f.nodeid for f in services.get(reader.flaky_tests(name, policy=preview))}
    if nodeids:
        chosen = list(dict.fromkeys(_resolve_test(services, name, n) for n in nodeids))
    else:
        chosen = sorted(flagged | (would or set()))
    widest = max(services.policy.window, 0 if preview is None else preview.window)
    tests = []
    for nodeid in chosen:
        entries = services.get(reader.history(name, nodeid))
        test = {
            "nodeid": nodeid,
            "window": [_entry_document(e, services.policy) for e in entries[:widest]],
            **_judged(entries, services.policy),
            "preview": None if preview is None else _judged(entries, preview),
        }
        if preview is not None:
            for shown, entry in zip(test["window"], entries, strict=False):
                shown["outage_in_preview"] = is_outage(window_entry(entry), preview)
        tests.append(test)
    return {
        "project": name,
        "policy": policy_document(services.policy),
        "preview": None if preview is None else policy_document(preview),
        "tests": tests,
        "newly_flagged": [] if would is None else sorted(would - flagged),
        "no_longer_flagged": [] if would is None else sorted(flagged - would),
    }


def _policy_line(policy: dict[str, Any]) -> str:
    rules = ", ".join(policy["evidence"]) or "none"
    return (
        f"window {policy['window']}, min_runs {policy['min_runs']}, "
        f"flip_rate {policy['flip_rate']:g}, outage above {policy['outage_share']:g} of "
        f"at least {policy['outage_min_tests']} tests, evidence: {rules}"
    )


def _entry_line(entry: dict[str, Any]) -> str:
    run = "pruned" if entry["run_id"] is None else f"run {entry['run_id']}"
    commit = entry["git_commit"]
    tree = {True: "dirty", False: "clean", None: "tree unknown"}[entry["git_dirty"]]
    parts = [f"{run:<10}", f"{entry['outcome']:<7}",
             f"commit {commit[:12]} {tree}" if commit else "no commit"]
    if entry["fingerprint"]:
        parts.append(f"code {entry['fingerprint'][:12]}")
    reruns = entry["rerun_failures"]
    if reruns:
        parts.append(f"{reruns} failed rerun attempt{'' if reruns == 1 else 's'}")
    if entry["outage"]:
        parts.append(f"outage ({entry['run_failing']} of {entry['run_executed']} failed)")
    return "  ".join(parts)


def _verdict_lines(judged: dict[str, Any], label: str) -> list[str]:
    because = judged["because"]
    lines = [f"  {label}: {judged['classification']} because {because['rule']}: "
             f"{because['summary']}"]
    width = max(len(r["rule"]) for r in judged["rules"])
    for rule in judged["rules"]:
        mark = "matched" if rule["matched"] else "no     "
        lines.append(f"    {rule['rule']:<{width}}  {mark}  {rule['summary']}")
    return lines


def render_explain(document: dict[str, Any]) -> list[str]:
    """The text of ``flaky --explain``: one block per test, then the preview's changes."""
    lines = [f"project {document['project']}: {_policy_line(document['policy'])}"]
    if document["preview"] is not None:
        lines.append(f"preview: {_policy_line(document['preview'])}")
    if not document["tests"]:
        lines.append("no flaky tests to explain")
    for test in document["tests"]:
        lines += ["", test["nodeid"], "  window (newest first):"]
        lines += [f"    {_entry_line(e)}" for e in test["window"]]
        lines += _verdict_lines(test, "verdict")
        if test["preview"] is not None:
            lines += _verdict_lines(test["preview"], "preview")
    if document["preview"] is not None:
        lines.append("")
        for key, words in (("newly_flagged", "would newly flag"),
                           ("no_longer_flagged", "would no longer flag")):
            found = document[key]
            lines.append(f"{words}: {', '.join(found) if found else 'none'}")
    return lines
