"""``runstore triage`` on a project recorded by real ``pytest --runstore`` runs.

The project lives in its own git repository and is recorded five times (``RUN`` 1-5):

- run 1: everything passes on a clean commit (the green run); each later run is on a new
  commit (``version.py``, which the tests import), so the verdicts rest on history, not on
  one commit or one code fingerprint;
- runs 2-3: ``test_persistent`` starts failing, ``test_flaky`` fails, passes, ...;
- run 4: ``pytest -k test_ok`` passes, but ran a selection, so it is not green;
- run 5 (triaged): ``app.connect()`` raises, failing ``test_db_a``, ``test_db_b`` and
  ``test_db_c`` through one root cause (one group); ``test_new`` fails on its own assertion;
  ``test_persistent`` fails for the 3rd run in a row (since run 2); ``test_flaky`` fails
  again (oscillation); ``test_rerun`` passes on its rerun; ``test_added`` is new and fails;
  ``app.py`` was edited and ``notes.txt`` added (uncommitted), ``version.py`` committed,
  since run 1's commit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_json_schemas import validate  # beside this file

from runstore.cli import cli

APP = '''
import os


def connect():
    if os.environ["TRIAGE_RUN"] == "5":
        raise ConnectionError("database at port 5432 refused")
    return "connection"
'''

TESTS = '''
import os

import pytest

import app

try:  # the code of each run is its own (a new code fingerprint), as after an edit
    import version  # noqa: F401
except ImportError:  # run 1
    pass

RUN = int(os.environ["TRIAGE_RUN"])
PLANS = {"persistent": "PFF-F", "flaky": "PFP-F"}


def planned(name):
    assert PLANS[name][RUN - 1] == "P", f"{name} fails as planned in run {RUN}"


def test_ok():
    assert True


def test_persistent():
    planned("persistent")


def test_flaky():
    planned("flaky")


def test_db_a():
    assert app.connect()


def test_db_b():
    assert app.connect()


def test_db_c():
    assert app.connect()


def test_new():
    assert RUN < 5, "the new behaviour is wrong"


@pytest.mark.flaky(reruns=1)
def test_rerun(tmp_path_factory):
    marks = os.environ["TRIAGE_MARKS"]
    mark = os.path.join(marks, f"rerun-{RUN}")
    if RUN == 5 and not os.path.exists(mark):
        open(mark, "w").close()
        raise TimeoutError("the first attempt timed out")


if RUN == 5:
    def test_added():
        assert False, "added and failing"
'''

M = "test_project.py::"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "RUNSTORE_", "GIT_"))}
    return {**env, "PYTHONDONTWRITEBYTECODE": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
            **extra}


def _git(folder: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=runstore", "-c", "user.email=runstore@example.invalid",
         *args], cwd=folder, env=_env(), check=True, capture_output=True, text=True)
    return done.stdout.strip()


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("pytest_rerunfailures")
    folder = tmp_path_factory.mktemp("triage") / "project"
    folder.mkdir()
    (folder / "app.py").write_text(textwrap.dedent(APP), encoding="utf-8")
    (folder / "test_project.py").write_text(textwrap.dedent(TESTS), encoding="utf-8")
    (folder / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    (folder / ".gitignore").write_text(".runstore/\nmarks/\n", encoding="utf-8")
    (folder / "marks").mkdir()
    _git(folder, "init", "-q")
    _git(folder, "add", ".")
    _git(folder, "commit", "-q", "-m", "the project")
    (folder.parent / "first-commit").write_text(_git(folder, "rev-parse", "HEAD"), encoding="utf-8")
    for run in range(1, 6):
        if run > 1:  # each run on a commit of its own: a persistent failure is no flake
            (folder / "version.py").write_text(f"RUN = {run}\n", encoding="utf-8")
            _git(folder, "add", "version.py")
            _git(folder, "commit", "-q", "-m", f"version {run}")
        if run == 5:  # changes since the green run's commit: an edit and a new file
            with (folder / "app.py").open("a", encoding="utf-8") as app:
                app.write("# edited\n")
            (folder / "notes.txt").write_text("what changed\n", encoding="utf-8")
        selection = ["-k", "test_ok"] if run == 4 else []
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "runstore.pytest_plugin", "--runstore",
             "-p", "pytest_rerunfailures", "-p", "no:cacheprovider", *selection],
            cwd=folder, env=_env(TRIAGE_RUN=str(run), TRIAGE_MARKS=str(folder / "marks")),
            capture_output=True, text=True, timeout=120, check=False,
        )
        assert done.returncode in (0, 1), done.stdout + done.stderr
        assert "runstore: warning" not in done.stdout + done.stderr
    return folder


def run(project: Path, *args: str, monkeypatch: pytest.MonkeyPatch) -> Result:
    monkeypatch.chdir(project)  # git answers for the repository the command runs in
    return CliRunner().invoke(cli, list(args), catch_exceptions=False, terminal_width=400)


def as_json(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def answer(project: Path) -> Any:
    with pytest.MonkeyPatch.context() as patch:
        return as_json(run(project, "triage", "--format", "json", monkeypatch=patch))


def test_the_document_matches_its_schema(answer: Any) -> None:
    validate("triage.json", {**answer})
    assert answer["run"]["id"] == 5
    assert answer["run"]["status"] == "failed"
    assert answer["partial"] is False
    assert answer["trimmed"]["omitted"] == dict.fromkeys(answer["trimmed"]["omitted"], 0)


def test_a_shared_root_cause_is_one_group(answer: Any) -> None:
    groups = {tuple(g["nodeids"]): g for g in answer["groups"]}
    db = groups[(f"{M}test_db_a", f"{M}test_db_b", f"{M}test_db_c")]
    assert db["count"] == 3
    assert db["is_new"] is True
    assert db["error"] == "ConnectionError: database at port 5432 refused"
    assert db["exception_type"] == "ConnectionError"
    assert db["location"] == "app.py:7"
    assert db["function"] == "connect"
    assert answer["groups"][0] is not None
    assert answer["groups"][0]["count"] == 3
    assert all(g["count"] == 1 for g in answer["groups"][1:])


def test_each_failure_has_its_place(answer: Any) -> None:
    failures = {f["nodeid"]: f for f in answer["failures"]}
    assert set(failures) == {f"{M}test_{n}" for n in
                             ("persistent", "flaky", "db_a", "db_b", "db_c", "new", "added")}
    persistent = failures[f"{M}test_persistent"]
    assert persistent["classification"] == "persistent_failure"
    assert (persistent["streak"], persistent["failing_since"]) == (3, 2)
    assert persistent["because"]["rule"] == "failing_streak"
    assert persistent["because"]["run_ids"] == [2, 3, 5]
    flaky = failures[f"{M}test_flaky"]
    assert (flaky["classification"], flaky["because"]["rule"]) == ("flaky", "oscillation")
    assert flaky["window"] == ["failed", "passed", "failed", "passed"]
    for name in ("db_a", "new", "added"):
        new = failures[f"{M}test_{name}"]
        assert (new["classification"], new["because"]["rule"]) == ("new_failure",
                                                                   "first_failure")
        assert new["streak"] == 1
        assert new["is_new"] is True
    assert failures[f"{M}test_new"]["error"] == (
        "AssertionError: the new behaviour is wrong")
    assert failures[f"{M}test_new"]["location"].startswith("test_project.py:")
    order = [f["classification"] for f in answer["failures"]]
    assert order == sorted(order, key=["new_failure", "persistent_failure", "flaky"].index)


def test_flaky_suspects_and_slowest(answer: Any) -> None:
    suspects = {s["nodeid"]: s for s in answer["flaky"]}
    assert set(suspects) == {f"{M}test_flaky", f"{M}test_rerun"}
    assert suspects[f"{M}test_rerun"]["outcome"] == "passed"
    assert suspects[f"{M}test_rerun"]["because"]["rule"] == "passed_on_rerun"
    durations = [t["duration_ms"] for t in answer["slowest"]]
    assert len(durations) == 9
    assert durations == sorted(durations, reverse=True)


def test_since_the_last_green_run(answer: Any, project: Path) -> None:
    since = answer["since_green"]
    assert since["run"]["id"] == 1  # run 4 passed, but ran a selection
    first = (project.parent / "first-commit").read_text(encoding="utf-8")
    assert since["run"]["git_commit"] == first
    assert since["newly_failing"] == sorted(f"{M}test_{n}" for n in
                                            ("persistent", "flaky", "db_a", "db_b", "db_c",
                                             "new"))
    assert since["added_failing"] == [f"{M}test_added"]
    assert since["changed_files"] == ["app.py", "notes.txt", "version.py"]


def test_files_changed_are_null_outside_the_repository(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = project / ".runstore" / "runstore.db"
    document = as_json(run(tmp_path, "--db", str(db), "triage", "--format", "json",
                           monkeypatch=monkeypatch))
    assert document["since_green"]["run"]["id"] == 1
    assert document["since_green"]["changed_files"] is None


def test_the_text_names_every_part(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = run(project, "triage", monkeypatch=monkeypatch).stdout
    assert "7 failures, most urgent first:" in text
    assert "3 x ConnectionError: database at port 5432 refused  at app.py:7  (new)" in text
    assert "failing_streak: failing since run 2, 3 runs in a row" in text
    assert "flaky suspects (2):" in text
    assert "since the last green run (run 1, commit " in text
    assert "  added and failing: 1" in text
    assert "    notes.txt" in text


def test_the_trimmed_text_says_what_it_left_out(project: Path, answer: Any,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    bound = answer["trimmed"]["estimated_tokens"] // 2
    text = run(project, "triage", "--max-tokens", str(bound), monkeypatch=monkeypatch).stdout
    assert "7 failures, most urgent first:" in text
    assert "3 x ConnectionError: database at port 5432 refused" in text  # the whole count
    assert "... 3 left out by --max-tokens" in text  # the group's node ids
    assert "slowest:\n  ... 9 left out by --max-tokens" in text


def test_an_older_run_is_triaged_as_it_was(project: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    document = as_json(run(project, "triage", "3", "--format", "json",
                           monkeypatch=monkeypatch))
    assert [f["nodeid"] for f in document["failures"]] == [f"{M}test_persistent"]
    assert document["since_green"]["run"]["id"] == 1
    assert document["since_green"]["changed_files"] == ["app.py", "notes.txt", "version.py"]


@pytest.fixture(scope="module")
def crowded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """A project recorded once with 1,200 untracked files, so the run's own environment
    carries 1,000 changed files (``MAX_CHANGED_FILES``), and its triage document."""
    folder = tmp_path_factory.mktemp("crowded") / "project"
    folder.mkdir(parents=True)
    (folder / "test_crowded.py").write_text("def test_fails():\n    assert False\n",
                                            encoding="utf-8")
    (folder / ".gitignore").write_text(".runstore/\n", encoding="utf-8")
    _git(folder, "init", "-q")
    _git(folder, "add", ".")
    _git(folder, "commit", "-q", "-m", "the project")
    for index in range(1200):
        (folder / f"file-{index:04}.txt").write_text("", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "runstore.pytest_plugin", "--runstore",
         "-p", "no:cacheprovider"],
        cwd=folder, env=_env(), capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    with pytest.MonkeyPatch.context() as patch:
        document = as_json(run(folder, "triage", "--format", "json", monkeypatch=patch))
    assert len(document["run"]["environment"]["git_changed_files"]) == 1000
    return folder, document


@settings(deadline=None, max_examples=25,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fraction=st.floats(0.0, 1.2))
@pytest.mark.parametrize("which", ["project", "crowded"])
def test_max_tokens_bounds_the_output(request: pytest.FixtureRequest, which: str,
                                      fraction: float) -> None:
    if which == "crowded":
        project, answer = request.getfixturevalue("crowded")
    else:
        project, answer = request.getfixturevalue("project"), request.getfixturevalue("answer")
    full = answer["trimmed"]["estimated_tokens"]
    with pytest.MonkeyPatch.context() as patch:
        least = _least(project, patch)
        bound = max(least, int(least + fraction * (full - least)))
        result = run(project, "triage", "--format", "json", "--max-tokens", str(bound),
                     monkeypatch=patch)
    document = as_json(result)
    assert len(result.stdout) / 4 <= bound
    assert document["trimmed"]["estimated_tokens"] == -(-len(result.stdout) // 4)
    validate("triage.json", document)
    omitted = document["trimmed"]["omitted"]
    for key in ("failures", "groups", "flaky", "slowest"):
        assert len(document[key]) + omitted[key] == len(answer[key])
        assert document[key] == answer[key][: len(document[key])] or key == "groups"
    dropped = answer["groups"][len(document["groups"]):]  # their node ids went first
    assert omitted["group_nodeids"] == (sum(g["nodeids_omitted"] for g in document["groups"])
                                        + sum(g["count"] for g in dropped))
    for group in document["groups"]:
        assert len(group["nodeids"]) + group["nodeids_omitted"] == group["count"]
    environment, recorded = document["run"]["environment"], answer["run"]["environment"]
    for key in ("git_changed_files", "command_line"):
        assert environment[key] == recorded[key][: len(environment[key])]
        assert len(environment[key]) + omitted[key] == len(recorded[key])
    assert environment["git_changed_files_truncated"] == (
        recorded["git_changed_files_truncated"] or omitted["git_changed_files"] > 0)
    # the run's own lists trim too: the least bound is far below what they alone take
    assert least * 4 < len(json.dumps(recorded["git_changed_files"])) or which == "project"
    # the bound's own digits replace the null of the unbounded answer's ``max_tokens``: a
    # bound of 5 to 8 digits adds at most one character, so at most one token
    if bound >= full + 1:
        assert document["failures"] == answer["failures"]
        assert not any(omitted.values())


def _least(project: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    """The least bound the answer accepts, as the refusal of a far too small one names it."""
    refused = run(project, "triage", "--format", "json", "--max-tokens", "1",
                  monkeypatch=monkeypatch)
    assert refused.exit_code == 1
    reason = json.loads(refused.stdout)["error"]
    assert reason.startswith("--max-tokens 1 is too small for this answer")
    least = int(reason.split("at least ")[1].split()[0])
    accepted = run(project, "triage", "--format", "json", "--max-tokens", str(least),
                   monkeypatch=monkeypatch)
    assert accepted.exit_code == 0
    too_small = run(project, "triage", "--format", "json", "--max-tokens", str(least - 1),
                    monkeypatch=monkeypatch)
    assert too_small.exit_code == 1
    return least


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner), max_leaves=25)


@given(value=JSON_VALUES)
def test_the_size_estimate_counts_the_printed_characters(value: Any) -> None:
    from runstore.cli._triage import _length

    assert _length(value) == len(json.dumps(value, ensure_ascii=False, indent=2))


def test_tables_and_changed_files_show_control_characters_visibly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ANSI colour in a failure message never reaches the terminal through ``show``'s or
    ``triage``'s tables, and a file name with a line break stays one line of triage's list."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / ".gitignore").write_text(".runstore/\n", encoding="utf-8")
    test = folder / "test_colour.py"
    test.write_text("def test_red():\n    pass\n", encoding="utf-8")
    _git(folder, "init", "-q")
    _git(folder, "add", ".")
    _git(folder, "commit", "-q", "-m", "the project")
    for expected in (0, 1):  # a green run, then the failure and a new file since
        if expected:
            test.write_text('def test_red():\n    assert 0, "\\x1b[31mRED\\x1b[0m boom"\n',
                            encoding="utf-8")
            (folder / "two\nlines.txt").write_text("", encoding="utf-8")
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "runstore.pytest_plugin", "--runstore",
             "-p", "no:cacheprovider"],
            cwd=folder, env=_env(), capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == expected, done.stdout + done.stderr
    for command in ("show", "triage"):
        text = run(folder, command, monkeypatch=monkeypatch).stdout
        assert "\x1b" not in text
        assert "AssertionError: RED boom" in text
    assert "\n    two\\nlines.txt\n" in text


def test_a_syntax_error_is_located_in_the_test_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A test module that does not parse fails in the standard library's ``ast.parse``:
    triage names the module's own line, never a frame outside the project."""
    folder = tmp_path / "project"
    (folder / "tests").mkdir(parents=True)
    (folder / "tests" / "test_broken.py").write_text("x = 1\ndef test_bad(:\n    pass\n",
                                                     encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "runstore.pytest_plugin", "--runstore",
         "-p", "no:cacheprovider"],
        cwd=folder, env=_env(), capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    document = as_json(run(folder, "triage", "--format", "json", monkeypatch=monkeypatch))
    [failure] = document["failures"]
    assert (failure["exception_type"], failure["location"]) == (
        "SyntaxError", "tests/test_broken.py:2")
    assert document["groups"][0]["location"] == "tests/test_broken.py:2"
