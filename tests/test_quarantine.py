"""The quarantine file (``runstore.quarantine``): reading, matching, expiry, and edits that
keep the user's comments and change nothing when refused."""

from __future__ import annotations

import json
import os
from datetime import date
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from returns.result import Failure, Success

from runstore.quarantine import (
    QUARANTINE_FILE,
    Quarantine,
    QuarantineEntry,
    QuarantineFileError,
    add_entry,
    load_quarantine,
    quarantine_path,
    remove_entry,
)

COMMENTED = """\
# Tests that may fail without failing CI.

# the cache warmer races this one
[[quarantine]]  # since the 1st
nodeid = "tests/test_cache.py::test_warm"   # exact
owner = "alice"
reason = "races the cache warmer (#123)"
expires = 2026-12-31
added = 2026-12-01

# every network test, until the proxy is fixed
[[quarantine]]
pattern = "tests/net/*"
owner = "bob"
reason = "proxy flaps"
expires = 2026-11-30
# keep this line: it is about what follows

[[quarantine]]
nodeid = "tests/test_z.py::test_z[[]1]"
owner = "carol"
reason = "z"
expires = 2027-01-01
"""

TODAY = date(2026, 12, 1)


def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / QUARANTINE_FILE
    path.write_text(text, encoding="utf-8")
    return str(path)


def _entries(path: str) -> tuple[QuarantineEntry, ...]:
    loaded = load_quarantine(path)
    assert isinstance(loaded, Success), loaded
    found: Quarantine = loaded.unwrap()
    return found.entries


def test_a_missing_file_is_an_empty_quarantine(tmp_path: Path) -> None:
    path = str(tmp_path / QUARANTINE_FILE)
    assert load_quarantine(path) == Success(Quarantine(path))


def test_entries_are_read_in_file_order(tmp_path: Path) -> None:
    path = _write(tmp_path, COMMENTED)
    first, second, third = _entries(path)
    assert first == QuarantineEntry("alice", "races the cache warmer (#123)", date(2026, 12, 31),
                                    nodeid="tests/test_cache.py::test_warm",
                                    added=date(2026, 12, 1))
    assert (second.pattern, second.nodeid, second.added) == ("tests/net/*", None, None)
    assert third.key == "tests/test_z.py::test_z[[]1]"


def test_matching_exact_then_pattern_and_expiry_by_the_day(tmp_path: Path) -> None:
    quarantine = load_quarantine(_write(tmp_path, COMMENTED)).unwrap()
    warm = quarantine.match("tests/test_cache.py::test_warm", TODAY)
    assert warm.active is not None
    assert warm.active.owner == "alice"
    net = quarantine.match("tests/net/sub/test_dns.py::test_a[x]", date(2026, 11, 30))
    assert net.active is not None
    assert net.active.pattern == "tests/net/*"
    after = quarantine.match("tests/net/test_dns.py::test_a", TODAY)  # a day later
    assert after.active is None
    assert [e.owner for e in after.expired] == ["bob"]
    assert quarantine.match("tests/other.py::test_warm", TODAY).active is None
    # the pattern is case-sensitive and matches the whole node id
    assert quarantine.match("Tests/net/x.py::t", date(2026, 11, 1)).active is None
    assert quarantine.match("x/tests/net/x.py::t", date(2026, 11, 1)).active is None


def test_an_exact_entry_wins_over_an_earlier_pattern(tmp_path: Path) -> None:
    path = _write(tmp_path, """\
[[quarantine]]
pattern = "t.py::*"
owner = "a"
reason = "all"
expires = 2027-01-01

[[quarantine]]
nodeid = "t.py::x"
owner = "b"
reason = "one"
expires = 2027-01-01
""")
    found = load_quarantine(path).unwrap().match("t.py::x", TODAY).active
    assert found is not None
    assert found.owner == "b"


