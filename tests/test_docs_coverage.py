"""The documentation site covers what the README and the command line offer, and works offline (no Sphinx
needed: the pages' sources, the generated command-line reference and, where one exists, a built site).

The lists come from the sources of truth: subcommands, flags and choices from ``structopt.cli``'s parser,
tasks from the task registry (``structopt.cli_registry.TASKS``), sections from README.md's ``##`` headings,
model and loss types from the saved-model registries.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = (ROOT / "README.md").read_text(encoding="utf-8")

#: where each README section's topic lives on the site: (page, heading on that page or None for the whole page)
README_TOPICS: dict[str, list[tuple[str, str | None]]] = {
    "Two commands": [("guide/quickstart.md", None)],
    "Documentation": [("building.md", None)],
    "The command line": [("guide/cli.md", None), ("guide/saved_models.md", None)],
    "A short example": [("guide/quickstart.md", None)],
    "Solvers: one vocabulary": [("guide/solvers.md", None), ("guide/certificates.md", None),
                                ("guide/checkpoints.md", None)],
    "Declaring a structure": [("guide/structures.md", "Your own constraints: `LPStructure`"),
                              ("guide/structures.md", "A dynamic program: `structopt.structures.dp`")],
    "What is there": [("architecture.md", None), ("guide/structures.md", "Built-in structures")],
    "Factor graphs and MAP": [("guide/structures.md", "Factor graphs: `FactorGraph`"), ("guide/marginals.md", None)],
    "Marginal inference": [("guide/marginals.md", None)],
    "Structured layers for PyTorch": [("guide/torch.md", None)],
    "Running on a dask cluster": [("guide/dask.md", None)],
    "Layout": [("architecture.md", None)],
    "Data": [("project.md", "Data")],
    "Benchmarks": [("project.md", "Benchmarks")],
    "Development": [("project.md", "Development")],
}


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, DOCS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def reference() -> str:
    return _load("_cli_reference").cli_reference()


@pytest.fixture(scope="module")
def parser() -> argparse.ArgumentParser:
    from structopt.cli import build_parser

    return build_parser()


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return {name: sub for name, (_, sub) in _load("_cli_reference").subcommands(parser).items()}


def _toctree_pages() -> set[str]:
    """Pages reachable from the index's toctrees (one level: the guide pages are listed there)."""
    text = (DOCS / "index.md").read_text(encoding="utf-8")
    pages = set()
    for block in re.findall(r"```\{toctree\}(.*?)```", text, re.DOTALL):
        pages |= {line.strip() for line in block.splitlines() if line.strip() and not line.strip().startswith(":")}
    return pages


def _headings(page: Path) -> set[str]:
    return {m.group(1).strip() for m in re.finditer(r"^#{1,4} (.+)$", page.read_text(encoding="utf-8"), re.M)}


def test_every_readme_section_has_a_docs_page_in_the_toctree():
    sections = re.findall(r"^## (.+)$", README, re.M)
    assert len(sections) >= 10
    assert set(sections) == set(README_TOPICS), "map each README ## section to its docs page(s) in README_TOPICS"
    listed = _toctree_pages()
    for section, places in README_TOPICS.items():
        for page, heading in places:
            path = DOCS / page
            assert path.is_file(), f"README section {section!r}: {page} is missing"
            assert page.removesuffix(".md") in listed, f"{page} is in no toctree of docs/index.md"
            if heading is not None:
                assert heading in _headings(path), f"README section {section!r}: {page} has no heading {heading!r}"


def test_readme_sections_included_on_the_site_exist_where_the_include_says():
    # project.md includes README text between headings: the markers must be README headings, in order
    text = (DOCS / "project.md").read_text(encoding="utf-8")
    markers = re.findall(r':(?:start-after|end-before): "(## [^"]+)"', text)
    assert markers, "project.md includes no README section"
    positions = [README.find(marker + "\n") for marker in markers]
    assert all(p >= 0 for p in positions), markers


def test_the_reference_names_every_subcommand_flag_and_choice(parser, reference):
    subs = _subparsers(parser)
    assert {"train", "predict", "check", "infer"} <= set(subs)
    section = _load("_cli_reference").SECTION
    for name, sub in subs.items():
        assert section.format(name=name) in reference, name
        for action in sub._actions:
            for flag in action.option_strings:
                assert f"`{flag}`" in reference, f"structopt {name} {flag}"
            for choice in action.choices or ():
                assert f"`{choice}`" in reference, f"structopt {name}: choice {choice!r}"
    for flag in ("--version", "--debug"):
        assert f"`{flag}`" in reference


