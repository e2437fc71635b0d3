"""The folder of a database file: made when missing, and a new ``.runstore`` is git-ignored."""

from __future__ import annotations

import os
from pathlib import Path

from runstore.layers import (
    GITIGNORE,
    build,
    database_path_problem,
    find_project_database,
    sqlite,
)


def test_opening_creates_the_runstore_folder_with_its_gitignore(tmp_path: Path) -> None:
    db = tmp_path / "proj" / ".runstore" / "runstore.db"
    with build(sqlite(db)):
        pass
    assert sorted(p.name for p in db.parent.iterdir()) == [".gitignore", "runstore.db"]
    assert (db.parent / ".gitignore").read_text(encoding="utf-8") == GITIGNORE


def test_a_folder_that_exists_or_has_another_name_gets_no_gitignore(tmp_path: Path) -> None:
    mine = tmp_path / "mine" / ".runstore"
    mine.mkdir(parents=True)
    other = tmp_path / "elsewhere" / "runs"
    for db in (mine / "runstore.db", other / "x.db"):
        with build(sqlite(db)):
            pass
        assert not (db.parent / ".gitignore").exists()
    assert (other / "x.db").is_file()


def test_a_blank_or_directory_path_names_its_problem(tmp_path: Path) -> None:
    assert database_path_problem("") == "the database path is blank"
    assert database_path_problem(" \t") == "the database path is blank"
    assert database_path_problem(str(tmp_path)) == (
        f"{tmp_path} is a directory; give the database file"
    )
    assert database_path_problem(str(tmp_path / "x.db")) is None


def test_a_url_is_refused_by_its_scheme_without_echoing_the_password() -> None:
    problem = database_path_problem("mysql://user:secret@localhost/db")
    assert problem == (
        "mysql:// URLs are not served; give a postgresql:// URL or the path of a SQLite "
        "database file"
    )
    assert database_path_problem("postgresql://user:secret@localhost/db") is None
    assert database_path_problem("file.db") is None


def test_a_key_value_connection_string_is_refused_without_echoing_it() -> None:
    for conninfo in ("host=db password=secret dbname=app", " dbname = app", "PORT=5432"):
        problem = database_path_problem(conninfo)
        assert problem is not None, conninfo
        assert problem.startswith(
            "a key=value connection string is not served; give the server as a postgresql://"
        ), conninfo
        assert "secret" not in problem
    assert database_path_problem("hostname=1.db") is None  # a file name, not a keyword
    assert database_path_problem("runs/user=me.db") is None


def test_the_project_database_is_found_walking_up(tmp_path: Path) -> None:
    db = tmp_path / "proj" / ".runstore" / "runstore.db"
    with build(sqlite(db)):
        pass
    below = tmp_path / "proj" / "tests" / "unit"
    below.mkdir(parents=True)
    assert find_project_database(str(below)) == str(db)
    assert find_project_database(os.fspath(tmp_path)) != str(db)  # not below: not found
