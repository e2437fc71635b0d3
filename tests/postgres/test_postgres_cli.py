"""The CLI on a ``postgresql://`` URL: the read guard, ``db status|check|migrate``, and the
password, which no line of output or error ever shows."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import click
import psycopg
import pytest
from click.testing import CliRunner, Result
from hypothesis import given
from hypothesis import strategies as st
from psycopg.conninfo import conninfo_to_dict

from postgres.fixtures import PostgresCluster
from runstore.cli import cli
from runstore.cli._guard import opened
from runstore.cli._settings import Settings
from runstore.layers import (
    DATA_READER,
    DATABASE_HEALTH,
    Tag,
    build,
    live,
    postgres,
    resolve_database,
    scrub_database,
    shipped_for,
    shown_database,
)
from runstore.layers._postgres_database import PostgresDatabase
from runstore.migrations import POSTGRESQL_FOLDER, shipped_ids

SECRET = "pw-Zq81-never-shown"
"""The password every URL here carries (the test server trusts its socket: it is not checked
unless a test makes it so)."""


def url_of(dsn: str, password: str = SECRET, user: str | None = None) -> str:
    """The ``postgresql://`` URL of the key=value ``dsn`` of a test database, with
    ``password``."""
    params = conninfo_to_dict(dsn)
    host = quote(str(params["host"]), safe="")
    name = user or params["user"]
    return f"postgresql://{name}:{quote(password, safe='')}@/{params['dbname']}?host={host}"


@pytest.fixture
def url(postgres_dsn: str) -> str:
    """The URL of a fresh, empty database (no runstore schema)."""
    return url_of(postgres_dsn)


def run(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)


def one_line(result: Result) -> str:
    """The one line of standard error of a refused command (exit 1), checked to hold no
    password."""
    assert result.exit_code == 1, (result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("runstore: ")
    assert SECRET not in result.stdout + result.stderr
    return lines[0]


def relations(dsn: str) -> int:
    """How many tables, indexes and views the database's public schema holds."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'public'"
        ).fetchone()
    assert row is not None
    return int(row[0])


# -- the URL is recognised, shown and resolved in one place -----------------------------------


@given(password=st.text(st.characters(blacklist_characters="?#", codec="utf-8"), min_size=1))
def test_a_url_is_shown_without_its_password_whatever_it_is(password: str) -> None:
    for written in (quote(password, safe=""), password):
        shown = shown_database(f"postgresql://runner:{written}@db.internal:5432/runs")
        assert shown == "postgresql://runner:***@db.internal:5432/runs"
        scrubbed = scrub_database(f"failed: {written}", f"postgres://runner:{written}@h/d")
        assert scrubbed.endswith("***")
        assert written not in scrubbed or set(written) == {"*"}


def test_a_password_given_as_a_query_parameter_is_hidden_too() -> None:
    shown = shown_database(f"postgresql:///runs?host=/tmp&password={SECRET}&sslmode=disable")
    assert shown == "postgresql:///runs?host=/tmp&password=***&sslmode=disable"
    assert shown_database("postgresql://runner@h/runs") == "postgresql://runner@h/runs"
    assert shown_database("runs.db") == "runs.db"


def test_a_url_is_taken_as_given_and_a_path_from_the_folder(tmp_path: Path) -> None:
    given_url = f"postgresql://u:{SECRET}@h/db"
    assert resolve_database(given_url, str(tmp_path)) == given_url
    assert resolve_database("runs.db", str(tmp_path)) == str(tmp_path / "runs.db")
    assert shipped_for(given_url) == shipped_ids(POSTGRESQL_FOLDER)
    assert shipped_for("runs.db") == shipped_ids()


def test_live_opens_postgresql_for_a_url(url: str) -> None:
    with build(live(url)) as container:
        assert isinstance(container.get(PostgresDatabase), PostgresDatabase)
        assert container.get(DATABASE_HEALTH).readiness().unwrap() is None


# -- the read guard --------------------------------------------------------------------------


