"""Solver options as data: each option declared once, the public signature and docstring made from the
declarations, the checkpoint fingerprint unchanged, and the estimator checking with the same declarations."""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import re
import typing
from pathlib import Path

import numpy as np
import pytest

import structopt as so
from structopt.archive import read_archive
from structopt.errors import InvalidInputError
from structopt.fingerprint import digest
from structopt.nonconvex import NonconvexProblem
from structopt.problem import SSVMProblem
from structopt.solvers import SOLVERS
from structopt.solvers.base import COMMON_OPTIONS, Checkpoints, RunOptions, StoppingRule, _docstring_options
from structopt.solvers.bcfw import GAP_OPTIONS

SOLVERS_DIR = Path(so.__file__).resolve().parent / "solvers"
FUNCTIONS = {function.solver_name: function for function in SOLVERS.values()}


@functools.cache
def _solver_sources() -> dict[str, ast.Module]:
    return {path.name: ast.parse(path.read_text()) for path in sorted(SOLVERS_DIR.glob("*.py"))}


def _declarations(name: str) -> list[str]:
    """Where option ``name`` is declared in structopt/solvers: annotated assignments (dataclass fields), and
    keyword parameters of the functions that take options from a caller: the ``@solver`` functions (where
    every option was declared before; their positional ``executor`` is the opened one) and the
    regularisation path."""
    found = []
    for module, tree in _solver_sources().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
                found.append(f"{module}:{node.lineno}")
            elif isinstance(node, ast.FunctionDef) and (node.name == "regularization_path" or any(
                    isinstance(d, ast.Call) and getattr(d.func, "id", "") == "solver" for d in node.decorator_list)):
                found.extend(f"{module}:{node.lineno} ({node.name})" for a in node.args.kwonlyargs if a.arg == name)
    return found


#: regularization_path is no @solver but a driver of BCFW runs: its budget is per lambda (default 200 passes)
PATH_DRIVER = {"max_passes", "eval_every", "random_state"}


@pytest.mark.parametrize("option", sorted(COMMON_OPTIONS))
def test_each_common_option_is_declared_once(option):
    found = [place for place in _declarations(option) if not place.endswith("(regularization_path)")]
    assert len(found) == 1 and found[0].startswith("_options.py:")
    assert len(_declarations(option)) == 1 + (option in PATH_DRIVER)


def test_no_solver_reads_its_options_from_locals():
    calls = [f"{module}:{node.lineno}" for module, tree in _solver_sources().items() for node in ast.walk(tree)
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("locals", "vars")]
    assert calls == []


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_the_public_signature_is_the_declarations(name):
    function = FUNCTIONS[name]
    parameters = inspect.signature(function).parameters
    assert list(parameters)[:2] == ["problem", "max_passes"]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for key, p in parameters.items() if key != "problem")
    own = function.options_type
    fields = [f.name for f in dataclasses.fields(own)]
    assert [key for key, option in function.options.items() if not option.common] == fields
    assert all(parameters[f.name].default == f.default for f in dataclasses.fields(own))
    common = [key for key, option in function.options.items() if option.common]
    assert set(common) <= set(COMMON_OPTIONS) and "max_passes" in common
    hints = typing.get_type_hints(function)  # evaluated: resolvable from any module (the CLI reads the problem type)
    assert hints["problem"] is (NonconvexProblem if name in ("prox_linear", "sgd_nonconvex") else SSVMProblem)


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_the_docstring_lists_every_option_once(name):
    doc = FUNCTIONS[name].__doc__
    section = doc.split("Parameters\n----------\n", 1)[1].split("\n\n")[0]
    names = [part.strip() for line in section.splitlines() if line and not line[0].isspace()
             for part in line.split(" : ")[0].split(",")]
    assert sorted(names) == sorted(["problem", *FUNCTIONS[name].options])  # each exactly once
    assert _docstring_options(doc) == {"problem", *FUNCTIONS[name].options}
    assert "As in :func:" not in doc


def test_common_options_are_documented_once_in_run_options():
    documented = _docstring_options(RunOptions.__doc__)
    assert documented == set(COMMON_OPTIONS) == {f.name for f in dataclasses.fields(RunOptions)}


def test_an_unknown_keyword_is_one_line_listing_the_valid_ones():
    problem = so.SSVMProblem(so.MultiClassModel(2, 2), [np.ones(2)], [1], so.Hamming(), 0.1)
    with pytest.raises(InvalidInputError) as refused:
        so.solvers.bcfw(problem, max_pases=3)
    message = str(refused.value)
    assert "\n" not in message and "max_pases" in message
    assert message.endswith("it accepts " + ", ".join(so.solvers.bcfw.options))
    with pytest.raises(TypeError):  # options are keywords only
        so.solvers.bcfw(problem, 3)


