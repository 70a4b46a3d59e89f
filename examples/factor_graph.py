"""Factor graphs: budgets, CRFs on your graph, fertility
=====================================================

Factor graphs: a chain under a global budget, a pairwise CRF on your own graph, a matching with
fertility. Each task is a few lines of user code over ``so.FactorGraph`` / ``so.GraphModel``.

(a) "At most 2 entities per sentence": a binary variable per token, chain tables between
    neighbours, one budget factor over all tokens; MAP by branch-and-bound over AD3 (exact).
(b) A pairwise CRF on a user's graph: ``so.GraphModel`` trained by BCFW on the relaxed oracle
    (AD3's LP-MAP point on the local polytope; the gap certifies the relaxed SSVM), predicted by
    exact MAP.
(c) Word alignment with fertility: a binary variable per (source, target) pair, budget factors
    "at most 2" on every row and column; MAP.

Run: python examples/factor_graph.py
"""

import numpy as np

import structopt as so
from structopt.solvers import get_solver


def budget_chain(entity_scores: np.ndarray, k: int = 2) -> np.ndarray:
    # ------------------------------------------------------------- (a) user code: 6 lines
    fg = so.FactorGraph([2] * len(entity_scores))
    for t, s in enumerate(entity_scores):
        fg.set_unary(t, [0.0, s])
    for t in range(len(entity_scores) - 1):
        fg.add_table([t, t + 1], [[0.0, 0.0], [0.0, -0.5]])  # adjacent entities cost a little
    fg.add_budget(range(len(entity_scores)), k)
    return fg.map(method="bnb").labels


def graph_crf(X: list, Y: list, X_test: list) -> list:
    # ------------------------------------------------------------- (b) user code: 3 lines
    model = so.GraphModel(n_node_features=X[0][0].shape[1], n_edge_features=1, n_states=2, symmetric=True)
    w = get_solver("bcfw")(so.SSVMProblem(model, X, Y, so.Hamming(), lam=0.1), max_passes=30).w
    return [model.predict(x, w, exact=True) for x in X_test]


def fertility_alignment(scores: np.ndarray, fertility: int = 2) -> np.ndarray:
    # ------------------------------------------------------------- (c) user code: 7 lines
    n, m = scores.shape
    fg = so.FactorGraph([2] * (n * m))  # variable i * m + j: source word i aligned to target word j
    for v, s in enumerate(scores.ravel()):
        fg.set_unary(v, [0.0, s])
    for i in range(n):
        fg.add_budget([i * m + j for j in range(m)], fertility)
    for j in range(m):
        fg.add_budget([i * m + j for i in range(n)], fertility)
    return fg.map(method="bnb").labels.reshape(n, m)


def ring_data(rng: np.random.Generator, n_graphs: int) -> tuple[list, list]:
    """Rings with chords whose labels come in runs; node features are noisy labels plus a constant."""
    X, Y = [], []
    for _ in range(n_graphs):
        N = int(rng.integers(8, 13))
        edges = np.array([(i, (i + 1) % N) for i in range(N)] + [(0, N // 2)])
        y = (np.arange(N) * 2 // N + int(rng.integers(0, 2))) % 2
        X.append((np.column_stack([y + rng.normal(0, 0.9, N), np.ones(N)]), edges, np.ones((len(edges), 1))))
        Y.append(y)
    return X, Y


def main() -> dict:
    rng = np.random.default_rng(0)
    scores = np.array([0.9, -0.3, 1.4, 0.2, 1.1, -1.0, 0.8])
    entities = budget_chain(scores)
    print("(a) entities:", entities, "count", int(entities.sum()))
    X, Y = ring_data(rng, 30)
    pred = graph_crf(X[:20], Y[:20], X[20:])
    acc = float(np.mean(np.concatenate([p == y for p, y in zip(pred, Y[20:])])))
    noisy = float(np.mean(np.concatenate([(x[0][:, 0] > 0.5) == y for x, y in zip(X[20:], Y[20:])])))
    print(f"(b) test accuracy {acc:.3f} (thresholding the noisy feature: {noisy:.3f})")
    align = fertility_alignment(rng.normal(size=(4, 5)) + 0.8)
    print("(c) alignment (rows: source words):\n", align)
    return {"entities": entities, "accuracy": acc, "noisy": noisy, "alignment": align}


if __name__ == "__main__":
    main()
