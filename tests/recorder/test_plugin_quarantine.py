"""The quarantine in a recorded session: the exit status changes, nothing recorded does."""

from __future__ import annotations

from datetime import date, timedelta
from pathlib import Path

import attrs
import pytest
from plugin_runs import SUMMARY, env_for, run_pytest, write

from runstore.layers import build, sqlite
from runstore.services.test_runs import DataReader, QuarantinedItem, RunId, TestRecord

XDIST = ("-p", "xdist.plugin", "-n", "2")

TESTS = """
    def test_ok():
        pass

    def test_bad():
        assert 0, "boom"

    def test_net_dns():
        assert 0, "no route"
"""

QUARANTINE = """\
# owned by the platform team
[[quarantine]]
nodeid = "test_a.py::test_bad"
owner = "alice"
reason = "races the cache warmer"
expires = 2027-06-30

[[quarantine]]
pattern = "test_a.py::test_net_*"
owner = "bob"
reason = "proxy flaps"
expires = {net_expires}
"""

FAKED_TODAY = """
    from datetime import date

    import runstore.quarantine as quarantine

    quarantine.today = lambda: date(2027, 1, 15)
"""


def _project(folder: Path, *, quarantine: str | None, net_expires: str = "2027-01-31") -> Path:
    write(folder, test_a=TESTS, conftest=FAKED_TODAY)
    if quarantine is not None:
        (folder / ".runstore-quarantine.toml").write_text(
            quarantine.format(net_expires=net_expires), encoding="utf-8")
    return folder


def _recorded(folder: Path) -> tuple[object, list[TestRecord], tuple[QuarantinedItem, ...]]:
    """The newest run's status and counts, its items without run ids and durations, and
    its quarantined items."""
    with build(sqlite(folder / ".runstore" / "runstore.db")) as container:
        reader = container.get(DataReader)
        run = reader.latest_run(folder.name).unwrap()
        items = [attrs.evolve(t, run_id=RunId(0), duration_ms=0.0, phases=tuple(
            attrs.evolve(p, duration_ms=0.0) for p in t.phases))
            for t in reader.tests(run.id).unwrap()]
        failures = [(f.nodeid, f.message) for f in reader.failures(run.id).unwrap()]
        return ((run.status, run.counts, failures), items,
                reader.quarantined(run.id).unwrap())


@pytest.mark.parametrize("parallel", [(), XDIST], ids=["serial", "xdist"])
def test_the_quarantine_changes_the_exit_status_and_nothing_recorded(
    tmp_path: Path, parallel: tuple[str, ...]
) -> None:
    if parallel:
        pytest.importorskip("xdist")
    plain = _project(tmp_path / "plain" / "proj", quarantine=None)
    quarantined = _project(tmp_path / "quarantined" / "proj", quarantine=QUARANTINE)
    without = run_pytest(plain, "--runstore", *parallel)
    with_it = run_pytest(quarantined, "--runstore", *parallel)
    assert without.returncode == 1, without.stdout
    assert with_it.returncode == 0, with_it.stdout
    run_without, items_without, marks_without = _recorded(plain)
    run_with, items_with, marks_with = _recorded(quarantined)
    assert run_with == run_without  # status "failed", the counts, the failures
    assert items_with == items_without
    assert marks_without == ()
    assert marks_with == (QuarantinedItem("test_a.py::test_bad", "test_a.py::test_bad"),
                          QuarantinedItem("test_a.py::test_net_dns", "test_a.py::test_net_*"))
    lines = SUMMARY.findall(with_it.stdout)
    assert lines[1] == (
        "runstore: 2 quarantined failures (test_a.py::test_bad, test_a.py::test_net_dns) by "
        "test_a.py::test_bad (owner alice, until 2027-06-30); test_a.py::test_net_* (owner "
        "bob, until 2027-01-31): the session passes (exit status 0)")
    assert "2 failed, 1 passed" in with_it.stdout  # pytest's own line is unchanged


