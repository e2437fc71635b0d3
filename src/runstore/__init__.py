"""runstore: a typed, Effect-style persistence layer for the records of runs, in SQLite.

Services (``runstore.services``) are Protocols whose methods return ``returns`` Results;
layers (``runstore.layers``) implement them live on SQLite or in memory; the contract suite
(``runstore.testing``) proves every layer behaves the same.
"""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
