"""``runstore tests-for PATH[:LINE]``: the tests that executed a file (or one line of it).

The answer is ``DataReader.tests_for``'s, over the per-test coverage that
``pytest --runstore --cov=PKG --cov-context=test`` (or ``--runstore-cov-context``) recorded:
each test with the newest run (of the newest ``--runs`` runs with per-test coverage) in which
it ran, when it executed the file there, newest run first, and the lines of the file it
executed there: a test that a newer run shows no longer executes the file is not listed.

``PATH`` names a file as the runs stored it (relative to pytest's rootdir, ``/``
separated), or by its last components (``cart.py``, ``shop/cart.py``) when they name one
measured file, or as a path on disk (absolute, or relative to the current folder), which is
made relative to the project folder holding the database's ``.runstore`` folder. A
trailing ``:LINE`` (digits) asks for one line (``:0`` is refused: lines count from 1); a
trailing ``:`` alone is ignored.

:func:`tests_for_document` returns exactly the JSON document the command prints (without
``schema_version``) and refuses as every query command does (``services.fail``): no per-test
coverage in the project is exit 1 with how to record it (in JSON the error document also
carries ``"kind": "no_per_test_coverage"`` and the ``hint``), a ``PATH`` naming several
measured files exit 1 with the ``candidates``, a ``PATH`` naming no file the runs read
measured exit 1 (``"kind": "not_measured"``), line 0 exit 1 with the service's reason.
"""

from __future__ import annotations

import os
from typing import Any

import click
from returns.result import Failure

from runstore.cli._output import emit_json
from runstore.cli._settings import format_option
from runstore.cli._test_runs import (
    Services,
    _plural,
    _print,
    _project,
    _row,
    _services,
    _table,
    measured_file,
    project_option,
)
from runstore.services._test_runs_rules import encode_lines
from runstore.services.errors import NotFound
from runstore.services.pagination import MAX_PAGE_SIZE
from runstore.services.test_runs import (
    DEFAULT_TESTS_FOR_RUNS,
    MAX_TESTS_FOR_RUNS,
    CoveringTest,
    TestsFor,
)

__all__ = ["HINT", "MAX_SHOWN_RANGES", "split_location", "tests_for", "tests_for_document"]

HINT = "pytest --runstore --cov=PKG --cov-context=test (or --cov=PKG --runstore-cov-context)"
"""How to record per-test coverage, as the refusal words it."""

MAX_SHOWN_RANGES = 20
"""The most line ranges shown per test (``lines``); ``lines_truncated`` says when cut."""


def split_location(location: str) -> tuple[str, int | None]:
    """``"src/a.py:12"`` -> ``("src/a.py", 12)``; ``"src/a.py"`` -> ``("src/a.py", None)``.

    A non-empty run of ASCII digits after the last ``:`` is always a line, ``0`` too (which
    ``tests_for`` refuses: lines count from 1); anything else after it stays part of the
    path (``C:\\x.py``). An empty line part (``src/a.py:``) is taken as the file ``src/a.py``.
    """
    head, sep, tail = location.rpartition(":")
    if sep and head and tail.isascii() and tail.isdigit():
        return head, int(tail)
    if sep and head and not tail:
        return head, None
    return location, None


def _test(test: CoveringTest) -> dict[str, Any]:
    spans = encode_lines(test.lines).split(",")
    return {
        "nodeid": test.nodeid,
        "run_id": int(test.run_id),
        "lines": ",".join(spans[:MAX_SHOWN_RANGES]),
        "lines_truncated": len(spans) > MAX_SHOWN_RANGES,
        "line_count": len(test.lines),
    }


def _document(answer: TestsFor, asked: str) -> dict[str, Any]:
    return {
        "project": answer.project,
        "path": answer.path,
        "asked": asked,
        "line": answer.line,
        "runs": [int(r) for r in answer.runs],
        "tests": [_test(t) for t in answer.tests],
        "has_more": answer.has_more,
    }


def _project_root(services: Services) -> str | None:
    """The folder holding the database's ``.runstore`` folder (pytest's rootdir when the
    plugin chose the database), None for a URL or a database kept elsewhere."""
    folder = os.path.dirname(os.path.abspath(services.db_path))
    if "://" in services.db_path or os.path.basename(folder) != ".runstore":
        return None
    return os.path.dirname(folder)


