"""The distribution declares its license, ships the license text in the sdist and the wheel,
and the wheel holds every file of the package.

The build test runs setuptools' own backend (the version ``[build-system]`` requires, fetched
from the package index into a scratch folder) on a copy of the tree's files, as ``pip wheel``
and ``python -m build`` would, and reads the archives it makes (about 5 s, most of it
fetching the backend).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_the_license_file_is_the_declared_license() -> None:
    project = PYPROJECT["project"]
    assert project["license"] == "MIT"
    assert project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License\n")
    assert "runstore contributors" in text.splitlines()[2]
    assert "THE SOFTWARE IS PROVIDED \"AS IS\"" in text
    # setuptools reads the SPDX string and license-files from version 77 on (PEP 639).
    assert "setuptools>=77" in PYPROJECT["build-system"]["requires"]


def _tree_files() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout
    return [name for name in listed.split("\0") if name and (ROOT / name).is_file()]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(sdist, wheel) built from a copy of the tree's files."""
    scratch = tmp_path_factory.mktemp("build")
    source = scratch / "source"
    for name in _tree_files():
        target = source / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes((ROOT / name).read_bytes())
    backend = scratch / "backend"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
         "--target", str(backend), *PYPROJECT["build-system"]["requires"]],
        check=True, capture_output=True, timeout=300,
    )
    out = scratch / "dist"
    env = {**os.environ, "PYTHONPATH": str(backend)}
    for hook in ("build_sdist", "build_wheel"):  # one process each, as build frontends do
        subprocess.run(
            [sys.executable, "-c", f"import sys, setuptools.build_meta as b; b.{hook}(sys.argv[1])",
             str(out)],
            cwd=source, env=env, check=True, capture_output=True, timeout=300,
        )
    (sdist,) = out.glob("*.tar.gz")
    (wheel,) = out.glob("*.whl")
    return sdist, wheel


def test_the_sdist_and_the_wheel_hold_the_license(built: tuple[Path, Path]) -> None:
    sdist, wheel = built
    license_text = (ROOT / "LICENSE").read_bytes()
    with tarfile.open(sdist) as archive:
        top = archive.getnames()[0].split("/")[0]
        member = archive.extractfile(f"{top}/LICENSE")
        assert member is not None
        assert member.read() == license_text
    with zipfile.ZipFile(wheel) as archive:
        (info,) = {n.split("/")[0] for n in archive.namelist() if ".dist-info/" in n}
        assert archive.read(f"{info}/licenses/LICENSE") == license_text
        metadata = archive.read(f"{info}/METADATA").decode()
    assert "License-Expression: MIT" in metadata.splitlines()
    assert "License-File: LICENSE" in metadata.splitlines()


def test_the_wheel_holds_every_file_of_the_package(built: tuple[Path, Path]) -> None:
    # Package data (migrations, JSON schemas, py.typed) must be listed in pyproject to ship.
    _, wheel = built
    package = {name.removeprefix("src/") for name in _tree_files()
               if name.startswith("src/runstore/")}
    with zipfile.ZipFile(wheel) as archive:
        shipped = set(archive.namelist())
    assert package - shipped == set()
    assert any(name.startswith("runstore/cli/schemas/") for name in package)
