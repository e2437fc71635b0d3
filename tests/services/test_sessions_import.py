"""The JSONL importer on made-up transcripts: versions, repairs, batches, strictness."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from returns.result import Failure

from runstore.layers import build, in_memory, sqlite
from runstore.services import Conflict, NewEntry, SessionRepository
from runstore.sessions_import import (
    BadLine,
    EmptySource,
    ImportReport,
    LineProblem,
    SourceUnreadable,
    export_jsonl,
    import_jsonl,
)

HEADER = {
    "type": "session",
    "version": 3,
    "id": "s",
    "timestamp": "2025-11-30T10:00:00.000Z",
    "cwd": "/w",
}
STAMP = "2025-11-30T10:00:01.000Z"


def msg(
    entry_id: str | None, parent: str | None, role: str = "user", **extra: Any
) -> dict[str, Any]:
    line: dict[str, Any] = {
        "type": "message",
        "timestamp": STAMP,
        "message": {"role": role, "content": "x", **extra},
    }
    if entry_id is not None:
        line["id"], line["parentId"] = entry_id, parent
    return line


@pytest.fixture(params=["sqlite", "memory"])
def repo(request: pytest.FixtureRequest) -> Iterator[SessionRepository]:
    layer = sqlite(":memory:") if request.param == "sqlite" else in_memory()
    with build(layer) as container:
        yield container.get(SessionRepository)


def write(tmp_path: Path, *lines: Any, name: str = "t.jsonl") -> Path:
    path = tmp_path / name
    text = "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
    path.write_text(text, encoding="utf-8")
    return path


def ids(repo: SessionRepository, session_id: str = "s") -> list[tuple[str, str | None]]:
    entries = repo.open(session_id).unwrap().entries(limit=1000).unwrap().items
    return [(e.id, e.parent_id) for e in entries]


def lenient(repo: SessionRepository, path: Path, **kw: Any) -> ImportReport:
    return import_jsonl(repo, path, mode="lenient", **kw).unwrap()


def test_version_1_gets_ids_chained_parents_and_a_kept_entry(
    repo: SessionRepository, tmp_path: Path
) -> None:
    v1 = {"type": "session", "id": "s", "timestamp": STAMP, "cwd": "/w", "thinkingLevel": "off"}
    compaction = {
        "type": "compaction",
        "timestamp": STAMP,
        "summary": "so far",
        "firstKeptEntryIndex": 2,
        "tokensBefore": 50,
    }
    path = write(
        tmp_path,
        v1,
        msg(None, None),
        msg(None, None, "assistant"),
        msg(None, None),
        compaction,
        msg(None, None),
    )
    report = import_jsonl(repo, path).unwrap()
    assert report.version == 1
    assert ids(repo) == [
        ("00000001", None),
        ("00000002", "00000001"),
        ("00000003", "00000002"),
        ("00000004", "00000003"),
        ("00000005", "00000004"),
    ]
    kept = repo.open("s").unwrap().entry("00000004").unwrap()
    assert dict(kept.payload) == {
        "summary": "so far",
        "firstKeptEntryId": "00000002",
        "tokensBefore": 50,
    }
    context = repo.open("s").unwrap().build_context().unwrap()
    assert [m.entry_id for m in context.messages] == [
        "00000004",
        "00000002",
        "00000003",
        "00000005",
    ]
    assert repo.get("s").unwrap().metadata == {"thinkingLevel": "off"}


def test_version_1_kept_index_that_names_no_entry(repo: SessionRepository, tmp_path: Path) -> None:
    v1 = {"type": "session", "id": "s", "timestamp": STAMP, "cwd": "/w"}
    compaction = {
        "type": "compaction",
        "timestamp": STAMP,
        "summary": "s",
        "firstKeptEntryIndex": 0,
        "tokensBefore": 1,
    }
    path = write(tmp_path, v1, msg(None, None), compaction, msg(None, None))
    refused = import_jsonl(repo, path).failure()
    assert isinstance(refused, BadLine)
    assert refused.line == 3
    report = lenient(repo, path)
    assert [(i.line, i.action) for i in report.issues] == [(3, "skipped")]
    assert ids(repo) == [("00000001", None), ("00000003", "00000001")]


def test_versions_1_and_2_rename_hook_messages(repo: SessionRepository, tmp_path: Path) -> None:
    path = write(tmp_path, {**HEADER, "version": 2}, msg("a", None, "hookMessage", customType="x"))
    import_jsonl(repo, path).unwrap()
    entry = repo.open("s").unwrap().entry("a").unwrap()
    assert entry.payload["message"]["role"] == "custom"


def test_header_members_become_the_session(repo: SessionRepository, tmp_path: Path) -> None:
    header = {
        **HEADER,
        "parentSession": "/old.jsonl",
        "metadata": {"profile": "r"},
        "extra": [1],
        "leafId": "a",
    }
    path = write(tmp_path, header, msg("a", None), msg("b", "a"))
    import_jsonl(repo, path).unwrap()
    record = repo.get("s").unwrap()
    assert (record.cwd, record.parent_session, record.created_ms) == (
        "/w",
        "/old.jsonl",
        1_764_496_800_000,
    )
    assert record.metadata == {"extra": [1], "profile": "r"}
    assert record.leaf_id == "a"


def test_unreadable_lines_are_skipped_and_reported(repo: SessionRepository, tmp_path: Path) -> None:
    path = tmp_path / "mixed.jsonl"
    lines = [
        json.dumps(HEADER).encode(),
        json.dumps(msg("a", None)).encode(),
        b"\xff\xfe not utf-8",
        b'{"type": "custom", "id": "n", "parentId": "a", "timestamp": "'
        + STAMP.encode()
        + b'", "v": NaN}',
        b"[1, 2]",
        b"   ",
        json.dumps({"id": "t", "parentId": "a"}).encode(),
        json.dumps(msg("b", "a")).encode() + b"\r",
    ]
    path.write_bytes(b"\xef\xbb\xbf" + b"\n".join(lines) + b"\n")
    strict = import_jsonl(repo, path).failure()
    assert isinstance(strict, BadLine)
    assert (strict.line, strict.reason.startswith("not UTF-8")) == (3, True)
    report = lenient(repo, path)
    assert [(i.line, i.action) for i in report.issues] == [
        (3, "skipped"),
        (4, "skipped"),
        (5, "skipped"),
        (7, "skipped"),
    ]
    assert ids(repo) == [("a", None), ("b", "a")]
    assert report.lines == 8


def test_children_of_a_skipped_entry_go_to_its_parent(
    repo: SessionRepository, tmp_path: Path
) -> None:
    bad = {"type": "model_change", "id": "m", "parentId": "a", "timestamp": STAMP, "provider": "p"}
    path = write(tmp_path, HEADER, msg("a", None), bad, msg("b", "m"), msg("c", "b"))
    assert isinstance(import_jsonl(repo, path).failure(), BadLine)
    report = lenient(repo, path, batch_entries=2)
    assert ids(repo) == [("a", None), ("b", "a"), ("c", "b")]
    assert [(i.line, i.action) for i in report.issues] == [(3, "skipped"), (4, "repaired")]


def test_repairs_of_parents_and_timestamps(repo: SessionRepository, tmp_path: Path) -> None:
    no_parent = {"type": "message", "id": "b", "timestamp": STAMP, "message": {"role": "user"}}
    bad_time = {**msg("c", "b"), "timestamp": "soon"}
    orphan = msg("d", "gone")
    path = write(tmp_path, HEADER, msg("a", None), no_parent, bad_time, orphan)
    report = lenient(repo, path, batch_entries=1)
    assert ids(repo) == [("a", None), ("b", None), ("c", "b"), ("d", None)]
    assert [(i.line, i.action) for i in report.issues] == [
        (3, "repaired"),
        (4, "repaired"),
        (5, "repaired"),
    ]
    entry = repo.open("s").unwrap().entry("c").unwrap()
    assert entry.timestamp_ms == 1_764_496_801_000  # the previous entry's time


@pytest.mark.parametrize("stamp", [-5, 2**63, "1969-12-31T23:59:59.999Z", "10000-01-01"])
def test_times_no_store_can_keep_are_repaired_alike_in_every_layer(
    repo: SessionRepository, tmp_path: Path, stamp: Any
) -> None:
    path = write(tmp_path, HEADER, msg("a", None), {**msg("b", "a"), "timestamp": stamp})
    report = lenient(repo, path)
    assert [(i.line, i.action) for i in report.issues] == [(3, "repaired")]
    assert repo.open("s").unwrap().entry("b").unwrap().timestamp_ms == 1_764_496_801_000
    refused = import_jsonl(repo, path, session_id="strict").failure()
    assert isinstance(refused, BadLine)
    assert refused.line == 3


def test_a_line_with_white_space_around_its_object_reads_back(
    repo: SessionRepository, tmp_path: Path
) -> None:
    line = "  " + json.dumps(msg("a", None)) + " \t"
    report = import_jsonl(repo, write(tmp_path, HEADER, line)).unwrap()
    assert report.entries == 1
    entry = repo.open("s").unwrap().entry("a").unwrap()
    assert dict(entry.payload) == {"message": {"role": "user", "content": "x"}}


def test_repeated_ids_across_batches(repo: SessionRepository, tmp_path: Path) -> None:
    path = write(
        tmp_path,
        HEADER,
        msg("a", None),
        msg("b", "a"),
        msg("c", "b"),
        msg("a", None),
        msg("d", "c"),
    )
    refused = import_jsonl(repo, path, batch_entries=2).failure()
    assert isinstance(refused, BadLine)
    assert refused.line == 5
    assert repo.list().unwrap().items == ()
    report = lenient(repo, path, batch_entries=2)
    assert ids(repo) == [("a", None), ("b", "a"), ("c", "b"), ("d", "c")]
    assert report.entries == 4


def test_an_existing_session_is_a_conflict_and_an_id_can_be_given(
    repo: SessionRepository, tmp_path: Path
) -> None:
    path = write(tmp_path, HEADER, msg("a", None))
    import_jsonl(repo, path).unwrap()
    again = import_jsonl(repo, path)
    assert isinstance(again.failure(), Conflict)
    copy = import_jsonl(repo, path, session_id="copy").unwrap()
    assert copy.session_id == "copy"
    assert ids(repo, "copy") == [("a", None)]


def test_empty_and_missing_sources(repo: SessionRepository, tmp_path: Path) -> None:
    blank = tmp_path / "blank.jsonl"
    blank.write_text("\n  \n\n")
    assert isinstance(import_jsonl(repo, blank, mode="lenient").failure(), EmptySource)
    garbage = write(tmp_path, "nope", "[]", name="garbage.jsonl")
    got = import_jsonl(repo, garbage, mode="lenient")
    assert isinstance(got, Failure)
    assert isinstance(got.failure(), EmptySource)
    assert isinstance(import_jsonl(repo, tmp_path / "absent.jsonl").failure(), SourceUnreadable)
    assert isinstance(import_jsonl(repo, tmp_path).failure(), SourceUnreadable)
    assert repo.list().unwrap().items == ()


def test_progress_is_reported_in_bytes(repo: SessionRepository, tmp_path: Path) -> None:
    path = write(tmp_path, HEADER, *[msg(f"e{n}", f"e{n - 1}" if n else None) for n in range(10)])
    seen: list[int] = []
    report = import_jsonl(repo, path, batch_entries=3, progress=seen.append).unwrap()
    assert seen == sorted(seen)
    assert seen[-1] == path.stat().st_size == report.bytes
    assert len(seen) >= 4


def test_a_header_only_file_is_an_empty_session(repo: SessionRepository, tmp_path: Path) -> None:
    report = import_jsonl(repo, write(tmp_path, HEADER)).unwrap()
    assert (report.entries, report.leaf_id) == (0, None)
    assert repo.get("s").unwrap().summary.entry_count == 0


def test_programmer_errors_raise() -> None:
    with build(in_memory()) as container:
        repo: SessionRepository = container.get(SessionRepository)
        with pytest.raises(ValueError, match="sloppy"):
            import_jsonl(repo, "x", mode="sloppy")
        with pytest.raises(ValueError, match="batch"):
            import_jsonl(repo, "x", batch_entries=0)


def test_a_first_line_that_is_not_utf8_is_named(repo: SessionRepository, tmp_path: Path) -> None:
    path = tmp_path / "bad-first.jsonl"
    good = [json.dumps(HEADER), json.dumps(msg("a", None)), json.dumps(msg("b", "a"))]
    path.write_bytes(b"\xff\xfe\n" + "\n".join(good).encode() + b"\n")
    strict = import_jsonl(repo, path).failure()
    assert isinstance(strict, BadLine)
    assert (strict.line, strict.reason.startswith("not UTF-8")) == (1, True)
    report = lenient(repo, path)
    assert [(i.line, i.action) for i in report.issues][:1] == [(1, "skipped")]
    assert ids(repo) == [("a", None), ("b", "a")]


# -- what pi itself accepts ----------------------------------------------------------------------


def refused_then_lenient(
    repo: SessionRepository,
    path: Path,
    line: int,
    problem: LineProblem,
    action: str,
    **kw: Any,
) -> ImportReport:
    """Strict refuses ``path`` at ``line`` for ``problem``; lenient reports only that line,
    ``action`` taken; return the lenient report."""
    refused = import_jsonl(repo, path, **kw).failure()
    assert isinstance(refused, BadLine)
    assert (refused.line, refused.problem) == (line, problem)
    assert repo.list().unwrap().items == ()
    report = lenient(repo, path, **kw)
    assert [(i.line, i.action, i.problem) for i in report.issues] == [(line, action, problem)]
    return report


def test_a_lone_surrogate_becomes_the_replacement_character(
    repo: SessionRepository, tmp_path: Path
) -> None:
    """pi's own output cut writes half of a UTF-16 pair (``\\ud83d``); pi keeps the tool
    result, so lenient repairs the text instead of dropping the entry; strict names it."""
    result = msg("b", "a", "toolResult", toolCallId="c1")
    result["message"]["content"] = [{"type": "text", "text": "grep: cut \ud83d"}]
    line = json.dumps(result)  # ensure_ascii: the surrogate is the escape \ud83d
    assert "\\ud83d" in line
    path = write(tmp_path, HEADER, msg("a", None), line, msg("c", "b"))
    report = refused_then_lenient(repo, path, 3, LineProblem.LONE_SURROGATE, "repaired")
    assert "message.content[0].text" in report.issues[0].reason
    assert ids(repo) == [("a", None), ("b", "a"), ("c", "b")]
    kept = repo.open("s").unwrap().entry("b").unwrap()
    assert kept.payload["message"]["content"][0]["text"] == "grep: cut \ufffd"


def test_a_compaction_keeping_no_ancestor_is_kept_as_pi_keeps_it(
    repo: SessionRepository, tmp_path: Path
) -> None:
    compaction = {
        "type": "compaction",
        "id": "k",
        "parentId": "b",
        "timestamp": STAMP,
        "summary": "earlier work",
        "firstKeptEntryId": "x",
        "tokensBefore": 100,
    }
    path = write(
        tmp_path, HEADER, msg("a", None), msg("b", "a"), msg("x", "a"), compaction, msg("c", "k")
    )
    refused_then_lenient(repo, path, 5, LineProblem.FIRST_KEPT_NOT_ANCESTOR, "kept")
    assert ids(repo) == [("a", None), ("b", "a"), ("x", "a"), ("k", "b"), ("c", "k")]
    storage = repo.open("s").unwrap()
    # pi: the walk looks for x, never finds it, reaches the root; no entry before k is kept.
    assert [e.id for e in storage.path_to_root_or_compaction("c").unwrap()] == ["a", "b", "k", "c"]
    context = storage.build_context().unwrap()
    assert [(m.entry_id, m.role) for m in context.messages] == [
        ("k", "compactionSummary"),
        ("c", "user"),
    ]


def test_a_repeated_id_resolves_to_its_last_line(repo: SessionRepository, tmp_path: Path) -> None:
    """pi's id map is filled in file order, so the last line of an id is the entry; an entry
    naming it as parent before that line hangs under the last one too."""
    path = write(
        tmp_path,
        HEADER,
        msg("a", None),
        msg("b", "a", text="first"),
        msg("c", "b"),  # its parent resolves to the b of line 6
        msg("x", "a"),
        msg("b", "x", text="last"),
        msg("d", "b"),
    )
    refused = import_jsonl(repo, path, batch_entries=2).failure()
    assert isinstance(refused, BadLine)
    assert (refused.line, refused.problem) == (6, LineProblem.DUPLICATE_ID)
    report = lenient(repo, path, batch_entries=2)
    assert [(i.line, i.action, i.problem) for i in report.issues] == [
        (3, "skipped", LineProblem.DUPLICATE_ID)
    ]
    assert "line 6" in report.issues[0].reason  # strict names the repeat, lenient the loser
    assert ids(repo) == [("a", None), ("x", "a"), ("b", "x"), ("c", "b"), ("d", "b")]
    storage = repo.open("s").unwrap()
    assert storage.entry("b").unwrap().payload["message"]["text"] == "last"
    assert report.leaf_id == "d"  # the last line imported, as pi's leaf


def test_an_identical_repeat_is_skipped_without_a_second_pass(
    repo: SessionRepository, tmp_path: Path
) -> None:
    path = write(tmp_path, HEADER, msg("a", None), msg("b", "a"), msg("a", None), msg("c", "b"))
    report = lenient(repo, path)
    assert [(i.line, i.action, i.problem) for i in report.issues] == [
        (4, "skipped", LineProblem.DUPLICATE_ID)
    ]
    assert ids(repo) == [("a", None), ("b", "a"), ("c", "b")]


def test_a_line_nested_too_deeply_is_a_typed_refusal(
    repo: SessionRepository, tmp_path: Path
) -> None:
    deep = (
        '{"type":"custom","id":"deep","parentId":"a","timestamp":"2025-11-30T10:00:01.000Z",'
        '"customType":"x","data":' + "[" * 1200 + "]" * 1200 + "}"
    )
    path = write(tmp_path, HEADER, msg("a", None), deep, msg("b", "a"))
    refused_then_lenient(repo, path, 3, LineProblem.TOO_DEEP, "skipped")
    assert ids(repo) == [("a", None), ("b", "a")]


def test_an_entry_deeper_than_the_store_keeps_is_refused_as_from_the_api(
    repo: SessionRepository, tmp_path: Path
) -> None:
    """Readable at 100 levels, but deeper than any payload may nest: the raw line must not
    slip past the rule (its export would then fail), so it is refused like the API's."""
    deep = (
        '{"type":"custom","id":"deep","parentId":"a","timestamp":"2025-11-30T10:00:01.000Z",'
        '"customType":"x","data":' + "[" * 100 + "]" * 100 + "}"
    )
    path = write(tmp_path, HEADER, msg("a", None), deep, msg("b", "a"))
    refused_then_lenient(repo, path, 3, LineProblem.TOO_DEEP, "skipped")
    export_jsonl(repo, "s", io.StringIO()).unwrap()
    assert ids(repo) == [("a", None), ("b", "a")]


