"""The ``runstore`` command line: a thin veneer that parses, calls a service, renders.

Global options: ``--db PATH`` (default ``.runstore/runstore.db`` in the current directory,
or ``$RUNSTORE_DB``) and ``--format text|json``. Exit codes: 0 success, 1 failure with a
one-line reason on standard error, 2 usage error.
"""

from __future__ import annotations

from runstore.cli._app import cli, main

__all__ = ["cli", "main"]
