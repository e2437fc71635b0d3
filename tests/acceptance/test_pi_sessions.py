"""Acceptance: every transcript of ``../shared/acceptance/pi-sessions`` gives what its README
says, on the live and the in-memory layer, in strict and lenient mode, and the files are never
changed. Each imported session exports to a file that imports back to an equal session."""

from __future__ import annotations

import hashlib
import io
import itertools
import json
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from returns.result import Failure

from runstore.cli import cli
from runstore.layers import Layer, build, in_memory, sqlite
from runstore.services import Entry, ModelRef, SessionRecord, SessionRepository
from runstore.sessions_import import (
    BadLine,
    EmptySource,
    ImportReport,
    LineProblem,
    export_jsonl,
    import_jsonl,
)

ROOT = Path(__file__).resolve().parents[2]
FILES = ROOT.parent / "shared" / "acceptance" / "pi-sessions"

pytestmark = pytest.mark.acceptance_inputs(FILES)  # skipped when missing, failed under CI

TREE_ID = "5f0c2a8e-3b1d-4c6e-9a7f-2d8e4b6c1a90"

LAYERS: dict[str, Callable[[], Layer]] = {"sqlite": lambda: sqlite(":memory:"), "memory": in_memory}


@pytest.fixture(params=sorted(LAYERS))
def repo(request: pytest.FixtureRequest) -> Iterator[SessionRepository]:
    with build(LAYERS[request.param]()) as container:
        yield container.get(SessionRepository)


def _fingerprint(path: Path) -> tuple[str, int, int]:
    stat = path.stat()
    return hashlib.sha256(path.read_bytes()).hexdigest(), stat.st_size, stat.st_mtime_ns


@pytest.fixture(autouse=True)
def files_are_never_changed() -> Iterator[None]:
    before = {p.name: _fingerprint(p) for p in sorted(FILES.glob("*.jsonl"))}
    yield
    assert {p.name: _fingerprint(p) for p in sorted(FILES.glob("*.jsonl"))} == before


def _import(repo: SessionRepository, name: str, mode: str) -> ImportReport:
    return import_jsonl(repo, FILES / name, mode=mode).unwrap()


def _refused(repo: SessionRepository, name: str, mode: str = "strict") -> Any:
    got = import_jsonl(repo, FILES / name, mode=mode)
    assert isinstance(got, Failure), got
    assert repo.list().unwrap().items == (), "a refused file must create nothing"
    return got.failure()


def _entries(repo: SessionRepository, session_id: str) -> list[Entry]:
    storage = repo.open(session_id).unwrap()
    entries: list[Entry] = []
    after = 0
    while True:
        page = storage.entries(after_seq=after, limit=1000).unwrap()
        entries.extend(page.items)
        if not page.has_more:
            return entries
        after = page.items[-1].seq


def _issues(report: ImportReport) -> list[tuple[int, str]]:
    return [(issue.line, issue.action) for issue in report.issues]


def _chain(entries: list[Entry]) -> list[str]:
    return [entry.id for entry in entries]


# -- large-session.jsonl -------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["strict", "lenient"])
def test_large_session_totals_are_exact(repo: SessionRepository, mode: str) -> None:
    report = _import(repo, "large-session.jsonl", mode)
    assert (report.version, report.entries, report.issues) == (1, 1018, ())
    entries = _entries(repo, report.session_id)
    assert len(entries) == 1018
    assert entries[0].parent_id is None
    assert all(child.parent_id == parent.id for parent, child in itertools.pairwise(entries))
    assert sum(e.type == "model_change" for e in entries) == 1
    assert sum(e.type == "thinking_level_change" for e in entries) == 103
    record = repo.get(report.session_id).unwrap()
    assert record.leaf_id == entries[-1].id == report.leaf_id
    summary = record.summary
    assert summary.message_count == 914
    assert summary.cached_tokens == 43_229_469
    assert summary.uncached_tokens == 4_297_281
    assert summary.total_tokens == 47_609_906
    assert summary.output_tokens == 83_156  # so cached + uncached + output = total
    assert summary.cost.quantize(Decimal("0.000001")) == Decimal("30.330198")
    context = repo.open(report.session_id).unwrap().build_context().unwrap()
    assert context.model == ModelRef("anthropic", "claude-sonnet-4-5")
    assert context.thinking_level == "off"
    # The version-1 header's model and thinking level are kept as metadata.
    assert record.metadata == {
        "provider": "anthropic",
        "modelId": "claude-sonnet-4-5",
        "thinkingLevel": "off",
    }


