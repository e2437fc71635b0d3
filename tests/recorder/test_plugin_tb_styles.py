"""A failure's recorded error does not depend on how pytest prints it (pytest in a subprocess).

``--tb`` only chooses how pytest formats a traceback: the same failure recorded under every
style (``auto``, ``long``, ``short``, ``line``, ``native``, ``no``), serial and under
``pytest-xdist``, has one exception type, message, frame list and cause chain, so one
failure signature, and ``runstore failures --new-signatures`` passes on every run after the
first. Only the stored text follows ``--tb``. The project fails in a test's call (with a cause
chain through a helper module), in a fixture's setup and teardown, and at collection.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from plugin_runs import run_pytest, write

from runstore.cli import cli
from runstore.layers import build, sqlite
from runstore.services.test_runs import DataReader, FailureRecord

TB_STYLES = ("auto", "long", "short", "line", "native", "no")
XDIST = ("-p", "xdist.plugin", "-n", "2")

HELPER = """
    def lookup(table, key):
        return table[key]
"""

TESTS = """
    import pytest

    import helper


    def test_always_fails():
        assert 1 == 2


    def test_chained():
        try:
            helper.lookup({}, "missing")
        except KeyError as exc:
            raise ValueError("lookup failed") from exc


    @pytest.fixture
    def broken_setup():
        raise RuntimeError("setup exploded")


    @pytest.fixture
    def broken_teardown():
        yield
        raise OSError("teardown exploded")


    def test_setup_error(broken_setup):
        pass


    def test_teardown_error(broken_teardown):
        pass
"""


def _failures(db: Path) -> list[list[FailureRecord]]:
    """The failures of each run of project ``p``, oldest run first."""
    with build(sqlite(db)) as container:
        reader = container.get(DataReader)
        runs = sorted(reader.list_runs("p", limit=100).unwrap().items, key=lambda run: run.id)
        return [list(reader.failures(run.id).unwrap()) for run in runs]


def _facts(failure: FailureRecord) -> tuple[Any, ...]:
    """Everything of a failure that must not follow ``--tb`` (its ``text`` may)."""
    causes = tuple((c.exception_type, c.message, c.frames) for c in failure.causes)
    return (failure.nodeid, failure.phase, failure.exception_type, failure.message,
            failure.frames, causes, failure.signature)


@pytest.mark.parametrize("parallel", [(), XDIST], ids=["serial", "xdist"])
def test_every_tb_style_records_one_signature(tmp_path: Path, parallel: tuple[str, ...]) -> None:
    if parallel:
        pytest.importorskip("xdist")
    project = write(tmp_path / "proj", helper=HELPER, test_f=TESTS,
                    test_broken="import module_that_does_not_exist\n")
    db = tmp_path / "runs.db"
    gates = []
    for style in TB_STYLES:
        done = run_pytest(project, *parallel, f"--tb={style}", "--continue-on-collection-errors",
                          "--runstore", f"--runstore-db={db}", "--runstore-project=p")
        assert done.returncode == 1, done.stdout + done.stderr
        gate = CliRunner().invoke(cli, ["--db", str(db), "failures", "--new-signatures"],
                                  catch_exceptions=False)
        gates.append((style, gate.exit_code))
    assert gates == [("auto", 1)] + [(style, 0) for style in TB_STYLES[1:]]

    runs = _failures(db)
    assert len(runs) == len(TB_STYLES)
    first = runs[0]
    assert [f.nodeid for f in first] == [
        "test_broken.py", "test_f.py::test_always_fails", "test_f.py::test_chained",
        "test_f.py::test_setup_error", "test_f.py::test_teardown_error",
    ]
    for style, failures in zip(TB_STYLES, runs, strict=True):
        assert [_facts(f) for f in failures] == [_facts(f) for f in first], style
        assert not any(f.is_new for f in failures if failures is not first), style
    by_node = {f.nodeid: f for f in first}
    always = by_node["test_f.py::test_always_fails"]
    assert always.message == "assert 1 == 2"
    assert [(f.path, f.function) for f in always.frames] == [
        ("test_f.py", "test_always_fails")
    ]
    chained = by_node["test_f.py::test_chained"]
    assert [(c.exception_type, [(f.path, f.function) for f in c.frames])
            for c in chained.causes] == [
        ("KeyError", [("test_f.py", "test_chained"), ("helper.py", "lookup")])
    ]
    assert by_node["test_f.py::test_setup_error"].frames[-1].function == "broken_setup"
    assert by_node["test_f.py::test_teardown_error"].frames[-1].function == "broken_teardown"

    with build(sqlite(db)) as container:
        listed = container.get(DataReader).failure_signatures("p").unwrap()
    assert len(listed.items) == len(first)
