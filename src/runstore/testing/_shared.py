"""What the contract suites of every domain share."""

from __future__ import annotations

from collections.abc import Callable

from runstore.layers import Layer

__all__ = ["LayerFactory"]

LayerFactory = Callable[[], Layer]
"""Makes a fresh layer under test, on an empty store, once per test and per hypothesis example.

Each contract says which services the layer must provide (a test-run contract ``DataStore``
and ``DataReader``, the ledger's ``ExecutionStorage`` and ``ActionRunStorage``, the agents'
``AgentStorage`` and ``ExecutionStorage``, the sessions' ``SessionRepository``).
"""