def test_a_method_options_object_is_frozen_and_fingerprints_its_fields():
    from structopt.solvers.bcfw import BCFWOptions

    options = BCFWOptions(line_search=False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.line_search = True  # type: ignore[misc]
    plain = options.trajectory()
    assert set(plain) == {"line_search", "averaging", "sampling", "batch_size", "fused"}  # as before: no gap options
    expensive = BCFWOptions(sampling="gap").trajectory()
    assert set(expensive) == set(plain) | set(GAP_OPTIONS)


def _problem(n=6, seed=0):
    rng = np.random.default_rng(seed)
    X = [rng.normal(size=3) for _ in range(n)]
    return so.SSVMProblem(so.MultiClassModel(3, 3), X, [int(rng.integers(0, 3)) for _ in range(n)], so.Hamming(), 0.1)


#: the checkpoint fingerprint of bcfw's options at their defaults, as the code before options-as-data wrote it
#: (digest of {"solver": "bcfw", line_search, averaging, sampling, batch_size, fused}): old checkpoints resume
OLD_BCFW_DEFAULTS = "{'solver': 'bcfw', 'line_search': True, 'averaging': 'weighted', 'sampling': 'perm', " \
                    "'batch_size': 1, 'fused': None}"


def test_the_checkpoint_fingerprint_is_the_one_old_checkpoints_carry(tmp_path):
    problem = _problem()
    path = tmp_path / "run.npz"
    so.solvers.bcfw(problem, max_passes=2, random_state=0, checkpoint=path, tol=0.0, eval_every=1)
    meta, _ = read_archive(path, "checkpoint")
    expected = digest(ast.literal_eval(OLD_BCFW_DEFAULTS))
    assert meta["fingerprint"]["solver options"] == expected
    # every solver: the method's own options as given, run options never
    casimir = tmp_path / "casimir.npz"
    so.solvers.casimir_svrg(problem, max_passes=2, random_state=0, checkpoint=casimir, mu=1.5, callback=lambda w: {})
    meta, _ = read_archive(casimir, "checkpoint")
    own = {key: option.default for key, option in so.solvers.casimir_svrg.options.items() if not option.common}
    assert meta["fingerprint"]["solver options"] == digest({"solver": "casimir_svrg", **own, "mu": 1.5})


def test_checkpoints_save_load_and_refuse_another_trajectory(tmp_path):
    problem = _problem()
    path = tmp_path / "c.npz"
    writer = Checkpoints(problem, "bcfw", {"line_search": True}, path=path, every=2.0)
    assert writer.due(0.5, stopping=False)  # nothing saved yet
    writer.save(1.0, {"k": np.arange(3)}, [{"passes": 1.0}], np.zeros(problem.n_params))
    assert not writer.due(2.5, stopping=False) and writer.due(3.0, stopping=False) and writer.due(1.5, stopping=True)
    loaded = Checkpoints(problem, "bcfw", {"line_search": True}, resume=path).load()
    assert np.array_equal(loaded["state"]["k"], np.arange(3)) and loaded["trace"] == [{"passes": 1.0}]
    with pytest.raises(InvalidInputError, match="solver options differs"):
        Checkpoints(problem, "bcfw", {"line_search": False}, resume=path).load()
    assert Checkpoints(problem, "bcfw", {}).load() is None and not Checkpoints(problem, "bcfw", {}).due(9.0, True)


def test_the_stopping_rule_reads_run_options():
    rule = StoppingRule(RunOptions(max_passes=2, tol=0.1, time_limit=5.0), rel_tol=0.01)
    assert rule.step_budget(3) == 6 and rule.reached(2.0) and not rule.reached(1.5)
    assert rule.reason(1.0, 0.05, 0.0).startswith("gap") and rule.reason(1.0, None, 6.0).startswith("reached time")
    assert rule.reason(1.0, 0.5, 0.0, primal=100.0).startswith("gap 0.5 <= rel_tol")
    assert rule.reason(1.0, 0.5, 0.0, primal=1.0) == ""


@pytest.mark.parametrize(("options", "match"), [
    ({"line_search": "yes"}, "StructuredSVM: line_search must be one of True, False"),
    ({"cache_size": -1}, "StructuredSVM: cache_size must be an integer >= 0"),
    ({"eval_every": 0}, "StructuredSVM: eval_every must be a finite number > 0"),
])
def test_the_estimator_checks_solver_options_with_the_declarations_before_any_work(options, match):
    estimator = so.StructuredSVM(so.MultiClassModel(3, 3), solver_options=options)
    with pytest.raises(InvalidInputError, match=re.escape(match)):
        estimator.fit(None, [0])  # X is bad too: the option is refused first, before the problem is built
