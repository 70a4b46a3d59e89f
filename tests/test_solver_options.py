"""Every option of every solver, from the declarations: bad values are refused naming the option.

The options are declared once, in each solver's signature (``Annotated[type, check]``; the common
ones in ``COMMON_OPTIONS``). From the declarations this module generates one case per (solver,
option, bad value), where the bad values are the candidates below minus those the option's own
declared check accepts; each must raise a StructoptError naming ``"{solver}: {option}"`` before any
work. It also checks that the declared keys equal the signature, that every option is listed in its
docstring, the README's option table, and the oracle declarations.
"""

from __future__ import annotations

import functools
import inspect
import math
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import numpy as np
import pytest

import structopt as so
from structopt.errors import NotSupportedError, StructoptError
from structopt.solvers import SOLVERS, option_table
from structopt.solvers.base import _docstring_options, one_of, solver

#: one function per solver (SOLVERS holds short names too)
FUNCTIONS = {function.solver_name: function for function in SOLVERS.values()}
NONCONVEX = {"prox_linear", "sgd_nonconvex"}

#: wrong type, NaN, inf, negative, zero, a string, an object, a list
CANDIDATES = {"nan": math.nan, "inf": math.inf, "negative": -1.0, "zero": 0, "frac": 0.5, "string": "bad",
              "object": object(), "list": [1.0], "bool": True}


def _accepted(option, value) -> bool:
    try:
        option.check("probe", value)
    except StructoptError:
        return False
    return True


def _cases():
    cases = []
    for name, function in sorted(FUNCTIONS.items()):
        for option in function.options.values():
            bad = {key: value for key, value in CANDIDATES.items() if not _accepted(option, value)}
            if option.name in ("checkpoint", "resume", "executor"):  # a string is a path / an address
                bad.pop("string", None)
            cases.extend(pytest.param(name, option.name, value, id=f"{name}-{option.name}-{key}")
                         for key, value in bad.items())
    return cases


CASES = _cases()


@functools.cache
def _problem(nonconvex: bool):
    rng = np.random.default_rng(0)
    if nonconvex:
        from structopt.models.nonlinear import NonlinearChainModel
        from structopt.nonconvex import NonconvexProblem

        X = [rng.normal(size=(2, 2)) for _ in range(3)]
        return NonconvexProblem(NonlinearChainModel(2, 2, 2), X, [np.array([0, 1]), np.array([1, 1]),
                                                                  np.array([0, 0])], so.Hamming(), 0.1)
    X = [rng.normal(size=3) for _ in range(6)]
    return so.SSVMProblem(so.MultiClassModel(3, 3), X, [int(rng.integers(0, 3)) for _ in range(6)], so.Hamming(), 0.1)


def test_the_generated_cases_cover_every_option_of_every_solver():
    covered = {(case.values[0], case.values[1]) for case in CASES}
    declared = {(name, option) for name, function in FUNCTIONS.items() for option in function.options}
    assert covered == declared  # each option refuses at least one candidate
    assert len(CASES) > 700


@pytest.mark.parametrize(("solver", "option", "value"), CASES)
def test_a_bad_value_is_refused_naming_the_option(solver, option, value):
    with pytest.raises(StructoptError, match=f"{solver}: {option}"):
        FUNCTIONS[solver](_problem(solver in NONCONVEX), **{"max_passes": 0.5, option: value})


@pytest.mark.parametrize("solver", sorted(FUNCTIONS))
def test_declared_options_equal_the_signature_and_the_docstring(solver):
    function = FUNCTIONS[solver]
    parameters = inspect.signature(function).parameters
    assert list(function.options) == [key for key in parameters if key != "problem"]
    assert all(function.options[key].default == parameters[key].default for key in function.options
               if not isinstance(parameters[key].default, float) or not math.isnan(parameters[key].default))
    assert set(function.options) <= _docstring_options(function.__doc__)
    assert all(option.description for option in function.options.values())


def test_an_undeclared_check_is_an_import_time_error():
    def method(problem, options, run_options, executor):
        """X."""

    @dataclass(frozen=True)
    class NoCheck:
        """X.

        Parameters
        ----------
        mystery : int
        """

        mystery: int = 1

    with pytest.raises(TypeError, match="mystery declares no check"):
        solver("x", NoCheck)(method)

    @dataclass(frozen=True)
    class Undocumented:
        """No parameters section."""

        shade: Annotated[str, one_of("a", "b")] = "a"

    with pytest.raises(TypeError, match="does not list shade"):
        solver("x", Undocumented)(method)


def test_get_solver_introspects_the_declarations():
    options = so.get_solver("casimir").options
    assert options["schedule"].default == "decreasing"
    assert options["schedule"].description == "One of 'decreasing', 'const', 'adapt'."
    assert options["alpha0"].description.startswith("None or ")
    assert options["max_passes"].common and not options["kappa"].common


def test_the_readme_option_table_is_the_declarations():
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert option_table() in readme


def test_a_missing_oracle_is_refused_naming_solver_option_and_problem():
    no_marginals = types.SimpleNamespace(has_marginals=False, has_topk=False)
    with pytest.raises(NotSupportedError, match=r"dual_extragradient with geometry='entropic' needs a marginals"):
        so.get_solver("extragradient")(no_marginals, geometry="entropic")
    with pytest.raises(NotSupportedError, match=r"svrg with kind='entropy' needs a marginals"):
        so.get_solver("svrg")(no_marginals, kind="entropy")
    with pytest.raises(NotSupportedError, match=r"svrg with kind='topk' needs a topk"):
        so.get_solver("svrg")(no_marginals)
    with pytest.raises(NotSupportedError, match=r"sgd with mu set and kind='topk' needs a topk"):
        so.get_solver("sgd")(no_marginals, mu=0.1)
    needs = {need.oracle for need in so.get_solver("sgd").needs if need.when({"mu": None, "kind": "topk"})}
    assert needs == {"max_oracle"}  # default sgd: the max oracle only


def test_default_sgd_runs_on_a_structure_without_a_top_k_oracle(monkeypatch):
    from structopt.structures.base import Structure

    problem = _problem(False)
    monkeypatch.setattr(type(problem.model.structure), "topk", Structure.topk)  # no top-K oracle
    with pytest.raises(NotSupportedError, match="top-K"):  # the smoothed run does need it
        so.get_solver("sgd")(problem, mu=0.1, max_passes=1)
    result = so.get_solver("sgd")(problem, max_passes=2)  # its default step estimate does not
    assert np.isfinite(result.trace[-1]["primal"]) and result.info["gamma0"] > 0
