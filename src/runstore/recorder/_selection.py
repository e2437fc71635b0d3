"""Which tests a pytest session was asked to run, as a :class:`Selection`.

Read from pytest's parsed options (``-k`` is ``config.option.keyword``, ``-m``
``markexpr``, ``--lf`` ``lf``, ``--ff`` ``failedfirst``, ``--maxfail``/``-x`` ``maxfail``)
and its arguments (``config.args`` with ``config.args_source``), never by re-parsing argv:

- ``args`` are the positional paths and node ids given on the command line, their path
  part made relative to the rootdir (``/`` separated; absolute when outside it). An
  argument naming the rootdir itself selects everything and is left out, as are the ini
  ``testpaths`` (the project's own full set). Run from a folder below the rootdir
  without arguments, pytest collects only that folder, recorded as its relative path.
- ``last_failed`` is ``--lf`` when pytest's cache had failures to rerun; with none pytest
  runs everything (``--lfnf=all``, its default), which narrows nothing.
- ``deselected`` is the sum of pytest's ``pytest_deselected`` calls (``-k``, ``-m``,
  ``--lf`` and plugins) and ``collected`` the items pytest collected (selected plus
  deselected, its "collected N items"), both known only after collection. Under
  ``pytest-xdist`` the workers collect and deselect and the controller learns only the
  selected node ids, so ``deselected`` stays 0 there (pytest's own summary line under
  xdist omits it too) and ``collected`` is the number of selected items.
- ``--lf`` collects only the failed tests of a module that had failures (pytest's
  "collected 1 item"): those left out are not deselected; ``last_failed`` says so.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from runstore.recorder._text import clean_text
from runstore.services.test_runs import Selection

__all__ = ["selection_at_start"]


def _relative_arg(arg: str, rootdir: str, invocation_dir: str) -> str | None:
    path, sep, rest = arg.partition("::")
    absolute = os.path.normpath(os.path.join(invocation_dir, path))
    if not os.path.exists(absolute):  # a --pyargs module name, or a path that is missing
        return arg
    try:
        relative = os.path.relpath(absolute, rootdir)
    except ValueError:  # another drive on Windows
        relative = absolute
    if relative.split(os.sep, 1)[0] == os.pardir:
        relative = absolute
    if relative == os.curdir and not sep:
        return None
    relative = relative.replace(os.sep, "/")
    return f"{relative}{sep}{rest}"


def _args(config: pytest.Config, rootdir: str, invocation_dir: str) -> tuple[str, ...]:
    source = getattr(config, "args_source", None)
    if source is pytest.Config.ArgsSource.TESTPATHS:
        return ()
    found = []
    for arg in config.args:
        relative = _relative_arg(str(arg), rootdir, invocation_dir)
        if relative is not None:
            found.append(clean_text(relative))
    return tuple(found)


def _last_failed(config: pytest.Config) -> bool:
    if not config.getoption("lf", False):
        return False
    plugin: Any = config.pluginmanager.get_plugin("lfplugin")
    lastfailed = getattr(plugin, "lastfailed", None)
    return bool(lastfailed) if isinstance(lastfailed, dict) else True


def selection_at_start(config: pytest.Config, rootdir: str, invocation_dir: str) -> Selection:
    """The selection known when the session starts (``deselected`` 0, ``collected`` None)."""
    maxfail = config.getoption("maxfail", 0)
    return Selection(
        args=_args(config, rootdir, invocation_dir),
        keyword=clean_text(config.getoption("keyword", "") or "") or None,
        markexpr=clean_text(config.getoption("markexpr", "") or "") or None,
        last_failed=_last_failed(config),
        failed_first=bool(config.getoption("failedfirst", False)),
        maxfail=maxfail if isinstance(maxfail, int) and maxfail > 0 else 0,
    )
