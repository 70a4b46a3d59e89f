"""The package list in pyproject.toml names every package of the source tree (a wheel ships only those)."""

from __future__ import annotations

from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_directory_is_listed_in_pyproject():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    directories = {**{name: ROOT / path for name, path in config.get("package-dir", {}).items()},
                   "structopt": ROOT / "structopt"}
    found = set()
    for name, directory in directories.items():
        for init in directory.rglob("__init__.py"):
            relative = init.parent.relative_to(directory).parts
            found.add(".".join((name, *relative)) if relative else name)
    assert found == listed, f"missing from pyproject: {sorted(found - listed)}; listed but absent: " \
                            f"{sorted(listed - found)}"
