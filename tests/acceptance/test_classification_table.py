"""Acceptance: every row of README.md's classification table is what the plugin's line,
``runstore show``, ``runstore flaky`` and ``runstore failures`` (text and JSON) say.

The table is read from README.md itself, so the document and the code cannot drift apart;
it must also equal ``CLASSIFICATION_TABLE``, the code's own copy. Each row becomes one test
of a generated pytest project whose outcome in each run follows a plan (oldest run first),
and the project is recorded with ``pytest --runstore`` once per run; then the commands are
asked about the last run. A row whose window is plain letters (```F P P```) is planned from
them; the other rows are planned in ``SCENARIOS``. Rows on one git commit run in their own
git repository: one committed and clean, one with a changed tracked file. The rest run
outside any repository, where no commit is known, so the same-commit rule cannot apply.
Every test module imports ``code_version.py`` (ignored by git), rewritten before each run, so
each run has code of its own (a new code fingerprint) as after an edit; the two projects of
the one-fingerprint row (outside git, and a dirty tree) keep one ``code_version.py``.
The outage row's project has ten more tests that fail with it in its first run (an outage by
the default policy); the configured rows' projects set ``[tool.runstore.flaky]`` in their
``pyproject.toml``, which the plugin reads at the rootdir and the commands walking up from
the project's folder (every other project has a ``pyproject.toml`` without it).

Plan letters: ``P`` passes, ``F`` fails, ``R`` fails and then passes on its rerun
(pytest-rerunfailures), ``T`` passes and then fails on its repeat (the project ``repeated``
records every run with ``--runstore-repeat 2``), ``S`` is skipped, ``X`` xfails, ``-`` the
row's window has not begun
(skipped, so not executed and not in history).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest
from test_pytest_zoo import _env

from runstore.layers import build, sqlite
from runstore.recorder._environment import GIT_BUDGET_SECONDS
from runstore.services.test_runs import CLASSIFICATION_TABLE, DataReader

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
HEADER = "| window (newest first) | verdict | because |"
RUNSTORE = Path(sys.executable).parent / "runstore"

PLAIN, CLEAN, DIRTY = "outside-git", "clean-commit", "dirty-tree"
"""The projects: outside any repository, one clean commit, one commit with a changed file."""
REPEATED = "repeated"
"""A project outside any repository whose runs repeat every test twice."""
SAME_PLAIN, SAME_DIRTY = "same-code", "same-code-dirty-tree"
"""Projects whose code is one between runs: outside any repository, a commit with a change."""
OUTAGE = "outage"
"""A project outside any repository whose first run is an outage: ``OUTAGE_FILLERS`` more
tests fail in it with the row's test, then pass."""
OUTAGE_FILLERS = 10
CONFIGURED: dict[str, str] = {
    "window-3": "window = 3\n",
    "flip-rate-0.6": "flip_rate = 0.6\n",
}
"""Projects outside any repository whose ``pyproject.toml`` sets ``[tool.runstore.flaky]``
(every other project has a ``pyproject.toml`` without it: the defaults)."""

SCENARIOS: dict[str, tuple[tuple[str, str], ...]] = {
    "`P` after a failed rerun attempt in the same run": ((PLAIN, "R"),),
    "`P P`, the older `P` after a failed rerun attempt": ((PLAIN, "RP"),),
    "`F` after a passing repeat in the same run": ((REPEATED, "T"),),
    "`F` and `P` with one code fingerprint (no git needed, dirty tree fine)": (
        (SAME_PLAIN, "PF"), (SAME_DIRTY, "PF")),
    "`F` and `P` on one commit with a clean tree": ((CLEAN, "PF"),),
    "`F P` on one commit with a dirty or unknown tree": ((DIRTY, "PF"), (PLAIN, "PF")),
    "skipped or xfailed in this run": ((PLAIN, "PS"), (PLAIN, "PX")),
    "`F P F`, the older `F` in a run where most tests failed": ((OUTAGE, "FPF"),),
    "`P F P F` with `window = 3` configured": (("window-3", "FPFP"),),
    "`F P P P F` with `flip_rate = 0.6` configured": (("flip-rate-0.6", "FPPPF"),),
}
"""(project, plan oldest first) for each row whose window is not plain letters."""


