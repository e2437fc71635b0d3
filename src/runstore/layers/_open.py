"""Opening a live database: connect, check, set the file up, migrate; close on any failure."""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Literal, TypeAlias

import apsw
from returns.result import Failure, Result, Success

from runstore.layers._sqlite_database import (
    ConnectionSettings,
    SqliteDatabase,
    _connect,
    _is_memory,
    _prepare_file,
)
from runstore.layers._sqlite_errors import from_apsw
from runstore.migrations import (
    JOURNAL_TABLE,
    apply_migrations,
    foreign_database,
    migration_status,
)
from runstore.services.errors import NotARunstoreDatabase, OpenError

if TYPE_CHECKING:
    from runstore.layers._layer import Layer

__all__ = [
    "ACCESSES",
    "DEFAULT_DB_PATH",
    "GITIGNORE",
    "Access",
    "check_access",
    "database_path_problem",
    "find_project_database",
    "find_upward",
    "live",
    "make_database_folder",
    "open_database",
    "resolve_database",
    "scrub_database",
    "shipped_for",
    "shown_database",
]

DEFAULT_DB_PATH = os.path.join(".runstore", "runstore.db")
"""A project's database, relative to the project's folder (pytest's rootdir)."""

GITIGNORE = "# Created by runstore automatically.\n*\n"
"""What a ``.runstore`` folder runstore creates gets as its ``.gitignore`` (as pytest does
for ``.pytest_cache``): the database is a local record, never something to commit."""

_OWN_FOLDER = os.path.dirname(DEFAULT_DB_PATH)

Access: TypeAlias = Literal["create", "write", "read"]
"""How :func:`open_database` treats the file (a literal, so a type checker catches a typo):

- ``"create"``: create the file (and its folder) when it is missing, migrate it;
- ``"write"``: the file must already be a runstore database; migrate it;
- ``"read"``: open an existing file read-only; nothing is created, migrated or changed.
"""


ACCESSES: tuple[Access, ...] = ("create", "write", "read")
"""The values of :data:`Access`, in the order the docs give them."""


def check_access(access: object) -> None:
    """Raise ``ValueError`` naming :data:`ACCESSES` when ``access`` is none of them: the
    layers (sync and async) check it when they are made, before anything is opened."""
    if access not in ACCESSES:
        raise ValueError(f"access must be one of {', '.join(map(repr, ACCESSES))}, not {access!r}")



def find_project_database(start: str) -> str | None:
    """The absolute path of the nearest ``.runstore/runstore.db`` at or above ``start``.

    Walks up from ``start`` (a folder) to the file-system root, stopping after the first
    folder that holds ``.git``; None when no folder on the way holds the file. The CLI
    uses it to find the project's database; the pytest plugin to know whether the CLI
    will find the one it wrote.
    """
    return find_upward(start, DEFAULT_DB_PATH)


def find_upward(start: str, relative: str) -> str | None:
    """The absolute path of the nearest file ``relative`` (a path below a folder) at or
    above the folder ``start``, walking up to the file-system root and stopping after the
    first folder that holds ``.git`` (a directory, or a file in worktrees and submodules);
    None when no folder on the way holds it. The database and ``pyproject.toml`` are found
    this way."""
    here = os.path.abspath(start)
    while True:
        candidate = os.path.join(here, relative)
        if os.path.isfile(candidate):
            return candidate
        parent = os.path.dirname(here)
        if parent == here or os.path.exists(os.path.join(here, ".git")):
            return None
        here = parent


_URL = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")

_CONNINFO = re.compile(
    r"\s*(host|hostaddr|port|dbname|user|password|passfile|service|sslmode|connect_timeout"
    r"|application_name|options|target_session_attrs)\s*=",
    re.IGNORECASE,
)
"""The start of a libpq key/value connection string (``host=db dbname=app ...``): its
first keyword, one of the common ones of libpq's "Parameter Key Words"."""

POSTGRES_SCHEMES = frozenset({"postgresql", "postgres"})
"""URL schemes served by the PostgreSQL layer (libpq's two spellings)."""

POSTGRES_EXTRA = "postgresql:// URLs need the postgresql extra: pip install 'runstore[postgresql]'"
"""Why a PostgreSQL URL cannot be used while psycopg or psycopg_pool is missing."""


