"""What several benchmark scripts share (they run as scripts, so this folder is on ``sys.path``)."""

from __future__ import annotations

import sys
from pathlib import Path


def use_checkout(root: Path) -> None:
    """Import structopt from ``root`` (and its ``tasks`` folder as ``structopt.tasks``, as the installed
    package maps it), whatever the installed copy points at."""
    import importlib.util

    sys.path.insert(0, str(root))
    import structopt

    if Path(structopt.__file__).resolve().parent != root / "structopt":
        raise SystemExit(f"imported structopt from {structopt.__file__}, not from {root}")
    spec = importlib.util.spec_from_file_location("structopt.tasks", root / "tasks" / "__init__.py",
                                                  submodule_search_locations=[str(root / "tasks")])
    module = importlib.util.module_from_spec(spec)
    sys.modules["structopt.tasks"] = module
    spec.loader.exec_module(module)


def write_keeping_findings(path: Path, text: str, heading: str = "\n## Findings") -> None:
    """Write a results file: ``text`` (the generated part), then the hand-written part of the file
    already there, from ``heading`` on, so that a re-run keeps the notes."""
    if path.exists():
        old = path.read_text()
        if heading in old:
            text += old[old.index(heading):]
    path.write_text(text)
