"""Copy a whole runstore database between backends (SQLite file <-> PostgreSQL), checked row
for row: :func:`copy_database`, behind ``runstore db copy SRC DST``.

Rules, in the order they are checked (every refusal is a typed value; the destination is
written in ONE unit of work, so a refused or failed copy leaves it as it was):

1. The source is opened read-only and must be ready to read by this code
   (``DatabaseHealth.readiness``: a runstore database, every shipped migration of its
   backend applied, none unknown or half-applied).
2. The destination is opened to create (made and migrated to its backend's current
   schema, as every writing command does; another program's database is refused).
3. The plan is read from both schemas, never from a list of tables: every table of the
   source except the migration journal and ``runstore_meta`` (each database keeps its own
   identity and journal) and the search indexes (the destination's triggers index the rows
   copied) is copied when the destination has it with the same column set.
   A table whose columns differ is refused as :class:`SchemaMismatch` when both journals
   hold the same migration ids (the schemas should be equal, so one was altered); when
   they do not (a backend without a domain's newest migrations yet), the table is listed
   as not copied with the reason, as is a table the destination lacks, and one that refers
   to a table not copied. A not-copied table holding rows a freshly migrated database does
   not hold is refused as :class:`RowsNotCopyable` unless ``partial`` is given: nothing is
   dropped silently.
4. In the destination's unit of work: its tables are locked (PostgreSQL: ``LOCK TABLE ...
   IN EXCLUSIVE MODE``; SQLite's ``BEGIN IMMEDIATE`` already excludes writers); every
   table must hold only what a freshly migrated database holds (the counter rows the
   migrations insert), else :class:`DestinationNotEmpty`; then the tables are copied in
   foreign-key order (parents first; rows of a self-referencing table parents first; a
   cycle between tables is broken by writing a nullable foreign key afterwards), with the
   seeded counter rows replaced by the source's. The source is read in one snapshot.
5. Ids keep their values, and the next id each table hands out stays above every id the
   source ever handed out: PostgreSQL identity sequences are set with ``setval`` and
   SQLite ``AUTOINCREMENT`` counters (``sqlite_sequence``) likewise, from the source's own
   counter (a pruned run's id is not reused after the copy either).
6. Verification, still inside the unit of work: the destination's row count and checksum
   of every copied table must equal the source's, else :class:`CopyMismatch` and the unit
   rolls back. A table's checksum is order-independent: the sum, modulo 2**128, of the
   128-bit BLAKE2b digest of each row's typed values (so two backends that return rows in
   different orders agree).

Table and column names come from the schemas and are quoted as identifiers; values are
always parameters.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

import attrs
from returns.result import Failure, Result, Success

from runstore.layers._progress import UnitProgress
from runstore.migrations import JOURNAL_TABLE, POSTGRESQL_FOLDER, shipped_migrations
from runstore.services._primitives import check_callable
from runstore.services.errors import Busy, InvalidInput, OpenError, StorageFailure
from runstore.services.health import ReadinessError

if TYPE_CHECKING:
    from runstore.layers._postgres_database import PostgresDatabase
    from runstore.layers._sqlite_database import SqliteDatabase

__all__ = [
    "PROGRESS_ROWS",
    "CopiedTable",
    "CopyError",
    "CopyMismatch",
    "CopyReport",
    "CounterSet",
    "DestinationNotEmpty",
    "NotCopied",
    "RowsNotCopyable",
    "SchemaMismatch",
    "copy_database",
    "table_checksums",
]

_IDENTITY_TABLES = frozenset({JOURNAL_TABLE, "runstore_meta"})
"""Tables that describe a database itself (schema journal, identity), never copied."""

_SEARCH_INDEXES = re.compile(r"search_(?:failures|tests|entries)(?:_\w+)?")
"""The search indexes of migration 0012 (FTS5 tables and their shadow tables on SQLite,
token tables on PostgreSQL): never copied, since the destination's triggers index the
copied rows as they are written, in its own backend's form."""


PROGRESS_ROWS = 10_000
"""Rows a copy writes between two progress reports (besides one after each table)."""


def _not_copied(name: str) -> bool:
    """Whether table ``name`` is left out of a copy (identity tables, search indexes)."""
    return name in _IDENTITY_TABLES or _SEARCH_INDEXES.fullmatch(name) is not None

Row: TypeAlias = tuple[Any, ...]


# -- results and refusals ---------------------------------------------------------------------


@attrs.frozen
class CopiedTable:
    """One table copied: ``rows`` rows whose ``checksum`` (32 hex digits) both sides agree on."""

    table: str
    rows: int
    checksum: str


