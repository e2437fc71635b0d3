"""Acceptance: what ``pytest --runstore`` records agrees with pytest's own ``--junitxml`` and
``-rA`` for the same run, item by item, on the suites of ``../shared/acceptance/pytest-zoo``
(plus the extra expectations of its README), under ``pytest-xdist``, with two recording
processes at once, and (opt-in, ``RUNSTORE_SLOW=1``) on the test suites of real packages.

Every run is a subprocess on a fresh writable copy of the folder: ``interrupt/`` raises
``KeyboardInterrupt``, which would also stop an in-process outer pytest.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import attrs
import pytest
from returns.result import Failure

from runstore.layers import build, sqlite
from runstore.services.errors import NotFound
from runstore.services.test_runs import (
    Classification,
    DataReader,
    EvidenceRule,
    FailureRecord,
    Outcome,
    Phase,
    RunStatus,
    RunSummary,
    TestRecord,
)

ROOT = Path(__file__).resolve().parents[2]
ZOO = ROOT.parent / "shared" / "acceptance" / "pytest-zoo"

needs_zoo = pytest.mark.acceptance_inputs(ZOO)  # skipped when missing, failed under CI


# -- running pytest -------------------------------------------------------------------------------


@attrs.frozen
class Ran:
    """One recorded pytest run: its exit code, output, junitxml and what runstore stored."""

    returncode: int
    output: str
    junit: Path
    run: RunSummary
    tests: dict[str, TestRecord]
    failures: dict[str, FailureRecord]


def _env() -> dict[str, str]:
    # Only the plugins a run needs are loaded (-p below): starting pytest with every plugin
    # the development environment has installed costs seconds per run.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "RUNSTORE_"))}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    return env


XDIST = ("-p", "xdist.plugin", "-n", "2")


def fresh_copy(folder: str, into: Path) -> Path:
    """A writable copy of zoo ``folder`` (the zoo itself is read-only in CI)."""
    target = into / folder
    shutil.copytree(ZOO / folder, target)
    for path in [target, *target.rglob("*")]:
        path.chmod(path.stat().st_mode | stat.S_IWUSR | (stat.S_IXUSR if path.is_dir() else 0))
    return target


def pytest_command(folder: Path, db: Path, junit: Path, *args: str) -> list[str]:
    return [
        sys.executable, "-m", "pytest", "-p", "runstore.pytest_plugin", "--runstore",
        f"--runstore-db={db}", f"--junitxml={junit}", "-rA", "-p", "no:cacheprovider", *args,
    ]


def read_latest(db: Path, project: str) -> tuple[RunSummary, dict[str, TestRecord],
                                                  dict[str, FailureRecord]]:
    with build(sqlite(db)) as container:
        reader = container.get(DataReader)
        run = reader.latest_run(project).unwrap()
        tests = {t.nodeid: t for t in reader.tests(run.id).unwrap()}
        failures = {f.nodeid: f for f in reader.failures(run.id).unwrap()}
    return run, tests, failures


def record(folder: Path, db: Path, *args: str, name: str = "junit.xml") -> Ran:
    """Run pytest on ``folder`` with runstore, junitxml and -rA; read back the newest run."""
    junit = folder.parent / f"{folder.name}-{name}"
    done = subprocess.run(
        pytest_command(folder, db, junit, *args), cwd=folder, env=_env(),
        capture_output=True, text=True, errors="replace", timeout=120, check=False,
    )
    output = done.stdout + done.stderr
    assert "runstore: warning" not in output, output
    run, tests, failures = read_latest(db, folder.name)
    return Ran(done.returncode, output, junit, run, tests, failures)


# -- the oracle: junitxml and -rA -----------------------------------------------------------------


def junit_key(nodeid: str) -> tuple[str, str]:
    """(classname, name) as junitxml derives them from a node id (``mangle_test_address``)."""
    path, bracket, params = nodeid.partition("[")
    names = path.split("::")
    names[0] = re.sub(r"\.py$", "", names[0].replace("/", "."))
    names[-1] += bracket + params
    return ".".join(names[:-1]), names[-1]


_ILLEGAL_XML = re.compile(  # what junitxml's bin_xml_escape replaces
    "[^\u0009\u000a\u000d\u0020-\u007e\u0080-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]"
)
_ESCAPED_SURROGATE = re.compile(r"\\u(d[89a-f][0-9a-f]{2})")


def as_junit_writes(text: str) -> str:
    """``text`` as junitxml writes it: characters XML cannot hold as ``#xHH``. runstore keeps
    a lone surrogate (which UTF-8 cannot hold) as a ``\\udcff`` escape, junitxml as
    ``#xDCFF``."""
    text = _ESCAPED_SURROGATE.sub(lambda m: f"#x{m.group(1).upper()}", text)
    return _ILLEGAL_XML.sub(lambda m: f"#x{ord(m.group()):02X}", text)