@attrs.frozen
class Row:
    """One row of the table: its window text, verdict and rule (the first word of the
    because column)."""

    window: str
    verdict: str
    rule: str


def table_rows(markdown: str) -> list[Row]:
    """The rows of the classification table in ``markdown`` (the one under ``HEADER``)."""
    lines = markdown.splitlines()
    start = lines.index(HEADER) + 2
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        window, verdict, because = (cell.strip() for cell in line.strip("|").split(" | "))
        rows.append(Row(window, verdict, because.split()[0]))
    return rows


def _table_lines(markdown: str) -> list[str]:
    lines = markdown.splitlines()
    start = lines.index(HEADER)
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return lines[start:end]


ROWS = table_rows(README.read_text(encoding="utf-8"))


@attrs.frozen
class Case:
    """One test of a generated project, planned from one table row."""

    row: Row
    project: str
    plan: str
    name: str

    @property
    def nodeid(self) -> str:
        return f"test_verdicts.py::{self.name}"

    @property
    def now(self) -> str:
        return self.plan[-1]

    @property
    def failing_now(self) -> bool:
        return self.now in "FT"

    @property
    def streak(self) -> int:
        """Runs in a row that end the plan failing."""
        return len(self.plan) - len(self.plan.rstrip("FT"))


def plans(row: Row) -> tuple[tuple[str, str], ...]:
    plain = re.fullmatch(r"`([FP](?: [FP])*)`", row.window)
    if plain:
        return ((PLAIN, plain.group(1).replace(" ", "")[::-1]),)
    assert row.window in SCENARIOS, f"no plan for README row {row.window!r}: add one"
    return SCENARIOS[row.window]


CASES = [
    Case(row, project, plan, f"test_row{r:02d}_{k}")
    for r, row in enumerate(ROWS, 1)
    for k, (project, plan) in enumerate(plans(row))
]

TEST_MODULE_HEAD = '''
import json
import os
from pathlib import Path

import pytest

import code_version  # noqa: F401  (the project's code: new in each run, or one for all)

PLAN = json.loads(Path(__file__).with_name("plan.json").read_text())
RUN = int(os.environ["VERDICT_RUN"])


def planned(name):
    token = PLAN[name][RUN]
    if token == "-":
        pytest.skip("the window of this row has not begun")
    if token == "S":
        pytest.skip("skipped in this run")
    if token == "X":
        pytest.xfail("xfailed in this run")
    if token == "R":
        mark = Path(os.environ["VERDICT_MARKS"]) / f"{name}-{RUN}"
        if not mark.exists():
            mark.write_text("first attempt")
            return "F"
        return "P"
    if token == "T":
        mark = Path(os.environ["VERDICT_MARKS"]) / f"{name}-{RUN}"
        if not mark.exists():
            mark.write_text("first execution")
            return "P"
        return "F"
    return token
'''

TEST_FUNCTION = '''

{marker}def {name}():
    assert planned("{name}") == "P", "{name} fails as planned"
'''


@attrs.frozen
class Answers:
    """What the commands say of a project's last run, in text and JSON."""

    show: dict[str, Any]
    show_text: str
    flaky: dict[str, Any]
    flaky_text: str
    failures: dict[str, Any]
    failures_text: str


@attrs.frozen
class Project:
    """A generated project, the output of its last recorded run and the commands' answers."""

    folder: Path
    db: Path
    cases: tuple[Case, ...]
    last_output: str

    def ask(self) -> Answers:
        return Answers(
            show={t["nodeid"]: t for t in cli_json(self, "show", "latest")["tests"]},
            show_text=cli(self, "show", "latest", "--all"),
            flaky={f["nodeid"]: f for f in cli_json(self, "flaky")["flaky"]},
            flaky_text=cli(self, "flaky"),
            failures={f["nodeid"]: f for f in cli_json(self, "failures")["failures"]},
            failures_text=cli(self, "failures"),
        )


def _no_git_settings(env: dict[str, str]) -> dict[str, str]:
    # GIT_DIR and the like (set inside git hooks) would point git at another repository.
    return {k: v for k, v in env.items() if not k.startswith("GIT_")}


def _git(folder: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=runstore", "-c", "user.email=runstore@example.invalid",
         *args], cwd=folder, env=_no_git_settings(dict(os.environ)), check=True,
        capture_output=True,
    )


