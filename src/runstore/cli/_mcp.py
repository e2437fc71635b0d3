"""``runstore mcp``: the query commands as tools of an MCP server over standard input/output.

Each tool answers exactly as one query command does with ``--format json``: its structured
content is the command's JSON document (``schema_version`` first), its ``outputSchema`` the
command's shipped schema (``runstore/cli/schemas/NAME.json`` with the shared definitions
bundled in, so it stands alone), and its arguments are parsed by the command's own options,
so a bad argument is refused with the command's usage message. A refusal (an unknown run,
project, test or session, a database that cannot be read) is a tool error (``isError``)
whose text is the command's one-line reason, and whose structured content is the command's
JSON error document (``error``, and ``candidates`` for an ambiguous node id).

The database is the CLI's (``--db``, ``RUNSTORE_DB``, else the project's found walking up
from the folder the server starts in); it is opened read-only on the first call that
reaches it and kept open while the server runs, so every later call is a query on a warm
connection. A refused opening (no database yet, pending migrations) is retried on the next
call. The server never writes: the file is opened ``access="read"`` (``PRAGMA
query_only``) and every tool is a query.

**Freshness.** On a SQLite file, each call starts, before any query, by looking at the
file the path names (``os.stat``: its device and inode) and at ``PRAGMA data_version`` on a
read-only connection of its own (SQLite: "the integer values returned by two invocations
of PRAGMA data_version from the same connection will be different if changes were
committed to the database by any other connection in the interim"). A file replaced
(``os.replace``, a restored copy) or removed since it was opened is closed, since an open
connection keeps reading the file it opened: the call opens the path anew, or is refused
as the CLI is ("no runstore database at ...") when nothing is there. When the version
moved, the database is asked again whether this code can read it
(``DatabaseHealth.readiness``): one another process migrated past this code is closed and
refused with the CLI's reason ("database has migrations this runstore does not know"),
and opened again on a later call once it is readable. So an answer is never older than
the data committed when the call began. On PostgreSQL readiness is checked when the
database is opened only.

**Cache.** On a SQLite file the server keeps the test-run reader's answers (every
``DataReader`` call that succeeded, by method and arguments) while the database is
unchanged, and drops them all when the version says another connection committed (see
"Freshness"). It keeps the most recently used answers, at most :data:`KEPT_ANSWERS` (64)
holding about :data:`KEPT_BYTES` (32 MiB) in all, as estimated from ``sys.getsizeof``
(:func:`_size`): past either bound the least recently used goes, and an answer larger than
that alone is never kept. What a call reads outside the database (git, for ``triage``'s
changed files) is read each time. A tool whose document is a pure function of an answer value
(``triage``: the :class:`~runstore.services.triage.Triage` answer, git's part included)
keeps its last document per arguments (under the same bounds, apart from the answers) and
serves it again only while a fresh answer equals the one it was built from. On PostgreSQL
nothing is kept.

The ``mcp`` SDK (the ``mcp`` extra) is imported only when the server starts: no other
command loads it.
"""

from __future__ import annotations

import enum
import importlib
import json
import os
import sys
from collections import OrderedDict
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

import attrs
import click

from runstore.cli._output import SCHEMA_VERSION, Refused, one_line
from runstore.cli._settings import Settings, settings
from runstore.layers import DATA_READER, DATA_STORE, SESSION_REPOSITORY, Tag, shown_database

if TYPE_CHECKING:
    from mcp.server.lowlevel import Server
    from mcp_types import CallToolRequestParams, CallToolResult, ListToolsResult

    from runstore.layers import Container

__all__ = ["KEPT_ANSWERS", "KEPT_BYTES", "TOOLS", "McpTool", "ToolAnswers", "mcp", "output_schema"]


# -- the tools ----------------------------------------------------------------------------------


@attrs.frozen
class Argument:
    """One argument of a tool: ``name`` as the tool takes it, ``param`` the name of the
    command's click parameter it fills, ``schema`` its JSON Schema (with a description)."""

    name: str
    schema: dict[str, Any]
    param: str = ""

    @property
    def target(self) -> str:
        return self.param or self.name


