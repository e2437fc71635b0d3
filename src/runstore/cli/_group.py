"""The root group's class: commands imported when they run, and usage errors that also
answer in JSON when JSON output was asked for."""

from __future__ import annotations

import errno
import importlib
import sys
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

import click
from click.core import ParameterSource

from runstore.cli._output import emit_json
from runstore.cli._settings import Settings
from runstore.cli._stdout import StandardOutputError, guard_standard_output
from runstore.layers import database_path_problem

__all__ = ["JsonErrorsGroup", "check_db_path"]


def _format_in(args: Sequence[str]) -> str | None:
    """The last ``--format`` value among ``args`` (a command's own overrides the global one)."""
    found: str | None = None
    for index, arg in enumerate(args):
        if arg == "--":
            break
        if arg == "--format" and index + 1 < len(args):
            found = args[index + 1]
        elif arg.startswith("--format="):
            found = arg.partition("=")[2]
    return found


class JsonErrorsGroup(click.Group):
    """A group that, on a usage error in JSON mode, also writes ``{"error": ...}`` on stdout,
    and imports each of its ``lazy_commands`` only when it is asked for.

    Click still prints its usage text on standard error and exits 2; JSON mode is the
    global or the command's ``--format json`` (read from the arguments, since the error may
    come before the option was processed).

    ``lazy_commands`` maps a command name to ``"module:attribute"``: running one command
    imports its module alone (``runstore show`` never imports the sessions commands, nor
    what they import); listing them all (``--help``) imports every one.

    A failed write to the process's standard output (a full device, a closed descriptor,
    a broken pipe; :mod:`runstore.cli._stdout`) ends any command with exit 1: a broken
    pipe quietly (the reader, such as ``head``, stopped reading), any other with
    ``runstore: cannot write standard output: REASON`` on standard error.
    """

    _args: tuple[str, ...] = ()

    def __init__(
        self, *args: Any, lazy_commands: Mapping[str, str] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self._lazy = dict(lazy_commands or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self._lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        found = super().get_command(ctx, cmd_name)
        if found is not None or cmd_name not in self._lazy:
            return found
        module, _, attribute = self._lazy[cmd_name].partition(":")
        command = getattr(importlib.import_module(module), attribute)
        if not isinstance(command, click.Command):  # pragma: no cover - a wiring bug
            raise TypeError(f"{self._lazy[cmd_name]} is not a click command")
        self.add_command(command, cmd_name)
        return command

    def main(self, *args: Any, **kwargs: Any) -> Any:
        guard_standard_output()
        try:
            try:
                return super().main(*args, **kwargs)
            finally:  # what is still buffered: its failure is the command's too
                sys.stdout.flush()
        except StandardOutputError as exc:
            _stdout_failed(exc)

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        self._args = tuple(args)
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.UsageError as exc:
            hinted = _hinted(exc)
            self._report(hinted, None)
            if hinted is exc:
                raise
            raise hinted from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            hinted = _hinted(exc)
            self._report(hinted, ctx)
            if hinted is exc:
                raise
            raise hinted from None

    def _report(self, exc: click.UsageError, ctx: click.Context | None) -> None:
        settings = None if ctx is None else ctx.find_object(Settings)
        wanted = _format_in(self._args) or (settings.output_format if settings else None)
        if wanted == "json":
            emit_json({"error": " ".join(exc.format_message().split())})


def _stdout_failed(exc: StandardOutputError) -> NoReturn:
    """Exit 1 for a failed write to standard output: quietly for a broken pipe (click
    exits so too), else with the reason on standard error."""
    if exc.errno != errno.EPIPE:
        click.echo(f"runstore: cannot write standard output: {exc.strerror or exc}", err=True)
    sys.exit(1)


def _hinted(exc: click.UsageError) -> click.UsageError:
    """``exc``, or for an unknown option such as ``-1`` (read as "one run back") the same
    error saying how runstore spells that: ``latest~1``."""
    if not isinstance(exc, click.NoSuchOption):
        return exc
    digits = exc.option_name[1:]
    if not (digits.isascii() and digits.isdigit()):
        return exc
    back = int(digits)
    return click.NoSuchOption(
        exc.option_name,
        f"No such option {exc.option_name!r}. To name the run {back} "
        f"run{'' if back == 1 else 's'} before the latest, write latest~{back}.",
        ctx=exc.ctx,
    )


def check_db_path(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Refuse a blank ``--db`` or one naming a directory, naming ``RUNSTORE_DB`` when the
    value came from the environment; None (neither given) passes."""
    if value is None:
        return None
    from_env = ctx.get_parameter_source(param.name or "") is ParameterSource.ENVIRONMENT
    hint = "RUNSTORE_DB" if from_env else "'--db'"
    problem = database_path_problem(value)
    if problem is not None:
        raise click.BadParameter(problem, ctx, param_hint=hint)
    return value