def test_reading_a_database_without_the_schema_says_so_and_creates_nothing(
    url: str, postgres_dsn: str
) -> None:
    for command in (["show", "latest"], ["runs"], ["failures"], ["flaky"]):
        reason = one_line(run("--db", url, *command))
        assert reason == (
            f"runstore: no runstore database at {shown_database(url)} (record a run with "
            "`pytest --runstore` or run `runstore db migrate`)"
        )
        assert ":***@" in reason
    result = run("--db", url, "--format", "json", "show", "latest")
    assert json.loads(result.stdout)["error"].startswith("no runstore database at ")
    assert relations(postgres_dsn) == 0


def test_prune_refuses_a_database_without_the_schema_and_creates_nothing(
    url: str, postgres_dsn: str
) -> None:
    reason = one_line(run("--db", url, "prune", "--keep-runs", "5"))
    assert reason.startswith("runstore: no runstore database at postgresql://")
    assert relations(postgres_dsn) == 0


def test_another_programs_database_is_refused_by_every_command(
    url: str, postgres_dsn: str
) -> None:
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id bigint PRIMARY KEY)")
    for command in (["show", "latest"], ["db", "status"], ["db", "migrate"], ["db", "check"]):
        assert "orders" in one_line(run("--db", url, *command))
    assert relations(postgres_dsn) == 2  # the table and its primary key, nothing added


def test_a_migrated_database_without_runs_says_how_to_record_one(url: str) -> None:
    assert run("--db", url, "db", "migrate").exit_code == 0
    assert "no runs recorded in" in one_line(run("--db", url, "show", "latest"))


def test_runstore_db_names_the_database_as_the_option_does(url: str) -> None:
    assert run("db", "migrate", env={"RUNSTORE_DB": url}).exit_code == 0
    result = run("--format", "json", "db", "status", env={"RUNSTORE_DB": url})
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["database"] == shown_database(url)
    assert document["database_source"] == "RUNSTORE_DB"
    assert SECRET not in result.stdout


def test_a_command_needing_a_service_the_layer_lacks_is_refused_before_opening(
    url: str, postgres_dsn: str
) -> None:
    @click.command()
    def needs_more() -> None:
        with opened("create", needs=(DATA_READER, Tag("tests.NotServedHere"))):
            raise AssertionError("opened a database that cannot serve the command")

    result = CliRunner().invoke(needs_more, obj=Settings(db_path=url, output_format="text"))
    reason = one_line(result)
    assert "this command needs NotServedHere, which runstore does not serve" in reason
    assert relations(postgres_dsn) == 0  # not even migrated


def test_another_scheme_is_a_usage_error_naming_it_alone() -> None:
    result = run("--db", f"mysql://u:{SECRET}@h/db", "show", "latest")
    assert result.exit_code == 2
    assert "mysql:// URLs are not served" in result.stderr
    assert SECRET not in result.stdout + result.stderr


# -- db status, migrate, check ----------------------------------------------------------------


def test_db_status_migrate_and_check_work_on_postgresql(url: str, postgres_dsn: str) -> None:
    pending = list(shipped_ids(POSTGRESQL_FOLDER))
    before = run("--db", url, "--format", "json", "db", "status")
    assert before.exit_code == 0, before.stderr
    status = json.loads(before.stdout)
    assert status["migrations"]["pending"] == pending
    assert status["migrations"]["shipped"] == pending
    assert status["database"] == shown_database(url)
    assert relations(postgres_dsn) == 0  # status changed nothing

    migrated = run("--db", url, "db", "migrate")
    assert migrated.exit_code == 0, migrated.stderr
    assert f"migrations: {len(pending)} applied, 0 pending" in migrated.stdout

    after = json.loads(run("--db", url, "--format", "json", "db", "status").stdout)
    assert [a["id"] for a in after["migrations"]["applied"]] == pending
    assert after["migrations"]["pending"] == []
    checked = run("--db", url, "--format", "json", "db", "check")
    assert checked.exit_code == 0, checked.stderr
    document = json.loads(checked.stdout)
    assert document["healthy"] is True
    assert document["integrity"] == ["ok"]
    assert document["foreign_key_violations"] == []
    for result in (migrated, checked):
        assert SECRET not in result.stdout + result.stderr


