"""Which projection the dual extragradient runs: the chain kernels only where they compute the
structure's own oracle (``structures.chain.chain_kernels_serve``), never because a structure lists
``"project"`` in ``kernel_oracles()``."""

from __future__ import annotations

import numpy as np
from _reference import random_chain_problem
from test_grid_model import small_problem

from structopt.problem import SSVMProblem
from structopt.solvers import dual_extragradient
from structopt.structures.chain import Chain, chain_kernels_serve
from structopt.structures.grid import BinaryGrid


class ListingGrid(BinaryGrid):
    """A grid that says the library's kernels reproduce its (inherited) projection."""

    def kernel_oracles(self) -> frozenset[str]:
        return frozenset({"project", "argmax"})


class CountingChain(Chain):
    """A chain whose projection is its own wrapper, listed as a kernel oracle all the same."""

    calls = 0

    def project(self, v, tol: float = 1e-9):
        CountingChain.calls += 1
        return super().project(v, tol)

    def kernel_oracles(self) -> frozenset[str]:
        return Chain.kernel_oracles(self) | {"project"}


def with_structure(problem: SSVMProblem, structure) -> SSVMProblem:
    problem.model.structure = structure
    return SSVMProblem(problem.model, problem.X, problem.Y, problem.loss, problem.lam)


def test_the_capability_not_the_listing_decides():
    assert chain_kernels_serve(Chain(3), ("project",))
    assert chain_kernels_serve(Chain(3), ("prox_entropy", "marginals"))
    assert not chain_kernels_serve(ListingGrid(), ("project",))
    assert not chain_kernels_serve(CountingChain(3), ("project",))
    masked = Chain(2, allowed=np.array([[True, False], [True, True]]))
    assert not chain_kernels_serve(masked, ("project",))  # the kernels have no masks


def test_grid_listing_project_uses_its_own_projection():
    plain = small_problem(np.random.default_rng(0), n=3)
    expected = dual_extragradient(plain, max_passes=2, random_state=0)
    listing = with_structure(small_problem(np.random.default_rng(0), n=3), ListingGrid())
    result = dual_extragradient(listing, max_passes=2, random_state=0)  # crashed inside the chain projection
    assert not result.info["fused"]
    assert np.array_equal(result.w, expected.w)
    assert [r["gap"] for r in result.trace] == [r["gap"] for r in expected.trace]


def test_chain_with_an_overridden_projection_is_served_by_it():
    problem = random_chain_problem(5, n=4)
    expected = dual_extragradient(problem, max_passes=2, random_state=0, fused=False)
    CountingChain.calls = 0
    counting = with_structure(random_chain_problem(5, n=4), CountingChain(problem.structure.n_states))
    result = dual_extragradient(counting, max_passes=2, random_state=0)
    assert not result.info["fused"]
    assert CountingChain.calls >= 2 * 2 * counting.n  # look-ahead and step per example and iteration
    # same projection up to the warm starts of the chain kernel route
    np.testing.assert_allclose(result.w, expected.w, rtol=1e-6, atol=1e-8)