_RUN_SCHEMA: dict[str, Any] = {
    "anyOf": [{"type": "integer", "minimum": 1}, {"type": "string"}],
    "description": "A run id, 'latest' or 'latest~N' (N runs before the latest).",
}
_PROJECT = Argument("project", {
    "type": "string",
    "description": "The project (default: the only one, else the one named like the "
                   "folder the server runs in).",
})


def _run(description: str = "", name: str = "run") -> Argument:
    return Argument(name, {**_RUN_SCHEMA, "description": description or _RUN_SCHEMA[
        "description"] + " Default: latest."})


def _text(name: str, description: str, param: str = "") -> Argument:
    return Argument(name, {"type": "string", "description": description}, param)


def _limit(description: str, most: int) -> Argument:
    return Argument("limit", {"type": "integer", "minimum": 1, "maximum": most,
                              "description": description})


@attrs.frozen
class McpTool:
    """A tool: its ``name``, ``description``, ``arguments`` (``required`` among them), the
    click ``command`` (``module:attribute``, a path of commands for a group's) whose
    parameters parse them, the ``answer`` (``module:function``, a ``*_document`` function
    called with the services and the parsed parameters), the ``schema`` file of its output,
    and the services it ``needs``."""

    name: str
    description: str
    command: str
    answer: str
    schema: str
    arguments: tuple[Argument, ...] = ()
    required: tuple[str, ...] = ()
    needs: tuple[Tag[Any], ...] = (DATA_STORE, DATA_READER)
    value: str = ""
    """``module:function`` computing, from the same services and parameters, the answer
    value the document is built from (see "Cache" in the module docstring), or empty."""
    render: str = ""
    """With ``value``: ``module:function`` building the document from the services, that
    value and the parameters, so a document not kept costs no second answer."""
    services: str = "test_runs"
    """Which services the answer takes: ``"test_runs"`` (``_test_runs.Services``),
    ``"sessions"`` (``_sessions.SessionServices``) or ``"search"``
    (``_search.SearchServices``)."""

    def input_schema(self) -> dict[str, Any]:
        """The JSON Schema of the tool's arguments (an object, no other properties)."""
        return {
            "type": "object",
            "properties": {a.name: a.schema for a in self.arguments},
            "required": list(self.required),
            "additionalProperties": False,
        }


_TEST_RUNS = "runstore.cli._test_runs"
_SESSIONS = "runstore.cli._sessions"
_SESSION_NEEDS: tuple[Tag[Any], ...] = (SESSION_REPOSITORY,)
_MAX_PAGE = 1000  # runstore.services.pagination.MAX_PAGE_SIZE, without importing the domain
_MAX_RUNS = 1000  # runstore.services.test_runs.MAX_TESTS_FOR_RUNS, likewise

