"""The code fingerprint of a test: which code it ran, as one short hex digest.

A fingerprint is a hex digest (32 hex digits, BLAKE2b of 16 bytes) over the contents of the
code a test ran, as a set of files, each named by its path relative to pytest's rootdir:

- the test's own module file;
- the ``conftest.py`` files on its path (in its folder and each folder above it, up to
  and including the rootdir);
- the project's source files it ran. Without per-test coverage this is the cheap form:
  every module in ``sys.modules`` whose file is under the rootdir and not inside a
  virtualenv (``sys.prefix``, ``sys.exec_prefix`` and ``sys.base_prefix``) or a
  ``site-packages`` / ``dist-packages`` folder, by the time the test finished (its teardown
  report). Test modules and conftests are imported while pytest collects, so the cheap form
  holds every collected test module of the session too. Per-test coverage contexts are
  not used, even when recorded: a test's context leaves out the module-level code run
  when pytest imported its modules (a constant the test reads), so a fingerprint of the
  context's files would keep still when such code changed and invent flaky evidence.

Each file's digest is BLAKE2b of its stored path, a NUL and its bytes; a fingerprint is the
BLAKE2b of the XOR of its files' digests, so the order in which files were loaded does not
matter and adding a file costs one XOR. A file is read and hashed once per session per
(``st_mtime_ns``, ``st_size``); modules are taken from ``sys.modules`` incrementally (a dict
keeps insertion order: only the entries added since the previous test are looked at), so a
test costs O(modules it loaded), not O(modules loaded).

What it promises: unchanged code run in the same order gives the same fingerprint, and a
change to any file it covers changes it, so two runs with one fingerprint ran the same code
(whatever git says, dirty tree or none). The cheap form over-approximates what a test ran
(a module loaded by an earlier test counts for every later one), so a different order, or
a ``pytest-xdist`` distribution that sends tests to other workers, may change a test's
fingerprint although its code did not change: that loses evidence, never invents it. What
it does not see: data files, environment variables, the interpreter and installed packages
(outside the project), code run from outside the rootdir, and files a test reads without
importing them.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Iterable
from types import ModuleType

__all__ = ["FINGERPRINT_CHARS", "Fingerprinter", "combine"]

FINGERPRINT_CHARS = 32
"""Hex digits of a fingerprint (BLAKE2b with a 16-byte digest)."""

_DIGEST_BYTES = FINGERPRINT_CHARS // 2
_SITE_DIRS = frozenset({"site-packages", "dist-packages"})
_Named = tuple[str, ModuleType]
_PERSON = b"runstore-code-1"  # BLAKE2b personalization: a new form of fingerprint, a new name


def combine(digests: Iterable[int]) -> str:
    """The fingerprint of a set of file digests (XOR, order-independent), as hex."""
    folded = 0
    for digest in digests:
        folded ^= digest
    return hashlib.blake2b(
        folded.to_bytes(_DIGEST_BYTES, "big"), digest_size=_DIGEST_BYTES, person=_PERSON
    ).hexdigest()


class Fingerprinter:
    """Fingerprints of the tests of one session (one process), cheap or exact.

    ``rootdir`` is pytest's rootdir (absolute). Not thread-safe: call it from the thread
    that runs the tests.
    """

    def __init__(self, rootdir: str) -> None:
        self._root = os.path.normcase(os.path.realpath(rootdir))
        self._prefix = self._root + os.sep
        # The interpreter's folders, unless the project lies inside one (/usr/src/app).
        prefixes = {os.path.normcase(os.path.realpath(p)) + os.sep
                    for p in (sys.prefix, sys.exec_prefix, sys.base_prefix)}
        self._outside = tuple(p for p in prefixes if not self._prefix.startswith(p))
        # path -> (st_mtime_ns, st_size, digest); None: not a file of the project
        self._files: dict[str, tuple[int, int, int] | None] = {}
        self._places: dict[str, str | None] = {}  # a module's __file__ -> its project path
        self._conftests: dict[str, tuple[str, ...]] = {}  # folder -> conftest paths on its path
        # sys.modules as last seen: its length, its newest key, and the module of each name
        self._seen_len = 0
        self._seen_last: str | None = None
        self._seen: dict[str, int] = {}
        self._loaded: set[str] = set()  # project paths of the loaded modules
        self._folded = 0  # XOR of the digests of ``_loaded``
        self._last: tuple[str, int, str | None] | None = None  # (module, _folded, answer)

    # -- files -------------------------------------------------------------------------------

    def project_path(self, filename: str) -> str | None:
        """The real absolute path of ``filename`` when it is a file of the project (under
        the rootdir, outside any virtualenv and ``site-packages``), else None."""
        if filename in self._places:
            return self._places[filename]
        path = os.path.normcase(os.path.realpath(filename))
        place: str | None = path
        if (not path.startswith(self._prefix) or path.startswith(self._outside)
                or _SITE_DIRS.intersection(path[len(self._prefix):].split(os.sep))):
            place = None
        self._places[filename] = place
        return place

    def digest(self, path: str) -> int | None:
        """The digest of the project file ``path`` (real and absolute, as
        :meth:`project_path` gives it), None when it cannot be read. Hashed again only when
        its ``st_mtime_ns`` or ``st_size`` changed."""
        try:
            stat = os.stat(path)
        except OSError:
            return None
        known = self._files.get(path)
        if known is not None and known[0] == stat.st_mtime_ns and known[1] == stat.st_size:
            return known[2]
        hasher = hashlib.blake2b(digest_size=_DIGEST_BYTES, person=_PERSON)
        hasher.update(os.path.relpath(path, self._root).replace(os.sep, "/").encode(
            "utf-8", "surrogateescape"))
        hasher.update(b"\0")
        try:
            with open(path, "rb") as stream:
                while chunk := stream.read(1 << 16):
                    hasher.update(chunk)
        except OSError:
            return None
        value = int.from_bytes(hasher.digest(), "big")
        self._files[path] = (stat.st_mtime_ns, stat.st_size, value)
        return value

    def conftests(self, module_path: str) -> tuple[str, ...]:
        """The ``conftest.py`` files on the path of the project file ``module_path``: in its
        folder and each one above it up to the rootdir (cached per folder)."""
        folder = os.path.dirname(module_path)
        known = self._conftests.get(folder)
        if known is not None:
            return known
        found: list[str] = []
        if folder != self._root and folder.startswith(self._prefix):
            found.extend(self.conftests(folder))  # a folder's path: its parent's conftests
        candidate = os.path.join(folder, "conftest.py")
        if (folder == self._root or folder.startswith(self._prefix)) and os.path.isfile(
                candidate):
            found.append(candidate)
        self._conftests[folder] = result = tuple(found)
        return result

    # -- the cheap form ----------------------------------------------------------------------

    def _take(self, module: object) -> None:
        filename = getattr(module, "__file__", None)
        if not isinstance(filename, str):
            return
        path = self.project_path(filename)
        if path is None or path in self._loaded:
            return
        value = self.digest(path)
        if value is not None:
            self._loaded.add(path)
            self._folded ^= value

    def _scan(self) -> None:
        """Take the modules added to ``sys.modules`` since the previous scan.

        Nothing changed when its length and newest key are as before (O(1)). Otherwise the
        entries are walked from the newest back to the first one seen before with the same
        module object; when that finds fewer new entries than the length grew by (a module
        seen before was put back at the end, as ``monkeypatch`` restores one), every entry
        is looked at once."""
        modules = sys.modules
        size = len(modules)
        if size == self._seen_len and (not size or next(reversed(modules)) == self._seen_last):
            return
        seen = self._seen
        try:
            added = self._added(reversed(modules.items()))
        except RuntimeError:  # another thread imported meanwhile: walk a copy
            added = self._added(reversed(list(modules.items())))
        if len(added) < size - self._seen_len:
            added = [(n, m) for n, m in list(modules.items()) if seen.get(n) != id(m)]
        for name, module in added:
            seen[name] = id(module)
            self._take(module)
        self._seen_len = size
        self._seen_last = next(reversed(modules)) if size else None

    def _added(self, newest_first: Iterable[tuple[str, ModuleType]]) -> list[_Named]:
        seen = self._seen
        added: list[_Named] = []
        for name, module in newest_first:
            if seen.get(name) == id(module):
                break
            added.append((name, module))
        return added

    def _fold(self, own: str, folded: int, counted: set[str]) -> str | None:
        """The fingerprint of ``counted`` (files whose digests XOR to ``folded``) with the
        test module ``own`` and the conftests on its path; None when one is unreadable."""
        for path in (own, *self.conftests(own)):
            if path not in counted:
                value = self.digest(path)
                if value is None:
                    return None
                folded ^= value
        return combine((folded,))

    def cheap(self, module_file: str) -> str | None:
        """The cheap fingerprint of a test of module file ``module_file`` (absolute) that
        has just finished: its module, the conftests on its path and the project modules
        loaded so far. None when the module is not a readable file of the project. The
        answer for the previous test is given again when it had the same module and no
        project module was loaded since (the common case: O(1))."""
        self._scan()
        last = self._last
        if last is not None and last[0] == module_file and last[1] == self._folded:
            return last[2]  # the next test of the same module, nothing new loaded
        own = self.project_path(module_file)
        answer = None if own is None else self._fold(own, self._folded, self._loaded)
        self._last = (module_file, self._folded, answer)
        return answer