@attrs.frozen
class Expected:
    """What junitxml says of one item: its outcome, the phase and message of its first
    problem, the skip or xfail reason, and whether a teardown error came after it."""

    outcome: str
    phase: str | None = None
    message: str | None = None
    reason: str | None = None
    teardown_error: bool = False


def junit_items(junit: Path) -> dict[tuple[str, str], Expected]:
    """Every item junitxml lists, by (classname, name); a failing call with a teardown error
    is two ``testcase`` elements there, one item here."""
    grouped: dict[tuple[str, str], list[ET.Element]] = {}
    for case in ET.parse(junit).iter("testcase"):
        if case.get("name") is None:  # the item a KeyboardInterrupt cut short
            continue
        grouped.setdefault((case.get("classname", ""), case.get("name", "")), []).extend(case)
    items = {}
    for key, children in grouped.items():
        by_tag = {child.tag: child for child in reversed(children)}
        errors = [c for c in children if c.tag == "error"]
        teardown = any((c.get("message") or "").startswith("failed on teardown") for c in errors)
        if "failure" in by_tag:
            items[key] = Expected("failed", "call", by_tag["failure"].get("message"),
                                  teardown_error=teardown)
        elif errors:
            message = errors[0].get("message") or ""
            found = re.match(r'failed on (setup|teardown) with "(.*)"\Z', message, re.S)
            if found:
                items[key] = Expected("error", found.group(1), found.group(2))
            else:
                items[key] = Expected("collection", "collect", message)
        elif "skipped" in by_tag:
            skipped = by_tag["skipped"]
            kind = "xfailed" if skipped.get("type") == "pytest.xfail" else "skipped"
            items[key] = Expected(kind, reason=skipped.get("message"))
        else:
            items[key] = Expected("passed")
    return items


def short_summary(output: str) -> dict[str, set[str]]:
    """Node ids per word of pytest's ``-rA`` short test summary (PASSED, XPASS, ...)."""
    words: dict[str, set[str]] = {}
    _, _, summary = output.partition("short test summary info")
    for line in summary.splitlines():
        word, _, rest = line.partition(" ")
        if word in {"PASSED", "XPASS", "XFAIL", "FAILED", "ERROR"}:
            words.setdefault(word, set()).add(rest.split(" - ", 1)[0])
    return words


_JUNIT_CUT = "...\n[truncated; full report in element text]"


def assert_same_message(stored: str, truncated: bool, junit: str, nodeid: str) -> None:
    """The stored message is junitxml's, where either one was cut at its own cap."""
    if junit.endswith(_JUNIT_CUT):  # junitxml (pytest 9) cuts long messages too
        junit = junit[: -len(_JUNIT_CUT)]
        shorter = min(len(junit), len(stored))
        assert stored[:shorter] == junit[:shorter], nodeid
        assert truncated or len(stored) >= len(junit), nodeid
    elif truncated:
        assert junit.startswith(stored), nodeid
    else:
        assert stored == junit, nodeid


