"""The body of each process of the concurrent-open test (importable by spawned children)."""

from __future__ import annotations

from multiprocessing.synchronize import Barrier
from typing import Any

from returns.result import Failure

from runstore.layers import open_database


def open_once(path: str, barrier: Barrier, results: Any) -> None:
    """Wait for every sibling, open (and so migrate) ``path``, report ``ok`` or the reason."""
    barrier.wait()
    try:
        opened = open_database(path)
    except BaseException as exc:  # report, never hang the parent
        results.put(f"raised {type(exc).__name__}: {exc}")
        return
    if isinstance(opened, Failure):
        results.put(f"failed: {opened.failure()}")
        return
    opened.unwrap().close()
    results.put("ok")
