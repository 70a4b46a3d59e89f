"""Tables that were written by hand are derived from the registries: latent_ssvm's inner solvers come from the
solvers' declared problem types (a new convex solver joins by its declaration), and the codecs and the torch
networks are :class:`~structopt.registry.Registry` instances with the same messages as before."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import structopt as so
from structopt.codecs import _CODECS, build, codecs, register_codec
from structopt.errors import InvalidInputError
from structopt.nonconvex import NonconvexProblem
from structopt.problem import SSVMProblem
from structopt.registry import Registry
from structopt.solvers import SOLVERS, bcfw, latent_ssvm
from structopt.solvers import latent as latent_module
from structopt.solvers.base import Result, solver, takes


def _latent_problem(seed: int = 0) -> SSVMProblem:
    rng = np.random.default_rng(seed)
    L, K, T, F = 2, 2, 4, 3
    structure = so.LatentChain(L, K)
    model = so.ChainModel(F, L * K, structure=structure)
    X = [rng.normal(size=(T, F)) for _ in range(6)]
    Y = [structure.lift(rng.integers(0, L, size=T), rng.integers(0, K, size=T)) for _ in range(6)]
    return SSVMProblem(model, X, Y, structure.label_loss(), 0.1)


def test_inner_solvers_are_the_declared_solvers_of_a_convex_problem():
    inner = latent_module.INNER_SOLVERS
    assert inner == latent_module.inner_solvers() and "bcfw" in inner and len(set(inner)) == len(inner)
    for function in SOLVERS.unique():
        assert isinstance(function.problem_type, type)  # every built-in declares what it solves
        if function.solver_name in inner:
            assert takes(function, SSVMProblem)
        else:  # the others solve non-convex problems only and refuse a convex one
            assert issubclass(function.problem_type, NonconvexProblem)
            with pytest.raises(InvalidInputError, match="needs a NonconvexProblem"):
                function(_latent_problem(), max_passes=1)
            with pytest.raises(InvalidInputError, match=f"unknown inner solver '{function.solver_name}'; choose "
                                                        f"from {', '.join(inner)}"):
                latent_ssvm(_latent_problem(), inner=function.solver_name)


def test_a_new_convex_solver_joins_the_inner_solvers_by_its_declaration():
    calls: list[float] = []

    def convex_test_solver(problem: SSVMProblem, options, run_options, executor) -> Result:
        calls.append(run_options.max_passes)
        return bcfw(problem, max_passes=run_options.max_passes, random_state=run_options.random_state)

    declared = solver("convex_test_solver", without=("executor", "n_workers"))(convex_test_solver)
    try:
        assert "convex_test_solver" in latent_module.INNER_SOLVERS and declared.problem_type is SSVMProblem
        result = latent_ssvm(_latent_problem(), inner="convex_test_solver", max_outer=2, inner_passes=3)
        assert calls and all(passes == 3 for passes in calls)
        assert result.trace[-1]["outer"] >= 1
    finally:  # its declared name is its function's name
        SOLVERS.remove("convex_test_solver")
    assert "convex_test_solver" not in latent_module.INNER_SOLVERS


def test_a_solver_without_a_problem_annotation_takes_any_problem():
    def anything(problem, options, run_options, executor) -> Result:
        raise AssertionError("not called")

    try:
        declared = solver("anything_test_solver", without=("executor", "n_workers"))(anything)
        assert declared.problem_type is None and takes(declared, SSVMProblem) and takes(declared, NonconvexProblem)
    finally:
        SOLVERS.remove("anything_test_solver")
        SOLVERS.remove("anything")  # a solver is registered under its function's name too


# --------------------------------------------------------------------------- codecs
def test_the_codecs_are_registries_and_their_messages_are_unchanged(monkeypatch):
    for kind in ("model", "loss", "structure"):
        assert isinstance(_CODECS[kind], Registry)
    assert "ChainModel" in codecs("model") and isinstance(codecs("model"), dict)
    known = ", ".join(codecs("model"))
    with pytest.raises(InvalidInputError, match=rf"^unknown model type 'NoSuch' \(known: {known}\)$"):
        build({"type": "NoSuch", "args": {}}, "model")
    with pytest.raises(InvalidInputError, match=r"^unknown model type 5 \(known: "):
        build({"type": 5, "args": {}}, "model")
    with pytest.raises(InvalidInputError, match=r"^unknown model type \['x'\] \(known: "):
        build({"type": ["x"], "args": {}}, "model")
    monkeypatch.setitem(_CODECS, "model", _CODECS["model"].copy())

    class Mine:
        def __init__(self, scale: float):
            self.scale = scale

    class Other:
        pass

    register_codec("test_registries.Mine", Mine, lambda m: {"scale": m.scale}, ("scale",))
    assert list(codecs("model"))[-1] == "test_registries.Mine"  # registration order
    assert build({"type": "test_registries.Mine", "args": {"scale": 2.0}}, "model").scale == 2.0
    register_codec("test_registries.Mine", Mine, lambda m: {"scale": m.scale}, ("scale",))  # a reload: replaced
    with pytest.raises(InvalidInputError, match=r"a model codec named 'test_registries\.Mine' is already registered"):
        register_codec("test_registries.Mine", Other, lambda m: {}, ())
    with pytest.raises(InvalidInputError, match=r"Mine already has the model codec 'test_registries\.Mine'"):
        register_codec("another", Mine, lambda m: {}, ())


# --------------------------------------------------------------------------- networks
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs PyTorch")
def test_the_networks_are_a_registry_with_the_same_messages():
    from structopt.torch import get_network, network_names, register_network
    from structopt.torch.networks import _NETWORKS

    assert isinstance(_NETWORKS, Registry) and network_names() == _NETWORKS.names() and "chain_mlp" in network_names()
    with pytest.raises(InvalidInputError, match=r"^unknown network 'nope': declared networks are .*chain_mlp.* "
                                                r"\(declare one with structopt.torch.register_network"):
        get_network("nope")
    with pytest.raises(InvalidInputError, match=r"^unknown network 5: declared networks are"):
        get_network(5)

    def linear_test_network(n: int):
        from torch import nn

        return nn.Linear(n, n)

    try:
        assert register_network("test_registries_linear")(linear_test_network) is linear_test_network
        assert network_names()[-1] == "test_registries_linear" and get_network("test_registries_linear")(2)
        register_network("test_registries_linear")(linear_test_network)  # the same constructor again: fine

        def other(n: int):
            return linear_test_network(n)

        with pytest.raises(InvalidInputError, match=r"network 'test_registries_linear' is already declared by "
                                                    r".*linear_test_network; choose another name for .*other"):
            register_network("test_registries_linear")(other)
    finally:
        _NETWORKS.remove("test_registries_linear")
