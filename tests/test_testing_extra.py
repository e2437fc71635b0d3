"""Without pytest or hypothesis, ``runstore.testing`` fails with one message naming the extra."""

from __future__ import annotations

import subprocess
import sys

import pytest

_PROBE = """
import sys

BLOCKED = set(sys.argv[1:])


class Block:
    '''Behave as if the blocked distributions were not installed.'''

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, Block())
try:
    import runstore.testing
except ImportError as exc:
    print(f"{type(exc).__name__}|{exc.name}|{exc}|{exc.__cause__!r}|{exc.__context__!r}")
else:
    print("imported")
"""


def _import_without(*blocked: str) -> str:
    done = subprocess.run([sys.executable, "-c", _PROBE, *blocked], capture_output=True,
                          text=True, check=True, timeout=60)
    return done.stdout.strip()


@pytest.mark.parametrize(
    ("blocked", "named"),
    [
        (("pytest",), "needs pytest, which is not installed"),
        (("hypothesis",), "needs hypothesis, which is not installed"),
        (("pytest", "hypothesis"), "needs pytest and hypothesis, which are not installed"),
    ],
)
def test_a_missing_test_tool_names_the_extra(blocked: tuple[str, ...], named: str) -> None:
    kind, name, message, cause, context = _import_without(*blocked).split("|")
    assert kind == "ImportError"
    assert name == blocked[0]
    assert named in message
    assert "pip install 'runstore[testing]'" in message
    assert (cause, context) == ("None", "None")  # one message, no chained traceback


def test_with_both_installed_it_imports() -> None:
    assert _import_without() == "imported"
