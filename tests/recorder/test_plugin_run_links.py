"""What links a recorded run to its surroundings: the changed files of the tree it ran on
(from the same ``git status`` as the dirty flag) and the agent session it was made for
(``RUNSTORE_SESSION_ID`` / ``--runstore-session``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from plugin_runs import env_for, latest, run_pytest, write
from test_plugin_run_facts import _git, needs_git  # beside this file

from runstore.recorder._environment import GitProbe, GitStatus, _parse_status, git_status
from runstore.services.test_runs import MAX_CHANGED_FILES, ChangedFile


def _repository(tmp_path: Path) -> Path:
    folder = write(tmp_path / "proj", test_one="def test_one():\n    pass\n",
                   helper="VALUE = 1\n")
    _git(folder, "init", "-q", "-b", "trunk")
    _git(folder, "add", ".")
    _git(folder, "commit", "-q", "-m", "one")
    return folder


@needs_git
def test_a_run_records_the_changed_files_of_its_tree(tmp_path: Path) -> None:
    folder = _repository(tmp_path)
    head = _git(folder, "rev-parse", "HEAD")
    db = folder / ".runstore" / "runstore.db"
    run_pytest(folder, "--runstore")
    clean = latest(db, "proj")[0].environment
    assert (clean.git_commit, clean.git_branch, clean.git_dirty) == (head, "trunk", False)
    assert (clean.git_changed_files, clean.git_changed_files_truncated) == ((), False)

    (folder / "helper.py").write_text("VALUE = 2\n", encoding="utf-8")  # changed, unstaged
    (folder / "staged.py").write_text("X = 1\n", encoding="utf-8")
    _git(folder, "add", "staged.py")  # added to the index
    (folder / "sub dir").mkdir()
    (folder / "sub dir" / "ñew.py").write_text("", encoding="utf-8")  # an untracked folder
    (folder / "test_one.py").unlink()  # deleted: the run collects nothing, and says so
    result = run_pytest(folder, "--runstore")
    assert "runstore: run 2 recorded" in result.stdout, result.stdout + result.stderr
    dirty = latest(db, "proj")[0].environment
    assert (dirty.git_commit, dirty.git_dirty) == (head, True)
    assert dirty.git_changed_files == (
        ChangedFile("helper.py", " M"),
        ChangedFile("staged.py", "A "),
        ChangedFile("test_one.py", " D"),
        ChangedFile("sub dir/", "??"),
    )
    assert dirty.git_changed_files_truncated is False


@needs_git
def test_changed_files_are_relative_to_the_repository_root(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    folder = write(repo / "pkg", test_a="def test_a():\n    pass\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "a")
    (repo / "top.txt").write_text("outside the rootdir\n", encoding="utf-8")
    run_pytest(folder, "--runstore", "--rootdir", str(folder))
    env = latest(folder / ".runstore" / "runstore.db", "pkg")[0].environment
    assert env.git_changed_files == (ChangedFile("top.txt", "??"),)


@needs_git
def test_a_huge_dirty_tree_keeps_the_first_files_and_says_so(tmp_path: Path) -> None:
    folder = tmp_path / "repo"
    folder.mkdir()
    _git(folder, "init", "-q")
    for i in range(MAX_CHANGED_FILES + 5):
        (folder / f"f{i:05}.txt").write_bytes(b"")
    status = git_status(folder, budget=30.0)
    assert status is not None
    assert status.dirty
    assert status.truncated
    assert [f.path for f in status.changed] == [f"f{i:05}.txt" for i in range(MAX_CHANGED_FILES)]


@pytest.mark.parametrize(
    ("out", "expected"),
    [
        (b"", GitStatus(False, (), False)),
        (b" M a.py\0?? b/\0", GitStatus(True, (ChangedFile("a.py", " M"),
                                                ChangedFile("b/", "??")), False)),
        (b"A  \xff\xfe.py\0", GitStatus(True, (ChangedFile("\ufffd\ufffd.py", "A "),), False)),
        (b"ZZ odd\0 M ok\0", GitStatus(True, (ChangedFile("ok", " M"),), False)),  # unknown XY
        (b" M x\0 M x\0", GitStatus(True, (ChangedFile("x", " M"),), False)),
    ],
    ids=["clean", "two", "not utf-8", "unknown status", "repeated"],
)
def test_porcelain_output_is_read_as_git_prints_it(out: bytes, expected: GitStatus) -> None:
    assert _parse_status(out) == expected


def test_the_cap_counts_entries_without_decoding_the_rest() -> None:
    out = b"".join(b"?? f%d\0" % i for i in range(5))
    assert _parse_status(out, cap=5) == GitStatus(
        True, tuple(ChangedFile(f"f{i}", "??") for i in range(5)), False)
    cut = _parse_status(out, cap=2)
    assert (cut.changed, cut.truncated) == ((ChangedFile("f0", "??"), ChangedFile("f1", "??")),
                                            True)


@pytest.mark.parametrize("how", ["env", "option", "both"])
def test_a_run_records_its_agent_session(tmp_path: Path, how: str) -> None:
    folder = write(tmp_path / "proj", test_one="def test_one():\n    pass\n")
    args = ["--runstore"]
    env = env_for()
    if how in ("env", "both"):
        env["RUNSTORE_SESSION_ID"] = "from-env" if how == "both" else "0193a1b2-séance ✓"
    if how in ("option", "both"):
        args.append("--runstore-session=0193a1b2-séance ✓")
    result = run_pytest(folder, *args, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    run = latest(folder / ".runstore" / "runstore.db", "proj")[0]
    assert run.session_id == "0193a1b2-séance ✓"  # the option wins over the environment


def test_without_a_session_the_run_names_none(tmp_path: Path) -> None:
    folder = write(tmp_path / "proj", test_one="def test_one():\n    pass\n")
    result = run_pytest(folder, "--runstore", env=env_for(RUNSTORE_SESSION_ID=""))  # empty: unset
    assert result.returncode == 0, result.stdout + result.stderr
    assert latest(folder / ".runstore" / "runstore.db", "proj")[0].session_id is None


@pytest.mark.parametrize(
    ("where", "value", "reason"),
    [
        ("option", "", "the session id is blank"),
        ("option", " ", "the session id is blank"),
        ("env", "   ", "the session id is blank"),
        ("option", "a\tb", "must not hold a control character, found U+0009"),
        ("env", "x" * 257, "must be at most 256 characters"),
        ("env", "s\x1b[31m", "must not hold a control character, found U+001B"),
    ],
    ids=["empty option", "blank option", "blank env", "tab", "too long", "escape"],
)
def test_a_bad_session_id_is_a_usage_error_before_any_test_runs(
    tmp_path: Path, where: str, value: str, reason: str
) -> None:
    folder = write(tmp_path / "proj", test_one="def test_one():\n    pass\n")
    if where == "option":
        result = run_pytest(folder, "--runstore", f"--runstore-session={value}")
        named = "'--runstore-session'"
    else:
        result = run_pytest(folder, "--runstore", env=env_for(RUNSTORE_SESSION_ID=value))
        named = "RUNSTORE_SESSION_ID"
    assert result.returncode == 4, result.stdout + result.stderr
    assert f"Invalid value for {named}: {reason}" in result.stderr
    assert "test_one" not in result.stdout
    assert not (folder / ".runstore" / "runstore.db").exists()


@needs_git
def test_a_probe_started_early_answers_once_and_is_reaped_when_unread(tmp_path: Path) -> None:
    folder = _repository(tmp_path)
    (folder / "helper.py").write_text("VALUE = 3\n", encoding="utf-8")
    probe = GitProbe(folder)
    first = probe.result()
    assert first == GitStatus(True, (ChangedFile("helper.py", " M"),), False)
    assert probe.result() == first  # asked again: the same answer, git not run again
    unread = GitProbe(folder)
    process = unread._process
    assert process is not None
    unread.close()
    assert process.returncode is not None  # killed or finished, and reaped
    assert unread.result() is None
    assert GitProbe(folder, budget=0.0).result() is None  # no time to wait: no answer
    assert GitProbe(tmp_path / "nowhere").result() is None
