"""The layers of docs/ARCHITECTURE.md hold in the source: no import runs up the layers, no private
module is imported from another package except the structures' kernels by the fused families, solvers
see only the problem layer (its operators, never its model, inputs or structure), and the potentials
arithmetic is a ground floor."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import structopt

ROOT = Path(structopt.__file__).resolve().parent

#: private imports across packages that predate the rule: none left (keep it empty; a layer that needs a
#: structure's backend imports it from structopt.structures.backends)
KNOWN: set[tuple[str, str]] = set()


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


#: the floors of docs/ARCHITECTURE.md ("Layers"), lowest first: a module imports (lazily too) only modules on its
#: floor or below. Modules on no floor (validation, the CLI, the estimator, saved models, marginal inference, the
#: structured layers, torch, tasks) sit on top and may import any floor.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("structopt.errors", "structopt.registry", "structopt.potentials", "structopt.options", "structopt.hooks",
     "structopt.progress", "structopt.interrupt", "structopt._numba_cache", "structopt.smoothing",
     "structopt.archive", "structopt.fingerprint", "structopt.codecs"),  # 0: the ground floor and the shared services
    ("structopt.structures",),  # 1
    ("structopt.models",),  # 2
    ("structopt.losses",),  # 3
    ("structopt.contract", "structopt.problem", "structopt.nonconvex", "structopt.fused"),  # 4: the problem, its
    # contract and, beside it, the fused kernel families (the problem's fused() builds their view)
    ("structopt.batch", "structopt.parallel"),  # 5: the executors and their passes
    ("structopt.solvers",),  # 6
)
#: imports that run up a floor, each with its reason (keep it short)
UPWARD_EXCEPTIONS = {
    # a convenience factory of the latent chain's label loss (a public API: README, tests, benchmarks), lazy
    ("structopt.structures.latent_chain", "structopt.losses"),
    ("structopt.models.latent_graph", "structopt.losses"),  # the same for the latent graph model, lazy
}


def _floor(module: str) -> int | None:
    found = None
    for level, prefixes in enumerate(FLOORS):
        if _allowed(module, prefixes):
            found = level
    return found


def test_no_import_runs_up_any_floor():
    """Every import (lazy ones included) goes to the importer's floor or below, across all the floors."""
    upward = set()
    for module, targets in _import_graph().items():
        own = _floor(module)
        if own is None:
            continue
        for target in targets:
            theirs = _floor(target)
            if theirs is None or theirs > own:
                upward.add((module, target))
    assert upward <= UPWARD_EXCEPTIONS, f"imports that run up the floors: {sorted(upward - UPWARD_EXCEPTIONS)}"


def test_registry_is_a_ground_floor():
    """structopt.registry serves every layer's registry, so it imports only the errors."""
    bad = sorted(name for module, _, name in _imports()
                 if module == "structopt.registry" and name.startswith("structopt.")
                 and not _allowed(name, ("structopt.errors",)))
    assert not bad, f"structopt.registry imports {bad}"


def test_private_modules_stay_in_their_package():
    crossing = set()
    for module, package, name in _imports():
        target = _private_target(name) if name.startswith("structopt") else None
        if target is None or target[0] == package:
            continue
        owner, private = target
        if owner == "structopt.structures" and package.startswith(("structopt.fused", "structopt.torch")):
            continue  # a fused family or a torch layer runs the structures' own kernels (a downward import)
        crossing.add((module, private))
    assert crossing <= KNOWN, f"private modules imported from another package: {sorted(crossing - KNOWN)}"



#: what solvers may import from structopt (ARCHITECTURE.md, "Solvers"): the problem layer (the
#: non-convex one included), the potentials arithmetic, the fused layer, the executors and their
#: passes, errors, option checks, checkpoints (archive, fingerprint), Ctrl-C handling, smoothing, and each other
SOLVER_IMPORTS = ("structopt.problem", "structopt.nonconvex", "structopt.potentials", "structopt.fused",
                  "structopt.parallel", "structopt.batch", "structopt.errors", "structopt.options", "structopt.archive",
                  "structopt.fingerprint", "structopt.interrupt", "structopt.smoothing", "structopt.solvers",
                  "structopt.registry")
