"""The code fingerprint of a test (``runstore.recorder._fingerprint``): which files count,
what changes it and what does not, and that files are read once."""

from __future__ import annotations

import importlib.util
import itertools
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runstore.recorder import _fingerprint
from runstore.recorder._fingerprint import FINGERPRINT_CHARS, Fingerprinter, combine

_names = itertools.count()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project: a conftest at the root and in tests/, a test module, two source modules
    and a sibling test folder with its own conftest."""
    files = {
        "conftest.py": "ROOT = 1\n",
        "tests/conftest.py": "TESTS = 1\n",
        "tests/test_cart.py": "def test_total():\n    assert True\n",
        "other/conftest.py": "OTHER = 1\n",
        "other/test_other.py": "def test_other():\n    pass\n",
        "shop/cart.py": "def total(prices):\n    return sum(prices)\n",
        "shop/tax.py": "RATE = 0.2\n",
    }
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def load(path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """Import the file ``path`` as a fresh module in ``sys.modules`` (removed after the test)."""
    name = f"_fingerprint_case_{next(_names)}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, name, module)
    return module


def edit(path: Path, text: str) -> None:
    """Change a file's contents (and its mtime, as an editor would)."""
    path.write_text(text)
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))


def cheap(project: Path, module: str = "tests/test_cart.py") -> str | None:
    return Fingerprinter(str(project)).cheap(str(project / module))


def test_unchanged_code_gives_the_same_fingerprint(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    load(project / "shop/cart.py", monkeypatch)
    first = cheap(project)
    assert first is not None
    assert len(first) == FINGERPRINT_CHARS
    assert all(c in "0123456789abcdef" for c in first)
    assert cheap(project) == first


@pytest.mark.parametrize(
    ("changed", "counts"),
    [
        ("tests/test_cart.py", True),  # the test's own module
        ("tests/conftest.py", True),  # conftests on its path
        ("conftest.py", True),
        ("shop/cart.py", True),  # a project module it loaded
        ("shop/tax.py", False),  # a project module nothing loaded
        ("other/conftest.py", False),  # a conftest on another path
        ("other/test_other.py", False),  # another test module, not loaded here
    ],
)
def test_a_change_to_the_code_it_ran_changes_it_and_no_other_does(
    project: Path, monkeypatch: pytest.MonkeyPatch, changed: str, counts: bool
) -> None:
    load(project / "shop/cart.py", monkeypatch)
    before = cheap(project)
    edit(project / changed, (project / changed).read_text() + "# edited\n")
    assert (cheap(project) != before) is counts


@pytest.mark.parametrize(
    "where", [".venv/lib/python3.11/site-packages", "lib/site-packages", "lib/dist-packages"]
)
def test_site_packages_never_count(
    project: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    installed = project / where / "dependency.py"
    installed.parent.mkdir(parents=True)
    installed.write_text("VERSION = 1\n")
    load(installed, monkeypatch)
    before = cheap(project)
    edit(installed, "VERSION = 2\n")
    load(installed, monkeypatch)
    assert cheap(project) == before


def test_the_interpreters_folders_never_count(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    venv = project / "env"
    (venv / "lib").mkdir(parents=True)
    installed = venv / "lib" / "tool.py"
    installed.write_text("A = 1\n")
    monkeypatch.setattr(sys, "prefix", str(venv))
    load(installed, monkeypatch)
    fingerprints = Fingerprinter(str(project))
    assert fingerprints.project_path(str(installed)) is None
    assert fingerprints.project_path(str(project / "shop/cart.py")) is not None


def test_a_project_inside_an_interpreters_folder_still_counts(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    monkeypatch.setattr(sys, "base_prefix", str(tmp_path))
    (tmp_path / "src" / "app").mkdir(parents=True)
    module = tmp_path / "src" / "app" / "m.py"
    module.write_text("")
    assert Fingerprinter(str(tmp_path / "src")).project_path(str(module)) is not None


def test_a_test_outside_the_project_has_none(project: Path, tmp_path_factory:
                                             pytest.TempPathFactory) -> None:
    elsewhere = tmp_path_factory.mktemp("elsewhere") / "test_x.py"
    elsewhere.write_text("")
    assert Fingerprinter(str(project)).cheap(str(elsewhere)) is None


def test_modules_loaded_after_a_test_count_from_the_next_one(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fingerprints = Fingerprinter(str(project))
    module = str(project / "tests/test_cart.py")
    first = fingerprints.cheap(module)
    load(project / "shop/cart.py", monkeypatch)
    second = fingerprints.cheap(module)
    assert second != first
    assert second == cheap(project)  # a fresh session that loaded the same code agrees


def test_a_module_put_back_at_the_end_does_not_hide_the_modules_loaded_before_it(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """monkeypatch.delitem(sys.modules, name) restores the same module object at the end of
    sys.modules: the backward walk stops at it, so the count of new entries must catch the
    module loaded just before."""
    early = load(project / "shop/tax.py", monkeypatch)
    fingerprints = Fingerprinter(str(project))
    module = str(project / "tests/test_cart.py")
    fingerprints.cheap(module)
    load(project / "shop/cart.py", monkeypatch)
    name = early.__name__
    del sys.modules[name]
    sys.modules[name] = early
    assert fingerprints.cheap(module) == cheap(project)


def test_each_file_is_read_once_per_session(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    load(project / "shop/cart.py", monkeypatch)
    reads: list[str] = []
    real_open = open

    def counting_open(path: str, mode: str = "r") -> object:
        reads.append(path)
        return real_open(path, mode)

    monkeypatch.setattr(_fingerprint, "open", counting_open, raising=False)
    fingerprints = Fingerprinter(str(project))
    for _ in range(5):
        fingerprints.cheap(str(project / "tests/test_cart.py"))
    assert len(reads) == len(set(reads)) == 4  # the test, two conftests, shop/cart.py


@given(st.lists(st.integers(min_value=0, max_value=2**128 - 1), unique=True, max_size=8),
       st.randoms())
def test_combining_digests_does_not_depend_on_their_order(digests: list[int], rnd: object
                                                          ) -> None:
    shuffled = list(digests)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    assert combine(shuffled) == combine(digests)
    assert len(combine(digests)) == FINGERPRINT_CHARS
