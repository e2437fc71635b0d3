"""The rules of failure signatures across runs (``DataReader.failure_signatures``), shared by
every test-run layer.

Pure functions: the listing's arguments and cursor, the order in which a finished run's
signatures take their places in it, the distinct tests a run adds to a signature, and the
row-to-record step. Nothing here touches storage.

- A finished ``passed`` or ``failed`` run records each of its signatures once: ``runs`` + 1,
  ``occurrences`` + the failing items and collection errors with it, ``tests`` + the node
  ids it had not affected before (:func:`added_tests`), and a fresh place in the listing
  (:func:`seen_order`). Interrupted and aborted runs record nothing, as they record no
  history; pruning a run changes no count.
- The listing is newest last seen first: by the place taken when a run last recorded the
  signature (a counter value, never reused), so runs that finish out of order list in the
  order they finished, whatever their clocks said.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import NamedTuple

from returns.result import Failure, Result, Success

from runstore.services._primitives import first_failure
from runstore.services._test_runs_rules import valid_limit, valid_project
from runstore.services.errors import InvalidInput
from runstore.services.pagination import CursorCodec, Page, page_of
from runstore.services.test_runs import FailureSignature, RunId

__all__ = [
    "SIGNATURES_CURSOR",
    "SignatureListing",
    "SignatureRow",
    "added_tests",
    "check_signature_listing",
    "seen_order",
    "signature_page",
]

SIGNATURES_CURSOR = CursorCodec("signatures", 1)
"""The cursor of ``failure_signatures``: the place (``seen_seq``) of the last row shown."""


class SignatureListing(NamedTuple):
    """A checked ``failure_signatures`` call: the signatures of ``project`` placed before
    ``before`` (None: from the newest), at most ``limit`` per page."""

    project: str
    limit: int
    before: int | None


def check_signature_listing(
    project: object, limit: object, cursor: object
) -> Result[SignatureListing, InvalidInput]:
    """Check the arguments of ``failure_signatures``, in this order: ``project`` (a lookup
    name, :func:`valid_project`), ``limit`` (:func:`valid_limit`), ``cursor``
    (:data:`SIGNATURES_CURSOR`); the first refusal is returned."""
    name = valid_project(project)
    size = valid_limit(limit)
    after = SIGNATURES_CURSOR.decode(cursor)
    checked = first_failure(name, size, after)
    if isinstance(checked, Failure):
        return Failure(checked.failure())
    position = after.unwrap()
    return Success(
        SignatureListing(name.unwrap(), size.unwrap(), None if position is None else position[0])
    )


class SignatureRow(NamedTuple):
    """A stored signature as a layer reads it for the listing (``seq``: its place)."""

    signature: str
    exception_type: str
    message: str
    frame: str
    first_seen_run_id: int | None
    first_seen_at_ms: int
    last_seen_run_id: int | None
    last_seen_at_ms: int
    runs: int
    tests: int
    occurrences: int
    seq: int

    def record(self) -> FailureSignature:
        """This row as the reader returns it."""
        first, last = self.first_seen_run_id, self.last_seen_run_id
        return FailureSignature(
            signature=self.signature,
            exception_type=self.exception_type,
            message=self.message,
            frame=self.frame,
            first_seen_run_id=None if first is None else RunId(first),
            first_seen_at_ms=self.first_seen_at_ms,
            last_seen_run_id=None if last is None else RunId(last),
            last_seen_at_ms=self.last_seen_at_ms,
            runs=self.runs,
            tests=self.tests,
            occurrences=self.occurrences,
        )


def signature_page(rows: Sequence[SignatureRow], limit: int) -> Page[FailureSignature]:
    """The page of ``rows`` (newest place first) fetched as ``limit + 1`` rows."""
    page = page_of(rows, limit, lambda row: SIGNATURES_CURSOR.encode(row.seq))
    return Page(tuple(row.record() for row in page.items), page.has_more, page.next_cursor)


def seen_order(signatures: Iterable[str], last_seq: int) -> dict[str, int]:
    """The places a run's ``signatures`` take after the counter value ``last_seq``: one each,
    in descending signature order, so that the listing (newest place first) shows one run's
    signatures in ascending order, whatever order a layer read them in."""
    ordered = sorted(set(signatures), reverse=True)
    return {signature: last_seq + i for i, signature in enumerate(ordered, start=1)}


def added_tests(
    hit: Iterable[tuple[str, str]], known: Mapping[str, AbstractSet[str]]
) -> dict[str, frozenset[str]]:
    """The node ids a run adds to each signature: ``hit`` holds its ``(signature, node id)``
    pairs (first errors of failing items and collection errors), ``known`` the node ids each
    signature affected before; signatures that gain none are left out."""
    added: dict[str, set[str]] = {}
    for signature, nodeid in hit:
        if nodeid not in known.get(signature, ()):
            added.setdefault(signature, set()).add(nodeid)
    return {signature: frozenset(nodeids) for signature, nodeids in added.items()}