@attrs.frozen
class NotCopied:
    """A source table the destination cannot hold: its ``rows`` (beyond what a freshly
    migrated database holds: ``data_rows``) and why."""

    table: str
    rows: int
    data_rows: int
    reason: str


@attrs.frozen
class CounterSet:
    """The destination's next id of ``table.column`` now follows ``value``."""

    table: str
    column: str
    value: int


@attrs.frozen
class CopyReport:
    """What a copy did: ``source`` and ``destination`` as shown (never a password), the
    tables copied in the order written, the tables not copied, and the counters set."""

    source: str
    destination: str
    tables: tuple[CopiedTable, ...]
    not_copied: tuple[NotCopied, ...]
    counters: tuple[CounterSet, ...]

    @property
    def rows(self) -> int:
        """Rows copied, over every table."""
        return sum(t.rows for t in self.tables)


@attrs.frozen
class DestinationNotEmpty:
    """The destination holds records already (``tables``: each table holding rows a freshly
    migrated database does not); a copy only fills an empty database."""

    destination: str
    tables: tuple[str, ...]

    def __str__(self) -> str:
        return (
            f"{self.destination} already holds records (in {', '.join(self.tables)}); "
            "copy into an empty database"
        )


@attrs.frozen
class SchemaMismatch:
    """``table`` has different columns on the two sides although both are at the same
    migrations (``source_only`` / ``destination_only``: the columns only one side has)."""

    table: str
    source_only: tuple[str, ...]
    destination_only: tuple[str, ...]

    def __str__(self) -> str:
        return (
            f"table {self.table} differs between source and destination at the same "
            f"migrations (only in the source: {', '.join(self.source_only) or '-'}; only in "
            f"the destination: {', '.join(self.destination_only) or '-'})"
        )


@attrs.frozen
class RowsNotCopyable:
    """Source tables holding records the destination's schema cannot hold yet; refused
    unless a partial copy was asked for."""

    tables: tuple[NotCopied, ...]

    def __str__(self) -> str:
        shown = "; ".join(f"{t.table} ({t.data_rows} rows): {t.reason}" for t in self.tables)
        return f"these records cannot be copied: {shown} (a partial copy leaves them behind)"


@attrs.frozen
class CopyMismatch:
    """After writing, ``table`` on the destination differs from the source (rows and
    checksums of both); the copy was rolled back."""

    table: str
    source_rows: int
    destination_rows: int
    source_checksum: str
    destination_checksum: str

    def __str__(self) -> str:
        return (
            f"table {self.table} did not copy faithfully: {self.source_rows} rows "
            f"({self.source_checksum}) in the source, {self.destination_rows} rows "
            f"({self.destination_checksum}) written; nothing was kept"
        )


CopyError: TypeAlias = (
    DestinationNotEmpty
    | SchemaMismatch
    | RowsNotCopyable
    | CopyMismatch
    | InvalidInput
    | OpenError
    | ReadinessError
    | Busy
    | StorageFailure
)
"""Every failure of :func:`copy_database`."""


# -- checksums --------------------------------------------------------------------------------


class _Digest:
    """Order-independent checksum of rows (see the module docstring)."""

    _MODULUS = 1 << 128

    def __init__(self) -> None:
        self.rows = 0
        self._sum = 0

    def add(self, row: Sequence[Any]) -> None:
        parts: list[bytes] = []
        for value in row:
            if value is None:
                parts.append(b"n")
            elif isinstance(value, bool):
                raise TypeError(f"unexpected boolean in a stored row: {row!r}")
            elif isinstance(value, int):
                parts.append(b"i%d" % value)
            elif isinstance(value, float):
                parts.append(b"f" + value.hex().encode())
            elif isinstance(value, str):
                data = value.encode("utf-8", "surrogatepass")
                parts.append(b"s%d:" % len(data) + data)
            elif isinstance(value, (bytes, bytearray, memoryview)):
                data = bytes(value)
                parts.append(b"b%d:" % len(data) + data)
            else:
                raise TypeError(f"unexpected {type(value).__name__} in a stored row")
        digest = hashlib.blake2b(b"\x1f".join(parts), digest_size=16).digest()
        self._sum = (self._sum + int.from_bytes(digest, "big")) % self._MODULUS
        self.rows += 1

    @property
    def hexdigest(self) -> str:
        return f"{self._sum:032x}"


# -- the two backends -------------------------------------------------------------------------


