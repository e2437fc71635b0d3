"""Without LangGraph, importing ``runstore.adapters.langgraph`` fails with ``MissingExtra``
naming the ``langgraph`` extra, not a bare ``ModuleNotFoundError`` of a package the user never
asked for (``langchain_core``)."""

from __future__ import annotations

import subprocess
import sys

# The main venv has neither package; a None in sys.modules makes their import fail there and
# in a venv that has them alike (ModuleNotFoundError naming the module).
_PROBE = """
import sys

sys.modules["langchain_core"] = sys.modules["langgraph"] = None
try:
    import runstore.adapters.langgraph
except Exception as exc:
    print(f"{type(exc).__module__}.{type(exc).__name__}|{exc}")
else:
    print("imported")
"""


def test_importing_the_adapter_without_langgraph_names_the_extra() -> None:
    done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True)
    kind, _, message = done.stdout.strip().partition("|")
    assert kind == "runstore.exceptions.MissingExtra", done.stdout + done.stderr
    assert message.startswith(
        "runstore.adapters.langgraph needs the langgraph extra: pip install 'runstore[langgraph]'"
    )
    assert "no module named 'langchain_core" in message, message