def record_project(base: Path, name: str, cases: list[Case]) -> Project:
    """Write the project, then record one pytest run per planned run."""
    folder = base / name
    folder.mkdir()
    runs = max(len(c.plan) for c in cases)
    plan = {c.name: "-" * (runs - len(c.plan)) + c.plan for c in cases}
    (folder / "plan.json").write_text(json.dumps(plan, indent=1), encoding="utf-8")
    (folder / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    if name == OUTAGE:  # more tests, failing with the row's in its first run only
        fillers = [f"test_outage_filler_{n}" for n in range(OUTAGE_FILLERS)]
        plan.update(dict.fromkeys(fillers, "F" + "P" * (runs - 1)))
        (folder / "plan.json").write_text(json.dumps(plan, indent=1), encoding="utf-8")
    source = TEST_MODULE_HEAD.lstrip("\n") + "".join(
        TEST_FUNCTION.format(
            name=test, marker="@pytest.mark.flaky(reruns=1)\n" if "R" in plan[test] else ""
        )
        for test in plan
    )
    flaky = CONFIGURED.get(name)
    (folder / "pyproject.toml").write_text(
        "[project]\nname = 'verdicts'\n"
        + ("" if flaky is None else f"\n[tool.runstore.flaky]\n{flaky}"),
        encoding="utf-8",
    )
    (folder / "test_verdicts.py").write_text(source, encoding="utf-8")
    (folder / ".gitignore").write_text("code_version.py\n", encoding="utf-8")
    same_code = name in (SAME_PLAIN, SAME_DIRTY)
    if name in (CLEAN, DIRTY, SAME_DIRTY):
        _git(folder, "init", "-q")
        _git(folder, "add", ".")
        _git(folder, "commit", "-q", "-m", "the project")
        if name in (DIRTY, SAME_DIRTY):  # a change to a tracked file
            with (folder / "pytest.ini").open("a", encoding="utf-8") as ini:
                ini.write("# changed, not committed\n")
    marks = base / f"{name}-marks"
    marks.mkdir()
    db = base / f"{name}.db"
    output = ""
    for run in range(runs):
        version = "one" if same_code else run
        (folder / "code_version.py").write_text(f"VERSION = {version!r}\n", encoding="utf-8")
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "runstore.pytest_plugin", "--runstore",
             f"--runstore-db={db}", "-p", "pytest_rerunfailures", "-p", "no:cacheprovider",
             "-rA", *(["--runstore-repeat=2"] if name == REPEATED else [])],
            cwd=folder, env=_no_git_settings(
                {**_env(), "VERDICT_RUN": str(run), "VERDICT_MARKS": str(marks)}),
            capture_output=True, text=True, timeout=120, check=False,
        )
        output = done.stdout + done.stderr
        assert done.returncode in (0, 1), output
        assert "runstore: warning" not in output, output
    if name in (CLEAN, DIRTY, SAME_DIRTY):
        with build(sqlite(db)) as container:
            page = container.get(DataReader).list_runs(name, limit=runs).unwrap()
        assert {r.environment.git_dirty for r in page.items} == {name != CLEAN}, (
            "git status gave no answer within the recorder's GIT_BUDGET_SECONDS "
            f"({GIT_BUDGET_SECONDS} s), so the tree counts as unknown: "
            f"{[r.environment for r in page.items]}"
        )
    return Project(folder, db, tuple(cases), output)


@pytest.fixture(scope="module")
def projects(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Project]:
    pytest.importorskip("pytest_rerunfailures")
    base = tmp_path_factory.mktemp("verdicts")
    by_project: dict[str, list[Case]] = {}
    for case in CASES:
        by_project.setdefault(case.project, []).append(case)
    return {name: record_project(base, name, cases) for name, cases in by_project.items()}


@pytest.fixture(scope="module")
def answers(projects: dict[str, Project]) -> dict[str, Answers]:
    return {name: project.ask() for name, project in projects.items()}


