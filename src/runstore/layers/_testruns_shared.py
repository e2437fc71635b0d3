"""What the test-run layers' neighbours read from here: the retention rules of the rules core
(:mod:`runstore.services._testruns_rules`), where they are written."""

from __future__ import annotations

from runstore.services._testruns_rules import MAX_KEEP_RUNS, valid_policy

__all__ = ["MAX_KEEP_RUNS", "valid_policy"]
