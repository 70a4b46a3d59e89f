"""Not a module: the root of structopt's source checkout.

Python imports this file as ``structopt`` only when ``import structopt`` runs in the folder that
holds a checkout named ``structopt``: the checkout then shadows the package (without this file, as an
empty namespace package that fails later with an unrelated AttributeError). It says so instead.
Imported under another name (pytest imports a test tree's packages by their folder names, e.g. a
checkout named otherwise), it does nothing. setuptools lists the packages explicitly
(pyproject.toml), so this file is never installed.
"""

from pathlib import Path

if __name__ == "structopt":
    _checkout = Path(__file__).resolve().parent
    raise ImportError(f"structopt: `import structopt` found the source checkout {_checkout}, not the package: run "
                      f"Python from another folder or inside the checkout (after `pip install -e {_checkout}`)")