def assert_agrees(ran: Ran) -> None:
    """runstore's record agrees with junitxml and -rA item by item."""
    expected = junit_items(ran.junit)
    collection = {k: v for k, v in expected.items() if v.outcome == "collection"}
    items = {k: v for k, v in expected.items() if v.outcome != "collection"}
    recorded = {junit_key(nodeid): test for nodeid, test in ran.tests.items()}
    assert sorted(recorded) == sorted(items)
    for key, want in items.items():
        test = recorded[key]
        outcome = test.outcome.value
        # junitxml writes an xpass as a pass; -rA tells them apart below.
        allowed = {"passed", "xpassed"} if want.outcome == "passed" else {want.outcome}
        assert outcome in allowed, (test.nodeid, want)
        if want.reason is not None:
            assert test.skip_reason == want.reason, test.nodeid
        if want.outcome in ("failed", "error"):
            failure = ran.failures[test.nodeid]
            assert failure.phase.value == want.phase, test.nodeid
            assert want.message is not None
            assert_same_message(as_junit_writes(failure.message), failure.message_truncated,
                                want.message, test.nodeid)
        teardown = next((p for p in test.phases if p.phase is Phase.TEARDOWN), None)
        assert (teardown is not None and teardown.outcome is Outcome.FAILED) == (
            want.teardown_error or (want.outcome == "error" and want.phase == "teardown")
        ), test.nodeid
    errors = {junit_key(f.nodeid): f for f in ran.failures.values() if f.phase is Phase.COLLECT}
    assert sorted(errors) == sorted(collection)
    assert ran.run.collection_errors == len(collection)
    # -rA tells xpass from pass, which junitxml cannot.
    words = short_summary(ran.output)
    by_outcome: dict[Outcome, set[str]] = {}
    for test in ran.tests.values():
        by_outcome.setdefault(test.outcome, set()).add(test.nodeid)
    # A passing call followed by a teardown error is a PASSED line and an ERROR line.
    passed_calls = {
        t.nodeid for t in ran.tests.values()
        if t.outcome is Outcome.ERROR
        and any(p.phase is Phase.CALL and p.outcome is Outcome.PASSED for p in t.phases)
    }
    assert words.get("PASSED", set()) == by_outcome.get(Outcome.PASSED, set()) | passed_calls
    assert words.get("XPASS", set()) == by_outcome.get(Outcome.XPASSED, set())
    assert words.get("XFAIL", set()) == by_outcome.get(Outcome.XFAILED, set())
    assert words.get("FAILED", set()) == by_outcome.get(Outcome.FAILED, set())
    # ERROR lines: error items, teardown errors of failed items, failed collectors.
    assert by_outcome.get(Outcome.ERROR, set()) <= words.get("ERROR", set())


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "runs" / "runstore.db"


