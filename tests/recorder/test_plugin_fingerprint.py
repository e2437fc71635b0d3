"""End to end: the plugin records a code fingerprint per test per run, and a flip on unchanged
code is flaky because ``same_code``, with no git repository and on a dirty tree; the same
flip after an edit of the code the test imported is not.

The test's outcome follows a counter file outside the project (``FLIP_COUNTER``): it passes
in its first run and fails in its second, while its code stays the same.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from plugin_runs import env_for, run_pytest, write

from runstore.layers import build, sqlite
from runstore.services.test_runs import (
    Classification,
    DataReader,
    EvidenceRule,
    TestClassification,
)

PROJECT = "flips"
NODEID = "tests/test_cart.py::test_total"


def make_project(base: Path) -> Path:
    folder = base / PROJECT
    write(folder, **{"pytest.ini": "[pytest]\n"})
    write(folder / "shop", __init__="", cart="def total(prices):\n    return sum(prices)\n")
    write(folder / "tests", conftest="", test_cart='''
        import os
        from pathlib import Path

        from shop.cart import total


        def test_total():
            counter = Path(os.environ["FLIP_COUNTER"])
            runs = int(counter.read_text()) if counter.exists() else 0
            counter.write_text(str(runs + 1))
            assert runs == 0, "fails from its second run on"
            assert total([1, 2]) == 3


        def test_steady():
            assert total([]) == 0
    ''')
    return folder


def git(folder: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=runstore", "-c", "user.email=runstore@example.invalid", *args],
        cwd=folder, check=True, capture_output=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
    )


def record(folder: Path, counter: Path, *args: str) -> str:
    db = folder.parent / "runs.db"
    done = run_pytest(folder, "--runstore", f"--runstore-db={db}", *args,
                      env=env_for(FLIP_COUNTER=str(counter)))
    assert done.returncode in (0, 1), done.stdout + done.stderr
    assert "runstore: warning" not in done.stdout, done.stdout
    return done.stdout


def verdict(folder: Path) -> tuple[TestClassification, list[str | None]]:
    """The newest run's verdict of the flipping test and its fingerprints, oldest first."""
    with build(sqlite(folder.parent / "runs.db")) as container:
        reader = container.get(DataReader)
        run = reader.latest_run(PROJECT).unwrap()
        (found,) = [c for c in reader.classify(run.id).unwrap() if c.nodeid == NODEID]
        history = reader.history(PROJECT, NODEID).unwrap()
        stored = {t.nodeid: t.fingerprint for t in reader.tests(run.id).unwrap()}
    assert stored[NODEID] == history[0].fingerprint
    return found, [h.fingerprint for h in reversed(history)]


@pytest.mark.parametrize(
    "where", ["no-git", "dirty-tree", "no-git-xdist"],
)
def test_a_flip_on_unchanged_code_is_flaky_because_same_code(tmp_path: Path, where: str) -> None:
    folder = make_project(tmp_path)
    if where == "dirty-tree":
        git(folder, "init", "-q")
        git(folder, "add", ".")
        git(folder, "commit", "-q", "-m", "the project")
        (folder / "pytest.ini").write_text("[pytest]\n# changed, not committed\n")
    extra = ("-p", "xdist", "-n", "1") if where.endswith("xdist") else ()
    counter = tmp_path / "counter"
    record(folder, counter, *extra)
    output = record(folder, counter, *extra)
    found, fingerprints = verdict(folder)
    assert (found.classification, found.because.rule) == (
        Classification.FLAKY, EvidenceRule.SAME_CODE
    ), found
    first, second = fingerprints
    assert first == second
    assert first is not None
    assert len(first) == 32
    assert f"code fingerprint {first[:12]}" in found.because.summary
    assert found.because.run_ids == (1, 2)
    assert "runs 1, 2" in found.because.summary
    assert "1 flaky" in output


@pytest.mark.parametrize("edited", ["shop/cart.py", "tests/test_cart.py", "tests/conftest.py"])
def test_the_same_flip_after_an_edit_of_its_code_is_not_same_code(
    tmp_path: Path, edited: str
) -> None:
    folder = make_project(tmp_path)
    counter = tmp_path / "counter"
    record(folder, counter)
    with (folder / edited).open("a", encoding="utf-8") as source:
        source.write("# edited\n")
    record(folder, counter)
    found, (first, second) = verdict(folder)
    assert first != second
    assert (found.classification, found.because.rule) == (
        Classification.NEW_FAILURE, EvidenceRule.FIRST_FAILURE
    ), found


def test_an_edit_of_a_module_no_test_loaded_keeps_the_fingerprint(tmp_path: Path) -> None:
    folder = make_project(tmp_path)
    write(folder / "shop", unused="VALUE = 1\n")
    counter = tmp_path / "counter"
    record(folder, counter)
    (folder / "shop" / "unused.py").write_text("VALUE = 2\n")
    record(folder, counter)
    found, (first, second) = verdict(folder)
    assert first == second
    assert found.because.rule is EvidenceRule.SAME_CODE
