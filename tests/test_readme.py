"""Every code block of README.md runs as written, in a fresh folder, twice in a row.

A fenced block in ``python`` runs under this tree's interpreter; one in ``sh``, ``bash`` or
``shell`` runs under ``sh -e`` (so every command must succeed), with this tree's ``bin``
folder first on ``PATH``, so ``pytest`` and ``runstore`` are the ones installed here. Each
block gets its own empty folder and runs there twice: a snippet must not depend on state
another snippet left, and running it again must not fail on what its first run stored.

A block that must not run says so, with its reason, in an HTML comment on the line right
before its fence: ``<!-- not run: REASON -->``. Use it sparingly: the only such blocks are
the set-up commands, which act on a clone of the repository (``.ci/run`` runs the test
command verbatim). Blocks in other languages are data or synopses (``json``, ``text``); a
block in a language this file does not know fails, so no new kind of block goes unchecked.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

from runstore.layers import build, sqlite
from runstore.services import AgentRunStatus, AgentStorage

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

RUNNABLE = {"python": "python", "sh": "sh", "bash": "sh", "shell": "sh"}
"""Fence language -> how the block is run."""

NOT_CODE = {"json", "text"}
"""Fence languages that hold data or a synopsis, not commands."""

NOT_RUN = re.compile(r"<!--\s*not run:\s*(?P<reason>\S.*?)\s*-->")
FENCE = re.compile(r"^```(?P<lang>[^\s`]*)[ \t]*\n(?P<body>.*?)^```[ \t]*$", re.M | re.S)
TIMEOUT_S = 120
"""Bound of one run of one block (the slowest, the tour, records two pytest runs)."""


@attrs.frozen
class Block:
    """One fenced block: its 1-based line in README.md, language, text and why it is not
    run (None: it runs)."""

    line: int
    lang: str
    body: str
    not_run: str | None


def readme_blocks(text: str) -> list[Block]:
    """Every fenced block of ``text`` in order, with the not-run marker of the line above."""
    blocks = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = NOT_RUN.fullmatch(before.strip())
        blocks.append(
            Block(
                line=text.count("\n", 0, match.start()) + 1,
                lang=match["lang"],
                body=match["body"],
                not_run=marker["reason"] if marker else None,
            )
        )
    return blocks


BLOCKS = readme_blocks(README.read_text(encoding="utf-8"))
TO_RUN = [b for b in BLOCKS if b.lang in RUNNABLE and b.not_run is None]


def _env() -> dict[str, str]:
    # The snippets run as a user's shell would: no test-runner or runstore settings leak in.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "RUNSTORE_"))}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def run_block(block: Block, folder: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-"] if RUNNABLE[block.lang] == "python" else ["sh", "-e"]
    return subprocess.run(
        command, input=block.body, cwd=folder, env=_env(), capture_output=True, text=True,
        timeout=TIMEOUT_S, check=False,
    )


@pytest.mark.parametrize("block", TO_RUN, ids=[f"line{b.line}-{b.lang}" for b in TO_RUN])
def test_block_runs_twice_in_a_fresh_folder(block: Block, tmp_path: Path) -> None:
    for attempt in ("first", "second"):
        done = run_block(block, tmp_path)
        assert done.returncode == 0, (
            f"README.md line {block.line}, {attempt} run, exit {done.returncode}\n"
            f"--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
        )
        assert "Traceback" not in done.stderr, done.stderr


def test_every_block_is_run_or_says_why_not() -> None:
    languages = {b.lang for b in BLOCKS}
    assert languages <= set(RUNNABLE) | NOT_CODE, (
        f"README.md has blocks in {sorted(languages - set(RUNNABLE) - NOT_CODE)}: run them "
        "here or name the language as data"
    )
    markers = len(NOT_RUN.findall(README.read_text(encoding="utf-8")))
    skipped = [b for b in BLOCKS if b.not_run is not None]
    assert markers == len(skipped), "a not-run marker must sit right above a fence"
    assert all(b.lang in RUNNABLE for b in skipped), "only runnable blocks need a marker"
    assert len(TO_RUN) >= 6, [b.line for b in TO_RUN]


def test_the_extractor_reads_markers_languages_and_lines() -> None:
    text = "intro\n\n```python\nprint(1)\n```\n<!-- not run: needs a clone -->\n```sh\nx\n```\n"
    assert readme_blocks(text) == [
        Block(3, "python", "print(1)\n", None),
        Block(7, "sh", "x\n", "needs a clone"),
    ]


def test_the_agent_snippet_records_a_new_turn_each_time_it_runs(tmp_path: Path) -> None:
    # Running it again must be a second turn of the thread (its own run, messages and
    # checkpoint), never more messages attributed to the first, finished run.
    snippet = "from runstore.services import AgentRunStatus, AgentStorage"
    (block,) = [b for b in TO_RUN if snippet in b.body]
    for _ in range(2):
        done = run_block(block, tmp_path)
        assert done.returncode == 0, done.stderr
    with build(sqlite(tmp_path / ".runstore" / "runstore.db")) as container:
        agents = container.get(AgentStorage)
        messages = agents.messages.list("thread-1").unwrap().items
        checkpoint = agents.checkpoints.latest("thread-1").unwrap()
        runs = [agents.runs.get(m.run_id).unwrap() for m in messages if m.run_id is not None]
    assert [m.seq for m in messages] == [1, 2, 3, 4, 5, 6]
    assert len({r.id for r in runs}) == 2
    assert all(r.status is AgentRunStatus.SUCCEEDED for r in runs)
    assert checkpoint is not None
    assert (checkpoint.number, checkpoint.through_seq, checkpoint.reason) == (2, 5, "threshold")


def test_ci_runs_the_readme_test_command_verbatim_and_fails_with_it() -> None:
    (setup,) = [b for b in BLOCKS if b.not_run is not None and "-m pytest" in b.body]
    command = setup.body.strip()
    lines = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert f"{command} || status=1" in lines
    assert lines[-1] == "exit $status"
