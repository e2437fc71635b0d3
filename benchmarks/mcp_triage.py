"""Benchmark: ``triage`` on a 1,000,000-item database, as a call to a warm ``runstore mcp``
server and as a whole ``runstore --format json triage`` process, for the same answer.

Run: ``.venv/bin/python benchmarks/mcp_triage.py [--runs 500] [--cases 2000] [--repeat 20]
[--processes 5] [--db PATH]``.

The database and the options are ``benchmarks/triage.py``'s (its ``arguments`` and
``database``): ``--runs`` finished runs of ``--cases`` items (500 x 2,000 = 1,000,000 items,
5% failing); ``--db PATH`` keeps the file and reuses it on the next call.

Timed, median of the repeats:

- ``server start``: from spawning ``runstore mcp`` to the answer of its first ``triage`` call
  (interpreter, the SDK's import, the handshake, opening the database, the first answer);
- ``warm call``: one ``tools/call`` of ``triage`` on the running server as any client pays
  for it: the JSON-RPC request written to the server's standard input, the response read
  from its standard output and parsed (``json.loads``); a minimal client, so nothing but
  the server and the pipe is timed;
- ``SDK client call``: the same call through the SDK's ``ClientSession.call_tool``, which
  also checks the structured content against the tool's output schema with ``jsonschema``
  (a cost of that client: for the ~110,000-character answer it is most of the call);
- ``process``: ``runstore --db PATH --format json triage`` as a fresh process, from start to
  exit.

Checks that the server's structured content equals the process's JSON document, then prints
the warm call as a share of the process time against the target (under 5%).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from triage import arguments, database

TARGET_PERCENT = 5.0


def cli_triage(db: Path) -> tuple[float, dict[str, Any]]:
    """One whole ``runstore --format json triage`` process: its wall time (ms) and answer."""
    command = [sys.executable, "-m", "runstore", "--db", str(db), "--format", "json", "triage"]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=True, timeout=600)
    took = (time.perf_counter() - started) * 1000
    document: dict[str, Any] = json.loads(done.stdout)
    return took, document


def _server(db: Path) -> list[str]:
    return [sys.executable, "-m", "runstore", "--db", str(db), "mcp"]


def raw_calls(db: Path, repeat: int) -> tuple[float, list[float], dict[str, Any]]:
    """Start the server and call ``triage`` over raw JSON-RPC lines (protocol 2025-06-18):
    the start (ms, to the first answer), ``repeat`` warm calls after two warm-ups (ms each)
    and the last structured content."""
    started = time.perf_counter()
    process = subprocess.Popen(_server(db), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL)
    assert process.stdin is not None
    assert process.stdout is not None
    stdin, stdout = process.stdin, process.stdout

    def ask(ident: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
        stdin.write((json.dumps({"jsonrpc": "2.0", "id": ident, "method": method,
                                 "params": params}) + "\n").encode())
        stdin.flush()
        while True:
            message: dict[str, Any] = json.loads(stdout.readline())
            if message.get("id") == ident:
                return message

    try:
        ask(1, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                              "clientInfo": {"name": "mcp_triage", "version": "1"}})
        stdin.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        call = {"name": "triage", "arguments": {}}
        answer = ask(2, "tools/call", call)["result"]
        start_ms = (time.perf_counter() - started) * 1000
        assert not answer.get("isError"), answer
        samples = []
        for ident in range(3, repeat + 5):
            began = time.perf_counter()
            answer = ask(ident, "tools/call", call)["result"]
            if ident > 4:
                samples.append((time.perf_counter() - began) * 1000)
            assert not answer.get("isError"), answer
    finally:
        stdin.close()
        process.wait(timeout=60)
    return start_ms, samples, answer["structuredContent"]


async def serve(db: Path, repeat: int) -> tuple[float, list[float], dict[str, Any]]:
    """Start the server, call ``triage`` ``repeat`` + 2 times; return the start (ms, to the
    first answer), the warm calls after two warm-ups (ms each) and the last answer."""
    command, *args = _server(db)
    server = StdioServerParameters(command=command, args=args)
    started = time.perf_counter()
    async with stdio_client(server) as streams, ClientSession(*streams) as session:
        await session.initialize()
        first = await session.call_tool("triage", {})
        start_ms = (time.perf_counter() - started) * 1000
        assert not first.is_error, first.content
        await session.call_tool("triage", {})
        samples = []
        answer: Any = None
        for _ in range(repeat):
            began = time.perf_counter()
            result = await session.call_tool("triage", {})
            samples.append((time.perf_counter() - began) * 1000)
            assert not result.is_error, result.content
            answer = result.structured_content
    return start_ms, samples, answer


def main() -> None:
    options = arguments(__doc__.splitlines()[0])
    with tempfile.TemporaryDirectory() as scratch:
        db = database(options, Path(scratch))
        cli_triage(db)  # warms the page cache
        processes = [cli_triage(db) for _ in range(options.processes)]
        process = statistics.median(took for took, _ in processes)
        start, samples, answer = raw_calls(db, options.repeat)
        _, sdk_samples, sdk_answer = anyio.run(serve, db, options.repeat)
    expected = processes[-1][1]
    assert answer == expected, "the server's answer differs from the CLI's"
    assert sdk_answer == expected, "the server's answer differs from the CLI's (SDK client)"
    warm = statistics.median(samples)
    sdk = statistics.median(sdk_samples)
    share = 100 * warm / process
    print(f"answer: {len(expected['failures'])} failures, "
          f"{len(json.dumps(expected, indent=2)):,} characters; equal to the CLI's")
    print(f"server start (to the first answer): {start:8.1f} ms")
    print(f"warm call (median of {options.repeat}):        {warm:8.1f} ms "
          f"(min {min(samples):.1f}, max {max(samples):.1f})")
    print(f"SDK client call (median of {options.repeat}):  {sdk:8.1f} ms "
          f"({100 * sdk / process:.1f} % of the process; its schema check included)")
    print(f"whole CLI process (median of {options.processes}):   {process:8.1f} ms")
    verdict = "meets" if share < TARGET_PERCENT else "misses"
    print(f"warm call / process:                  {share:8.2f} % "
          f"({verdict} the target of under {TARGET_PERCENT:g} %)")


if __name__ == "__main__":
    main()
