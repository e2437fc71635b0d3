"""Make the fixture database of one released schema, for the upgrade tests.

Every released schema keeps a fixture database in ``tests/migrations/fixtures/``, and
``test_migrations.py`` upgrades a copy of each one to the newest shipped schema. When a
release ships migration ``N``, run this script once, with the code of that release, and
commit the file it writes::

    .venv/bin/python tests/migrations/make_fixture.py N

- ``N = 0`` writes ``schema_0000_empty.db``: an empty file, what a brand-new database is
  before runstore touches it.
- ``N >= 1`` writes ``schema_NNNN_<name>.db``: a database migrated exactly up to ``N`` with
  the runner itself (``apply_migrations(db, up_to=N)``), checkpointed so the single file
  holds everything, in WAL mode like every database runstore writes.

Never regenerate or edit an existing fixture: it stands for databases already out there,
and a released migration must keep upgrading them. The script refuses to overwrite one
unless ``--force`` is given (only for a fixture that was never released).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from returns.result import Failure

from runstore.layers import SqliteDatabase
from runstore.migrations import JOURNAL_TABLE, apply_migrations, shipped_migrations

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def fixture_name(number: int) -> str:
    """Return the file name of the fixture for schema ``number`` (0 = empty)."""
    if number == 0:
        return "schema_0000_empty.db"
    names = {m.id: m.name for m in shipped_migrations()}
    if number not in names:
        raise SystemExit(f"no shipped migration {number:04d}; shipped: {sorted(names)}")
    return f"schema_{number:04d}_{names[number]}.db"


def make_fixture(number: int, folder: Path = FIXTURES, *, force: bool = False) -> Path:
    """Write the fixture database of schema ``number`` into ``folder`` and return its path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / fixture_name(number)
    if path.exists() and not force:
        raise SystemExit(f"{path} exists; released fixtures are never regenerated")
    path.unlink(missing_ok=True)
    if number == 0:
        path.write_bytes(b"")
        return path
    db = SqliteDatabase.open(path).unwrap()
    try:
        applied = apply_migrations(db, up_to=number)
        if isinstance(applied, Failure):
            raise SystemExit(f"cannot migrate {path}: {applied.failure()}")
        ids = [row[0] for row in db.execute(f"SELECT id FROM {JOURNAL_TABLE} ORDER BY id")]
        expected = [m.id for m in shipped_migrations() if m.id <= number]
        if ids != expected:
            raise SystemExit(f"journal {ids} is not the shipped migrations up to {number}")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        db.close()
    return path


def main(argv: list[str] | None = None) -> None:
    """Parse the command line and write one fixture."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("number", type=int, help="the schema: 0 (empty) or a migration id")
    parser.add_argument("--force", action="store_true", help="overwrite an unreleased fixture")
    args = parser.parse_args(argv)
    print(make_fixture(args.number, force=args.force))


if __name__ == "__main__":
    main(sys.argv[1:])
