"""What third parties and our own tests use to check a layer: contract suites, strategies and
seeded test layers."""

from __future__ import annotations

__all__: list[str] = []