def postgres_url(target: str | os.PathLike[str]) -> bool:
    """Whether ``target`` is a ``postgresql://`` or ``postgres://`` URL."""
    url = _URL.match(os.fspath(target)) if isinstance(target, str) else None
    return url is not None and url.group(1).lower() in POSTGRES_SCHEMES


def postgres_extra_problem() -> str | None:
    """:data:`POSTGRES_EXTRA` when the PostgreSQL driver is not installed, else None (looked
    up without importing it)."""
    import importlib.util

    found = all(importlib.util.find_spec(name) is not None for name in ("psycopg", "psycopg_pool"))
    return None if found else POSTGRES_EXTRA


def database_path_problem(path: str) -> str | None:
    """Why ``path`` cannot name a database, or None when it can.

    A blank or whitespace-only path is ``"the database path is blank"``; an existing
    directory is ``"<path> is a directory; give the database file"``. The CLI (``--db``,
    ``RUNSTORE_DB``) and the pytest plugin (``--runstore-db``, ``RUNSTORE_DB``) refuse such
    a path with this reason as a usage error. A ``postgresql://`` or ``postgres://`` URL
    names a PostgreSQL database (opened by :func:`live`); while the ``postgresql`` extra
    is missing it is refused with :data:`POSTGRES_EXTRA`. Any other URL
    (``scheme://...``) is refused naming its scheme only, never the rest (it may hold a
    password), instead of being taken as a file name. So is a libpq key/value connection
    string (``host=db password=... dbname=app``): it is named by its form alone, with the
    URL form to use instead, rather than created as a SQLite file of that name.
    """
    if not path.strip():
        return "the database path is blank"
    if _CONNINFO.match(path):  # named by its form alone: it may hold a password
        return ("a key=value connection string is not served; give the server as a "
                "postgresql://user@host:port/dbname URL, or the path of a SQLite database file")
    url = _URL.match(path)
    if url and postgres_url(path):
        return postgres_extra_problem()
    if url:  # named by its scheme alone: the rest may hold a password
        return (f"{url.group(1)}:// URLs are not served; give a postgresql:// URL or the "
                "path of a SQLite database file")
    if os.path.isdir(path):
        return f"{path} is a directory; give the database file"
    return None


def _split_url(text: str) -> tuple[str, str, str, str]:
    """``scheme://``, the user info (``user:password``, "" when none), the rest before the
    query, and the query of a URL. The user info ends at the last ``@`` before the query,
    further than libpq looks, so a password holding an unescaped ``/`` is still found."""
    scheme, _, rest = text.partition("://")
    rest, _, query = rest.partition("#")[0].partition("?")
    userinfo, _, hosts = rest.rpartition("@")
    return f"{scheme}://", userinfo, hosts, query


def _is_password(part: str) -> bool:
    return part.partition("=")[0].strip().lower() == "password"


def shown_database(target: str | os.PathLike[str]) -> str:
    """``target`` as output and errors may show it: a ``postgresql://`` URL without its
    password (the one after ``user:`` becomes ``***``, as does a ``password`` query
    parameter; a fragment is dropped), anything else as it is. Pure text work: psycopg is
    not imported."""
    text = os.fspath(target)
    if not postgres_url(text):
        return text
    scheme, userinfo, hosts, query = _split_url(text)
    user, colon, password = userinfo.partition(":")
    userinfo = user + colon + ("***" if password else "")
    parts = ["password=***" if _is_password(part) else part for part in query.split("&")]
    return (scheme + (f"{userinfo}@" if userinfo or "@" in text.partition("?")[0] else "")
            + hosts + ("?" + "&".join(parts) if query else ""))


def _passwords(target: str) -> tuple[str, ...]:
    """The password text ``target`` (a ``postgresql://`` URL) carries, as written and
    percent-decoded, longest first; empty for anything else."""
    from urllib.parse import unquote_plus

    if not postgres_url(target):
        return ()
    _, userinfo, _, query = _split_url(target)
    found = [userinfo.partition(":")[2]] if ":" in userinfo else []
    found += [part.partition("=")[2] for part in query.split("&") if _is_password(part)]
    variants = {v for p in found for v in (p, unquote_plus(p)) if v}
    return tuple(sorted(variants, key=len, reverse=True))