# -- tree-v3.jsonl -------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["strict", "lenient"])
def test_tree_v3_summary_and_both_contexts(repo: SessionRepository, mode: str) -> None:
    report = _import(repo, "tree-v3.jsonl", mode)
    assert (report.session_id, report.version, report.entries, report.issues) == (
        TREE_ID,
        3,
        18,
        (),
    )
    record = repo.get(TREE_ID).unwrap()
    assert record.leaf_id == "e0000018"
    summary = record.summary
    assert (summary.message_count, summary.cached_tokens, summary.uncached_tokens) == (
        10,
        800,
        1370,
    )
    assert (summary.total_tokens, summary.cost) == (2400, Decimal("0.125"))
    assert summary.name == "Fetch resilience"
    assert summary.labels == {"e0000013": "breaker-idea"}
    storage = repo.open(TREE_ID).unwrap()
    at_leaf = storage.build_context().unwrap()
    assert [(m.entry_id, m.role) for m in at_leaf.messages] == [
        ("e0000001", "user"),
        ("e0000002", "assistant"),
        ("e0000003", "toolResult"),
        ("e0000004", "assistant"),
        ("e0000011", "branchSummary"),
        ("e0000013", "user"),
        ("e0000014", "assistant"),
        ("e0000018", "custom"),
    ]
    assert (at_leaf.model, at_leaf.thinking_level) == (ModelRef("openai", "gpt-5"), "off")
    compacted = storage.build_context("e0000010").unwrap()
    assert [(m.entry_id, m.role) for m in compacted.messages] == [
        ("e0000008", "compactionSummary"),
        ("e0000006", "user"),
        ("e0000007", "assistant"),
        ("e0000009", "user"),
        ("e0000010", "assistant"),
    ]
    assert compacted.model == ModelRef("anthropic", "claude-sonnet-4-5")
    assert compacted.thinking_level == "high"


# -- broken files --------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["strict", "lenient"])
def test_empty_file_is_a_typed_error_and_creates_nothing(
    repo: SessionRepository, mode: str
) -> None:
    error = _refused(repo, "empty.jsonl", mode)
    assert isinstance(error, EmptySource)
    assert "empty" in str(error)


def test_bad_header(repo: SessionRepository) -> None:
    error = _refused(repo, "bad-header.jsonl")
    assert isinstance(error, BadLine)
    assert error.line == 1
    report = _import(repo, "bad-header.jsonl", "lenient")
    assert _chain(_entries(repo, report.session_id)) == [
        "e0000001",
        "e0000002",
        "e0000003",
        "e0000004",
    ]
    assert (1, "skipped") in _issues(report)


def test_torn_tail(repo: SessionRepository) -> None:
    error = _refused(repo, "torn-tail.jsonl")
    assert isinstance(error, BadLine)
    assert error.line == 6
    assert "cut off" in error.reason
    report = _import(repo, "torn-tail.jsonl", "lenient")
    assert _chain(_entries(repo, report.session_id)) == [
        "e0000001",
        "e0000002",
        "e0000003",
        "e0000004",
    ]
    assert _issues(report) == [(6, "skipped")]
    assert report.leaf_id == "e0000004"


def test_fused_line(repo: SessionRepository) -> None:
    error = _refused(repo, "fused-line.jsonl")
    assert isinstance(error, BadLine)
    assert error.line == 5
    report = _import(repo, "fused-line.jsonl", "lenient")
    entries = _entries(repo, report.session_id)
    assert _chain(entries) == [f"e000000{n}" for n in range(1, 8)]
    assert all(child.parent_id == parent.id for parent, child in itertools.pairwise(entries))
    assert _issues(report) == [(5, "repaired")]


