"""A command whose standard output cannot be written ends with exit 1 and one line on
standard error (a broken pipe: quietly), never a traceback, and never exit 0 having
written nothing (a closed descriptor): a real process each, since the guard stands only
over the process's own standard output."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from _zoo import seed_zoo  # beside this file


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The recorded runs of ``zoo`` (``_zoo``), read only."""
    return seed_zoo(tmp_path_factory.mktemp("zoo") / "runstore.db")


def _command(db: Path, *args: str) -> list[str]:
    return [sys.executable, "-c", "from runstore.cli import main; main()", "--db", str(db),
            *args]


COMMANDS = [("runs", "--project", "zoo"), ("--format", "json", "runs", "--project", "zoo"),
            ("report", "-o", "-", "--project", "zoo"), ("--help",)]
IDS = ["runs", "runs-json", "report", "help"]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
@pytest.mark.parametrize("args", COMMANDS, ids=IDS)
def test_a_full_device_is_one_line_and_exit_1(db: Path, args: tuple[str, ...]) -> None:
    with open("/dev/full", "wb") as full:
        done = subprocess.run(_command(db, *args), stdout=full, stderr=subprocess.PIPE,
                              check=False, timeout=120)
    assert done.returncode == 1
    assert done.stderr.decode() == (
        "runstore: cannot write standard output: No space left on device\n")


def _closing(descriptor: int) -> Callable[[], None]:
    return lambda: os.close(descriptor)


@pytest.mark.parametrize("args", COMMANDS, ids=IDS)
def test_a_closed_standard_output_is_one_line_and_exit_1(
    db: Path, args: tuple[str, ...]
) -> None:
    """``>&-``: before, the command wrote nothing and exited 0."""
    done = subprocess.run(_command(db, *args), stderr=subprocess.PIPE, check=False,
                          timeout=120, preexec_fn=_closing(1))
    assert done.returncode == 1
    assert done.stderr.decode() == "runstore: cannot write standard output: Bad file descriptor\n"


@pytest.mark.parametrize("args", COMMANDS, ids=IDS)
def test_a_broken_pipe_exits_1_quietly(db: Path, args: tuple[str, ...]) -> None:
    """The reader is gone before the first write (``| head -0``): exit 1 and nothing on
    standard error, neither a traceback nor Python's "Exception ignored" at exit."""
    reader, writer = os.pipe()
    os.close(reader)
    try:
        done = subprocess.run(_command(db, *args), stdout=writer, stderr=subprocess.PIPE,
                              check=False, timeout=120)
    finally:
        os.close(writer)
    assert (done.returncode, done.stderr.decode()) == (1, "")