def test_an_expired_entry_no_longer_applies_and_is_reported(tmp_path: Path) -> None:
    folder = _project(tmp_path / "proj", quarantine=QUARANTINE, net_expires="2027-01-14")
    done = run_pytest(folder, "--runstore")
    assert done.returncode == 1, done.stdout
    lines = SUMMARY.findall(done.stdout)
    assert lines[1:] == [
        "runstore: 1 quarantined failure (test_a.py::test_bad) by test_a.py::test_bad (owner "
        "alice, until 2027-06-30): the session still fails: test_a.py::test_net_dns not "
        "quarantined",
        "runstore: quarantine entry test_a.py::test_net_* (owner bob) expired after "
        "2027-01-14: it no longer applies to test_a.py::test_net_dns",
    ]
    assert _recorded(folder)[2] == (
        QuarantinedItem("test_a.py::test_bad", "test_a.py::test_bad"),)
    # On its last day the entry still applies.
    (folder / ".runstore-quarantine.toml").write_text(
        QUARANTINE.format(net_expires="2027-01-15"), encoding="utf-8")
    assert run_pytest(folder, "--runstore").returncode == 0


def test_a_collection_error_is_never_masked(tmp_path: Path) -> None:
    folder = _project(tmp_path / "proj", quarantine=QUARANTINE + """
[[quarantine]]
pattern = "test_*"
owner = "carol"
reason = "everything"
expires = 2030-01-01
""")
    write(folder, test_broken="def test_x(:\n")
    stopped = run_pytest(folder, "--runstore")
    assert stopped.returncode == 2, stopped.stdout  # pytest stops after collection errors
    going_on = run_pytest(folder, "--runstore", "--continue-on-collection-errors")
    assert going_on.returncode == 1, going_on.stdout
    assert ("the session still fails: a collection error or interruption is never masked"
            in going_on.stdout)


def test_a_session_stopped_early_is_not_masked(tmp_path: Path) -> None:
    folder = _project(tmp_path / "proj", quarantine=QUARANTINE)
    assert run_pytest(folder, "--runstore", "-x").returncode == 1


def test_a_bad_quarantine_file_quarantines_nothing_and_says_why(tmp_path: Path) -> None:
    folder = _project(tmp_path / "proj", quarantine=QUARANTINE.replace("expires = 2027-06-30",
                                                                       "expire = 2027-06-30"))
    done = run_pytest(folder, "--runstore")
    assert done.returncode == 1, done.stdout
    assert SUMMARY.findall(done.stdout)[1] == (
        f"runstore: quarantine not applied: {folder / '.runstore-quarantine.toml'}, entry 1, "
        "key 'expire': unknown key (an entry has nodeid, pattern, owner, reason, expires, "
        "added)")


def test_the_quarantine_needs_recording_on(tmp_path: Path) -> None:
    folder = _project(tmp_path / "proj", quarantine=QUARANTINE)
    assert run_pytest(folder, env=env_for()).returncode == 1


FLIPPING = """
    from pathlib import Path

    def test_flips():
        counter = Path(__file__).with_name("counter.txt")
        count = int(counter.read_text()) + 1 if counter.exists() else 1
        counter.write_text(str(count))
        assert count % 3 != 1, f"execution {count} fails"
"""


def test_a_quarantined_test_whose_repeats_flipped_does_not_fail_the_session(
    tmp_path: Path,
) -> None:
    folder = write(tmp_path / "proj", test_flip=FLIPPING)
    flipped = run_pytest(folder, "--runstore", "--runstore-repeat=3")
    assert flipped.returncode == 1, flipped.stdout  # passed last, flipped: fails
    (folder / ".runstore-quarantine.toml").write_text(
        '[[quarantine]]\nnodeid = "test_flip.py::test_flips"\nowner = "a"\nreason = "r"\n'
        "expires = 2030-01-01\n", encoding="utf-8")
    masked = run_pytest(folder, "--runstore", "--runstore-repeat=3")
    assert masked.returncode == 0, masked.stdout
    assert "1 quarantined failure (test_flip.py::test_flips)" in masked.stdout
    # the repeat's line and the quarantine's agree: the session passes
    assert "1 repeated test flipped, so the session fails unless quarantined" in masked.stdout
    assert "the session passes (exit status 0)" in masked.stdout
    # the run is stored failed with no failing item: failures says why
    from click.testing import CliRunner

    from runstore.cli import cli

    told = CliRunner().invoke(cli, ["--db", str(folder / ".runstore" / "runstore.db"),
                                    "failures", "1"], catch_exceptions=False)
    assert told.exit_code == 0
    assert told.stdout.splitlines()[-2:] == [
        "no failures", "the run failed because 1 test(s) passed flaky (their repeated "
        "executions flipped): test_flip.py::test_flips"]