def test_duplicate_header_and_repeated_entry(repo: SessionRepository) -> None:
    error = _refused(repo, "duplicate-header.jsonl")
    assert isinstance(error, BadLine)
    assert error.line == 4
    report = _import(repo, "duplicate-header.jsonl", "lenient")
    assert _chain(_entries(repo, report.session_id)) == [
        "e0000001",
        "e0000002",
        "e0000003",
        "e0000004",
    ]
    assert _issues(report) == [(4, "skipped"), (5, "skipped")]
    assert [issue.problem for issue in report.issues] == [
        LineProblem.HEADER,
        LineProblem.DUPLICATE_ID,  # the same entry again: kept once
    ]


def test_show_names_what_the_session_resumes_with(tmp_path: Path) -> None:
    """tree-v3's leaf is on the branch of the model change to openai/gpt-5 and without the
    change to thinking ``high`` (on the other branch): pi resumes with gpt-5 and ``off``,
    while the newest appended thinking level is ``high``."""
    db = str(tmp_path / "cli.db")
    runner = CliRunner()
    imported = runner.invoke(cli, ["--db", db, "sessions", "import", str(FILES / "tree-v3.jsonl")])
    assert imported.exit_code == 0, imported.output
    shown = runner.invoke(cli, ["--db", db, "--format", "json", "sessions", "show", TREE_ID])
    document = json.loads(shown.stdout)
    assert document["resume"] == {
        "leaf_id": "e0000018",
        "model": {"provider": "openai", "model_id": "gpt-5"},
        "thinking_level": "off",
    }
    assert document["summary"]["thinking_level"] == "high"
    assert document["summary"]["output_tokens"] == 2_400 - 800 - 1_370
    text = runner.invoke(cli, ["--db", db, "sessions", "show", TREE_ID]).stdout
    assert "model openai/gpt-5, thinking off (at the leaf, as pi resumes" in text
    assert "output 230)" in text


def test_fragment_without_header(repo: SessionRepository) -> None:
    error = _refused(repo, "fragment-no-header.jsonl")
    assert isinstance(error, BadLine)
    assert error.line == 1
    report = _import(repo, "fragment-no-header.jsonl", "lenient")
    entries = _entries(repo, report.session_id)
    assert _chain(entries) == ["e0000006", "e0000007", "e0000008", "e0000009", "e0000010"]
    assert entries[0].parent_id is None
    assert any("e0000005" in issue.reason and issue.line == 1 for issue in report.repaired)


# -- round trip ----------------------------------------------------------------------------------


def _whole(repo: SessionRepository, session_id: str) -> tuple[SessionRecord, list[Entry]]:
    return repo.get(session_id).unwrap(), _entries(repo, session_id)


@pytest.mark.parametrize(
    "name",
    [
        "large-session.jsonl",
        "tree-v3.jsonl",
        "bad-header.jsonl",
        "torn-tail.jsonl",
        "fused-line.jsonl",
        "duplicate-header.jsonl",
        "fragment-no-header.jsonl",
    ],
)
def test_export_imports_back_to_an_equal_session(
    repo: SessionRepository, name: str, tmp_path: Path
) -> None:
    report = _import(repo, name, "lenient")
    if name == "tree-v3.jsonl":  # a leaf that is not the last entry must survive too
        repo.open(report.session_id).unwrap().set_leaf("e0000010").unwrap()
    out = io.StringIO()
    export_jsonl(repo, report.session_id, out).unwrap()
    text = out.getvalue()
    lines = text.splitlines()
    assert sum('"type":"session"' in line for line in lines) == 1
    assert lines[0].startswith('{"type":"session","version":3,')
    exported = tmp_path / "exported.jsonl"
    exported.write_text(text, encoding="utf-8")
    with build(sqlite(":memory:")) as other:
        again: SessionRepository = other.get(SessionRepository)
        back = import_jsonl(again, exported, mode="strict").unwrap()
        assert back.issues == ()
        assert _whole(again, report.session_id) == _whole(repo, report.session_id)
