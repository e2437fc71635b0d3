"""``runstore report``: writes the page whole (or to standard output), answers its JSON, and
refuses an unknown project (exit 1) or a bad ``--runs`` (exit 2) without writing anything."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import cast

import pytest
from _zoo import seed_zoo  # beside this file
from click.testing import CliRunner, Result
from test_json_schemas import validate  # beside this file

from runstore.cli import cli
from runstore.cli._output import Refusals, Refused
from runstore.cli._report import _DEFAULT_RUNS, _MAX_RUNS, DEFAULT_FILE, _write
from runstore.cli._test_runs import Services
from runstore.report import DEFAULT_REPORT_RUNS, MAX_REPORT_RUNS


@pytest.fixture(scope="module")
def zoo_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return seed_zoo(tmp_path_factory.mktemp("zoo") / "runstore.db")


@pytest.fixture
def db(zoo_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the zoo database in a folder of its own, the current folder."""
    copy = tmp_path / "runstore.db"
    shutil.copyfile(zoo_db, copy)
    monkeypatch.chdir(tmp_path)
    return copy


def _run(db: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--db", str(db), *args], catch_exceptions=False)


def _written(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.suffix != ".db")


def test_it_writes_the_page_to_the_default_file_and_says_where(db: Path) -> None:
    done = _run(db, "report", "--project", "zoo")
    assert done.exit_code == 0, done.output
    page = db.parent / DEFAULT_FILE
    html = page.read_text(encoding="utf-8")
    assert html.startswith("<!doctype html>")
    for part in ("runs-chart", "matrix", "signatures", "slowest", "coverage", "failing"):
        assert f'id="{part}"' in html
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"wrote {DEFAULT_FILE} (")
    assert lines[0].endswith("kB): 5 runs of zoo")
    assert lines[1] == f"open {page.resolve().as_uri()}"
    assert _written(db.parent) == [DEFAULT_FILE]  # no partial file left behind


def test_dash_writes_the_page_to_standard_output_and_no_file(db: Path) -> None:
    done = _run(db, "report", "--project", "zoo", "-o", "-")
    assert done.exit_code == 0
    assert done.stdout.startswith("<!doctype html>")
    assert done.stdout.rstrip().endswith("</html>")
    assert _written(db.parent) == []


def test_the_json_document_names_the_file_its_size_and_the_runs(db: Path) -> None:
    done = _run(db, "--format", "json", "report", "--project", "zoo", "-o", "out.html",
                "--runs", "2")
    assert done.exit_code == 0
    document = json.loads(done.stdout)
    validate("report.json", document)
    written = db.parent / "out.html"
    assert document == {"schema_version": 1, "project": "zoo",
                        "path": str(written.resolve()), "bytes": written.stat().st_size,
                        "runs": 2}
    assert written.read_text(encoding="utf-8").count('<rect class="hit"') == 2


def test_it_replaces_an_existing_file_whole(db: Path) -> None:
    old = db.parent / "r.html"
    old.write_text("x" * 1_000_000, encoding="utf-8")
    assert _run(db, "report", "--project", "zoo", "-o", "r.html").exit_code == 0
    assert old.read_text(encoding="utf-8").startswith("<!doctype html>")


def test_an_unknown_project_is_refused_naming_the_known_ones(db: Path) -> None:
    done = _run(db, "report", "--project", "nope")
    assert done.exit_code == 1
    assert "no runs of project 'nope'" in done.stderr
    assert "(projects: commit, zoo)" in done.stderr
    assert _written(db.parent) == []


def test_several_projects_without_project_are_refused(db: Path) -> None:
    done = _run(db, "report")
    assert done.exit_code == 1
    assert "several projects" in done.stderr
    assert "--project" in done.stderr
    assert _written(db.parent) == []


