"""The layers of docs/ARCHITECTURE.md hold in the source: no import runs up the layers, and no private
module is imported from another package except the structures' kernels by the fused families."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import structopt

ROOT = Path(structopt.__file__).resolve().parent

#: private imports across packages that predate the rule, outside the fast paths (importer, imported
#: module; validate is becoming a package): remove an entry when its import goes, never add one
KNOWN = {
    ("structopt.marginals.oracles", "structopt.structures._ilp"),
    ("structopt.marginals.oracles", "structopt.structures._mincut"),
    ("structopt.validate", "structopt.structures._minnorm"),
    ("structopt.validate.oracles", "structopt.structures._minnorm"),
}


def _module_names(path: Path) -> tuple[str, str]:
    """``(module, package)`` of a source file: ``structopt.fused.chain`` lives in ``structopt.fused``."""
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
        return ".".join(parts), ".".join(parts)
    return ".".join(parts), ".".join(parts[:-1])


def _imports() -> Iterator[tuple[str, str, str]]:
    """``(module, package, imported name)`` for every import statement anywhere in a module (lazy
    imports inside functions included); ``from a import b`` yields ``a.b``."""
    for path in sorted(ROOT.rglob("*.py")):
        module, package = _module_names(path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield module, package, alias.name
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: resolve against the importing package
                    anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                for alias in node.names:
                    yield module, package, f"{base}.{alias.name}"


def _private_target(name: str) -> tuple[str, str] | None:
    """``(owner package, private module)`` when ``name`` goes through a private segment, else None."""
    segments = name.split(".")
    for k, segment in enumerate(segments):
        if segment.startswith("_") and not segment.startswith("__"):
            return ".".join(segments[:k]), ".".join(segments[:k + 1])
    return None


def test_no_import_runs_up_the_layers():
    upward = sorted((module, name) for module, _, name in _imports()
                    if module.startswith(("structopt.models", "structopt.structures"))
                    and name.startswith(("structopt.solvers", "structopt.fused")))
    assert not upward, f"models/structures import solvers or fused: {upward}"


def test_private_modules_stay_in_their_package():
    crossing = set()
    for module, package, name in _imports():
        target = _private_target(name) if name.startswith("structopt") else None
        if target is None or target[0] == package:
            continue
        owner, private = target
        if owner == "structopt.structures" and package.startswith("structopt.fused"):
            continue  # a fused family runs the structures' own kernels (a downward import)
        crossing.add((module, private))
    assert crossing <= KNOWN, f"private modules imported from another package: {sorted(crossing - KNOWN)}"

