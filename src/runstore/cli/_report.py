"""``runstore report``: write a project's HTML report, one self-contained file.

The report is collected through ``DataReader`` (``runstore.report.collect_report``) and
rendered by ``runstore.report.render_html``; both, and Jinja2 with them, are imported only
when the command runs, so no other command loads them. Exit codes as every query command
(``runstore.cli._test_runs``): 0 written, 1 refused (no database, unknown project, busy or
broken database, a file that cannot be written), 2 usage error (``--runs`` out of range,
a blank ``-o``, ``-o -`` with ``--format json``). JSON shape: ``report.json`` in
``runstore/cli/schemas/``.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

import click

from runstore.cli._output import emit_json, progress_on_terminal, say
from runstore.cli._settings import format_option, settings
from runstore.cli._test_runs import Services, _project, _services, project_option

__all__ = ["DEFAULT_FILE", "report"]

DEFAULT_FILE = "runstore-report.html"
"""Where the report goes unless ``-o`` says: this file in the current folder."""

_MAX_RUNS = 500
"""``runstore.report.MAX_REPORT_RUNS``, repeated so that ``--help`` loads no report code
(a test checks that the two agree)."""
_DEFAULT_RUNS = 100
"""``runstore.report.DEFAULT_REPORT_RUNS`` (checked as ``_MAX_RUNS``)."""


def _size(count: int) -> str:
    """A file size as a person reads it: ``812 bytes``, ``48.3 kB``, ``1.82 MB`` (SI units)."""
    if count < 1000:
        return f"{count} byte{'s' if count != 1 else ''}"
    if count < 1_000_000:
        return f"{count / 1000:.1f} kB"
    return f"{count / 1_000_000:.2f} MB"


def _html(services: Services, project: str | None, runs: int) -> tuple[str, str, int]:
    """The page of ``project`` (None: the default project) over its newest ``runs`` runs:
    (the project, the HTML, how many runs it covers); a refusal ends the command."""
    from runstore.report import collect_report, render_html

    name = _project(services, project)
    with progress_on_terminal("collecting the report", None) as advance:
        data = services.get(collect_report(services.reader, name, runs=runs,
                                           policy=services.policy, progress=advance))
    return name, render_html(data), len(data.runs)


_SIDE_FILES = ("-wal", "-shm", "-journal")
"""The files SQLite keeps beside a database, named by the database's name and these."""


def _umask() -> int:
    """The process's umask: read from ``/proc/self/status`` where Linux has it (setting
    and restoring it would race another thread creating a file), else set and restored."""
    with contextlib.suppress(OSError, StopIteration, ValueError):
        with open("/proc/self/status", encoding="ascii") as status:
            line = next(line for line in status if line.startswith("Umask:"))
        return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _write(services: Services, output: str, page: bytes) -> bool:
    """Write ``page`` to ``output`` whole or not at all: into a temporary file of its own
    (``.NAME.<random>.partial``, so two reports writing one file at once never share it)
    beside the file ``output`` names (a symbolic link's target, so the link stays), given
    the mode a new file gets under the umask, then renamed over it (removed on any
    failure); a device or a pipe that exists (``/dev/stdout``, a FIFO) is written to
    directly, as a rename would put a file in its place. True when ``output`` is a file (False: a
    device or a pipe). The database being read (or a file SQLite keeps beside it), a
    folder that is missing or is no folder (said so) or where no file can be made
    (``/proc``: said so, with the system's reason) end the command."""
    target = os.path.realpath(output)
    database = os.path.realpath(services.db_path)  # a PostgreSQL URL names no file here
    if target in {database, *(database + side for side in _SIDE_FILES)}:
        services.fail(f"cannot write {output}: it is the database the report reads")
    try:
        mode: int | None = os.stat(output).st_mode  # /dev/stdout: what it stands for
    except OSError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):  # click refuses a folder
        try:
            with open(output, "wb") as out:
                out.write(page)
        except OSError as exc:
            services.fail(f"cannot write {output}: {exc.strerror or exc}")
        return False
    folder, name = os.path.split(target)
    if not os.path.isdir(folder):
        missing = "is not a folder" if os.path.exists(folder) else "does not exist"
        services.fail(f"cannot write {output}: the folder {folder} {missing}")
    try:
        handle, partial = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".partial")
    except OSError as exc:  # /proc: the file is there, but no file can be made beside it
        services.fail(f"cannot write {output}: no new file can be made in {folder} to "
                      f"replace it ({exc.strerror or exc})")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(page)
            os.fchmod(out.fileno(), 0o666 & ~_umask())  # mkstemp made it 0o600
        os.replace(partial, target)
    except BaseException as exc:  # an interrupt too: no temporary file is left behind
        with contextlib.suppress(OSError):
            os.unlink(partial)
        if isinstance(exc, OSError):
            services.fail(f"cannot write {output}: {exc.strerror or exc}")
        raise
    return True


def _not_blank(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """Refuse a blank ``-o`` as a usage error, as ``--db`` refuses one."""
    if not value.strip():
        raise click.BadParameter("the report path is blank", ctx, param)
    return value


@click.command()
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, allow_dash=True),
    default=DEFAULT_FILE,
    show_default=True,
    metavar="FILE",
    callback=_not_blank,
    help="File to write (its folder must exist); - writes the page to standard output.",
)
@click.option(
    "--runs",
    type=click.IntRange(1, _MAX_RUNS),
    default=_DEFAULT_RUNS,
    show_default=True,
    metavar="N",
    help=f"The newest N runs the report covers (1 to {_MAX_RUNS}).",
)
@project_option
@format_option
def report(output: str, runs: int, project: str | None) -> None:
    """Write a project's HTML report: one file that opens offline in any browser.

    It shows the runs over time (items by outcome and duration; a run with failures links
    to its failing tests), a history matrix of tests by run with each cell's outcome,
    duration and attempts (failing and flaky tests first, each flaky verdict with its
    reason), failure signature groups with first and last seen, the slowest tests and
    their trend, coverage per run and the least covered files, and a section per failing
    test of the newest run (history, error, frames, traceback). The page loads nothing
    from the network and reads without JavaScript. Verdicts follow the flaky policy of
    [tool.runstore.flaky] in pyproject.toml.

    \b
    JSON (schema report.json): {"project", "path", "bytes", "runs"}
           (path: the file written, absolute; bytes: its size; runs: the runs covered)
    Example:
      runstore report --runs 50 -o report.html
    """
    if output == "-" and settings().output_format == "json":
        raise click.UsageError("-o - writes the page to standard output; with --format "
                               "json write it to a file (-o FILE)")
    with _services() as services:
        name, html, covered = _html(services, project, runs)
        page = html.encode("utf-8")
        if output == "-":
            click.echo(page, nl=False)  # bytes: written as they are, whatever the locale
            return
        is_file = _write(services, output, page)
    path = Path(output).resolve()
    if settings().output_format == "json":
        emit_json({"project": name, "path": str(path), "bytes": len(page), "runs": covered})
        return
    if not is_file:  # as with -o -: -o /dev/stdout must get the page alone
        return
    say(f"wrote {output} ({_size(len(page))}): {covered} run{'s' if covered != 1 else ''} "
        f"of {name}")
    say(f"open {path.as_uri()}")
