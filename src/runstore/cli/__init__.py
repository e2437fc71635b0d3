"""The ``runstore`` command line: a thin veneer that parses, calls a service, renders.

Global options: ``--db PATH`` (else ``$RUNSTORE_DB``, else the project's
``.runstore/runstore.db``, found walking up from the current folder, not above the top of
the git repository; see ``runstore.cli._discover``) and ``--format text|json``. Exit codes:
0 success, 1 failure with a one-line reason on standard error (standard output that cannot
be written too; a broken pipe quietly), 2 usage error. Every JSON
document has a top-level ``schema_version``; its shapes are JSON Schema files in
``runstore/cli/schemas/``.
"""

from __future__ import annotations

from runstore.cli._app import cli, main

__all__ = ["cli", "main"]