def test_db_check_refuses_a_database_with_an_unknown_migration(url: str) -> None:
    assert run("--db", url, "db", "migrate").exit_code == 0
    with build(postgres(url)) as container:
        db = container.get(PostgresDatabase)
        db.execute(
            "INSERT INTO runstore_migrations (id, name, checksum, applied_at_ms, finished)"
            " VALUES (9999, 'from_the_future', 'x', 0, 1)"
        )
    reason = one_line(run("--db", url, "db", "check"))
    assert "9999" in reason
    assert "9999" in one_line(run("--db", url, "show", "latest"))


# -- the password never shows -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "said"),
    [
        (f"postgresql://runner:{SECRET}@no-such-host.invalid/runs", "no-such-host.invalid"),
        (f"postgresql://runner:{SECRET}@127.0.0.1:1/runs", "Connection refused"),
    ],
    ids=["wrong-host", "refused"],
)
def test_an_unreachable_server_is_one_line_without_the_password(target: str, said: str) -> None:
    for command in (["show", "latest"], ["db", "status"], ["db", "migrate"]):
        reason = one_line(run("--db", target, *command))
        assert said in reason
        assert ":***@" in reason


@pytest.fixture
def password_role(postgres_server: PostgresCluster) -> Iterator[str]:
    """A role that must log in with the password ``right-password`` (scram-sha-256) on the
    test server; its name. The server's other logins stay as they are."""
    server = postgres_server.server
    if server is None:  # an external server: its authentication is its own
        pytest.skip("needs the embedded test server, whose pg_hba.conf this test edits")
    hba = server.pgdata / "pg_hba.conf"
    original = hba.read_text()
    role = "runstore_pw_role"
    postgres_server.admin.execute(f"DROP ROLE IF EXISTS {role}")
    postgres_server.admin.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'right-password'")
    hba.write_text(f"local all {role} scram-sha-256\n{original}")
    try:
        postgres_server.admin.execute("SELECT pg_reload_conf()")
        _wait_until_refused(postgres_server.dsn_of("postgres"), role)
        yield role
    finally:
        hba.write_text(original)
        postgres_server.admin.execute("SELECT pg_reload_conf()")
        postgres_server.admin.execute(f"DROP ROLE IF EXISTS {role}")


def _wait_until_refused(dsn: str, role: str) -> None:
    """Wait (at most 10 s) until the server has read the new pg_hba.conf."""
    deadline = time.monotonic() + 10
    while True:
        try:
            psycopg.connect(dsn, user=role, password="wrong").close()
        except psycopg.OperationalError:
            return
        assert time.monotonic() < deadline, "the server never asked for the password"
        time.sleep(0.05)


def test_a_wrong_password_is_one_line_without_it(
    password_role: str, postgres_dsn: str
) -> None:
    wrong = url_of(postgres_dsn, user=password_role)
    reason = one_line(run("--db", wrong, "show", "latest"))
    assert f'password authentication failed for user "{password_role}"' in reason
    json_mode = run("--db", wrong, "--format", "json", "db", "status")
    assert SECRET not in json_mode.stdout + json_mode.stderr
    assert json.loads(json_mode.stdout)["healthy"] is False
    right = url_of(postgres_dsn, password="right-password", user=password_role)
    reason = one_line(run("--db", right, "show", "latest"))
    assert reason.startswith("runstore: no runstore database at postgresql://")
    assert "right-password" not in reason


def test_no_environment_variable_carries_the_password_in_help() -> None:
    result = run("--help", env={"RUNSTORE_DB": f"postgresql://u:{SECRET}@h/db"})
    assert result.exit_code == 0
    assert "postgresql://u:***@h/db (from RUNSTORE_DB)" in " ".join(result.stdout.split())
    assert SECRET not in result.stdout