def test_leaf_entries_move_the_leaf_and_export_as_they_came(
    repo: SessionRepository, tmp_path: Path
) -> None:
    leaf = {"type": "leaf", "id": "l1", "parentId": "b", "timestamp": STAMP, "targetId": "a"}
    lost = {"type": "leaf", "id": "l2", "parentId": "a", "timestamp": STAMP, "targetId": "zz"}
    path = write(tmp_path, HEADER, msg("a", None), msg("b", "a"), leaf)
    report = import_jsonl(repo, path).unwrap()
    assert report.leaf_id == "a"  # the leaf entry's target, not the leaf entry
    storage = repo.open("s").unwrap()
    assert storage.entry("l1").unwrap().type == "leaf"
    assert (
        storage.append(NewEntry.message("c", "a", {"role": "user", "content": "y"}, timestamp=1))
        .unwrap()
        .parent_id
        == "a"
    )
    out = io.StringIO()
    export_jsonl(repo, "s", out).unwrap()
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert "leafId" not in lines[0]
    assert lines[3] == leaf
    repo.delete("s").unwrap()
    bad = write(tmp_path, HEADER, msg("a", None), lost, name="lost.jsonl")
    skipped = refused_then_lenient(repo, bad, 3, LineProblem.LEAF_TARGET_MISSING, "skipped")
    assert skipped.leaf_id == "a"