def scrub_database(text: str, target: str | os.PathLike[str]) -> str:
    """``text`` with every password that ``target`` (a ``postgresql://`` URL) carries
    replaced by ``***``: the last guard of what the CLI and the recorder print."""
    for secret in _passwords(os.fspath(target)):
        text = text.replace(secret, "***")
    return text


def resolve_database(target: str, base: str) -> str:
    """``target`` (a database path or URL) as seen from the folder ``base``: a path made
    absolute against it (``~`` expanded, normalised); a ``postgresql://`` URL and
    ``:memory:`` as they are."""
    if target == ":memory:" or postgres_url(target):
        return target
    return os.path.normpath(os.path.join(base, os.path.expanduser(target)))


def shipped_for(target: str | os.PathLike[str]) -> tuple[int, ...]:
    """The ids of the migrations runstore ships for the database ``target`` names (a
    ``postgresql://`` URL: PostgreSQL's translations; else SQLite's), in order."""
    from runstore.migrations import POSTGRESQL_FOLDER, shipped_ids

    return shipped_ids(POSTGRESQL_FOLDER) if postgres_url(target) else shipped_ids()


def live(
    target: str | os.PathLike[str],
    settings: ConnectionSettings | None = None,
    *,
    access: Access = "create",
) -> Layer:
    """The live layer on ``target``, the one place that tells a URL from a path:
    :func:`runstore.layers.postgres` for a ``postgresql://`` or ``postgres://`` URL, else
    :func:`runstore.layers.sqlite` on the file (or ``:memory:``). ``access`` means the same
    on both (see :func:`open_database` and
    :func:`runstore.layers._postgres_layer.open_postgres`).

    ``settings`` are SQLite's; on PostgreSQL ``busy_timeout_ms`` becomes the lock timeout
    of a statement and ``busy_budget_ms`` the retry budget of a unit
    (``PostgresSettings``), so a caller waits as long on either. The CLI and the pytest
    plugin open every database through this function.

    Raises :class:`~runstore.exceptions.MissingExtra` for a URL while the ``postgresql``
    extra is missing; building the layer raises ``DatabaseOpenError`` as each does.
    """
    from runstore.layers import postgres, sqlite

    if not postgres_url(target):
        return sqlite(target, settings, access=access)
    if settings is None:
        return postgres(os.fspath(target), access=access)
    from runstore.layers._postgres_database import PostgresSettings

    waits = PostgresSettings(
        lock_timeout_ms=settings.busy_timeout_ms, busy_budget_ms=settings.busy_budget_ms
    )
    return postgres(os.fspath(target), waits, access=access)


def make_database_folder(path: str | os.PathLike[str]) -> None:
    """Create the folder of the database file ``path`` when it is missing.

    A folder named ``.runstore`` that this call creates gets a ``.gitignore`` holding
    :data:`GITIGNORE`; a folder that exists already, or has another name, is left as it is.
    Never raises: when the folder cannot be made, opening the file reports why.
    """
    folder = os.path.dirname(os.path.abspath(os.fspath(path)))
    if os.path.exists(folder):
        return
    try:
        os.makedirs(os.path.dirname(folder), exist_ok=True)
        os.mkdir(folder)
    except OSError:  # made by another process meanwhile, or not makeable: the open says
        return
    if os.path.basename(folder) == _OWN_FOLDER:
        try:
            with open(os.path.join(folder, ".gitignore"), "w", encoding="utf-8") as handle:
                handle.write(GITIGNORE)
        except OSError:
            pass