def _stored_form(services: Services, path: str) -> str:
    """``path`` as the recorder stores it: a file on disk relative to the project folder
    (``/`` separated) when it lies inside it; anything else as given, without ``./``."""
    root = _project_root(services)
    if root is not None and (os.path.isabs(path) or os.path.exists(path)):
        absolute = os.path.normpath(os.path.abspath(path))
        relative = os.path.relpath(absolute, root)
        if relative.split(os.sep, 1)[0] != os.pardir:
            return relative.replace(os.sep, "/")
        return absolute
    return path.replace("\\", "/").removeprefix("./")


def _measured_paths(services: Services, answer: TestsFor) -> set[str]:
    """The files the runs of ``answer`` measured (their per-file coverage)."""
    paths: set[str] = set()
    for run_id in answer.runs:
        report = services.reader.coverage(run_id)
        if not isinstance(report, Failure):
            paths.update(f.path for f in report.unwrap().files)
    return paths


def tests_for_document(
    services: Services,
    location: str,
    project: str | None = None,  # noqa: PT028 - not a test: named after its command
    runs: int = DEFAULT_TESTS_FOR_RUNS,  # noqa: PT028
    limit: int = 50,  # noqa: PT028
) -> dict[str, Any]:
    """The ``tests-for`` JSON document (schema ``tests-for.json``, without
    ``schema_version``) of ``location`` (``PATH`` or ``PATH:LINE``, see the module).

    Refusals (:class:`~runstore.cli._output.Refused`): the project's as every query
    command's; no run of the project with per-test coverage (with ``kind`` and ``hint`` in
    the error document); a ``PATH`` whose last components name several measured files
    (with ``candidates``); a database error.
    """
    name = _project(services, project)
    path, line = split_location(location)
    stored = _stored_form(services, path)
    found = services.reader.tests_for(name, stored, line=line, runs=runs, limit=limit)
    if isinstance(found, Failure) and isinstance(found.failure(), NotFound):
        services.fail(
            f"no run of project {name!r} recorded per-test coverage; record it with: {HINT}",
            {"kind": "no_per_test_coverage", "hint": HINT},
        )
    answer = services.get(found)
    if not answer.tests:
        chosen = measured_file(services, _measured_paths(services, answer), stored, path)
        if chosen is None:
            services.fail(
                f"{path!r} is not a file the newest {_plural(len(answer.runs), 'run')}"
                f" with per-test coverage measured",
                {"kind": "not_measured"},
            )
        if chosen != stored:
            answer = services.get(services.reader.tests_for(
                name, chosen, line=line, runs=runs, limit=limit))
    return _document(answer, location)


@click.command("tests-for")
@click.argument("location", metavar="PATH[:LINE]")
@project_option
@click.option("--runs", type=click.IntRange(1, MAX_TESTS_FOR_RUNS),
              default=DEFAULT_TESTS_FOR_RUNS, show_default=True,
              help="Read the newest N runs that recorded per-test coverage.")
@click.option("--limit", type=click.IntRange(1, MAX_PAGE_SIZE), default=50,
              show_default=True, help="List at most N tests.")
@format_option
def tests_for(location: str, project: str | None, runs: int, limit: int) -> None:
    """List the tests that executed a file, or one line of it (PATH:LINE), newest run first.

    Reads the per-test coverage that `pytest --runstore --cov=PKG --cov-context=test`
    (or `--runstore-cov-context` instead of --cov-context) records. Each test is judged by
    the newest run in which it ran, and listed when it executed the file there: the run id
    and the lines of the file it executed (at most 20 ranges). Without per-test coverage:
    exit 1 with how to record it.

    \b
    JSON: {"project", "path", "asked", "line", "runs", "tests": [{"nodeid", "run_id",
           "lines", "lines_truncated", "line_count"}], "has_more"}
    Example:
      runstore tests-for src/shop/cart.py
      runstore --format json tests-for cart.py:42
    """
    with _services() as services:
        document = tests_for_document(services, location, project, runs, limit)
        if services.output_format == "json":
            emit_json(document)
            return
        where = document["path"] + ("" if document["line"] is None else f":{document['line']}")
        read = ", ".join(str(r) for r in document["runs"])
        heading = (f"{_plural(len(document['tests']), 'test')} executed {where}"
                   f"{' (more with --limit)' if document['has_more'] else ''}"
                   f" (newest first; read {_plural(len(document['runs']), 'run')}: {read})")
        if not document["tests"]:
            _print(heading)
            return
        table = _table("run", "test", "lines")
        for test in document["tests"]:
            lines = test["lines"].replace(",", ", ") + (", ..." if test["lines_truncated"] else "")
            _row(table, test["run_id"], test["nodeid"], lines)
        _print(heading, table)
