"""Every ```python block of README.md and of the user guide (docs/guide/*.md) runs, as written.

Each block runs in a fresh namespace with a fresh temporary directory as the working directory.
A block whose first lines carry a marker comment is run accordingly:

- ``# needs: if __name__ == "__main__"`` — the block starts worker processes; it runs as a script in
  a subprocess (its own ``if __name__ == "__main__":`` guard is then exercised);
- ``# needs: shared data`` — it reads ``../shared/data``; skipped when neither /work/shared/data nor
  ../shared/data beside the repository exists, and run from a directory whose ``../shared`` is it;
- ``# needs: torch`` — it imports PyTorch (the optional ``torch`` extra); skipped where torch is not installed.

Also here: README.md's solver-option tables equal the ones generated from the solvers' declarations
(``docs/_solver_options.py``), and every example script has the title block the gallery needs.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs" / "guide").glob("*.md"))]
MAIN_MARKER = '# needs: if __name__ == "__main__"'
DATA_MARKER = "# needs: shared data"
TORCH_MARKER = "# needs: torch"
FENCE = re.compile(r"^```python[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _shared_root() -> Path | None:
    """The folder holding ``data/`` (so that ``../shared/data`` resolves from a sibling folder)."""
    for root in (ROOT.parent / "shared", Path("/work/shared")):
        if (root / "data").is_dir():
            return root.resolve()
    return None


def python_blocks(page: Path) -> list[tuple[str, str]]:
    """(id "FILE:LINE", source) of every ```python block of ``page``."""
    text = page.read_text(encoding="utf-8")
    blocks = []
    for match in FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        blocks.append((f"{page.relative_to(ROOT)}:{line}", match.group(1)))
    return blocks


BLOCKS = [block for page in PAGES for block in python_blocks(page)]


def _params():
    for block_id, source in BLOCKS:
        head = source.splitlines()[:3]
        marks = []
        if any(line.strip().startswith(DATA_MARKER) for line in head):
            # real data: marked slow (item 5 of issue 26), skipped where the data is absent
            marks += [pytest.mark.slow,
                      pytest.mark.skipif(_shared_root() is None, reason="../shared/data is absent")]
        if any(line.strip() == TORCH_MARKER for line in head):
            marks.append(pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                            reason="torch (the optional extra) is not installed"))
        if any(line.strip() == MAIN_MARKER for line in head):
            marks.append(pytest.mark.slow)  # starts worker processes and a dask cluster: tens of seconds
        yield pytest.param(block_id, source, marks=marks, id=block_id)


def test_the_pages_have_python_blocks():
    counts = {page.name: len(python_blocks(page)) for page in PAGES}
    assert counts["README.md"] >= 4, counts
    assert len(BLOCKS) >= 15, counts


@pytest.mark.parametrize(("block_id", "source"), list(_params()))
def test_block_runs(block_id: str, source: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    ast.parse(source, filename=block_id)  # a syntax error is reported with the page and line
    workdir = tmp_path / "run"
    workdir.mkdir()
    if DATA_MARKER in source:
        (tmp_path / "shared").symlink_to(_shared_root(), target_is_directory=True)
    env = {**os.environ, "MPLBACKEND": "Agg", "PYTHONPATH": str(ROOT)}
    if MAIN_MARKER in source:
        assert 'if __name__ == "__main__":' in source, f"{block_id}: marked {MAIN_MARKER!r} but has no such guard"
        script = workdir / "block.py"
        script.write_text(source, encoding="utf-8")
        done = subprocess.run([sys.executable, str(script)], cwd=workdir, env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, f"{block_id} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
        return
    monkeypatch.chdir(workdir)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    namespace = {"__name__": "readme_block"}
    exec(compile(source, block_id, "exec"), namespace)  # the page's own code, as a reader runs it


def _load_generator():
    spec = importlib.util.spec_from_file_location("solver_options_doc", ROOT / "docs" / "_solver_options.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_solver_tables_are_generated_from_the_declarations():
    generator = _load_generator()
    block = generator.readme_block((ROOT / "README.md").read_text(encoding="utf-8"))
    assert block is not None, "README.md has no generated solver-option block"
    assert block == generator.solver_option_tables(), (
        "README.md's solver-option tables differ from the solvers' declarations; "
        "run `python docs/_solver_options.py --write`")


def test_the_generated_table_says_which_common_options_are_refused():
    from structopt.solvers import get_solver

    tables = _load_generator().solver_option_tables()
    common_table = tables.split("Each solver's own options")[0]
    rows = {line.split("|")[1].strip(" `"): line for line in common_table.splitlines() if line.startswith("| `")}
    header = next(line for line in tables.splitlines() if line.startswith("| solver | `eval_every`"))
    columns = [cell.strip(" `") for cell in header.split("|")[2:-1]]
    for name in ("bcfw", "frank_wolfe", "svrg", "sgd"):
        marks = [cell.strip() for cell in rows[name].split("|")[2:2 + len(columns)]]
        for option, mark in zip(columns, marks):
            assert (mark == "✓") == (option in get_solver(name).options), (name, option, mark)


@pytest.mark.parametrize("example", sorted((ROOT / "examples").glob("*.py")), ids=lambda p: p.name)
def test_examples_have_a_gallery_title(example: Path):
    docstring = ast.get_docstring(ast.parse(example.read_text(encoding="utf-8")), clean=False)
    assert docstring, f"{example.name}: no module docstring (the gallery takes its title from it)"
    title, underline = docstring.splitlines()[:2]
    assert title.strip() and set(underline) == {"="} and len(underline) >= len(title), (
        f"{example.name}: the docstring must open with a title underlined by '=' (sphinx-gallery)")