def test_the_reference_and_the_cli_page_name_every_task(reference):
    from structopt.cli_registry import TASKS

    page = (DOCS / "guide" / "cli.md").read_text(encoding="utf-8")
    train = reference.split("### `structopt train`")[1].split("### `structopt predict`")[0]
    predict = reference.split("### `structopt predict`")[1].split("### `structopt check`")[0]
    for task, spec in TASKS.items():
        assert f"| `{task}` |" in train, f"train task {task} is not in the reference"
        if getattr(spec, "input_help", ""):
            assert f"| `{task}` |" in predict, f"predict task {task} is not in the reference"
            assert f"`{spec.default_output}`" in predict
        assert f"`{task}`" in page or f"train {task}" in page, f"docs/guide/cli.md does not mention task {task}"
    assert "structopt train horses --graph superpixels" in page


def test_every_flag_the_readme_gives_the_command_is_in_the_reference(parser, reference):
    section = README.split("## The command line")[1].split("\n## ")[0]
    flags = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", section))
    known = {flag for sub in [parser, *_subparsers(parser).values()] for a in sub._actions for flag in a.option_strings}
    assert len(flags) >= 20
    assert flags <= known, f"README names flags the parser lacks: {sorted(flags - known)}"
    missing = [flag for flag in flags if f"`{flag}`" not in reference]
    assert not missing, missing


def test_the_cli_page_includes_the_generated_reference():
    page = (DOCS / "guide" / "cli.md").read_text(encoding="utf-8")
    assert "```{include} _cli_reference.md" in page
    conf = (DOCS / "conf.py").read_text(encoding="utf-8")
    assert '"_cli_reference.md", cli_reference())' in conf
    assert "docs/guide/_cli_reference.md" in (ROOT / ".gitignore").read_text(encoding="utf-8")
    for name in ("train", "predict", "check", "infer"):
        assert f"structopt {name}" in page


def test_the_saved_models_page_covers_saving_loading_predicting_and_untrusted_input():
    from structopt.codecs import codecs
    from structopt.saved_model import LOSS_TYPES, MODEL_TYPES, OPTIONAL_MODEL_MODULES

    page = (DOCS / "guide" / "saved_models.md").read_text(encoding="utf-8")
    for needed in ("save_model", "load_model", ".predict(", "StructuredSVM.save", "StructuredSVM.load",
                   "structopt predict", "sealed", "pickle", "SHA-256", "preprocessing", "Untrusted input"):
        assert needed in page, needed
    names = list(MODEL_TYPES)  # reading the names imports the built-in codecs
    registry = codecs("model")  # the built-in types (a user's, e.g. the guide's own example, are not listed)
    builtin = [name for name in names
               if name in OPTIONAL_MODEL_MODULES or registry[name].cls.__module__.startswith("structopt.")]
    for name in (*builtin, *LOSS_TYPES):
        assert name in page or name in ("Hamming", "WeightedHamming", "MatchingHamming", "BoxLoss"), name
    for name in builtin:
        assert f"`{name}`" in page, f"the saved-models page does not list {name}"


# ----------------------------------------------------------------------------------------- offline
def test_the_configuration_writes_no_cdn_page_and_refuses_remote_assets():
    conf = (DOCS / "conf.py").read_text(encoding="utf-8")
    assert re.search(r'"write_computation_times":\s*False', conf)
    assert 'app.connect("build-finished", refuse_remote_assets)' in conf


def test_remote_assets_finds_scripts_and_stylesheets_not_links():
    offline = _load("_offline")
    page = """<link href="https://cdn.datatables.net/1.13.6/css/x.css" rel="stylesheet" />
    <script src="https://code.jquery.com/jquery-3.7.0.js"></script>
    <script async="async" src="//cdn.jsdelivr.net/npm/mathjax@3/es5/tex-mml-chtml.js"></script>
    <link rel="canonical" href="https://example.org/page.html" />
    <script src="_static/furo.js"></script><link rel="stylesheet" href="../_static/pygments.css" />
    <a href="https://github.com/structopt">source</a>"""
    assert offline.remote_assets(page) == ["https://cdn.datatables.net/1.13.6/css/x.css",
                                           "https://code.jquery.com/jquery-3.7.0.js",
                                           "//cdn.jsdelivr.net/npm/mathjax@3/es5/tex-mml-chtml.js"]


def _builds() -> list[Path]:
    candidates = [DOCS / "_build" / "html", *(Path(p) for p in os.environ.get("STRUCTOPT_DOCS_BUILD", "").split(
        os.pathsep) if p)]
    return [path for path in candidates if (path / "index.html").is_file()]


@pytest.mark.skipif(not _builds(), reason="no built site (docs/_build/html or $STRUCTOPT_DOCS_BUILD)")
def test_a_built_site_loads_nothing_from_the_network():
    offline = _load("_offline")
    for build in _builds():
        assert not list(build.rglob("sg_execution_times.html")), build
        pages = sorted(build.rglob("*.html"))
        assert len(pages) > 50, build
        remote = {str(p.relative_to(build)): offline.remote_assets(p.read_text(encoding="utf-8", errors="replace"))
                  for p in pages}
        assert not {page: urls for page, urls in remote.items() if urls}
        assert (build / "guide" / "saved_models.html").is_file() and (build / "guide" / "cli.html").is_file()


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