@pytest.mark.parametrize(("text", "entry", "key", "kind"), [
    ("[[quarantine]\n", None, None, "syntax"),
    ("owner = 'x'\n", None, "owner", "invalid"),
    ("quarantine = 3\n", None, "quarantine", "invalid"),
    ("[[quarantine]]\nowner='a'\nreason='r'\nexpires=2027-01-01\n", 1, None, "invalid"),
    ("[[quarantine]]\nnodeid='t'\npattern='t*'\nowner='a'\nreason='r'\nexpires=2027-01-01\n",
     1, None, "invalid"),
    ("[[quarantine]]\nnodeid='t'\nowner='a'\nreason='r'\n", 1, "expires", "invalid"),
    ("[[quarantine]]\nnodeid='t'\nowner='a'\nreason='r'\nexpires='2027-01-01'\n", 1,
     "expires", "invalid"),
    ("[[quarantine]]\nnodeid='t'\nowner='a'\nreason='r'\nexpires=2027-01-01T10:00:00\n", 1,
     "expires", "invalid"),
    ("[[quarantine]]\nnodeid='t'\nowner='a'\nreason='r'\nexpires=2027-02-30\n", None, None,
     "syntax"),
    ("[[quarantine]]\nnodeid='t'\nowner='a'\nreason='r'\nexpire=2027-01-01\n", 1, "expire",
     "invalid"),
    ("[[quarantine]]\nnodeid='t'\nowner='  '\nreason='r'\nexpires=2027-01-01\n", 1, "owner",
     "invalid"),
    ("[[quarantine]]\nnodeid='t'\nowner='a'\nreason=3\nexpires=2027-01-01\n", 1, "reason",
     "invalid"),
    ("[[quarantine]]\nnodeid='t'\nowner='a'\nreason='r'\nexpires=2027-01-01\nadded=1\n", 1,
     "added", "invalid"),
    ("[[quarantine]]\nnodeid='t'\nowner='a'\nreason='r'\nexpires=2027-01-01\n"
     "[[quarantine]]\nnodeid='t'\nowner='b'\nreason='s'\nexpires=2027-01-01\n", 2, "nodeid",
     "duplicate"),
])
def test_a_bad_file_is_refused_naming_the_entry_and_key(
    tmp_path: Path, text: str, entry: int | None, key: str | None, kind: str
) -> None:
    path = _write(tmp_path, text)
    refused = load_quarantine(path)
    assert isinstance(refused, Failure), refused
    error = refused.failure()
    assert (error.path, error.entry, error.key, error.kind) == (path, entry, key, kind)
    assert str(error).startswith(path)


def test_add_keeps_every_byte_of_the_file_and_appends_the_entry(tmp_path: Path) -> None:
    path = _write(tmp_path, COMMENTED)
    new = QuarantineEntry('dan "the man"', "ü\\ fails on Tuesdays", date(2027, 3, 1),
                          pattern="tests/t_*.py::*", added=TODAY)
    added = add_entry(path, new)
    assert isinstance(added, Success), added
    text = Path(path).read_text(encoding="utf-8")
    assert text.startswith(COMMENTED + "\n[[quarantine]]\n")
    assert _entries(path)[-1] == new
    assert len(_entries(path)) == 4


def test_add_to_a_missing_file_creates_it(tmp_path: Path) -> None:
    path = str(tmp_path / QUARANTINE_FILE)
    entry = QuarantineEntry("a", "r", date(2027, 1, 1), nodeid="t.py::x")
    assert add_entry(path, entry) == Success(Quarantine(path, (entry,)))
    assert Path(path).read_text(encoding="utf-8").startswith("[[quarantine]]\nnodeid = ")


def test_remove_takes_only_the_entry_and_its_own_comments(tmp_path: Path) -> None:
    path = _write(tmp_path, COMMENTED)
    gone = remove_entry(path, "tests/net/*")
    assert isinstance(gone, Success)
    assert gone.unwrap().owner == "bob"
    text = Path(path).read_text(encoding="utf-8")
    assert "bob" not in text
    assert "every network test" not in text
    assert "# keep this line: it is about what follows" in text
    assert "# the cache warmer races this one" in text
    assert "# exact" in text
    assert text.startswith("# Tests that may fail without failing CI.\n")
    assert [e.owner for e in _entries(path)] == ["alice", "carol"]
    first = remove_entry(path, "tests/test_cache.py::test_warm")
    assert isinstance(first, Success)
    text = Path(path).read_text(encoding="utf-8")
    assert "# Tests that may fail without failing CI." in text  # the file's own comment
    assert "races" not in text
    assert "# the cache warmer" not in text
    assert [e.owner for e in _entries(path)] == ["carol"]