UNTIL = (date.today() + timedelta(days=30)).isoformat()
ONE_QUARANTINED = ('[[quarantine]]\nnodeid = "test_a.py::test_bad"\nowner = "alice"\n'
                   f'reason = "r"\nexpires = {UNTIL}\n')


def _line(verdict: str) -> str:
    """The quarantine line of a session where ``test_a.py::test_bad`` failed, quarantined."""
    return ("runstore: 1 quarantined failure (test_a.py::test_bad) by test_a.py::test_bad "
            f"(owner alice, until {UNTIL}): {verdict}")


def test_a_coverage_threshold_missed_is_never_masked(tmp_path: Path) -> None:
    pytest.importorskip("pytest_cov")
    folder = write(tmp_path / "proj", test_a="""
        import shop

        def test_ok():
            assert shop.price(1) == 1

        def test_bad():
            assert 0, "boom"
    """, shop="""
        def price(n):
            return n

        def never_run(n):
            if n:
                return n + 1
            return n - 1
    """)
    (folder / ".runstore-quarantine.toml").write_text(ONE_QUARANTINED, encoding="utf-8")
    covered = run_pytest(folder, "-p", "pytest_cov.plugin", "--runstore", "--cov=shop")
    assert covered.returncode == 0, covered.stdout  # the quarantine alone masks
    missed = run_pytest(folder, "-p", "pytest_cov.plugin", "--runstore", "--cov=shop",
                        "--cov-fail-under=90")
    assert missed.returncode == 1, missed.stdout
    assert SUMMARY.findall(missed.stdout)[1] == _line(
        "the session still fails: pytest counted 2 failures where the test reports have 1 "
        "(a plugin failed the session, such as pytest-cov's --cov-fail-under)")


@pytest.mark.parametrize("call", ["pass", "assert 0"])
def test_a_failed_session_fixture_teardown_on_a_quarantined_test_is_not_masked(
    tmp_path: Path, call: str
) -> None:
    folder = write(tmp_path / "proj", test_a=f"""
        import pytest

        @pytest.fixture(scope="session")
        def server():
            yield
            raise RuntimeError("the server did not stop")

        def test_ok(server):
            pass

        def test_bad(server):
            {call}
    """)
    (folder / ".runstore-quarantine.toml").write_text(ONE_QUARANTINED, encoding="utf-8")
    done = run_pytest(folder, "--runstore")
    assert done.returncode == 1, done.stdout
    assert SUMMARY.findall(done.stdout)[1] == _line(
        "the session still fails: the teardown of test_a.py::test_bad failed, which is never "
        "masked (it may be a module- or session-scoped fixture's)")


def test_a_test_that_passed_on_a_rerun_does_not_keep_the_session_failing(
    tmp_path: Path,
) -> None:
    pytest.importorskip("pytest_rerunfailures")
    folder = write(tmp_path / "proj", test_a="""
        from pathlib import Path

        def test_second_try():
            tries = Path(__file__).with_name("tries.txt")
            n = int(tries.read_text()) + 1 if tries.exists() else 1
            tries.write_text(str(n))
            assert n > 1

        def test_bad():
            assert 0, "boom"
    """)
    (folder / ".runstore-quarantine.toml").write_text(ONE_QUARANTINED, encoding="utf-8")
    done = run_pytest(folder, "-p", "pytest_rerunfailures", "--runstore", "--reruns", "1")
    assert done.returncode == 0, done.stdout
    assert SUMMARY.findall(done.stdout)[1] == _line("the session passes (exit status 0)")
