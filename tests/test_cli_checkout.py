"""`import structopt` in the folder that holds a checkout named structopt says so in one line (the root
__init__.py), instead of binding an empty namespace package that fails later with an AttributeError."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_import_from_the_checkouts_parent_names_the_checkout(tmp_path):
    (tmp_path / "structopt").symlink_to(ROOT, target_is_directory=True)
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", "import structopt"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last == (f"ImportError: structopt: `import structopt` found the source checkout {ROOT}, not the package: "
                    f"run Python from another folder or inside the checkout (after `pip install -e {ROOT}`)")


def test_the_root_file_is_inert_under_another_name_and_never_packaged():
    import importlib.util

    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    spec = importlib.util.spec_from_file_location("checkout_root", ROOT / "__init__.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # pytest imports it by the checkout's folder name: no error then
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    assert all(name.startswith("structopt") for name in packages)  # listed explicitly: the root is no package