@pytest.fixture(scope="module")
def serial(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The serial run of a zoo folder, recorded once per module (xdist is compared to it)."""
    done: dict[str, Ran] = {}

    def get(folder: str) -> Ran:
        if folder not in done:
            scratch = tmp_path_factory.mktemp(f"serial-{folder}")
            done[folder] = record(fresh_copy(folder, scratch), scratch / "runstore.db")
        return done[folder]

    return get


# -- the zoo --------------------------------------------------------------------------------------


@needs_zoo
def test_outcomes(serial: Any) -> None:
    ran = serial("outcomes")
    assert ran.returncode == 1
    assert_agrees(ran)
    assert ran.run.status is RunStatus.FAILED
    tests = {nodeid.split("::", 1)[1]: t for nodeid, t in ran.tests.items()}
    assert tests["test_xfail"].outcome is Outcome.XFAILED
    assert tests["test_xpass"].outcome is Outcome.XPASSED
    assert tests["test_xpass_strict"].outcome is Outcome.FAILED
    assert tests["test_skipped"].outcome is Outcome.SKIPPED
    assert tests["test_error_in_setup"].outcome is Outcome.ERROR
    passes_then = tests["test_passes_then_teardown_errors"]
    assert passes_then.outcome is Outcome.ERROR
    assert [(p.phase, p.outcome) for p in passes_then.phases][1:] == [
        (Phase.CALL, Outcome.PASSED), (Phase.TEARDOWN, Outcome.FAILED)
    ]
    assert ran.failures["test_outcomes.py::test_passes_then_teardown_errors"].phase is (
        Phase.TEARDOWN
    )
    fails_then = tests["test_fails_and_teardown_errors"]
    assert [(p.phase, p.outcome) for p in fails_then.phases][1:] == [
        (Phase.CALL, Outcome.FAILED), (Phase.TEARDOWN, Outcome.FAILED)
    ]
    assert re.search(r"runstore: run \d+ recorded: .*\(runstore .*show \d+\)", ran.output)


@needs_zoo
def test_names(serial: Any) -> None:
    ran = serial("names")
    assert_agrees(ran)
    duplicates = {"pkg_a/test_same.py::test_duplicate_name",
                  "pkg_b/test_same.py::test_duplicate_name"}
    assert duplicates <= set(ran.tests)
    assert ran.tests["pkg_a/test_same.py::test_duplicate_name"].outcome is Outcome.PASSED
    assert ran.tests["pkg_b/test_same.py::test_duplicate_name"].outcome is Outcome.FAILED
    # Every id round-trips exactly as pytest prints it (-rA lists the passing ones).
    printed = short_summary(ran.output)["PASSED"]
    odd = {n for n in printed if "test_odd_ids[" in n or "test_very_long_id[" in n}
    assert len(odd) == 11
    assert odd <= set(ran.tests)
    assert "pkg_a/test_same.py::test_odd_ids[]" in ran.tests
    assert ran.tests["pkg_a/test_same.py::test_odd_ids[c::d]"].parametrize_id == "c::d"


@needs_zoo
def test_messages(tmp_path: Path, db: Path) -> None:
    ran = record(fresh_copy("messages", tmp_path), db)
    assert_agrees(ran)
    failures = {nodeid.split("::", 1)[1]: f for nodeid, f in ran.failures.items()}
    assert set(failures) == {
        "test_huge_message", "test_chained_exception", "test_unprintable_exception",
        "test_surrogates_and_nul", "test_prints_a_lot", "test_deep_stack",
    }
    huge = failures["test_huge_message"]
    assert huge.message_truncated
    assert huge.message.startswith("AssertionError: big:yyy")
    assert len(huge.message) <= 16_384
    chained = failures["test_chained_exception"]
    assert chained.exception_type == "ValueError"
    assert [c.exception_type for c in chained.causes] == ["KeyError"]
    assert chained.causes[0].message == "KeyError: 'missing'"
    unprintable = failures["test_unprintable_exception"]
    assert unprintable.outcome is Outcome.FAILED
    assert unprintable.exception_type == "test_messages.Unprintable"
    assert "\x00" in failures["test_surrogates_and_nul"].message
    deep = failures["test_deep_stack"]
    assert 10 <= len(deep.frames) <= 100
    assert deep.frames[-1].function == "helper"
    assert all(f.is_project for f in deep.frames)
    assert failures["test_prints_a_lot"].message == "assert False"


@needs_zoo
def test_collection_stops_the_session_by_default(tmp_path: Path, db: Path) -> None:
    ran = record(fresh_copy("collection", tmp_path), db)
    assert ran.returncode == pytest.ExitCode.INTERRUPTED
    assert_agrees(ran)
    # Recorded as what it was: a failed run with a collection error and no items.
    assert ran.run.status is RunStatus.FAILED
    assert ran.run.total == 0
    assert ran.run.collection_errors == 1
    error = ran.failures["test_import_error.py"]
    assert error.phase is Phase.COLLECT
    assert error.exception_type == "ModuleNotFoundError"
    assert "module_that_does_not_exist" in error.message
    assert "1 collection error" in ran.output


@needs_zoo
def test_collection_continues_when_asked(tmp_path: Path, db: Path) -> None:
    ran = record(fresh_copy("collection", tmp_path), db, "--continue-on-collection-errors")
    assert_agrees(ran)
    assert ran.tests["test_good.py::test_still_runs"].outcome is Outcome.PASSED
    assert ran.run.collection_errors == 1
    assert ran.run.status is RunStatus.FAILED


@needs_zoo
def test_flaky_across_two_runs(tmp_path: Path, db: Path) -> None:
    folder = fresh_copy("flaky", tmp_path)
    first = record(folder, db, name="first.xml")
    assert_agrees(first)
    assert first.tests["test_flaky.py::test_flips"].outcome is Outcome.FAILED
    assert "1 new failure" in first.output
    second = record(folder, db, name="second.xml")
    assert_agrees(second)
    assert second.tests["test_flaky.py::test_flips"].outcome is Outcome.PASSED
    with build(sqlite(db)) as container:
        reader = container.get(DataReader)
        history = reader.history("flaky", "test_flaky.py::test_flips").unwrap()
        classified = {c.nodeid: c for c in reader.classify(second.run.id).unwrap()}
        flaky = [f.nodeid for f in reader.flaky_tests("flaky").unwrap()]
    assert [h.outcome for h in history] == [Outcome.PASSED, Outcome.FAILED]
    # The copy is no git repository, but both runs ran the same code (one code fingerprint:
    # the test counts its runs in a file beside it, not in its code), so the failure then
    # the pass is flaky evidence, as the zoo's test says it must be.
    flips = classified["test_flaky.py::test_flips"]
    assert (flips.classification, flips.because.rule) == (
        Classification.FLAKY, EvidenceRule.SAME_CODE
    )
    assert [h.fingerprint for h in history] == [history[1].fingerprint] * 2
    assert history[0].fingerprint is not None
    assert classified["test_flaky.py::test_stable"].classification is Classification.STABLE
    assert flaky == ["test_flaky.py::test_flips"]


@needs_zoo
def test_interrupt_keeps_what_finished(tmp_path: Path, db: Path) -> None:
    ran = record(fresh_copy("interrupt", tmp_path), db)
    assert ran.returncode == pytest.ExitCode.INTERRUPTED
    assert_agrees(ran)
    assert ran.run.status is RunStatus.INTERRUPTED
    assert {n: t.outcome for n, t in ran.tests.items()} == {
        "test_interrupt.py::test_first": Outcome.PASSED,
        "test_interrupt.py::test_second_fails": Outcome.FAILED,
    }
    assert "recorded as interrupted" in ran.output
    with build(sqlite(db)) as container:  # an interrupted run does not touch history
        found = container.get(DataReader).history("interrupt", "test_interrupt.py::test_first")
    assert isinstance(found, Failure)
    assert isinstance(found.failure(), NotFound)


# -- xdist and concurrent writers -----------------------------------------------------------------


def _comparable(ran: Ran) -> dict[str, Any]:
    return {
        "status": ran.run.status,
        "counts": ran.run.counts,
        "collection_errors": ran.run.collection_errors,
        "tests": {n: (t.outcome, [(p.phase, p.outcome, p.skip_reason) for p in t.phases],
                      t.markers, t.line) for n, t in ran.tests.items()},
        "failures": {n: (f.phase, f.exception_type, f.message, f.causes,
                         [(fr.path, fr.line, fr.function) for fr in f.frames])
                     for n, f in ran.failures.items()},
    }


@needs_zoo
# Not "messages": pytest-xdist itself cannot send a report holding a lone surrogate (execnet
# encodes strings as UTF-8), and a plain `pytest -n 2` run there ends in INTERNALERROR.
@pytest.mark.parametrize(
    "folder", ["outcomes", pytest.param("names", marks=pytest.mark.slow)]
)
def test_xdist_records_what_a_serial_run_records(
    tmp_path: Path, db: Path, folder: str, serial: Any
) -> None:
    pytest.importorskip("xdist")
    parallel = record(fresh_copy(folder, tmp_path), db, *XDIST)
    assert_agrees(parallel)
    assert _comparable(parallel) == _comparable(serial(folder))


@needs_zoo
def test_xdist_records_collection_errors_once(tmp_path: Path, db: Path) -> None:
    pytest.importorskip("xdist")
    ran = record(fresh_copy("collection", tmp_path), db, *XDIST)
    assert ran.run.collection_errors == 1
    assert ran.run.status is RunStatus.FAILED


@needs_zoo
def test_two_processes_record_into_one_database_at_once(tmp_path: Path, db: Path) -> None:
    folders = [fresh_copy(name, tmp_path) for name in ("outcomes", "names")]
    running = [
        subprocess.Popen(
            pytest_command(f, db, tmp_path / f"{f.name}.xml"), cwd=f, env=_env(),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
        )
        for f in folders
    ]
    outputs = [p.communicate(timeout=120)[0] for p in running]
    for folder, process, output in zip(folders, running, outputs, strict=True):
        assert process.returncode == 1, output
        assert "runstore: warning" not in output, output
        run, tests, _ = read_latest(db, folder.name)
        assert run.status is RunStatus.FAILED
        assert {junit_key(n) for n in tests} == {
            k for k, v in junit_items(tmp_path / f"{folder.name}.xml").items()
            if v.outcome != "collection"
        }


# -- real suites (opt-in) -------------------------------------------------------------------------


REAL_SUITES = {
    # package==version: (folder inside the sdist holding the tests, extra pytest args)
    "six==1.17.0": ("test_six.py", ()),
    "idna==3.10": ("tests", ()),
}


@pytest.fixture(scope="module")
def throwaway_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    python = folder / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", f"{ROOT}[testing]"], check=True)
    return python


@pytest.mark.slow
@pytest.mark.parametrize("requirement", sorted(REAL_SUITES))
def test_real_suite_matches_junitxml(
    requirement: str, throwaway_venv: Path, tmp_path: Path, db: Path
) -> None:
    tests_at, extra = REAL_SUITES[requirement]
    downloads = tmp_path / "downloads"
    subprocess.run(
        [str(throwaway_venv), "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
         "-d", str(downloads), requirement],
        check=True,
    )
    (sdist,) = downloads.glob("*.tar.gz")
    with tarfile.open(sdist) as archive:
        archive.extractall(tmp_path / "src", filter="data")
    (source,) = (tmp_path / "src").iterdir()
    subprocess.run([str(throwaway_venv), "-m", "pip", "install", "-q", str(source)], check=True)
    junit = tmp_path / "junit.xml"
    done = subprocess.run(
        [str(throwaway_venv), "-m", "pytest", "-p", "runstore.pytest_plugin", "--runstore",
         f"--runstore-db={db}",
         "--runstore-project=real", f"--junitxml={junit}", "-rA", "-p", "no:cacheprovider",
         tests_at, *extra],
        cwd=source, env=_env(), capture_output=True, text=True, errors="replace", timeout=600,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode in (0, 1), output
    assert "runstore: warning" not in output
    run, tests, failures = read_latest(db, "real")
    assert run.total > 10
    assert_agrees(Ran(done.returncode, output, junit, run, tests, failures))