def cli(project: Project, *args: str) -> str:
    done = subprocess.run(
        [str(RUNSTORE), "--db", str(project.db), *args], cwd=project.folder,
        env={**_env(), "COLUMNS": "400"}, capture_output=True, text=True, timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def cli_json(project: Project, *args: str) -> Any:
    document = json.loads(cli(project, "--format", "json", *args))
    assert isinstance(document, dict)
    return document


def _line_with(text: str, nodeid: str) -> str:
    found = [line for line in text.splitlines() if nodeid in line]
    assert found, f"{nodeid} missing from\n{text}"
    return found[0]


# -- the table itself -----------------------------------------------------------------------


def test_the_readme_table_is_the_code_table() -> None:
    assert _table_lines(README.read_text(encoding="utf-8")) == _table_lines(CLASSIFICATION_TABLE)


def test_every_planned_row_is_in_the_readme() -> None:
    assert set(SCENARIOS) <= {row.window for row in ROWS}
    assert len(ROWS) >= 10


# -- the plugin's line ----------------------------------------------------------------------

_LINE = re.compile(r"^runstore: run (?P<run>\d+) recorded: (?P<parts>.*) \(runstore .*\)$", re.M)


def line_counts(output: str) -> dict[str, int]:
    """The plugin line's counts: failed, new, flaky, recovered (0 when not mentioned)."""
    found = _LINE.search(output)
    assert found, output[-2000:]
    counts = {"failed": 0, "new": 0, "flaky": 0, "recovered": 0}
    for part in found["parts"].split(", "):
        if matched := re.fullmatch(r"(\d+) new failures?", part):
            counts["failed"] = counts["new"] = int(matched[1])
        elif matched := re.fullmatch(r"(\d+) (failed|new|flaky|recovered)", part):
            counts[matched[2]] = int(matched[1])
        else:
            assert part in ("none new", "no failures"), part
    return counts


@pytest.mark.parametrize(
    "name", [PLAIN, CLEAN, DIRTY, SAME_PLAIN, SAME_DIRTY, OUTAGE, *CONFIGURED]
)
def test_the_plugin_line_counts_the_table_verdicts(projects: dict[str, Project], name: str) -> None:
    project = projects[name]
    cases = project.cases
    assert line_counts(project.last_output) == {
        "failed": sum(c.failing_now for c in cases),
        # New: failing now with a signature no earlier run of the project recorded.
        "new": sum(c.failing_now and "F" not in c.plan[:-1] for c in cases),
        "flaky": sum(c.row.verdict == "flaky" for c in cases),
        "recovered": sum(c.row.verdict == "recovered" for c in cases),
    }, project.last_output[-2000:]


# -- the commands, row by row ---------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=[f"{c.name}:{c.row.window}" for c in CASES])
def test_show_flaky_and_failures_give_the_row_verdict(
    answers: dict[str, Answers], case: Case
) -> None:
    said = answers[case.project]
    verdict, rule = case.row.verdict, case.row.rule

    shown = said.show[case.nodeid]
    assert (shown["classification"], shown["because"]["rule"]) == (verdict, rule), shown
    line = _line_with(said.show_text, case.nodeid)
    assert verdict in line, line
    assert rule in line, line

    if verdict == "flaky":
        assert said.flaky[case.nodeid]["because"]["rule"] == rule, said.flaky[case.nodeid]
        assert rule in _line_with(said.flaky_text, case.nodeid)
    else:
        assert case.nodeid not in said.flaky, said.flaky[case.nodeid]
        assert case.nodeid not in said.flaky_text, said.flaky_text

    if case.failing_now:
        failure = said.failures[case.nodeid]
        assert (failure["classification"], failure["because"]["rule"]) == (verdict, rule)
        assert failure["streak"] == case.streak, failure
        block = said.failures_text.split(case.nodeid, 1)[1].split("\nFAILED ", 1)[0]
        assert verdict in _line_with(said.failures_text, case.nodeid)
        assert f"because {rule}" in block, block
    else:
        assert case.nodeid not in said.failures, said.failures[case.nodeid]
        assert case.nodeid not in said.failures_text, said.failures_text


def test_the_plan_of_a_plain_row_reads_its_window_backwards() -> None:
    assert plans(Row("`F P P`", "new_failure", "first_failure")) == ((PLAIN, "PPF"),)
    case = Case(Row("`F F P`", "persistent_failure", "failing_streak"), PLAIN, "PFF", "t")
    assert (case.now, case.failing_now, case.streak) == ("F", True, 2)