@attrs.frozen
class _ForeignKey:
    columns: tuple[str, ...]
    parent: str
    parent_columns: tuple[str, ...]


@attrs.frozen
class _Table:
    name: str
    columns: tuple[str, ...]
    nullable: frozenset[str]
    primary_key: tuple[str, ...]
    foreign_keys: tuple[_ForeignKey, ...]
    counters: frozenset[str]
    """Columns whose next value a counter of the backend hands out (identity, AUTOINCREMENT)."""


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _columns_sql(columns: Iterable[str]) -> str:
    return ", ".join(_quote(c) for c in columns)


class _Side(Protocol):
    """What the copy needs of one database."""

    shown: str
    folder: str | None

    def migration_ids(self) -> tuple[int, ...]: ...
    def tables(self) -> dict[str, _Table]: ...
    def rows(self, table: str, columns: Sequence[str]) -> Iterator[Row]: ...
    def count(self, table: str) -> int: ...
    def high_water(self, table: _Table, column: str) -> int: ...
    def read(self, operation: str, fn: Callable[[], Result[Any, Any]]) -> Result[Any, Any]: ...
    def transact(self, operation: str, fn: Callable[[], Result[Any, Any]]) -> Result[Any, Any]: ...
    def lock(self, tables: Sequence[str]) -> None: ...
    def delete_all(self, table: str) -> None: ...
    def insert(self, table: str, columns: Sequence[str], rows: Iterable[Row]) -> None: ...
    def update(
        self, table: str, columns: Sequence[str], key: Sequence[str], rows: Iterable[Row]
    ) -> None: ...
    def set_counter(self, table: _Table, column: str, value: int) -> None: ...
    def close(self) -> None: ...


class _Statements(Protocol):
    """What both databases offer the copy (``SqliteDatabase``, ``PostgresDatabase``)."""

    def execute(self, sql: str, params: Any = ...) -> list[Row]: ...
    def scalar(self, sql: str, params: Any = ...) -> Any: ...
    def executemany(self, sql: str, rows: Iterable[Any]) -> None: ...
    def read(self, operation: str, fn: Callable[[], Result[Any, Any]]) -> Result[Any, Any]: ...
    def transact(self, operation: str, fn: Callable[[], Result[Any, Any]]) -> Result[Any, Any]: ...
    def close(self) -> object: ...


class _Common:
    """The statements both backends spell alike (``mark``: the parameter placeholder)."""

    mark = "?"
    folder: str | None = None
    """Where this backend's migration files are (None: SQLite's, the runner's default)."""

    def __init__(self, db: _Statements, shown: str) -> None:
        self.statements = db
        self.shown = shown

    def migration_ids(self) -> tuple[int, ...]:
        rows = self.statements.execute(f"SELECT id FROM {JOURNAL_TABLE} ORDER BY id")
        return tuple(r[0] for r in rows)

    def count(self, table: str) -> int:
        return int(self.statements.scalar(f"SELECT count(*) FROM {_quote(table)}"))

    def _max(self, table: str, column: str) -> int:
        return int(
            self.statements.scalar(f"SELECT max({_quote(column)}) FROM {_quote(table)}") or 0
        )

    def read(self, operation: str, fn: Callable[[], Result[Any, Any]]) -> Result[Any, Any]:
        return self.statements.read(operation, fn)

    def transact(self, operation: str, fn: Callable[[], Result[Any, Any]]) -> Result[Any, Any]:
        return self.statements.transact(operation, fn)

    def delete_all(self, table: str) -> None:
        self.statements.execute(f"DELETE FROM {_quote(table)}")

    def update(
        self, table: str, columns: Sequence[str], key: Sequence[str], rows: Iterable[Row]
    ) -> None:
        sets = ", ".join(f"{_quote(c)} = {self.mark}" for c in columns)
        where = " AND ".join(f"{_quote(c)} = {self.mark}" for c in key)
        self.statements.executemany(f"UPDATE {_quote(table)} SET {sets} WHERE {where}", rows)

    def close(self) -> None:
        self.statements.close()


