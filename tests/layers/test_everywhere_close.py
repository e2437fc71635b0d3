"""Closing a database whose last checkpoint cannot be written is a typed failure, not a raise.

Closing the last connection of a WAL database checkpoints the ``-wal`` file into the main
file. When that write fails (the disk is full, the file system turned read-only) the
container used to raise the driver's exception out of ``build``'s block; now
``SqliteDatabase.close`` returns a ``StorageFailure`` and logs it on ``runstore.layers``, the
connection is released, and what was committed is still there on the next open.

The fault is a small VFS over the default one that refuses writes to the main file (or to
every file) once switched on, as a full or read-only file system does.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import apsw
import pytest
from returns.result import Failure, Success

from runstore.layers import DATA_READER, DATA_STORE, build, open_database, sqlite
from runstore.services import RunStart
from runstore.services.errors import StorageFailure, StorageFailureKind

BASE_VFS = apsw.vfs_names()[0]

FAULTS = {
    "full": (apsw.FullError, StorageFailureKind.FULL),
    "io": (apsw.IOError, StorageFailureKind.IO),
    "read_only": (apsw.ReadOnlyError, StorageFailureKind.READ_ONLY),
}


class _Fault:
    """What the faulty VFS does now: nothing (None), or raise ``error`` writing ``where``."""

    error: type[apsw.Error] | None = None
    everywhere = False


class _File(apsw.VFSFile):
    def __init__(self, name: apsw.URIFilename | str | None, flags: list[int]) -> None:
        self._main = isinstance(name, apsw.URIFilename) and not name.filename().endswith(
            ("-wal", "-shm", "-journal")
        )
        super().__init__(BASE_VFS, name, flags)

    def xWrite(self, data: bytes, offset: int) -> None:
        if _Fault.error is not None and (self._main or _Fault.everywhere):
            raise _Fault.error("injected write fault")
        super().xWrite(data, offset)


class _Vfs(apsw.VFS):
    def __init__(self) -> None:
        super().__init__("runstore_faulty", BASE_VFS, makedefault=True)

    def xOpen(
        self, name: apsw.URIFilename | str | None, flags: list[int]
    ) -> apsw.VFSFile:
        return _File(name, flags)


@pytest.fixture
def faulty() -> Iterator[type[_Fault]]:
    vfs = _Vfs()
    try:
        yield _Fault
    finally:
        _Fault.error = None
        _Fault.everywhere = False
        vfs.unregister()


def _start(project: str) -> RunStart:
    return RunStart(project, f"inv-{project}", datetime(2026, 1, 1, tzinfo=UTC))


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_failed_checkpoint_on_close_is_logged_as_a_typed_failure(
    tmp_path: Path, faulty: type[_Fault], fault: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "runs.db"
    error, kind = FAULTS[fault]
    with caplog.at_level(logging.WARNING, logger="runstore.layers"), build(sqlite(path)) as c:
        run = c.get(DATA_STORE).begin_run(_start("shop")).unwrap()
        faulty.error = error  # the checkpoint at close cannot write the main file

    faulty.error = None
    assert (tmp_path / "runs.db-wal").exists()  # the commit waits there for the next open
    [record] = [r for r in caplog.records if r.name == "runstore.layers"]
    assert record.levelno == logging.WARNING
    assert f"closing {path} failed: storage failure ({kind}) in close" in record.getMessage()
    with build(sqlite(path)) as c:
        assert c.get(DATA_READER).get_run(run).unwrap().project == "shop"


def test_close_returns_the_failure_and_releases_the_connection(
    tmp_path: Path, faulty: type[_Fault]
) -> None:
    db = open_database(tmp_path / "runs.db").unwrap()
    db.execute("CREATE TABLE t (x BLOB)")
    db.execute("INSERT INTO t VALUES (randomblob(50000))")
    faulty.error = apsw.FullError

    closed = db.close()

    assert isinstance(closed, Failure)
    failure = closed.failure()
    assert isinstance(failure, StorageFailure)
    assert (failure.operation, failure.kind) == ("close", StorageFailureKind.FULL)
    with pytest.raises(apsw.ConnectionClosedError):
        db.connection.execute("SELECT 1")
    assert db.close() == Success(None)  # idempotent


def test_close_after_a_write_the_full_disk_refused_is_quiet_and_typed(
    tmp_path: Path, faulty: type[_Fault], caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "runs.db"
    with caplog.at_level(logging.WARNING, logger="runstore.layers"), build(sqlite(path)) as c:
        store = c.get(DATA_STORE)
        store.begin_run(_start("kept")).unwrap()
        faulty.error, faulty.everywhere = apsw.FullError, True
        refused = store.begin_run(_start("lost"))
        assert isinstance(refused, Failure)
        assert isinstance(refused.failure(), StorageFailure)
        assert refused.failure().kind is StorageFailureKind.FULL

    faulty.error = None
    assert all("storage failure (full)" in r.getMessage() for r in caplog.records
               if r.name == "runstore.layers")
    with build(sqlite(path)) as c:
        assert c.get(DATA_READER).projects().unwrap() == ("kept",)


def test_a_clean_close_logs_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    db = open_database(tmp_path / "runs.db").unwrap()
    with caplog.at_level(logging.DEBUG, logger="runstore.layers"):
        assert db.close() == Success(None)
    assert caplog.records == []