TOOLS: tuple[McpTool, ...] = (
    McpTool(
        "triage",
        "What a run (default: the latest) needs looked at, in one answer: status and counts, "
        "each failure with its verdict (new_failure, persistent_failure with its streak and "
        "since-run, flaky) and the rule and runs it rests on, its first error line and "
        "location; the failures grouped by failure signature (one root cause is one group); "
        "flaky suspects; the slowest items; and since the last green run, the tests newly "
        "failing and the files git says changed. `max_tokens` bounds the answer's size, "
        "trimming the longest lists first and saying what it left out. As `runstore triage`.",
        "runstore.cli._triage:triage", "runstore.cli._triage:triage_document", "triage",
        (_run(), _PROJECT,
         Argument("slowest", {"type": "integer", "minimum": 1, "maximum": _MAX_PAGE,
                              "description": "How many of the slowest items to list "
                                             "(default 10)."}),
         Argument("max_tokens", {"type": "integer", "minimum": 1, "description":
                                 "Bound the answer to about this many tokens (characters / 4)."})),
        value="runstore.cli._mcp:triage_value", render="runstore.cli._mcp:triage_render",
    ),
    McpTool(
        "failures",
        "The failing items and collection errors of a run (default: the latest): each with "
        "its error, frames and causes, failure signature, whether it is new, since which run "
        "and how many runs in a row it has failed, and its verdict (new_failure, "
        "persistent_failure, flaky) with the rule and runs it rests on. As `runstore "
        "failures`.",
        f"{_TEST_RUNS}:failures", f"{_TEST_RUNS}:failures_document", "failures",
        (_run(), _PROJECT, Argument("new", {
            "type": "boolean", "description": "Only failures not seen in an earlier run."},
            "only_new")),
    ),
    McpTool(
        "flaky",
        "The tests of a project with evidence of flakiness in their recent runs, each with "
        "its rule (passed_on_rerun, same_commit, oscillation), the runs it rests on and its "
        "recent outcomes (newest first). As `runstore flaky`.",
        f"{_TEST_RUNS}:flaky", f"{_TEST_RUNS}:flaky_document", "flaky", (_PROJECT,),
    ),
    McpTool(
        "signatures",
        "The failure signatures (root causes: exception type, masked message, failing "
        "frame) of a project, newest last seen first, each with the run that first and last "
        "recorded it and how many runs and distinct tests it affected. As `runstore "
        "signatures`.",
        "runstore.cli._signatures:signatures", "runstore.cli._signatures:signatures_document",
        "signatures", (_PROJECT, _limit("Most signatures to list (default 20).", _MAX_PAGE)),
    ),
    McpTool(
        "history",
        "The recent outcomes of one test, newest first, with the failure message, git "
        "commit and failed rerun attempts of each. As `runstore history`.",
        f"{_TEST_RUNS}:history", f"{_TEST_RUNS}:history_document", "history",
        (_text("nodeid", "A node id, or a part of one naming one test."), _PROJECT),
        ("nodeid",),
    ),
    McpTool(
        "diff",
        "What changed from run_a to run_b: newly failing, fixed, added, not run (run_b ran a "
        "selection or was interrupted) and removed tests. As `runstore diff`.",
        f"{_TEST_RUNS}:diff", f"{_TEST_RUNS}:diff_document", "diff",
        (_run("The earlier run: an id, 'latest' or 'latest~N'.", "run_a"),
         _run("The later run: an id, 'latest' or 'latest~N'.", "run_b"), _PROJECT),
        ("run_a", "run_b"),
    ),
    McpTool(
        "coverage",
        "The per-file coverage stored with a run (default: the latest): statements, "
        "branches, percent covered and the missing lines of each file; with `file`, only "
        "that file (its stored path or its last components). As `runstore coverage`.",
        f"{_TEST_RUNS}:coverage", f"{_TEST_RUNS}:coverage_document", "coverage",
        (_run(), _PROJECT, _text("file", "Only this file: the path as stored, or its last "
                                 "components (shop/cart.py).", "path")),
    ),
    McpTool(
        "tests_for",
        "The tests that executed a file, or one line of it (`PATH:LINE`), by the per-test "
        "coverage of the newest runs that recorded it (pytest --runstore --cov=PKG "
        "--cov-context=test): each test with the newest run it executed the file in and "
        "the lines it executed, newest run first. As `runstore tests-for`.",
        "runstore.cli._tests_for:tests_for", "runstore.cli._tests_for:tests_for_document",
        "tests-for",
        (_text("location", "PATH or PATH:LINE: the file as stored, its last components "
                           "(shop/cart.py) or a path on disk."), _PROJECT,
         Argument("runs", {"type": "integer", "minimum": 1, "maximum": _MAX_RUNS, "description":
                           "How many of the newest runs with per-test coverage to read "
                           "(default 10)."}),
         _limit("Most tests to list (default 50).", _MAX_PAGE)),
        ("location",),
    ),
    McpTool(
        "search",
        "Search failure messages, test names and session entries for every word of `text` "
        "(a word ending in * matches as a prefix; other characters are plain text): per "
        "kind a page of hits, best first, each with a snippet. As `runstore search`.",
        "runstore.cli._search:search", "runstore.cli._mcp:search_answer", "search",
        (_text("text", "The words to find."),
         Argument("in", {"type": "array", "items": {"enum": ["failures", "tests", "sessions"]},
                         "minItems": 1, "description": "What to search, at least one (default, "
                         "when left out: all three)."}, "kinds"),
         _text("project", "Only failures and tests of this project (default: every project)."),
         _text("cwd", "Only entries of sessions of this working folder."),
         _limit("Hits per kind (default 20).", _MAX_PAGE),
         _text("cursor", "The next_cursor of the previous page (with exactly one kind in "
                         "`in`).")),
        ("text",), needs=(DATA_READER, SESSION_REPOSITORY), services="search",
    ),
    McpTool(
        "sessions_list",
        "Agent sessions, newest first, each with its working folder, leaf and token and "
        "cost summary; a page at a time. As `runstore sessions list`.",
        f"{_SESSIONS}:sessions list", f"{_SESSIONS}:sessions_list_document", "sessions-list",
        (_text("cwd", "Only the sessions of this working folder."),
         _limit("Sessions per page (default 50).", _MAX_PAGE),
         _text("cursor", "The next_cursor of the previous page.")),
        needs=_SESSION_NEEDS, services="sessions",
    ),
    McpTool(
        "sessions_show",
        "One agent session: where it ran, its leaf, the model and thinking level it resumes "
        "with, and its summary. As `runstore sessions show`.",
        f"{_SESSIONS}:sessions show", f"{_SESSIONS}:sessions_show_document", "sessions-show",
        (_text("session_id", "The session id."),), ("session_id",), needs=_SESSION_NEEDS,
        services="sessions",
    ),
    McpTool(
        "sessions_context",
        "What the model gets at a leaf of a session (default: its active leaf): the "
        "messages, the model and the thinking level. As `runstore sessions context`.",
        f"{_SESSIONS}:sessions context", f"{_SESSIONS}:sessions_context_document",
        "sessions-context",
        (_text("session_id", "The session id."),
         _text("leaf", "Build the context at this entry id.")),
        ("session_id",), needs=_SESSION_NEEDS, services="sessions",
    ),
)
"""Every tool the server lists, in the order it lists them."""