class _SqliteSide(_Common):
    def __init__(self, db: SqliteDatabase) -> None:
        super().__init__(db, db.path)
        self.db = db

    def tables(self) -> dict[str, _Table]:
        found: dict[str, _Table] = {}
        for name, sql in self.db.execute(
            "SELECT name, sql FROM sqlite_schema WHERE type = 'table'"
            " AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name"
        ):
            info = self.db.execute(
                'SELECT name, "notnull", pk FROM pragma_table_info(?) ORDER BY cid', (name,)
            )
            key = tuple(r[0] for r in sorted((r for r in info if r[2]), key=lambda r: r[2]))
            keys: dict[int, list[tuple[str, str, str | None]]] = {}
            for fk_id, _, parent, child, to in self.db.execute(
                'SELECT id, seq, "table", "from", "to" FROM pragma_foreign_key_list(?)'
                " ORDER BY id, seq",
                (name,),
            ):
                keys.setdefault(fk_id, []).append((parent, child, to))
            foreign = []
            for parts in keys.values():
                parent = parts[0][0]
                targets = [p[2] for p in parts]
                if any(t is None for t in targets):  # "REFERENCES parent": its primary key
                    targets = [
                        r[0]
                        for r in sorted(
                            self.db.execute(
                                "SELECT name, pk FROM pragma_table_info(?) WHERE pk > 0", (parent,)
                            ),
                            key=lambda r: r[1],
                        )
                    ]
                foreign.append(
                    _ForeignKey(tuple(p[1] for p in parts), parent, tuple(str(t) for t in targets))
                )
            autoincrement = "AUTOINCREMENT" in (sql or "").upper() and len(key) == 1
            found[name] = _Table(
                name=name,
                columns=tuple(r[0] for r in info),
                nullable=frozenset(r[0] for r in info if not r[1] and not r[2]),
                primary_key=key,
                foreign_keys=tuple(foreign),
                counters=frozenset(key if autoincrement else ()),
            )
        return found

    def rows(self, table: str, columns: Sequence[str]) -> Iterator[Row]:
        cursor = self.db.connection.execute(f"SELECT {_columns_sql(columns)} FROM {_quote(table)}")
        for row in cursor:
            yield tuple(row)

    def high_water(self, table: _Table, column: str) -> int:
        top = self._max(table.name, column)
        if column in table.counters:
            seq = self.db.scalar("SELECT seq FROM sqlite_sequence WHERE name = ?", (table.name,))
            top = max(top, seq or 0)
        return int(top)

    def lock(self, tables: Sequence[str]) -> None:
        del tables  # BEGIN IMMEDIATE holds the write lock of the whole file

    def insert(self, table: str, columns: Sequence[str], rows: Iterable[Row]) -> None:
        marks = ", ".join("?" for _ in columns)
        self.db.executemany(
            f"INSERT INTO {_quote(table)} ({_columns_sql(columns)}) VALUES ({marks})", rows
        )

    def set_counter(self, table: _Table, column: str, value: int) -> None:
        del column
        if value < 1:
            return
        self.db.execute(
            "UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = ?", (value, table.name)
        )
        self.db.execute(
            "INSERT INTO sqlite_sequence (name, seq) SELECT ?, ?"
            " WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = ?)",
            (table.name, value, table.name),
        )


_PG_COLUMNS = (
    "SELECT c.relname::text, a.attname::text, NOT a.attnotnull,"
    " pg_get_serial_sequence(quote_ident(c.relname), a.attname) IS NOT NULL"
    " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
    " JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped"
    " WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p')"
    " ORDER BY c.relname, a.attnum"
)
_PG_KEYS = (
    "SELECT c.relname::text, con.contype::text, p.relname::text,"
    " ARRAY(SELECT a.attname::text FROM unnest(con.conkey) WITH ORDINALITY k(num, o)"
    "       JOIN pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = k.num ORDER BY k.o),"
    " ARRAY(SELECT a.attname::text FROM unnest(con.confkey) WITH ORDINALITY k(num, o)"
    "       JOIN pg_attribute a ON a.attrelid = con.confrelid AND a.attnum = k.num ORDER BY k.o)"
    " FROM pg_constraint con JOIN pg_class c ON c.oid = con.conrelid"
    " JOIN pg_namespace n ON n.oid = c.relnamespace"
    " LEFT JOIN pg_class p ON p.oid = con.confrelid"
    " WHERE n.nspname = current_schema() AND con.contype IN ('p', 'f')"
    " ORDER BY c.relname, con.conname"
)