def open_database(
    path: str | os.PathLike[str],
    settings: ConnectionSettings | None = None,
    *,
    access: Access = "create",
) -> Result[SqliteDatabase, OpenError]:
    """Open ``path`` (a file or ``:memory:``) as ``access`` says; migrate it unless reading.

    - ``"create"`` (the default): a missing file is created, and a missing folder made by
      :func:`make_database_folder` (a new ``.runstore`` folder gets its ``.gitignore``).
      An existing file is used when it is a runstore database or holds nothing (empty, or
      an empty database); one that holds another program's tables and no migration
      journal is refused with ``NotARunstoreDatabase`` naming those ``tables``, and left
      exactly as it was.
    - ``"write"``: ``path`` must already be a runstore database: a missing file, or one
      without the migration journal (empty, or written by another program), is refused
      with ``NotARunstoreDatabase`` and left exactly as it was.
    - ``"read"``: ``path`` is opened for reading only (``PRAGMA query_only``): nothing is
      created, migrated or written (the journal mode is left as the file has it; as the
      last connection to close it removes the WAL files, as any connection that may
      write does, rather than leave them beside the file). A missing file is
      ``NotARunstoreDatabase``; whether the file can be read by this code is for
      :meth:`runstore.services.DatabaseHealth.readiness` to say. A write through the
      database fails with a ``StorageFailure`` of kind ``read_only``.
    ``:memory:`` holds nothing to protect: it is a fresh, migrated database whatever
    ``access`` says.

    Steps when writing: connect with the per-connection settings; read the migration
    journal and refuse a database this code cannot use; only then set the file up
    (``auto_vacuum`` when fresh, the WAL journal, which rewrites the file header) and apply
    the pending migrations, each in its own ``BEGIN IMMEDIATE`` unit.

    Returns the open database, or why it cannot be used: ``StorageFailure`` or ``Busy``
    from opening or migrating (e.g. ``not_a_database``, ``cant_open``), ``UnknownMigration``,
    ``MigrationDrift`` or ``HalfAppliedMigration`` from the check, ``NotARunstoreDatabase``
    as above. On a refusal the file's bytes are exactly as they were found. On every
    failure, and when an exception escapes (a programmer error, re-raised), the connection
    is closed again.
    """
    settings = settings or ConnectionSettings()
    memory = _is_memory(path)
    if not memory and access != "create" and not os.path.isfile(path):
        return Failure(NotARunstoreDatabase(os.fspath(path), "there is no such file"))
    if memory or access != "read":
        return _open_for_writing(path, settings, create=memory or access == "create")
    return _connect(path, settings, open_as="query_only", prepare=False).map(
        lambda connection: SqliteDatabase(connection, settings, path=os.fspath(path))
    )


def _open_for_writing(
    path: str | os.PathLike[str], settings: ConnectionSettings, *, create: bool
) -> Result[SqliteDatabase, OpenError]:
    if create and not _is_memory(path):
        make_database_folder(path)
    connected = _connect(path, settings, open_as="create" if create else "existing", prepare=False)
    if isinstance(connected, Failure):
        return connected
    db = SqliteDatabase(connected.unwrap(), settings, path=os.fspath(path))
    try:
        opened = _check_and_migrate(db, settings, create=create)
    except BaseException:
        db.close()
        raise
    if isinstance(opened, Failure):
        db.close()
        return opened
    return Success(db)


def _refuse_foreign(db: SqliteDatabase) -> Result[None, OpenError]:
    """Refuse ``db``, which has no journal rows, when it holds another program's tables."""
    found = db.read("database check", lambda: Success(foreign_database(db)))
    if isinstance(found, Failure):
        return found
    refusal = found.unwrap()
    return Success(None) if refusal is None else Failure(refusal)


def _check_and_migrate(
    db: SqliteDatabase, settings: ConnectionSettings, *, create: bool
) -> Result[None, OpenError]:
    status = migration_status(db)
    if isinstance(status, Failure):
        return status
    journalled = bool(status.unwrap().applied)
    if not create and not journalled:  # refused however it looks; the detail says why
        return _refuse_foreign(db).bind(
            lambda _: Failure(NotARunstoreDatabase(db.path, f"it holds no {JOURNAL_TABLE} journal"))
        )
    problems = status.unwrap().problems
    if problems:
        return Failure(problems[0])
    if not journalled:
        foreign = _refuse_foreign(db)
        if isinstance(foreign, Failure):
            return foreign
    connection = db.connection
    # A brand-new file holds nothing to lose, so it is set up and migrated without fsyncs
    # (8 of the 10 a fresh open and close cost): a power loss meanwhile can at worst spoil
    # that empty file. The configured durability holds again before anything else is written.
    fresh = (
        not status.unwrap().applied
        and not connection.execute("SELECT 1 FROM sqlite_schema LIMIT 1").fetchall()
    )
    try:
        if fresh:
            connection.pragma("synchronous", "OFF")
        _prepare_file(connection, settings)
        migrated = apply_migrations(db)
    except apsw.Error as exc:
        return Failure(from_apsw(exc, operation="open", waited_ms=settings.busy_timeout_ms))
    finally:
        if fresh:
            connection.pragma("synchronous", settings.synchronous.upper())
    if isinstance(migrated, Failure):
        return Failure(migrated.failure())
    return Success(None)
