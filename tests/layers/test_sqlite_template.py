"""The contract suites' SQLite files are copies of one migrated template (``sqlite_files``):
a copy must hold exactly what a freshly migrated file holds, or the copies would hide a
migration bug."""

from __future__ import annotations

from pathlib import Path

from runstore.layers import SqliteDatabase, build, open_database
from runstore.migrations import JOURNAL_TABLE, shipped_migrations
from runstore.services.test_runs import DataReader
from runstore.testing import LayerFactory
from sqlite_template import SqliteTemplate

_FILE_SETTINGS = (
    "page_size", "auto_vacuum", "journal_mode", "encoding", "user_version", "application_id",
    "page_count", "freelist_count",
)
_IDENTITY = "runstore_meta"


def _contents(db: SqliteDatabase) -> dict[str, object]:
    """Everything a migrated file holds but its identity's values and the journal's times."""
    connection = db.connection
    schema = connection.execute(
        "SELECT type, name, tbl_name, sql FROM sqlite_schema ORDER BY type, name"
    ).fetchall()
    tables = [name for kind, name, _, _ in schema if kind == "table"]
    rows = {
        name: sorted(map(repr, connection.execute(f'SELECT * FROM "{name}"').fetchall()))
        for name in tables
        if name not in (JOURNAL_TABLE, _IDENTITY)
    }
    return {
        "settings": {name: connection.pragma(name) for name in _FILE_SETTINGS},
        "schema": schema,
        "journal": connection.execute(
            f"SELECT id, name, checksum, finished FROM {JOURNAL_TABLE} ORDER BY id"
        ).fetchall(),
        "identity keys": connection.execute(
            f"SELECT key FROM {_IDENTITY} ORDER BY key"
        ).fetchall(),
        "rows": rows,
    }


def _read(path: Path) -> dict[str, object]:
    db = open_database(path).unwrap()
    try:
        return _contents(db)
    finally:
        db.close()


def test_a_copy_holds_what_a_freshly_migrated_file_holds(
    sqlite_template: SqliteTemplate, tmp_path: Path
) -> None:
    fresh = _read(tmp_path / "fresh.db")
    copied = _read(sqlite_template.copy(tmp_path))
    assert copied == fresh
    assert [row[0] for row in copied["journal"]] == [  # type: ignore[attr-defined]
        m.id for m in shipped_migrations()
    ]


def test_the_comparison_sees_a_schema_the_template_lacks(
    sqlite_template: SqliteTemplate, tmp_path: Path
) -> None:
    """What the check above compares would tell a template missing a migration's table."""
    copy = sqlite_template.copy(tmp_path)
    db = open_database(copy).unwrap()
    try:
        db.connection.execute("CREATE TABLE added_later (id INTEGER PRIMARY KEY)")
    finally:
        db.close()
    assert _read(copy) != _read(tmp_path / "fresh.db")


def test_each_layer_is_a_file_of_its_own_and_the_template_is_left_alone(
    sqlite_template: SqliteTemplate, sqlite_files: LayerFactory
) -> None:
    before = sqlite_template.path.read_bytes()
    with build(sqlite_files()) as first, build(sqlite_files()) as second:
        assert first.get(SqliteDatabase).path != second.get(SqliteDatabase).path
        assert first.get(DataReader).projects().unwrap() == ()
    assert sqlite_template.path.read_bytes() == before


def test_a_loaded_image_holds_what_a_freshly_migrated_memory_database_holds(
    sqlite_memory_layers: LayerFactory,
) -> None:
    """Its contents, and the settings of its connection, are a fresh ``:memory:``'s."""
    connection_settings = (
        "foreign_keys", "recursive_triggers", "synchronous", "query_only", "busy_timeout",
        "cache_size", "temp_store", "secure_delete", "cell_size_check", "trusted_schema",
    )

    def seen(db: SqliteDatabase) -> dict[str, object]:
        pragmas = {name: db.connection.pragma(name) for name in connection_settings}
        return {**_contents(db), "connection": pragmas}

    fresh = open_database(":memory:").unwrap()
    try:
        expected = seen(fresh)
    finally:
        fresh.close()
    with build(sqlite_memory_layers()) as container:
        db = container.get(SqliteDatabase)
        assert db.path == ":memory:"
        assert seen(db) == expected


def test_each_memory_layer_is_a_database_of_its_own(sqlite_memory_layers: LayerFactory) -> None:
    with build(sqlite_memory_layers()) as first:
        first.get(SqliteDatabase).connection.execute("CREATE TABLE only_here (id INTEGER)")
        with build(sqlite_memory_layers()) as second:
            assert _contents(second.get(SqliteDatabase)) != _contents(first.get(SqliteDatabase))