class _PostgresSide(_Common):
    mark = "%s"
    folder: str | None = POSTGRESQL_FOLDER

    def __init__(self, db: PostgresDatabase) -> None:
        super().__init__(db, db.shown)
        self.db = db

    def tables(self) -> dict[str, _Table]:
        columns: dict[str, list[tuple[str, bool, bool]]] = {}
        for table, column, nullable, counted in self.db.execute(_PG_COLUMNS):
            columns.setdefault(table, []).append((column, nullable, counted))
        keys: dict[str, tuple[str, ...]] = {}
        foreign: dict[str, list[_ForeignKey]] = {}
        for table, kind, parent, child_columns, parent_columns in self.db.execute(_PG_KEYS):
            if kind == "p":
                keys[table] = tuple(child_columns)
            else:
                foreign.setdefault(table, []).append(
                    _ForeignKey(tuple(child_columns), parent, tuple(parent_columns))
                )
        return {
            name: _Table(
                name=name,
                columns=tuple(c[0] for c in cols),
                nullable=frozenset(c[0] for c in cols if c[1]),
                primary_key=keys.get(name, ()),
                foreign_keys=tuple(foreign.get(name, ())),
                counters=frozenset(c[0] for c in cols if c[2]),
            )
            for name, cols in sorted(columns.items())
        }

    def rows(self, table: str, columns: Sequence[str]) -> Iterator[Row]:
        return self.db.stream(f"SELECT {_columns_sql(columns)} FROM {_quote(table)}")

    def high_water(self, table: _Table, column: str) -> int:
        top = self._max(table.name, column)
        if column in table.counters:
            last = self.db.scalar(
                "SELECT pg_sequence_last_value(pg_get_serial_sequence(%s, %s)::regclass)",
                (_quote(table.name), column),
            )
            top = max(top, last or 0)
        return int(top)

    def lock(self, tables: Sequence[str]) -> None:
        if tables:
            self.db.execute(f"LOCK TABLE {_columns_sql(tables)} IN EXCLUSIVE MODE")

    def insert(self, table: str, columns: Sequence[str], rows: Iterable[Row]) -> None:
        self.db.copy_in(table, columns, rows)

    def set_counter(self, table: _Table, column: str, value: int) -> None:
        sequence = "pg_get_serial_sequence(%s, %s)::regclass"
        if value >= 1:
            self.db.execute(
                f"SELECT setval({sequence}, %s, true)", (_quote(table.name), column, value)
            )
        else:
            self.db.execute(f"SELECT setval({sequence}, 1, false)", (_quote(table.name), column))


# -- opening ----------------------------------------------------------------------------------


def _is_url(target: str) -> bool:
    from runstore.layers._open import postgres_url

    return postgres_url(target)


def _open_source(target: str) -> Result[_Side, OpenError | ReadinessError]:
    """Open ``target`` read-only and require it ready to read."""
    if _is_url(target):
        from runstore.layers._postgres_layer import open_postgres
        from runstore.layers._postgres_migrations import readiness as pg_readiness

        opened_pg = open_postgres(target, access="read")
        if isinstance(opened_pg, Failure):
            return opened_pg
        pg = opened_pg.unwrap()
        return _ready(_PostgresSide(pg), pg_readiness(pg))
    from runstore.layers._open import open_database
    from runstore.migrations import readiness

    opened = open_database(target, access="read")
    if isinstance(opened, Failure):
        return opened
    db = opened.unwrap()
    return _ready(_SqliteSide(db), readiness(db))


def _ready(side: _Side, ready: Result[None, ReadinessError]) -> Result[_Side, ReadinessError]:
    if isinstance(ready, Failure):
        side.close()
        return ready
    return Success(side)


def _open_destination(target: str) -> Result[_Side, OpenError]:
    if _is_url(target):
        from runstore.layers._postgres_layer import open_postgres

        return open_postgres(target).map(_PostgresSide)
    from runstore.layers._open import open_database

    return open_database(target).map(_SqliteSide)


def _same_target(source: str, destination: str) -> bool:
    if _is_url(source) or _is_url(destination):
        return source == destination
    return os.path.abspath(source) == os.path.abspath(destination) or (
        os.path.exists(source)
        and os.path.exists(destination)
        and os.path.samefile(source, destination)
    )


