"""runstore's settings in the project's ``pyproject.toml``: the ``[tool.runstore]`` table.

::

    [tool.runstore]
    quarantine_file = "ci/quarantine.toml"   # default: .runstore-quarantine.toml

    [tool.runstore.flaky]                    # runstore.services.FlakyPolicy; defaults shown
    window = 10                              # executed entries judged, 1..50
    min_runs = 1                             # evidence runs before a history rule fires
    flip_rate = 0.0                          # oscillation also needs flips/(entries-1) >= it
    evidence = ["passed_on_rerun", "flipped_in_run", "same_code", "same_commit", "oscillation"]
    outage_share = 0.5                       # a run of >= outage_min_tests executed items
    outage_min_tests = 10                    #   with more than this share failing: an outage

The pytest plugin reads the ``pyproject.toml`` at pytest's rootdir; the command line the
nearest one walking up from the current folder, stopping at the top of a git repository
(as it finds the database, ``runstore.cli._discover``). No file, or a file without the
table, means the defaults. A file that is not TOML, a key the table does not have, or a
value out of its range is a :class:`ConfigError` naming the file, the key and what is
allowed (the CLI exits 2 with it, the plugin raises ``pytest.UsageError``).

Importing this module costs ``runstore.services.test_runs`` (which every caller has loaded
already); ``tomllib`` and the policy's rules are imported when a file is read.
"""

from __future__ import annotations

import os
from typing import Any

import attrs
from returns.result import Failure, Result, Success

from runstore.services.test_runs import DEFAULT_FLAKY_POLICY, FLAKY_RULES, EvidenceRule, FlakyPolicy

__all__ = [
    "CONFIG_FILE",
    "FLAKY_KEYS",
    "RUNSTORE_KEYS",
    "ConfigError",
    "RunstoreConfig",
    "find_config",
    "read_config",
]

CONFIG_FILE = "pyproject.toml"
"""The file runstore reads its settings from."""

FLAKY_KEYS = (
    "window", "min_runs", "flip_rate", "evidence", "outage_share", "outage_min_tests"
)
"""The keys of ``[tool.runstore.flaky]``, the fields of ``FlakyPolicy``."""

RUNSTORE_KEYS = ("flaky", "quarantine_file")
"""The keys of ``[tool.runstore]``."""


@attrs.frozen
class ConfigError:
    """The settings in ``path`` were refused: ``key`` (dotted, ``tool.runstore.flaky.window``;
    empty when the file itself is not TOML or cannot be read) and why, saying what is
    allowed."""

    path: str
    key: str
    reason: str

    def __str__(self) -> str:
        where = f"{self.path}: {self.key}" if self.key else self.path
        return f"{where}: {self.reason}"


@attrs.frozen
class RunstoreConfig:
    """The settings read: the file (None when there was none), the flaky policy and the
    quarantine file as written (None: the default; relative to the file's folder)."""

    path: str | None = None
    flaky: FlakyPolicy = DEFAULT_FLAKY_POLICY
    quarantine_file: str | None = None


def find_config(start: str) -> str | None:
    """The nearest ``pyproject.toml`` at or above the folder ``start``, not above the first
    folder holding ``.git``; None when there is none."""
    from runstore.layers._open import find_upward

    return find_upward(start, CONFIG_FILE)


def _kind(value: object) -> str:
    return {bool: "a boolean", str: "a string", list: "an array", dict: "a table",
            int: "an integer", float: "a number"}.get(type(value), type(value).__name__)


def _flaky(path: str, table: object) -> Result[FlakyPolicy, ConfigError]:
    from runstore.services._test_runs_rules import check_flaky_policy

    prefix = "tool.runstore.flaky"
    if not isinstance(table, dict):
        return Failure(ConfigError(path, prefix, f"must be a table, not {_kind(table)}"))
    unknown = sorted(set(table) - set(FLAKY_KEYS))
    if unknown:
        return Failure(ConfigError(
            path, f"{prefix}.{unknown[0]}", f"is not a key (keys: {', '.join(FLAKY_KEYS)})"
        ))
    fields: dict[str, Any] = dict(table)
    if "evidence" in fields:
        names = fields["evidence"]
        allowed = ", ".join(FLAKY_RULES)
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            return Failure(ConfigError(
                path, f"{prefix}.evidence", f"must be an array of rule names ({allowed})"
            ))
        wrong = [n for n in names if n not in {r.value for r in FLAKY_RULES}]
        if wrong:
            return Failure(ConfigError(
                path, f"{prefix}.evidence", f"{wrong[0]!r} is not a flaky rule ({allowed})"
            ))
        twice = next((n for i, n in enumerate(names) if n in names[:i]), None)
        if twice is not None:  # a set would drop it silently, hiding the rule meant instead
            return Failure(ConfigError(
                path, f"{prefix}.evidence", f"{twice!r} is given twice (each rule once)"
            ))
        fields["evidence"] = frozenset(EvidenceRule(n) for n in names)
    checked = check_flaky_policy(FlakyPolicy(**fields))
    if isinstance(checked, Failure):
        error = checked.failure()
        key = error.field.replace("policy", prefix, 1)
        return Failure(ConfigError(path, key, error.reason))
    return Success(checked.unwrap())


def read_config(
    path: str | None, *, flaky: bool = True
) -> Result[RunstoreConfig, ConfigError]:
    """The settings in the ``pyproject.toml`` at ``path`` (None, or a file that does not
    exist: the defaults). Failures: ``ConfigError`` for a file that cannot be read or is not
    TOML, a ``[tool.runstore]`` that is not a table or has an unknown key, a bad
    ``[tool.runstore.flaky]`` (see ``FlakyPolicy``; an ``evidence`` rule named twice), a
    ``quarantine_file`` that is not a non-empty string without NUL. ``evidence = []`` is
    accepted: no flaky rule fires, which turns flaky detection off. With ``flaky=False`` the
    flaky table is not read (the default policy is given): a caller that shows no verdict
    need not refuse a bad policy."""
    if path is None or not os.path.isfile(path):
        return Success(RunstoreConfig())
    import tomllib

    try:
        with open(path, "rb") as handle:
            document = tomllib.load(handle)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        return Failure(ConfigError(path, "", f"cannot be read as TOML: {exc}"))
    tool = document.get("tool", {})
    table = tool.get("runstore") if isinstance(tool, dict) else None
    if table is None:
        return Success(RunstoreConfig(path))
    if not isinstance(table, dict):
        return Failure(ConfigError(path, "tool.runstore", f"must be a table, not {_kind(table)}"))
    unknown = sorted(set(table) - set(RUNSTORE_KEYS))
    if unknown:
        return Failure(ConfigError(
            path, f"tool.runstore.{unknown[0]}",
            f"is not a key (keys: {', '.join(RUNSTORE_KEYS)})",
        ))
    quarantine = table.get("quarantine_file")
    if quarantine is not None and (
        not isinstance(quarantine, str) or not quarantine.strip() or "\0" in quarantine
    ):
        return Failure(ConfigError(
            path, "tool.runstore.quarantine_file", "must be a non-empty path string"
        ))
    if "flaky" not in table or not flaky:
        return Success(RunstoreConfig(path, quarantine_file=quarantine))
    policy = _flaky(path, table["flaky"])
    if isinstance(policy, Failure):
        return Failure(policy.failure())
    return Success(RunstoreConfig(path, policy.unwrap(), quarantine))