# -- schemas ------------------------------------------------------------------------------------

_DEFINITIONS = "definitions.json"


def _schema_file(name: str) -> dict[str, Any]:
    text = (resources.files("runstore.cli") / "schemas" / name).read_text(encoding="utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def _local_refs(value: Any) -> Any:
    """``value`` with each ``definitions.json#/...`` reference made local (``#/...``)."""
    if isinstance(value, dict):
        return {k: (v.removeprefix(_DEFINITIONS) if k == "$ref" and isinstance(v, str)
                    else _local_refs(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_local_refs(v) for v in value]
    return value


@cache
def output_schema(name: str) -> dict[str, Any]:
    """The shipped schema ``NAME.json`` standing alone: the shared definitions bundled as its
    ``$defs`` and every reference to them local, since an MCP client resolves references
    within the schema only."""
    schema = _schema_file(f"{name}.json")
    if "definitions.json#" not in json.dumps(schema):
        return schema
    bundled = dict(_local_refs(schema))
    bundled["$defs"] = {**_local_refs(_schema_file(_DEFINITIONS))["$defs"],
                        **bundled.get("$defs", {})}
    return bundled


def search_answer(services: Any, kinds: tuple[str, ...] = (), **params: Any) -> dict[str, Any]:
    """``search_document`` as the command calls it: no ``--in`` searches every kind."""
    from runstore.cli._search import KINDS, search_document

    return search_document(services, kinds=kinds or KINDS, **params)


# -- the cache ----------------------------------------------------------------------------------


def triage_value(
    services: Any, run: int | str = "latest", project: str | None = None, slowest: int = 10,
    max_tokens: int | None = None,
) -> Any:
    """The triage answer ``triage_document`` renders for these parameters: the service's
    :class:`~runstore.services.triage.Triage`, its changed files read from git in the
    current folder as the command reads them."""
    from runstore._git import changed_since
    from runstore.cli._test_runs import _run
    from runstore.services.triage import triage_run

    summary = _run(services, project, run)
    return services.get(triage_run(services.reader, run_id=summary.id, slowest=slowest,
                                   changed_files=changed_since, policy=services.policy))


def triage_render(services: Any, value: Any, *, max_tokens: int | None = None,
                  **_params: Any) -> dict[str, Any]:
    """The document ``triage_document`` returns for these parameters, built from their
    :func:`triage_value`."""
    from runstore.cli._triage import bounded_document

    return bounded_document(services, value, max_tokens)


KEPT_ANSWERS = 64
"""Most reader answers kept at once (and, apart, most documents): past it the least
recently used goes."""

KEPT_BYTES = 32 * 1024 * 1024
"""About how many bytes (:func:`_size`) the kept reader answers may hold in all (and,
apart, the kept documents): past it the least recently used go, and an answer larger than
this alone is never kept. ``failures`` of a run of 5,000 failures, each with a 300-character
message and 8 frames, measures 17 MB."""


_SAMPLED = 16
"""How many items of a longer tuple or list :func:`_size` measures, for the rest to be
estimated from them."""


def _size(value: Any) -> int:
    """About how many bytes ``value`` holds: ``sys.getsizeof`` of it and of what it holds
    (tuples, lists, sets, dicts, attrs records, a ``returns`` container's value), an object
    held twice counted twice. Of a tuple or list longer than :data:`_SAMPLED` only that many
    items, spread over it, are measured and the rest counted as their mean, so sizing a
    reader's answer costs about as much whatever its length (measuring every item of
    ``failures`` of 5,000 failures, 13 MB, took as long as reading them). An enum member,
    None or a bool holds nothing of its own."""
    from returns.result import Result

    if value is None or isinstance(value, (bool, enum.Enum)):
        return 0
    own = sys.getsizeof(value)
    if isinstance(value, (str, bytes, int, float)):
        return own
    if isinstance(value, (tuple, list)) and len(value) > _SAMPLED:
        step = len(value) / _SAMPLED
        sampled = sum(_size(value[int(i * step)]) for i in range(_SAMPLED))
        return own + sampled * len(value) // _SAMPLED
    held: Any = ()
    if isinstance(value, (tuple, list, set, frozenset)):
        held = value
    elif isinstance(value, dict):
        held = (*value, *value.values())
    elif isinstance(value, Result):
        held = (value._inner_value,)
    elif attrs.has(type(value)):
        held = tuple(getattr(value, field.name) for field in attrs.fields(type(value)))
    return own + sum(_size(item) for item in held)


class _Kept:
    """Values by key, the least recently used going first once there are more than
    ``most`` or they hold more than about ``most_bytes`` (:func:`_size`); a value larger
    than ``most_bytes`` alone is not kept."""

    def __init__(self, most: int = KEPT_ANSWERS, most_bytes: int = KEPT_BYTES) -> None:
        self._most, self._most_bytes = most, most_bytes
        self._values: OrderedDict[Any, tuple[Any, int]] = OrderedDict()
        self._bytes = 0

    def get(self, key: Any) -> Any:
        """The value kept for ``key`` (now the most recently used), or None."""
        kept = self._values.get(key)
        if kept is None:
            return None
        self._values.move_to_end(key)
        return kept[0]

    def put(self, key: Any, value: Any) -> None:
        size = _size(value)
        if key in self._values:
            self._bytes -= self._values.pop(key)[1]
        if size > self._most_bytes:
            return
        self._values[key] = (value, size)
        self._bytes += size
        while len(self._values) > self._most or self._bytes > self._most_bytes:
            self._bytes -= self._values.popitem(last=False)[1][1]

    def clear(self) -> None:
        self._values.clear()
        self._bytes = 0


class _CachedReader:
    """A ``DataReader`` that answers a call it answered before from memory until its
    answers are dropped (the database changed: see the module docstring), keeping the most
    recently used (``most`` answers, about ``most_bytes`` in all): the values are frozen
    records and tuples, safe to share. Failures (a busy database) are never kept."""

    def __init__(self, reader: Any, most: int = KEPT_ANSWERS,
                 most_bytes: int = KEPT_BYTES) -> None:
        self._reader = reader
        self._answers = _Kept(most, most_bytes)

    def clear(self) -> None:
        self._answers.clear()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._reader, name)
        if not callable(method):
            return method

        def cached(*args: Any, **kwargs: Any) -> Any:
            try:
                key = (name, args, tuple(sorted(kwargs.items())))
                hash(key)
            except TypeError:  # an unhashable argument: ask the reader
                return method(*args, **kwargs)
            kept = self._answers.get(key)
            if kept is not None:
                return kept
            from returns.result import Success

            answer = method(*args, **kwargs)
            if isinstance(answer, Success):
                self._answers.put(key, answer)
            return answer

        return cached


def _identity(path: str) -> tuple[int, int] | None:
    """Which file ``path`` names: its ``(st_dev, st_ino)``, None when there is none."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino


class _Changes:
    """Whether a SQLite database changed since the last look: ``PRAGMA data_version`` on a
    read-only connection of its own. Opening it raises ``apsw.Error`` when the file cannot
    be opened."""

    def __init__(self, path: str) -> None:
        import apsw

        self._connection = apsw.Connection(path, flags=apsw.SQLITE_OPEN_READONLY)
        self._seen: int | None = None

    def changed(self) -> bool:
        """Whether anything was committed since the previous call (True the first time and
        whenever the version cannot be read)."""
        import apsw

        try:
            row = self._connection.execute("PRAGMA data_version").fetchone()
        except apsw.Error:
            self._seen = None
            return True
        version = None if row is None else int(row[0])
        changed = version is None or version != self._seen
        self._seen = version
        return changed

    def close(self) -> None:
        self._connection.close()


# -- answering ----------------------------------------------------------------------------------


def _import(spec: str) -> Any:
    module, _, attribute = spec.partition(":")
    found: Any = importlib.import_module(module)
    for part in attribute.split():
        found = found.commands[part] if isinstance(found, click.Group) else getattr(found, part)
    return found


def _token(value: Any) -> str:
    """A JSON value as the command line would give it: text as it is, an integer in digits,
    anything else as JSON (which the option then refuses, as it would that text)."""
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return json.dumps(value)


def _tokens(tool: McpTool, arguments: Mapping[str, Any], command: click.Command) -> list[str]:
    """The command line that asks ``command`` what ``arguments`` ask the tool: its options,
    then ``--`` and its arguments in the command's order (a value starting with ``-`` is
    never read as an option). A name the tool does not take, a flag given a value that is
    not a boolean, or an empty list for a repeatable option (``search``'s ``in``: leaving
    it out means every kind, as on the command line) is a usage error."""
    by_name = {p.name: p for p in command.params}
    known = {a.name: a for a in tool.arguments}
    options: list[str] = []
    positional: dict[str, str] = {}
    for name, value in arguments.items():
        if name not in known:
            listed = ", ".join(known) or "none"
            raise click.UsageError(f"{tool.name} takes no argument {name!r} (arguments: "
                                   f"{listed})")
        if value is None:
            continue
        param = by_name[known[name].target]
        if isinstance(param, click.Option) and param.multiple:
            if value == []:  # the command line cannot say "none": leaving it out means all
                raise click.BadParameter(
                    f"an empty list names nothing: leave {name!r} out for all, or name "
                    "at least one", param=param, param_hint=f"'{param.opts[0]}'")
            for item in value if isinstance(value, list) else [value]:
                options.extend((param.opts[0], _token(item)))
            continue
        if isinstance(param, click.Option) and param.is_flag:
            if not isinstance(value, bool):
                raise click.BadParameter(f"{value!r} is not a valid boolean.", param=param,
                                         param_hint=f"'{param.opts[0]}'")
            if value:
                options.append(param.opts[0])
            continue
        token = _token(value)
        if isinstance(param, click.Argument):
            positional[param.name or ""] = token
        else:
            options.extend((param.opts[0], token))
    ordered = [positional[p.name] for p in command.params if p.name in positional]
    return [*options, "--", *ordered]


@attrs.define
class ToolAnswers:
    """Answers the tools on one database, opened on first use and kept open (warm).

    ``call(name, arguments)`` returns ``(document, None)`` for an answer (the command's
    JSON document, ``schema_version`` first) or ``(error_document, reason)`` for a refusal
    or a bad argument (the command's JSON error document and its one-line reason).
    """

    settings: Settings
    cache: bool = True
    _stack: ExitStack | None = None
    _container: Container | None = None
    _services: dict[str, Any] = attrs.field(factory=dict)
    _root: click.Context | None = None
    _reader: _CachedReader | None = None
    _changes: _Changes | None = None
    _file: tuple[int, int] | None = None
    _documents: _Kept = attrs.field(factory=_Kept)
    _served: dict[str, str | None] = attrs.field(factory=dict)

    def close(self) -> None:
        """Close the database, if open."""
        if self._stack is not None:
            self._stack.close()
        self._stack = self._container = None
        self._services.clear()
        self._documents.clear()
        self._reader = self._changes = None
        self._file = None

    def _watch(self) -> None:
        """Before a call reads anything (module docstring, "Freshness"): a database file
        replaced or removed since it was opened is closed, for the call to open it anew
        or be refused as the CLI is; one another connection committed to since the last
        call drops the kept answers and is asked again whether this code can read it, and
        is closed and refused as the CLI refuses it when not."""
        if self._container is None or self._changes is None:
            return  # not open, or PostgreSQL: nothing is kept or watched
        if self._file is None or _identity(self.settings.db_path) != self._file:
            self.close()
            return
        if not self._changes.changed():
            return
        if self._reader is not None:
            self._reader.clear()
        self._documents.clear()
        try:
            self._check_ready(self._container)
        except Refused:
            self.close()
            raise

    def _check_ready(self, container: Container) -> None:
        """Refuse, as the CLI does, a database this code cannot read as it is (not a
        runstore database, pending or unknown migrations: ``DatabaseHealth.readiness``)."""
        from returns.result import Failure

        from runstore.cli._guard import refusal
        from runstore.layers import DATABASE_HEALTH

        ready = container.get(DATABASE_HEALTH).readiness()
        if isinstance(ready, Failure):
            raise Refused(refusal(self.settings.db_path, ready.failure()))

    def _open(self) -> Container:
        if self._container is not None:
            return self._container
        import apsw

        from runstore.cli._guard import refusal
        from runstore.exceptions import DatabaseOpenError
        from runstore.layers import build, live
        from runstore.layers._open import postgres_url
        from runstore.layers._sqlite_errors import from_apsw

        path = self.settings.db_path
        watched = not postgres_url(path)
        # Before opening: a file replaced after this look is seen by the next call.
        file = _identity(path) if watched else None
        stack = ExitStack()
        try:
            container = stack.enter_context(build(live(path, access="read")))
        except DatabaseOpenError as exc:
            raise Refused(refusal(path, exc.error)) from None
        try:
            self._check_ready(container)
            changes = _Changes(path) if watched else None
        except apsw.Error as exc:  # the file went away since it was opened
            stack.close()
            raise Refused(refusal(path, from_apsw(exc, operation="open"))) from None
        except BaseException:
            stack.close()
            raise
        if changes is not None:
            stack.callback(changes.close)
            changes.changed()
        self._stack, self._container, self._changes, self._file = stack, container, changes, file
        return container

    def _services_for(self, tool: McpTool) -> Any:
        from runstore.cli._guard import unserved_reason
        from runstore.layers import live

        path = self.settings.db_path
        if tool.name not in self._served:
            self._served[tool.name] = unserved_reason(path, live(path, access="read"),
                                                      tool.needs)
        unserved = self._served[tool.name]
        if unserved is not None:
            raise Refused(unserved)
        kind = tool.services
        if kind in self._services:
            return self._services[kind]
        container = self._open()
        made: Any
        if kind == "sessions":
            from runstore.cli._sessions import SessionServices

            runs = self._reader_of(container) if DATA_READER in container else None
            made = SessionServices(container.get(SESSION_REPOSITORY), runs)
        elif kind == "search":
            from runstore.cli._search import SearchServices

            made = SearchServices(self._reader_of(container), container.get(SESSION_REPOSITORY),
                                  shown_database(path))
        else:
            from runstore.cli._discover import configured_policy
            from runstore.cli._test_runs import Services

            made = Services(store=container.get(DATA_STORE), reader=self._reader_of(container),
                            output_format="json", db_path=shown_database(path),
                            policy=configured_policy())
        self._services[kind] = made
        return made

    def _reader_of(self, container: Container) -> Any:
        """The container's ``DataReader``, behind the cache when answers are kept."""
        if self._reader is not None:
            return self._reader
        reader = container.get(DATA_READER)
        if not self.cache or self._changes is None:
            return reader
        self._reader = _CachedReader(reader)
        return self._reader

    def _root_context(self) -> click.Context:
        if self._root is None:
            from runstore.cli._app import cli

            self._root = click.Context(cli, info_name="runstore", obj=self.settings)
        return self._root

    def call(
        self, name: str, arguments: Mapping[str, Any] | None
    ) -> tuple[dict[str, Any], str | None]:
        """The answer of tool ``name`` to ``arguments`` (see the class docstring)."""
        tool = _BY_NAME.get(name)
        if tool is None:
            return self._refused(f"no tool {name!r} (tools: {', '.join(_BY_NAME)})", None)
        try:
            command: click.Command = _import(tool.command)
            root = self._root_context()
            tokens = _tokens(tool, arguments or {}, command)
            with root.scope(cleanup=False), command.make_context(
                    command.name, tokens, parent=root) as ctx:
                params = dict(ctx.params)
            self._watch()
            services = self._services_for(tool)
            with root.scope(cleanup=False):
                document = self._document(tool, services, params)
        except click.UsageError as exc:
            return self._refused(exc.format_message(), None)
        except Refused as refused:
            return self._refused(refused.reason, refused.document)
        return {"schema_version": SCHEMA_VERSION, **document}, None

    def _document(self, tool: McpTool, services: Any, params: dict[str, Any]) -> dict[str, Any]:
        """The tool's document: the kept one while its answer value is unchanged (only
        while the reader's answers are kept), else built anew (from that value, when the
        tool has one)."""
        answer: Callable[..., dict[str, Any]] = _import(tool.answer)
        if not tool.value or self._reader is None:
            return answer(services, **params)
        key = (tool.name, tuple(sorted(params.items())))
        value = _import(tool.value)(services, **params)
        kept = self._documents.get(key)
        if kept is not None and kept[0] == value:
            document: dict[str, Any] = kept[1]
            return document
        document = _import(tool.render)(services, value, **params)
        self._documents.put(key, (value, document))
        return document

    def _refused(
        self, reason: str, document: dict[str, Any] | None
    ) -> tuple[dict[str, Any], str]:
        line = one_line(reason, self.settings.db_path)
        return {"schema_version": SCHEMA_VERSION, **(document or {}), "error": line}, line


_BY_NAME = {t.name: t for t in TOOLS}


# -- the server ---------------------------------------------------------------------------------


def _listed_tools() -> ListToolsResult:
    import mcp_types as types

    return types.ListToolsResult(tools=[
        types.Tool(
            name=tool.name,
            description=tool.description,
            input_schema=tool.input_schema(),
            output_schema=output_schema(tool.schema),
            annotations=types.ToolAnnotations(read_only_hint=True, destructive_hint=False,
                                              idempotent_hint=True, open_world_hint=False),
        )
        for tool in TOOLS
    ])


def make_server(answers: ToolAnswers) -> Server[Any]:
    """The MCP server answering the tools with ``answers``."""
    import mcp_types as types
    from mcp.server.lowlevel import Server

    async def list_tools(_ctx: Any, _params: Any) -> ListToolsResult:
        return _listed_tools()

    async def call_tool(_ctx: Any, params: CallToolRequestParams) -> CallToolResult:
        document, reason = answers.call(params.name, params.arguments)
        text = reason if reason is not None else json.dumps(document, ensure_ascii=False)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)],
            structured_content=document,
            is_error=reason is not None,
        )

    from importlib.metadata import version

    return Server(
        "runstore",
        version=version("runstore"),
        instructions="Answers about recorded test runs (pytest --runstore) and agent sessions, "
                     "as the runstore command line gives them with --format json.",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def _serve(answers: ToolAnswers) -> None:
    import anyio
    from mcp.server.stdio import stdio_server

    server = make_server(answers)

    async def run() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(run)


@click.command()
def mcp() -> None:
    """Serve the query commands as MCP tools over standard input and output.

    Tools: triage, failures, flaky, signatures, history, diff, coverage, tests_for, search,
    sessions_list, sessions_show, sessions_context; each answers the command's JSON
    document for the same question and refuses with the command's one-line reason (a
    tool error). The database is found as every command finds it (--db, RUNSTORE_DB,
    the project's), opened read-only on the first call and kept open; the server never
    writes. Needs the mcp extra:
    pip install 'runstore[mcp]'.

    \b
    Example (the mcpServers entry of a coding agent):
      {"mcpServers": {"runstore": {"command": "runstore", "args": ["mcp"]}}}
    """
    try:
        import mcp as _sdk  # noqa: F401 - only to say how to install it when it is missing
    except ImportError:
        raise click.UsageError(
            "runstore mcp needs the MCP SDK: pip install 'runstore[mcp]'") from None
    answers = ToolAnswers(settings())
    try:
        _serve(answers)
    finally:
        answers.close()