def copy_database(
    source: str,
    destination: str,
    *,
    partial: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> Result[CopyReport, CopyError]:
    """Copy every record of the runstore database ``source`` into the empty one
    ``destination`` (each a SQLite path or a ``postgresql://`` URL), following the rules of
    the module docstring; return what was copied.

    ``progress(done, total)``, when given, is told how far the copy got, in rows: ``total``
    the rows of the tables copied (counted first, in the source's snapshot: the report's
    ``rows``), ``done`` the rows written so far (every :data:`PROGRESS_ROWS` rows and after
    each table). ``done`` never decreases; the last call, ``(total, total)``, is made once
    the copy is verified and committed, so a returned Success always had one. A refusal
    before the destination's unit of work calls nothing; calls made before a later Failure
    stand, but nothing was kept.

    Failures, each leaving the destination without any copied row:

    - ``InvalidInput``: ``source`` and ``destination`` name the same database; ``progress``
      neither None nor callable.
    - From the source: ``NotARunstoreDatabase`` (missing, or another program's), and
      ``PendingMigrations``, ``UnknownMigration``, ``HalfAppliedMigration`` (its schema is
      not this code's current one: migrate it first, or upgrade runstore).
    - From the destination: the refusals of opening it to create
      (:func:`runstore.layers.open_database`, ``open_postgres``).
    - :class:`SchemaMismatch`, :class:`RowsNotCopyable` (unless ``partial``),
      :class:`DestinationNotEmpty`, :class:`CopyMismatch` as the rules say.
    - ``Busy`` / ``StorageFailure`` from either database.
    """
    if _same_target(source, destination):
        return Failure(InvalidInput("destination", "the destination is the source itself"))
    checked = check_callable(progress, "progress")
    if isinstance(checked, Failure):
        return checked
    opened_source = _open_source(source)
    if isinstance(opened_source, Failure):
        return opened_source
    src = opened_source.unwrap()
    try:
        opened_destination = _open_destination(destination)
        if isinstance(opened_destination, Failure):
            return opened_destination
        dst = opened_destination.unwrap()
        try:
            return _copy(src, dst, partial=partial, told=UnitProgress(progress))
        finally:
            dst.close()
    finally:
        src.close()


# -- planning ---------------------------------------------------------------------------------


@attrs.frozen
class _Plan:
    order: tuple[_Table, ...]
    """Destination tables to write, parents first."""
    deferred: dict[str, tuple[_ForeignKey, ...]]
    """Per table, foreign keys written after every table (they close a cycle)."""
    not_copied: tuple[tuple[str, str], ...]
    """Source tables not copied, and why."""


def _plan(
    src_tables: dict[str, _Table],
    dst_tables: dict[str, _Table],
    *,
    one_sided: str,
    one_sided_sql: str,
) -> Result[_Plan, SchemaMismatch]:
    candidates: dict[str, _Table] = {}
    skipped: dict[str, str] = {}
    for name, table in src_tables.items():
        if _not_copied(name):
            continue
        other = dst_tables.get(name)
        if other is None:
            skipped[name] = "the destination's schema has no such table yet"
            continue
        mine, theirs = set(table.columns), set(other.columns)
        if mine != theirs:
            if not re.search(rf"\b{re.escape(name)}\b", one_sided_sql, re.IGNORECASE):
                return Failure(
                    SchemaMismatch(name, tuple(sorted(mine - theirs)), tuple(sorted(theirs - mine)))
                )
            skipped[name] = (
                f"its columns differ (only in the source: {', '.join(sorted(mine - theirs)) or '-'}"
                f"; only in the destination: {', '.join(sorted(theirs - mine)) or '-'}) while "
                f"migrations {one_sided} are applied on one side only"
            )
            continue
        candidates[name] = other
    changed = True
    while changed:  # a table referring to one not copied cannot be copied either
        changed = False
        for name, table in list(candidates.items()):
            missing = [fk.parent for fk in table.foreign_keys if fk.parent not in candidates]
            if missing:
                del candidates[name]
                skipped[name] = f"it refers to {missing[0]}, which cannot be copied"
                changed = True
    order, deferred = _foreign_key_order(candidates)
    return Success(_Plan(order, deferred, tuple(sorted(skipped.items()))))


def _sql_of(side: _Side, ids: set[int]) -> str:
    """The text of the migrations ``ids`` of ``side``'s backend."""
    shipped = shipped_migrations() if side.folder is None else shipped_migrations(side.folder)
    return "\n".join(m.sql for m in shipped if m.id in ids)


def _foreign_key_order(
    tables: dict[str, _Table],
) -> tuple[tuple[_Table, ...], dict[str, tuple[_ForeignKey, ...]]]:
    """Parents before children (Kahn's algorithm, by name among equals); where a cycle
    stops it, a foreign key with a nullable column is deferred to break it."""
    deferred: dict[str, list[_ForeignKey]] = {}

    def waiting_on(table: _Table, placed: set[str]) -> list[_ForeignKey]:
        held = deferred.get(table.name, [])
        return [
            fk
            for fk in table.foreign_keys
            if fk.parent != table.name and fk.parent not in placed and fk not in held
        ]

    placed: set[str] = set()
    order: list[_Table] = []
    while len(order) < len(tables):
        ready = [
            t for n, t in sorted(tables.items()) if n not in placed and not waiting_on(t, placed)
        ]
        if not ready:
            breakable = [
                (t.name, fk)
                for n, t in sorted(tables.items())
                if n not in placed
                for fk in waiting_on(t, placed)
                if any(c in t.nullable for c in fk.columns) and t.primary_key
            ]
            if not breakable:
                raise ValueError(f"no order of these tables satisfies their foreign keys: {tables}")
            name, fk = breakable[0]
            deferred.setdefault(name, []).append(fk)
            continue
        for table in ready:
            placed.add(table.name)
            order.append(table)
    return tuple(order), {name: tuple(fks) for name, fks in deferred.items()}


# -- copying ----------------------------------------------------------------------------------


def _fresh_reference() -> _SqliteSide:
    """A freshly migrated database: what an empty one holds (the migrations' seed rows)."""
    from runstore.layers._open import open_database

    return _SqliteSide(open_database(":memory:").unwrap())


def _data_rows(side: _Side, table: _Table, reference: _SqliteSide, fresh: dict[str, _Table]) -> int:
    """How many rows of ``table`` a freshly migrated database would not hold: 0 when it
    holds exactly the migrations' seed rows, all of them when a seed row was changed."""
    rows = side.count(table.name)
    seed = fresh.get(table.name)
    if rows == 0 or seed is None:
        return rows
    seeded = reference.count(table.name)
    if rows != seeded:
        return max(rows - seeded, 1)
    columns = [c for c in table.columns if c in seed.columns]
    same = _checksum(side, table.name, columns) == _checksum(reference, table.name, columns)
    return 0 if same else rows


def _checksum(side: _Side, table: str, columns: Sequence[str]) -> tuple[int, str]:
    digest = _Digest()
    for row in side.rows(table, columns):
        digest.add(row)
    return digest.rows, digest.hexdigest


def table_checksums(
    side_target: str,
) -> Result[dict[str, tuple[int, str]], OpenError | ReadinessError]:
    """Rows and checksum of every table of the database ``side_target`` names except the
    journal and ``runstore_meta``, over its columns in name order (so the two backends'
    column orders agree): ``{table: (rows, checksum)}``. Read in one snapshot."""
    opened = _open_source(side_target)
    if isinstance(opened, Failure):
        return opened
    side = opened.unwrap()
    try:

        def read() -> Result[dict[str, tuple[int, str]], OpenError]:
            return Success(
                {
                    name: _checksum(side, name, sorted(table.columns))
                    for name, table in side.tables().items()
                    if not _not_copied(name)
                }
            )

        return side.read("table checksums", read)
    finally:
        side.close()


def _copy(
    src: _Side, dst: _Side, *, partial: bool, told: UnitProgress
) -> Result[CopyReport, CopyError]:
    reference = _fresh_reference()
    try:
        fresh = reference.tables()

        def survey() -> Result[
            tuple[_Plan, dict[str, _Table], dict[str, _Table], list[NotCopied]], CopyError
        ]:
            dst_schema = dst.read(
                "copy: read schema", lambda: Success((dst.tables(), dst.migration_ids()))
            )
            if isinstance(dst_schema, Failure):
                return dst_schema
            dst_tables, dst_ids = dst_schema.unwrap()
            src_tables = src.tables()
            src_ids, dst_set = set(src.migration_ids()), set(dst_ids)
            one_sided = ", ".join(f"{n:04d}" for n in sorted(src_ids ^ dst_set))
            sql = _sql_of(src, src_ids - dst_set) + _sql_of(dst, dst_set - src_ids)
            planned = _plan(src_tables, dst_tables, one_sided=one_sided, one_sided_sql=sql)
            if isinstance(planned, Failure):
                return planned
            plan = planned.unwrap()
            left = [
                NotCopied(
                    name, src.count(name), _data_rows(src, src_tables[name], reference, fresh), why
                )
                for name, why in plan.not_copied
            ]
            return Success((plan, src_tables, dst_tables, left))

        surveyed = src.read("copy: plan", survey)
        if isinstance(surveyed, Failure):
            return surveyed
        plan, src_tables, dst_tables, left = surveyed.unwrap()
        kept = [t for n, t in sorted(dst_tables.items()) if not _not_copied(n)]
        at_risk = tuple(t for t in left if t.data_rows)
        if at_risk and not partial:
            return Failure(RowsNotCopyable(at_risk))

        def write() -> Result[CopyReport, CopyError]:
            dst.lock([t.name for t in kept])
            holding = tuple(t.name for t in kept if _data_rows(dst, t, reference, fresh))
            if holding:
                return Failure(DestinationNotEmpty(dst.shown, holding))
            return src.read(
                "copy: read source", lambda: _write_all(src, dst, plan, src_tables, told)
            )

        written = dst.transact("copy", write)
        if isinstance(written, Failure):
            return written
        report: CopyReport = told.committed(written.unwrap())
        return Success(attrs.evolve(report, not_copied=tuple(left)))
    finally:
        reference.close()


def _write_all(
    src: _Side, dst: _Side, plan: _Plan, src_tables: dict[str, _Table], told: UnitProgress
) -> Result[CopyReport, CopyError]:
    copied: list[CopiedTable] = []
    later: list[tuple[_Table, tuple[str, ...], list[Row]]] = []
    told.planned(sum(src.count(table.name) for table in plan.order))
    done = 0
    for table in plan.order:
        digest = _Digest()
        held = tuple(
            c for fk in plan.deferred.get(table.name, ()) for c in fk.columns if c in table.nullable
        )
        updates: list[Row] = []
        rows: Iterable[Row] = src.rows(table.name, table.columns)
        if any(fk.parent == table.name for fk in table.foreign_keys):
            rows = _parents_first(list(rows), table.columns, table)
        dst.delete_all(table.name)
        prepared = _prepared(rows, table, held, digest, updates, told, done)
        dst.insert(table.name, table.columns, prepared)
        if updates:
            later.append((table, held, updates))
        copied.append(CopiedTable(table.name, digest.rows, digest.hexdigest))
        done += digest.rows
        told.reached(done)
    for table, held, updates in later:
        dst.update(table.name, held, table.primary_key, updates)
    counters: list[CounterSet] = []
    for table in plan.order:
        for column in sorted(table.counters):
            top = src.high_water(src_tables[table.name], column)
            dst.set_counter(table, column, top)
            counters.append(CounterSet(table.name, column, top))
    for table, expected in zip(plan.order, copied, strict=True):
        rows_now, checksum = _checksum(dst, table.name, table.columns)
        if (rows_now, checksum) != (expected.rows, expected.checksum):
            return Failure(
                CopyMismatch(table.name, expected.rows, rows_now, expected.checksum, checksum)
            )
    return Success(CopyReport(src.shown, dst.shown, tuple(copied), (), tuple(counters)))


def _prepared(
    rows: Iterable[Row],
    table: _Table,
    held: tuple[str, ...],
    digest: _Digest,
    updates: list[Row],
    told: UnitProgress,
    before: int,
) -> Iterator[Row]:
    """``rows`` as written: each added to ``digest``; the ``held`` columns (a foreign key
    that closes a cycle) written NULL and kept in ``updates`` (values, then the key);
    ``told`` the rows written (``before`` those of earlier tables) every
    :data:`PROGRESS_ROWS` rows."""
    at = [table.columns.index(c) for c in held]
    key = [table.columns.index(c) for c in table.primary_key]
    for row in rows:
        digest.add(row)
        if digest.rows % PROGRESS_ROWS == 0:
            told.reached(before + digest.rows)
        if at and any(row[i] is not None for i in at):
            updates.append(tuple(row[i] for i in at) + tuple(row[i] for i in key))
            row = tuple(None if i in at else v for i, v in enumerate(row))
        yield row


def _parents_first(rows: list[Row], columns: Sequence[str], table: _Table) -> list[Row]:
    """``rows`` of a self-referencing ``table`` reordered so that each row comes after the
    row it refers to (rows whose reference is NULL or outside the table first)."""
    own = [fk for fk in table.foreign_keys if fk.parent == table.name]
    refs = [[columns.index(c) for c in fk.columns] for fk in own]
    targets = [[columns.index(c) for c in fk.parent_columns] for fk in own]
    present = [{tuple(r[i] for i in t) for r in rows} for t in targets]
    placed: list[set[tuple[Any, ...]]] = [set() for _ in own]
    ordered: list[Row] = []
    pending = rows
    while pending:
        waiting: list[Row] = []
        for row in pending:
            needs = [tuple(row[i] for i in ref) for ref in refs]
            if all(
                None in need or need not in present[k] or need in placed[k]
                for k, need in enumerate(needs)
            ):
                ordered.append(row)
                for k, target in enumerate(targets):
                    placed[k].add(tuple(row[i] for i in target))
            else:
                waiting.append(row)
        if len(waiting) == len(pending):  # rows referring to each other: the database says no
            ordered.extend(waiting)
            break
        pending = waiting
    return ordered