@pytest.mark.parametrize("runs", ["0", "501", "-3", "x", ""])
def test_a_bad_runs_is_a_usage_error_and_writes_nothing(db: Path, runs: str) -> None:
    done = _run(db, "report", "--project", "zoo", "--runs", runs)
    assert done.exit_code == 2
    assert "'--runs'" in done.stderr
    assert _written(db.parent) == []


def test_dash_with_json_is_a_usage_error(db: Path) -> None:
    done = _run(db, "--format", "json", "report", "--project", "zoo", "-o", "-")
    assert done.exit_code == 2
    validate("error.json", json.loads(done.stdout))
    assert "-o -" in done.stderr


def test_a_folder_that_does_not_exist_is_refused(db: Path) -> None:
    """Said so: it said "No such file or directory", as if the page were missing."""
    done = _run(db, "report", "--project", "zoo", "-o", "missing/r.html")
    assert done.exit_code == 1
    assert done.stderr == (f"runstore: cannot write missing/r.html: the folder "
                           f"{db.parent / 'missing'} does not exist\n")
    assert _written(db.parent) == []


def test_a_file_in_place_of_the_folder_is_refused(db: Path) -> None:
    (db.parent / "notes").write_text("", encoding="utf-8")
    done = _run(db, "report", "--project", "zoo", "-o", "notes/r.html")
    assert done.exit_code == 1
    assert f"the folder {db.parent / 'notes'} is not a folder" in done.stderr


@pytest.mark.parametrize("output", ["", "  "], ids=["empty", "spaces"])
def test_a_blank_output_is_a_usage_error(db: Path, output: str) -> None:
    """As ``--db ''``: it was exit 1, "cannot write : Is a directory"."""
    done = _run(db, "report", "--project", "zoo", "-o", output)
    assert done.exit_code == 2
    assert "'-o' / '--output': the report path is blank" in done.stderr
    assert _written(db.parent) == []


@pytest.mark.skipif(not os.path.isfile("/proc/version"), reason="no /proc/version here")
def test_a_file_in_a_folder_taking_no_new_file_says_so(db: Path) -> None:
    """``/proc/version`` exists: the reason is the folder's, not "No such file"."""
    done = _run(db, "report", "--project", "zoo", "-o", "/proc/version")
    assert done.exit_code == 1
    assert done.stderr.startswith(
        "runstore: cannot write /proc/version: no new file can be made in /proc to replace it (")


def test_no_database_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    done = _run(tmp_path / "absent.db", "report")
    assert done.exit_code == 1
    assert list(tmp_path.iterdir()) == []


def test_the_option_limits_are_the_collectors() -> None:
    assert (_DEFAULT_RUNS, _MAX_RUNS) == (DEFAULT_REPORT_RUNS, MAX_REPORT_RUNS)


_PROBE = """
import json, sys
from runstore.cli import cli
try:
    cli.main(sys.argv[1:], prog_name="runstore")
except SystemExit as done:
    code = done.code
print(json.dumps({"code": code, "jinja2": "jinja2" in sys.modules}), file=sys.stderr)
"""


@pytest.mark.parametrize(
    ("args", "loads"),
    [
        (["--help"], False),  # imports every command's module, runstore.cli._report too
        (["report", "--help"], False),
        (["--format", "json", "runs", "--project", "zoo"], False),
        (["trends", "--project", "zoo"], False),
        (["report", "--project", "zoo", "-o", "-"], True),
    ],
)
def test_only_the_report_loads_jinja2(db: Path, args: list[str], loads: bool) -> None:
    done = subprocess.run([sys.executable, "-c", _PROBE, "--db", str(db), *args],
                          capture_output=True, text=True, check=False, timeout=120)
    report = json.loads(done.stderr.strip().splitlines()[-1])
    assert report == {"code": 0, "jinja2": loads}


