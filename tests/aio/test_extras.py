"""Without an extra, its entry points raise ``MissingExtra`` naming it, as
``runstore.layers.postgres`` does: ``runstore.aio.postgres`` (psycopg hidden from a child
interpreter) and ``runstore.adapters.openai_agents`` (the main venv has no Agents SDK)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest


def _child(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False, timeout=120)
    return done.stdout + done.stderr


def test_aio_postgres_without_psycopg_names_the_postgresql_extra() -> None:
    code = (
        "import sys\n"
        "sys.modules['psycopg'] = None\n"
        "sys.modules['psycopg_pool'] = None\n"
        "from runstore import aio\n"
        "from runstore.exceptions import MissingExtra\n"
        "try:\n"
        "    aio.postgres('postgresql://nobody@127.0.0.1:1/x')\n"
        "except MissingExtra as exc:\n"
        "    print('MissingExtra:', exc)\n"
    )
    assert "MissingExtra: " in (out := _child(code)), out
    assert "pip install 'runstore[postgresql]'" in out


@pytest.mark.skipif(importlib.util.find_spec("agents") is not None,
                    reason="the Agents SDK is installed here")
def test_the_agents_adapter_without_the_sdk_names_the_openai_agents_extra() -> None:
    code = (
        "from runstore.exceptions import MissingExtra\n"
        "try:\n"
        "    import runstore.adapters.openai_agents\n"
        "except MissingExtra as exc:\n"
        "    print('MissingExtra:', exc, '| from', type(exc.__cause__).__name__)\n"
    )
    out = _child(code)
    assert "MissingExtra: runstore.adapters.openai_agents needs the openai-agents extra" in out, out
    assert "pip install 'runstore[openai-agents]' | from ModuleNotFoundError" in out
