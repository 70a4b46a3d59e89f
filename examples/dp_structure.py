"""A dynamic program: semi-Markov segmentation
===========================================

Declaring a dynamic program: a semi-Markov segmenter (labelled spans of bounded length) written
against structopt's DP helper, checked by ``check_structure`` and trained by every solver.

``so.DPStructure`` takes the dynamic program as a hypergraph (items in topological order, hyperedges
building an item from smaller ones, each scoring one potential) and derives every oracle from one
recursion: argmax (max-plus), marginals (log-sum-exp, inside-outside), exact top-K (k-best),
max-marginals, the marginal polytope (flows). Here item t means "positions < t are segmented" and a
segment (i, j, s) builds item j from item i. Outputs are tags per position, ``s`` at a segment's
start and ``S + s`` inside it, so the Hamming loss counts wrong tags.

Run: python examples/dp_structure.py
"""

import itertools

import numpy as np

import structopt as so
import structopt.validate
from structopt.solvers import get_solver


# ----------------------------------------------------------------------------- user code starts here
class Segmentation(so.DPStructure):
    """Split T positions into segments of length <= L with one of S labels each."""

    name = "Segmentation"

    def __init__(self, length: int, n_labels: int, max_len: int):
        self.T, self.S, self.states_per_node = length, n_labels, 2 * n_labels  # tags: start s, inside S + s
        self.segments = [(i, j, s) for j in range(1, length + 1) for i in range(max(0, j - max_len), j)
                         for s in range(n_labels)]
        self.index = {seg: e + 1 for e, seg in enumerate(self.segments)}  # hyperedge 0: the axiom of item 0
        super().__init__(length + 1, heads=[0] + [j for _, j, _ in self.segments],
                         tails=[[]] + [[i] for i, _, _ in self.segments], scores=[-1, *range(len(self.segments))])

    def decode(self, edges: np.ndarray) -> np.ndarray:  # hyperedges of a derivation -> tags
        y = np.zeros(self.T, dtype=np.int64)
        for i, j, s in (self.segments[e - 1] for e in edges if e):
            y[i], y[i + 1:j] = s, self.S + s
        return y

    def encode(self, y: np.ndarray) -> list[int]:  # tags -> hyperedges (a bad y is refused by the helper)
        starts = [t for t in range(self.T) if y[t] < self.S] + [self.T]
        return [0] + [self.index[i, j, int(y[i])] for i, j in itertools.pairwise(starts)]

    def node_potentials(self, costs: np.ndarray, like=None) -> so.DPPotentials:  # per-tag costs, for Hamming
        inside = np.vstack([np.zeros(self.S), np.cumsum(costs[:, self.S:], axis=0)])
        return so.DPPotentials(np.array([costs[i, s] + inside[j, s] - inside[i + 1, s] for i, j, s in self.segments]))
# ----------------------------------------------------------------------------- user code ends here


SOLVERS = [("bcfw", {}), ("frank_wolfe", {}), ("ssg", {}), ("sgd", {}), ("svrg", {}),
           ("casimir_svrg", {"kind": "topk", "k": 5}), ("casimir_svrg", {"kind": "entropy"}),
           ("dual_extragradient", {"geometry": "euclidean"})]


def main(seed: int = 0, passes: float = 5, n: int = 24, verbose: bool = True) -> dict[str, float]:
    """Check the structure, then train a FeatureModel with every solver. Returns primal value per solver."""
    rng = np.random.default_rng(seed)
    structure = Segmentation(length=6, n_labels=2, max_len=3)
    report = so.validate.check_structure(structure, so.DPPotentials(rng.integers(-3, 4, structure.graph.n_scores)
                                                                    .astype(float)))
    assert report.ok, report.table()
    model = so.FeatureModel(structure, n_features=4)  # x: (segments, 4) features per candidate segment
    w_true = rng.normal(size=4)
    X = [rng.normal(size=(structure.graph.n_scores, 4)) for _ in range(n)]
    Y = [structure.argmax(model.potentials(x, w_true)) for x in X]
    problem = so.SSVMProblem(model, X, Y, so.Hamming(), lam=0.1)
    values = {}
    for name, options in SOLVERS:
        result = get_solver(name)(problem, max_passes=passes, **options)
        label = name + "".join(f"[{v}]" for k, v in options.items() if k in ("kind", "geometry"))
        values[label] = problem.primal(result.w)
        if verbose:
            print(f"{label:34s} primal {values[label]:.4f}")
    if verbose:
        print(report.table())
    return values


if __name__ == "__main__":
    main()