def _refused_unchanged(path: str, result: object, kind: str) -> None:
    assert isinstance(result, Failure), result
    error = result.failure()
    assert isinstance(error, QuarantineFileError)
    assert error.kind == kind, error


@pytest.mark.parametrize("entry", [
    QuarantineEntry("alice", "again", date(2027, 1, 1), nodeid="tests/test_cache.py::test_warm"),
    QuarantineEntry(" ", "r", date(2027, 1, 1), nodeid="t::n"),
    QuarantineEntry("a", "line\nbreak", date(2027, 1, 1), nodeid="t::n"),
    QuarantineEntry("a", "r", date(2027, 1, 1), nodeid="t::\x00"),
    QuarantineEntry("a", "r", date(2027, 1, 1), nodeid="t::n", pattern="t::*"),
    QuarantineEntry("a", "r", date(2027, 1, 1)),
])
def test_a_refused_add_changes_nothing(tmp_path: Path, entry: QuarantineEntry) -> None:
    path = _write(tmp_path, COMMENTED)
    before = os.stat(path)
    result = add_entry(path, entry)
    kind = "duplicate" if entry.owner == "alice" else "invalid"
    _refused_unchanged(path, result, kind)
    assert Path(path).read_text(encoding="utf-8") == COMMENTED
    assert os.stat(path).st_mtime_ns == before.st_mtime_ns
    assert sorted(os.listdir(tmp_path)) == [QUARANTINE_FILE]  # no temporary file left


@pytest.mark.parametrize(("text", "kind"), [
    ("[[quarantine]\n", "syntax"),
    ("[[quarantine]]\nnodeid='t'\nowner='a'\nreason='r'\n", "invalid"),
    ("quarantine = [{nodeid='t', owner='a', reason='r', expires=2027-01-01}]\n", "invalid"),
])
def test_edits_of_a_bad_or_foreign_layout_change_nothing(
    tmp_path: Path, text: str, kind: str
) -> None:
    path = _write(tmp_path, text)
    _refused_unchanged(path, add_entry(path, QuarantineEntry(
        "a", "r", date(2027, 1, 1), nodeid="t::new")), kind)
    _refused_unchanged(path, remove_entry(path, "t"), kind)
    assert Path(path).read_text(encoding="utf-8") == text


def test_removing_an_unknown_entry_changes_nothing(tmp_path: Path) -> None:
    path = _write(tmp_path, COMMENTED)
    _refused_unchanged(path, remove_entry(path, "tests/nope.py::x"), "not_found")
    assert Path(path).read_text(encoding="utf-8") == COMMENTED


def test_the_quarantine_file_can_be_named_in_pyproject(tmp_path: Path) -> None:
    assert quarantine_path(str(tmp_path)) == Success(str(tmp_path / QUARANTINE_FILE))
    (tmp_path / "pyproject.toml").write_text('[tool.runstore]\nquarantine_file = "ci/q.toml"\n')
    assert quarantine_path(str(tmp_path)) == Success(str(tmp_path / "ci/q.toml"))
    (tmp_path / "pyproject.toml").write_text("[tool.runstore]\nquarantine_file = 3\n")
    refused = quarantine_path(str(tmp_path))
    assert isinstance(refused, Failure)
    assert refused.failure().key == "tool.runstore.quarantine_file"


_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cc", "Cs")), min_size=1,
                max_size=12).filter(str.strip)


