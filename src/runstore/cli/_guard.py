"""How every command opens the database: once, and only as much as the command needs.

A reading command opens the file read-only (``access="read"``): nothing is created, migrated
or written, and before it reads it asks the database's ``DatabaseHealth`` whether this code
can read the file as it is (a runstore database, every shipped migration applied). A writing
command that must not create a database (``prune``) opens it with ``access="write"``, which
refuses a file that is not already a runstore database; ``db migrate`` and ``sessions import``
create it. Every refusal ends the command with one line (exit 1) and leaves the file as it
was found. A ``postgresql://`` URL opens the PostgreSQL layer the same way
(:func:`runstore.layers.live` decides), and every message names it without its password.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from returns.result import Failure

from runstore.cli._output import fail
from runstore.cli._settings import settings
from runstore.exceptions import DatabaseOpenError
from runstore.layers import (
    DATABASE_HEALTH,
    Access,
    Container,
    Layer,
    Tag,
    build,
    live,
    shown_database,
)
from runstore.services.errors import (
    NotARunstoreDatabase,
    PendingMigrations,
    StorageFailure,
    StorageFailureKind,
)

__all__ = ["cannot_open_reason", "foreign_reason", "opened", "refusal", "unserved_reason"]


def cannot_open_reason(path: str, failure: object) -> str:
    """The one-line reason ``path`` (a file or a URL, named without its password) could not
    be opened, with a hint for an unwritable folder.

    SQLite in WAL mode needs to create ``PATH-shm`` and ``PATH-wal`` beside the file even to
    read it, so an existing file that cannot be opened usually sits in a read-only folder.
    """
    reason = f"cannot open {shown_database(path)}: {failure}"
    if (
        isinstance(failure, StorageFailure)
        and failure.kind is StorageFailureKind.CANT_OPEN
        and os.path.isfile(path)
    ):
        reason += f" (the folder of {path} must be writable: SQLite WAL needs it)"
    return reason


def foreign_reason(path: str, error: NotARunstoreDatabase) -> str:
    """The one line refusing ``path``, another program's database, named as the command
    names it (a URL without its password)."""
    return f"{shown_database(path)} is not a runstore database: {error.detail}"


def refusal(path: str, error: object) -> str:
    """The one line a command ends with when ``path`` cannot be used for it."""
    if isinstance(error, NotARunstoreDatabase) and error.tables:
        return foreign_reason(path, error)  # neither command would make it one
    if isinstance(error, NotARunstoreDatabase):
        return (
            f"no runstore database at {shown_database(path)} (record a run with "
            "`pytest --runstore` or run `runstore db migrate`)"
        )
    if isinstance(error, PendingMigrations):
        return f"{shown_database(path)}: {error}: run `runstore db migrate` (or record a run) first"
    return cannot_open_reason(path, error)


def unserved_reason(path: str, layer: Layer, needs: tuple[Tag[Any], ...]) -> str | None:
    """The one line refusing a command that ``needs`` services ``layer`` (on ``path``) does
    not provide, or None when it provides them all."""
    missing = sorted(tag.key.rpartition(".")[2] for tag in set(needs) - layer.provides)
    if not missing:
        return None
    return (f"{shown_database(path)}: this command needs {', '.join(missing)}, which runstore "
            "does not serve on this kind of database yet; use a SQLite database file")


@contextmanager
def opened(
    access: Access, *, needs: tuple[Tag[Any], ...] = (), document: dict[str, Any] | None = None
) -> Iterator[Container]:
    """The services on the command's database, opened once as ``access`` says.

    With ``"read"`` the database must also be ready to read
    (``DatabaseHealth.readiness``). ``needs`` are the services the command uses: a
    database whose layer does not provide them all is refused before it is opened (nothing
    is created or migrated). A refusal ends the command (exit 1) with one line on
    standard error and, in JSON mode, ``document`` with the ``error`` on standard output.
    """
    cfg = settings()
    path = cfg.db_path
    layer = live(path, access=access)
    unserved = unserved_reason(path, layer, needs)
    if unserved is not None:
        fail(unserved, output_format=cfg.output_format, document=document)
    try:
        with build(layer) as container:
            if access == "read":
                ready = container.get(DATABASE_HEALTH).readiness()
                if isinstance(ready, Failure):
                    fail(refusal(path, ready.failure()), output_format=cfg.output_format,
                         document=document)
            yield container
    except DatabaseOpenError as exc:
        fail(refusal(path, exc.error), output_format=cfg.output_format, document=document)