def test_a_symbolic_link_keeps_pointing_at_the_page(db: Path) -> None:
    """The page replaces the file a link names, not the link itself."""
    (db.parent / "site").mkdir()
    link = db.parent / "latest.html"
    link.symlink_to(Path("site") / "report.html")
    done = _run(db, "report", "--project", "zoo", "-o", "latest.html")
    assert done.exit_code == 0, done.output
    assert link.is_symlink()
    assert (db.parent / "site" / "report.html").read_text(encoding="utf-8").startswith(
        "<!doctype html>")
    assert sorted(p.name for p in (db.parent / "site").iterdir()) == ["report.html"]


def test_a_named_pipe_is_written_to_and_stays_a_pipe(db: Path) -> None:
    """``-o`` a FIFO (or ``/dev/stdout``, ``/dev/null``) writes into it: a rename over it
    would replace the pipe or device with a plain file."""
    fifo = db.parent / "page.fifo"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    try:
        done = _run(db, "report", "--project", "zoo", "-o", "page.fifo")
        reader.join(timeout=30)
        assert done.exit_code == 0, done.output
        assert stat.S_ISFIFO(fifo.lstat().st_mode)
        assert received
        assert received[0].startswith(b"<!doctype html>")
        assert _written(db.parent) == ["page.fifo"]
    finally:
        if reader.is_alive():  # nothing wrote into the pipe: let the reader end
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


@pytest.mark.parametrize("name", ["runstore.db", "./runstore.db", "runstore.db-wal"])
def test_the_database_it_reads_is_never_written_over(db: Path, name: str) -> None:
    before = db.read_bytes()
    done = _run(db, "report", "--project", "zoo", "-o", name)
    assert done.exit_code == 1
    assert "is the database the report reads" in done.stderr
    assert db.read_bytes() == before
    assert _written(db.parent) == []
    assert _run(db, "runs", "--project", "zoo").exit_code == 0


def test_dev_stdout_into_a_pipe_gets_the_page_alone(db: Path) -> None:
    """``-o /dev/stdout`` piped writes into the pipe (its name resolves to no file) and
    says nothing more there, as ``-o -`` does."""
    done = subprocess.run(
        [sys.executable, "-c", "from runstore.cli import cli; cli.main()", "--db", str(db),
         "report", "--project", "zoo", "-o", "/dev/stdout"],
        capture_output=True, check=False, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(b"<!doctype html>")
    assert done.stdout.rstrip().endswith(b"</html>")


class _Writing(Refusals):
    """What ``_write`` reads of the command's services: the database's name and ``fail``."""

    __slots__ = ("db_path",)

    def __init__(self, db_path: str) -> None:
        self.db_path = db_path


def test_reports_writing_one_file_at_once_leave_one_whole_page(tmp_path: Path) -> None:
    """Each writer has a temporary file of its own: with one shared ``FILE.partial`` a
    writer's rename found it gone ("cannot write") or moved a page another was still
    writing."""
    writers = 8
    pages = [bytes([65 + i]) * 4_000_000 for i in range(writers)]  # 4 MB each, one letter
    start = threading.Barrier(writers)
    refused: list[str] = []

    def write(page: bytes) -> None:
        start.wait()
        for _ in range(3):
            try:
                assert _write(cast(Services, _Writing(str(tmp_path / "runstore.db"))),
                              str(tmp_path / "r.html"), page)
            except Refused as refusal:
                refused.append(refusal.reason)

    threads = [threading.Thread(target=write, args=(page,)) for page in pages]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert refused == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html"]  # no temporary file
    assert (tmp_path / "r.html").read_bytes() in pages


def test_the_page_gets_the_mode_a_new_file_gets_under_the_umask(db: Path) -> None:
    old = os.umask(0o027)
    try:
        assert _run(db, "report", "--project", "zoo", "-o", "r.html").exit_code == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE((db.parent / "r.html").stat().st_mode) == 0o640


def test_a_failed_write_leaves_no_temporary_file(db: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    def full(*_: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "replace", full)
    done = _run(db, "report", "--project", "zoo", "-o", "r.html")
    assert done.exit_code == 1
    assert "cannot write r.html: No space left on device" in done.stderr
    assert _written(db.parent) == []