@given(owners=st.lists(_TEXT, min_size=1, max_size=4, unique=True), data=st.data())
def test_adding_then_removing_restores_the_file(
    tmp_path_factory: pytest.TempPathFactory, owners: list[str], data: st.DataObject
) -> None:
    folder = tmp_path_factory.mktemp("q")
    path = _write(folder, COMMENTED)
    entries = [QuarantineEntry(o, o + " why", date(2027, 1, 1), nodeid=f"t.py::{o}")
               for o in owners]
    for entry in entries:
        assert isinstance(add_entry(path, entry), Success)
    assert _entries(path)[3:] == tuple(entries)
    for entry in data.draw(st.permutations(entries)):
        assert remove_entry(path, entry.key) == Success(entry)
    assert Path(path).read_text(encoding="utf-8") == COMMENTED


def _add_many(path: str, worker: int, count: int) -> None:
    for n in range(count):
        added = add_entry(path, QuarantineEntry(
            "alice", "races", date(2026, 12, 31), nodeid=f"tests/test_{worker}.py::test_{n}"))
        assert isinstance(added, Success), added


def test_edits_made_at_once_by_several_processes_lose_no_entry(tmp_path: Path) -> None:
    import multiprocessing

    path = str(tmp_path / QUARANTINE_FILE)
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_add_many, args=(path, w, 8)) for w in range(6)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    loaded = load_quarantine(path).unwrap()
    assert len(loaded.entries) == 48


_REFUSED_CHARS = ["\x1b", "\x7f", "\x85", "\x9f", "\u2028", "\u2029", "\u202a", "\u202e",
                  "\u2066", "\u2069"]


@pytest.mark.parametrize("char", _REFUSED_CHARS)
def test_a_control_separator_or_bidi_character_is_refused_in_the_file_and_on_add(
        tmp_path: Path, char: str) -> None:
    text = (f'[[quarantine]]\nnodeid = "t.py::t"\nowner = {json.dumps(f"al{char}ice")}\n'
            'reason = "r"\nexpires = 2026-12-31\n')  # escaped: TOML refuses a raw C0 itself
    path = _write(tmp_path, text)
    loaded = load_quarantine(path)
    assert isinstance(loaded, Failure)
    assert loaded.failure().key == "owner"
    assert f"U+{ord(char):04X}" in loaded.failure().reason
    other = str(tmp_path / "other.toml")
    added = add_entry(other, QuarantineEntry("bob", f"re{char}ason", date(2026, 12, 31),
                                             nodeid="t.py::t"))
    assert isinstance(added, Failure)
    assert added.failure().key == "reason"
    assert not os.path.exists(other)


@pytest.mark.parametrize("pattern", ["*", "**", "*::*", "*/*", "?*"])
def test_a_pattern_of_wildcards_only_is_refused_in_the_file_and_on_add(
        tmp_path: Path, pattern: str) -> None:
    path = _write(tmp_path, f'[[quarantine]]\npattern = "{pattern}"\nowner = "a"\n'
                  'reason = "r"\nexpires = 2026-12-31\n')
    loaded = load_quarantine(path)
    assert isinstance(loaded, Failure)
    assert (loaded.failure().entry, loaded.failure().key) == (1, "pattern")
    other = str(tmp_path / "other.toml")
    added = add_entry(other, QuarantineEntry("a", "r", date(2026, 12, 31), pattern=pattern))
    assert isinstance(added, Failure)
    assert added.failure().key == "pattern"
    assert not os.path.exists(other)


@pytest.mark.parametrize(("line", "key"), [("expires = 9999-12-31", "expires"),
                                           ("expires = 2026-12-31\nadded = 2027-06-01", "added")])
def test_reading_applies_the_date_limits_add_applies(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, line: str, key: str) -> None:
    import runstore.quarantine as module

    monkeypatch.setattr(module, "today", lambda: TODAY)
    path = _write(tmp_path, f'[[quarantine]]\nnodeid = "t.py::t"\nowner = "a"\nreason = "r"\n'
                  f"{line}\n")
    loaded = load_quarantine(path)
    assert isinstance(loaded, Failure)
    assert (loaded.failure().entry, loaded.failure().key) == (1, key)
    path = _write(tmp_path, '[[quarantine]]\nnodeid = "t.py::t"\nowner = "a"\nreason = "r"\n'
                  "expires = 2036-11-29\nadded = 2026-12-02\n")  # the limits, a day of slack
    assert isinstance(load_quarantine(path), Success)