#: the executors' passes (batch.py) and the executors (parallel.py): the same, minus the solvers
PASS_IMPORTS = tuple(name for name in SOLVER_IMPORTS if name != "structopt.solvers")
#: solver-side modules that read a problem's model, inputs, outputs or structure directly, and why
#: (parallel.py is exempt as a whole: executors ship those pieces to the workers)
REACH_EXCEPTIONS = {
    ("structopt.solvers.base", "model"),  # checkpoint references: older states point at the model
}


def _allowed(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)


def test_solvers_import_only_the_problem_layer():
    bad = sorted((module, name) for module, _, name in _imports()
                 if module.startswith("structopt.solvers") and name.startswith("structopt.")
                 and not _allowed(name, SOLVER_IMPORTS))
    assert not bad, f"solvers import beyond the problem layer (use SSVMProblem's operators): {bad}"
    bad = sorted((module, name) for module, _, name in _imports()
                 if module in ("structopt.batch", "structopt.parallel") and name.startswith("structopt.")
                 and not _allowed(name, PASS_IMPORTS))
    assert not bad, f"batch passes / executors import beyond the problem layer: {bad}"


def test_potentials_arithmetic_is_a_ground_floor():
    bad = sorted(name for module, _, name in _imports()
                 if module == "structopt.potentials" and name.startswith("structopt.")
                 and not _allowed(name, ("structopt.errors",)))
    assert not bad, f"structopt.potentials imports {bad}"


def test_solvers_reach_the_model_only_through_the_problem():
    """No ``problem.model`` / ``problem.X`` / ``problem.Y`` / ``problem.structure`` (nor ``p.``,
    ``self.problem.``) in solvers/ and batch.py: they call the problem's operators."""
    found = set()
    for path in sorted(ROOT.rglob("*.py")):
        module, _ = _module_names(path)
        if not (module.startswith("structopt.solvers") or module == "structopt.batch"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Attribute) and node.attr in ("model", "X", "Y", "structure")):
                continue
            owner = node.value
            if ((isinstance(owner, ast.Name) and owner.id in ("problem", "p"))
                    or (isinstance(owner, ast.Attribute) and owner.attr == "problem")):
                found.add((module, node.attr))
    assert found <= REACH_EXCEPTIONS, f"solvers reach past the problem: {sorted(found - REACH_EXCEPTIONS)}"


def test_hook_table_is_a_ground_floor():
    """structopt.hooks is looked up by losses, structures and the problem, so it imports none of them."""
    bad = sorted(name for module, _, name in _imports()
                 if module == "structopt.hooks" and name.startswith("structopt.")
                 and not _allowed(name, ("structopt.errors", "structopt.registry")))
    assert not bad, f"structopt.hooks imports {bad}"


def _import_graph() -> dict[str, set[str]]:
    """Module -> the structopt modules it imports (lazy imports included). An import of a module's own
    package (``structopt.fused.chain`` reading ``structopt.fused``'s registry) is the package's business
    and left out: the package's ``__init__`` imports its modules by design."""
    modules = {_module_names(path)[0] for path in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for module, _, name in _imports():
        parts = name.split(".")
        target = next((".".join(parts[:k]) for k in range(len(parts), 0, -1) if ".".join(parts[:k]) in modules),
                      None)
        if target and target != module and not module.startswith(target + "."):
            graph.setdefault(module, set()).add(target)
    return graph


def test_no_import_cycle():
    graph = _import_graph()
    cycles, state = [], {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for target in sorted(graph.get(module, ())):
            if state.get(target) == "open":
                cycles.append([*path[path.index(target):], target])
            elif target not in state:
                visit(target, [*path, target])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert not cycles, f"import cycles: {[' -> '.join(c) for c in cycles]}"
