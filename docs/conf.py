"""Sphinx configuration of the structopt documentation.

Build: ``pip install -e ".[docs]" && sphinx-build -W -b html docs docs/_build/html``.

The API pages (``docs/api/*.rst``) are written here at every build from the packages' ``__all__``
(or, without one, the public classes and functions a module defines): each object is documented once,
in the most specific listed module that defines it, and every module that re-exports it links there.
The command-line reference (``docs/guide/_cli_reference.md``) is written from ``structopt.cli``'s
parser and task registry (``docs/_cli_reference.py``), and the solver-option tables from the solvers'
declarations (``docs/_solver_options.py``).

Every page works offline: sphinx-gallery's timing page (``sg_execution_times``, which loads its table
styles and scripts from CDNs) is not written, and a build whose HTML loads a script or stylesheet
over http(s) fails (``docs/_offline.py``: a warning, so an error under ``-W``).
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(DOCS))

from _cli_reference import cli_reference  # noqa: E402
from _offline import refuse_remote_assets  # noqa: E402
from _solver_options import solver_option_tables  # noqa: E402

import structopt  # noqa: E402

project = "structopt"
author = "the structopt developers"
copyright = "the structopt developers"
release = version = structopt.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "myst_parser",
    "sphinx_gallery.gen_gallery",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
# guide/_*.md are generated parts that other pages include (the option tables, the command-line reference)
exclude_patterns = ["_build", "ARCHITECTURE.md", "guide/_*.md", "auto_examples/*.ipynb", "auto_examples/*.py",
                    "auto_examples/*.zip", "auto_examples/*.md5", "auto_examples/*.json"]
templates_path = ["_templates"]
html_theme = "furo"
html_title = f"structopt {release}"
html_static_path = ["_static"]
html_css_files = ["custom.css"]

myst_enable_extensions = ["dollarmath"]
myst_heading_anchors = 3

autosummary_generate = True
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_description_target = "documented"  # types for documented parameters only: no "Return type" noise
autodoc_typehints_format = "short"
napoleon_numpy_docstring = True
napoleon_google_docstring = False
napoleon_use_rtype = False
napoleon_use_ivar = True  # "Attributes" as fields: NamedTuple fields are documented once, by autodoc

# ---------------------------------------------------------------------------------------------
# The gallery: every examples/*.py, run at build time (seconds each: the examples' own budgets are
# small). examples/word_alignment.py reads the Hansards corpus: it runs only where the data is.
# ---------------------------------------------------------------------------------------------


def _shared_data() -> Path | None:
    for candidate in (os.environ.get("STRUCTOPT_DATA"), ROOT.parent / "shared" / "data", "/work/shared/data"):
        if candidate and (Path(candidate) / "hansards").is_dir():
            return Path(candidate)
    return None


_found_data = _shared_data()
if _found_data is not None:  # the examples' loaders (run in this process) read the data where this found it
    os.environ.setdefault("STRUCTOPT_DATA", str(_found_data))
_gallery_skip = [] if _found_data else [r"word_alignment\.py"]
sphinx_gallery_conf = {
    "examples_dirs": str(ROOT / "examples"),
    "gallery_dirs": "auto_examples",
    "filename_pattern": r".*\.py",  # execute every example, not only plot_*.py
    "ignore_pattern": "|".join([r"__init__\.py", *_gallery_skip]),
    "image_scrapers": ("matplotlib",),
    "download_all_examples": False,
    "remove_config_comments": True,
    "abort_on_example_error": True,
    "within_subsection_order": "FileNameSortKey",
    "show_memory": False,
    "plot_gallery": "True",
    # the timing pages (sg_execution_times) load bootstrap, jQuery and DataTables from CDNs: not written
    "write_computation_times": False,
}
# a timing page left by an older build (or another configuration) would still be built: remove it
for _stale in (DOCS / "sg_execution_times.rst", DOCS / "auto_examples" / "sg_execution_times.rst"):
    _stale.unlink(missing_ok=True)

# ---------------------------------------------------------------------------------------------
# API pages
# ---------------------------------------------------------------------------------------------

#: the documented modules, each with a one-line heading; order = the order of the API index
API_MODULES: list[tuple[str, str]] = [
    ("structopt", "Top level: everything a typical script needs"),
    ("structopt.structures", "Structures: output sets and their oracles"),
    ("structopt.structures.dp", "Dynamic programs over hypergraphs"),
    ("structopt.models", "Models: joint feature maps"),
    ("structopt.models.nonlinear", "Non-linear score maps"),
    ("structopt.losses", "Losses"),
    ("structopt.problem", "The SSVM problem"),
    ("structopt.nonconvex", "Non-convex problems"),
    ("structopt.solvers", "Solvers"),
    ("structopt.solvers.base", "Solver machinery: options, results, the run loop, checkpoints"),
    ("structopt.estimator", "scikit-learn estimator"),
    ("structopt.saved_model", "Saved models: trained weights and preprocessing on disk"),
    ("structopt.codecs", "Codecs: how each model, loss and structure type is saved"),
    ("structopt.marginals", "Marginal inference and MAP for UAI models"),
    ("structopt.validate", "Validation of structures and models"),
    ("structopt.parallel", "Executors: processes and dask"),
    ("structopt.potentials", "Potentials arithmetic"),
    ("structopt.contract", "The extension contract"),
    ("structopt.hooks", "The hook table: optional attributes looked up by name"),
    ("structopt.archive", "Sealed archives (checkpoints)"),
    ("structopt.interrupt", "Ctrl-C handling"),
    ("structopt.errors", "Errors"),
    ("structopt.options", "Option checks"),
    ("structopt.smoothing", "Smoothed max operators"),
    # imports torch: the docs build needs the optional extra (.ci/run installs the CPU build first)
    ("structopt.torch", "Structured layers and losses for PyTorch (optional extra)"),
    ("structopt.net_checkpoint", "Network training runs: checkpoints, resume, the best epoch"),
    ("structopt.tasks.ocr", "Task: OCR handwriting"),
    ("structopt.tasks.conll", "Task: CoNLL chunking and NER"),
    ("structopt.tasks.alignment", "Task: word alignment"),
    ("structopt.tasks.horses", "Task: figure-ground segmentation"),
    ("structopt.tasks.localization", "Task: object localization"),
    ("structopt.tasks.own_data", "Your own data: sequence, segmentation, boxes, bitext"),
]

#: names left out of the reference on purpose (with the reason)
API_SKIP = {
    "__version__",  # shown in the page title
}


def public_names(module) -> list[str]:
    """``module.__all__``, or the public classes and functions the module itself defines."""
    names = getattr(module, "__all__", None)
    if names is None:
        names = [name for name, obj in vars(module).items()
                 if not name.startswith("_") and (inspect.isclass(obj) or inspect.isfunction(obj))
                 and getattr(obj, "__module__", None) == module.__name__]
    return [name for name in names if name not in API_SKIP]


def _owner(obj, listed: list[str], holders: list[str]) -> str:
    """The most specific listed module that defines ``obj`` (else the first that exports it)."""
    defined_in = getattr(obj, "__module__", None)
    if isinstance(defined_in, str) and (inspect.isclass(obj) or inspect.isfunction(obj) or callable(obj)):
        candidates = [m for m in listed if defined_in == m or defined_in.startswith(m + ".")]
        if candidates:
            return max(candidates, key=len)
    deeper = [m for m in holders if m != "structopt"]
    return deeper[0] if deeper else holders[0]


def _summary(obj) -> str:
    doc = inspect.getdoc(obj) or ""
    first = doc.strip().split("\n\n")[0].replace("\n", " ").strip()
    return first


def write_api_pages() -> int:
    """Write docs/api/*.rst; returns the number of documented names."""
    out = DOCS / "api"
    out.mkdir(exist_ok=True)
    listed = [name for name, _ in API_MODULES]
    modules = {name: importlib.import_module(name) for name in listed}
    exported = {name: public_names(module) for name, module in modules.items()}
    # objects held here for the whole function: ids of temporaries could be reused
    objects = {(m, name): getattr(modules[m], name) for m in listed for name in exported[m]}
    holders: dict[int, list[str]] = {}
    for (mod_name, _), obj in objects.items():
        holders.setdefault(id(obj), []).append(mod_name)
    owner_of: dict[tuple[str, str], str] = {}
    for mod_name in listed:
        for name in exported[mod_name]:
            obj = objects[mod_name, name]
            owner = _owner(obj, listed, holders[id(obj)])
            if name not in exported.get(owner, []):
                owner = mod_name
            owner_of[mod_name, name] = owner
    total = 0
    index = ["API reference", "=============", "",
             "Every public name, documented once where it is defined; modules that re-export a name link",
             "to that page. Generated from the packages' ``__all__`` and the numpy-style docstrings.", "",
             ".. toctree::", "   :maxdepth: 1", ""]
    for mod_name, heading in API_MODULES:
        index.append(f"   {mod_name}")
        title = f"``{mod_name}`` — {heading}"
        lines = [title, "=" * (len(title) + 4), "", f".. automodule:: {mod_name}", "   :no-members:", ""]
        own = [n for n in exported[mod_name] if owner_of[mod_name, n] == mod_name]
        other = [n for n in exported[mod_name] if owner_of[mod_name, n] != mod_name]
        if own:
            lines += [f".. currentmodule:: {mod_name}", "", ".. autosummary::", "   :toctree: generated",
                      "   :nosignatures:", ""] + [f"   {n}" for n in own] + [""]
            total += len(own)
        if other:
            # re-exports: autosummary rows (link and summary) pointing at the page where each is documented
            heading = "Names" if mod_name == "structopt" else "Also exported here"
            lines += [heading, "-" * len(heading), "",
                      "Each documented in the module named on its page (``structopt.X`` is the same object).", "",
                      ".. currentmodule:: None", "", ".. autosummary::", "   :nosignatures:", ""]
            lines += [f"   ~{owner_of[mod_name, n]}.{n}" for n in other] + [""]
        _write_if_changed(out / f"{mod_name}.rst", "\n".join(lines))
    _write_if_changed(out / "index.rst", "\n".join(index) + "\n")
    # stubs of names no longer documented where they were (moved, renamed, removed) would be orphans
    expected = {f"{m}.{n}.rst" for (m, n), owner in owner_of.items() if owner == m}
    for stub in (out / "generated").glob("*.rst"):
        if stub.name not in expected:
            stub.unlink()
    return total


def _write_if_changed(path: Path, text: str) -> None:
    # an unchanged page keeps its mtime, so an incremental build does not read it again
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")


API_NAMES = write_api_pages()
_write_if_changed(DOCS / "guide" / "_solver_options.md", solver_option_tables() + "\n")
_write_if_changed(DOCS / "guide" / "_cli_reference.md", cli_reference())

# ---------------------------------------------------------------------------------------------
# Docstring mends applied at build time, for modules whose owners have not fixed them yet (each is
# the fix to make in the source; a mend whose text is no longer there is skipped). Keyed by the
# documented object's full name: (text in the raw docstring, replacement).
# ---------------------------------------------------------------------------------------------
DOCSTRING_MENDS: dict[str, list[tuple[str, str]]] = {}


def _mend_docstring(app, what, name, obj, options, lines):
    if name in DOCSTRING_MENDS:
        text = "\n".join(lines)
        for old, new in DOCSTRING_MENDS[name]:
            text = text.replace(old, new)
        lines[:] = text.split("\n")
    # a data object without a #: comment gets its type's docstring (dict's, list's): drop it
    if what == "data" and lines and inspect.getdoc(type(obj)) == "\n".join(lines).strip():
        lines[:] = []


def _skip_aliases(app, what, name, obj, skip, options):
    # class attributes that alias a class documented elsewhere (Chain.Potentials = ChainPotentials):
    # documenting them makes every reference to "Potentials" ambiguous
    if what == "class" and inspect.isclass(obj) and obj.__name__ != name:
        return True
    return None


def setup(app):
    app.connect("autodoc-process-docstring", _mend_docstring, priority=100)  # before napoleon (500)
    app.connect("autodoc-skip-member", _skip_aliases)
    app.connect("build-finished", refuse_remote_assets)
