"""Small random pairwise MRFs shared by the marginal-inference tests."""

from __future__ import annotations

import numpy as np

from structopt.marginals import PairwiseMRF


def random_mrf(cards: list[int], edges: list[tuple[int, int]], rng: np.random.Generator,
               scale: float = 1.0) -> PairwiseMRF:
    """Gaussian unary and pairwise log-potentials on the given graph."""
    return PairwiseMRF.from_potentials([rng.normal(size=c) for c in cards], edges,
                                       [scale * rng.normal(size=(cards[a], cards[b])) for a, b in edges])


def ising_grid(h: int, w: int, coupling: float, rng: np.random.Generator, field: float = 1.0) -> PairwiseMRF:
    """The paper's mixed grid: θ_i ~ U[−field, field] on (−θ_i, θ_i), θ_ij ~ U[−c, c] on (θ, −θ; −θ, θ)."""
    idx = np.arange(h * w).reshape(h, w)
    edges = [(int(idx[a, b]), int(idx[a, b + 1])) for a in range(h) for b in range(w - 1)]
    edges += [(int(idx[a, b]), int(idx[a + 1, b])) for a in range(h - 1) for b in range(w)]
    unary = [np.array([-t, t]) for t in rng.uniform(-field, field, h * w)]
    pairwise = [np.array([[t, -t], [-t, t]]) for t in rng.uniform(-coupling, coupling, len(edges))]
    return PairwiseMRF.from_potentials(unary, edges, pairwise)


def random_tree_edges(n: int, rng: np.random.Generator) -> list[tuple[int, int]]:
    """A random labelled tree: node k > 0 attaches to a random earlier node."""
    return [(int(rng.integers(0, k)), k) for k in range(1, n)]


LOOPY_EDGES = [(0, 1), (1, 2), (2, 0), (3, 4), (4, 0), (1, 3), (2, 4)]
