"""Acceptance: a generated suite with controlled flakiness, recorded run after run with
``pytest --runstore``, gets exactly the verdicts the rules give over the outcomes it planned.

The suite's conftest counts sessions in a file (``run.txt``); each test fails as ``FAILS``
says for that run: every second or third run (the file counter), at a seeded random rate of
30 %, never, or from run 3 on (a clean break). In ``OUTAGE_RUN`` every test fails, as when a
service the tests need is down: an outage by the default policy (at least 10 executed tests,
more than half failing), so those failures are never flaky evidence. The code never changes
between runs, so a flip is flaky evidence by ``same_code`` where the rules allow it.

After each run, every item's verdict (``DataReader.classify``) must equal
``runstore.services._test_runs_rules.classify`` over the window built from the plan: the
planned outcomes and the run's executed and failing counts, with the code fingerprint each
run stored (an environment fact the recorder tests check). At the end ``flaky_tests`` must
equal the rules too, the test that fails only in the outage is not flaky, and it would be
with the outage guard off.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_pytest_zoo import _env

from runstore.layers import build, sqlite
from runstore.services._test_runs_rules import (
    CaseHistory,
    WindowEntry,
    classify,
    flaky_entry,
    previous_window,
)
from runstore.services.test_runs import (
    DEFAULT_FLAKY_POLICY,
    Classification,
    DataReader,
    FlakyPolicy,
    Outcome,
    RunId,
)

RUNS = 8
OUTAGE_RUN = 5
NAMES = (
    "counter_2", "counter_3", "random_0", "random_1", "random_2", "random_3", "random_4",
    "stable_0", "stable_1", "stable_2", "stable_3", "broken",
)

FAILS = f'''
import random

OUTAGE_RUN = {OUTAGE_RUN}


def fails(name, run):
    """Whether test ``name`` fails in run ``run`` (0 first)."""
    if run == OUTAGE_RUN:
        return True
    kind, _, arg = name.partition("_")
    if kind == "counter":
        return run % int(arg) == 0
    if kind == "random":
        return random.Random(f"{{arg}}:{{run}}").random() < 0.3
    if kind == "broken":
        return run >= 3
    return False
'''
"""The plan, written into the suite and run here to know what each run should say."""

CONFTEST = '''
from pathlib import Path


def pytest_sessionstart(session):
    counter = Path(__file__).with_name("run.txt")
    counter.write_text(str(int(counter.read_text()) + 1 if counter.exists() else 0))
'''

MODULE = '''
from pathlib import Path

import pytest

from plan import fails

RUN = int(Path(__file__).with_name("run.txt").read_text())


@pytest.mark.parametrize("name", {names!r})
def test_controlled(name):
    assert not fails(name, RUN), f"{{name}} fails as planned in run {{RUN}}"
'''


def _plan() -> Any:
    namespace: dict[str, Any] = {}
    exec(FAILS, namespace)  # the plan this file itself wrote
    return namespace["fails"]


def _key(c: Any) -> tuple[Any, ...]:
    return (c.nodeid, c.classification, c.because.rule, c.because.run_ids)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("controlled")
    (folder / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    (folder / "plan.py").write_text(FAILS.lstrip("\n"), encoding="utf-8")
    (folder / "conftest.py").write_text(CONFTEST.lstrip("\n"), encoding="utf-8")
    module = MODULE.format(names=list(NAMES)).lstrip("\n")
    (folder / "test_controlled.py").write_text(module, encoding="utf-8")
    db = folder / "runs.db"
    for _ in range(RUNS):
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "runstore.pytest_plugin",
             "--runstore", f"--runstore-db={db}", "-p", "no:cacheprovider"],
            cwd=folder, env=_env(), capture_output=True, text=True, timeout=120, check=False,
        )
        assert done.returncode in (0, 1), done.stdout + done.stderr
        assert "runstore: run" in done.stdout, done.stdout
    return db


def test_every_run_gets_the_verdicts_of_the_rules(recorded: Path) -> None:
    fails = _plan()
    nodeids = {n: f"test_controlled.py::test_controlled[{n}]" for n in NAMES}
    history: dict[str, list[WindowEntry]] = {n: [] for n in NAMES}  # newest first
    outage_runs = set()
    with build(sqlite(recorded)) as container:
        reader = container.get(DataReader)
        (project,) = reader.projects().unwrap()
        runs = sorted(s.id for s in reader.list_runs(project, limit=RUNS).unwrap().items)
        assert len(runs) == RUNS
        for run_number, run in enumerate(runs):
            failing = sum(fails(n, run_number) for n in NAMES)
            if run_number == OUTAGE_RUN:
                assert failing == len(NAMES)
                outage_runs.add(run)
            stored = {t.nodeid: t for t in reader.tests(run).unwrap()}
            expected = []
            for name in NAMES:
                nodeid = nodeids[name]
                outcome = Outcome.FAILED if fails(name, run_number) else Outcome.PASSED
                assert stored[nodeid].outcome == outcome, (name, run_number)
                fingerprint = reader.history(project, nodeid).unwrap()
                code = next(e.fingerprint for e in fingerprint if e.run_id == run)
                now = WindowEntry(RunId(run), outcome, run_executed=len(NAMES),
                                  run_failing=failing, fingerprint=code)
                previous = previous_window(history[name], run)
                expected.append(classify(run, CaseHistory(nodeid, now, previous)))
                history[name].insert(0, now)
            got = reader.classify(run).unwrap()
            assert sorted(map(_key, got)) == sorted(map(_key, expected)), run_number
            for verdict in got:
                if verdict.classification is Classification.FLAKY:
                    assert not outage_runs & set(verdict.because.run_ids), verdict
        verdicts = {c.nodeid: c.classification for c in reader.classify(runs[-1]).unwrap()}
        assert Classification.FLAKY in verdicts.values()  # the counters flip on one code
        for policy in (DEFAULT_FLAKY_POLICY, FlakyPolicy(outage_share=1.0)):
            wanted = sorted(
                (nodeids[n], f.because)
                for n in NAMES
                if (f := flaky_entry(nodeids[n], history[n], policy)) is not None
            )
            listed = reader.flaky_tests(project, policy=policy).unwrap()
            assert sorted((f.nodeid, f.because) for f in listed) == wanted, policy
        guarded = {f.nodeid for f in reader.flaky_tests(project).unwrap()}
        unguarded = {f.nodeid for f in reader.flaky_tests(
            project, policy=FlakyPolicy(outage_share=1.0)).unwrap()}
        stable = nodeids["stable_0"]
        assert stable not in guarded  # failed only in the outage
        assert stable in unguarded
