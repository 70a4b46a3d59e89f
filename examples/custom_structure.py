"""Declaring your own structure
============================

Declaring your own structure: a k-of-n selection written as cvxpy constraints, BIO tagging with a
constrained chain, and multi-label classification over a tree of labels. Each is a complete task in
under 20 lines.

Run: python examples/custom_structure.py
"""

import cvxpy as cp
import numpy as np

import structopt as so


def k_of_n_selection(seed: int = 0) -> float:
    """Pick the k best of n items; the structure is one cvxpy constraint. Returns test accuracy."""
    rng = np.random.default_rng(seed)
    n, k, F = 8, 3, 5
    z = cp.Variable(n, boolean=True)                        # z[j] = 1: item j is chosen
    structure = so.LPStructure(z, [cp.sum(z) == k])         # exactly k items, solved as an exact ILP
    model = so.FeatureModel(structure, n_features=F)        # item scores theta = x @ w, x of shape (n, F)

    w_true = rng.normal(size=F)                             # synthetic data: the k items with best noisy score
    X = [rng.normal(size=(n, F)) for _ in range(80)]
    Y = [structure.argmax(so.VectorPotentials(x @ w_true + 0.3 * rng.normal(size=n))) for x in X]

    svm = so.StructuredSVM(model, solver="bcfw", lam=0.01, max_passes=10, random_state=seed)
    svm.fit(X[:60], Y[:60])                                 # Hamming loss: entries of z that differ
    accuracy = svm.score(X[60:], Y[60:])
    print(f"k-of-n selection: test accuracy {accuracy:.3f}, chose {svm.predict(X[60:61])[0]}")
    return accuracy


def bio_tagging(seed: int = 0) -> float:
    """BIO chunk tags: I-X may only follow B-X or I-X. Returns the test token accuracy."""
    rng = np.random.default_rng(seed)
    tags, F = ["O", "B-NP", "I-NP", "B-VP", "I-VP"], 6
    allowed = np.ones((5, 5), dtype=bool)
    allowed[:, [2, 4]] = False                              # nothing enters I-X ...
    allowed[[1, 2], 2] = allowed[[3, 4], 4] = True          # ... except from B-X or I-X
    start = np.array([True, True, False, True, False])      # a sentence cannot start inside a chunk
    model = so.ChainModel(F, len(tags), allowed=allowed, allowed_start=start)  # every oracle honours the masks

    w_true = rng.normal(size=model.n_params)                # synthetic sentences from a masked chain
    X = [rng.normal(size=(int(rng.integers(3, 9)), F)) for _ in range(120)]
    Y = [model.structure.argmax(model.potentials(x, w_true)) for x in X]

    svm = so.StructuredSVM(model, solver="bcfw", lam=0.01, max_passes=10, random_state=seed).fit(X[:80], Y[:80])
    accuracy = svm.score(X[80:], Y[80:])
    print(f"BIO tagging: test token accuracy {accuracy:.3f}, tags {[tags[t] for t in svm.predict(X[80:81])[0]]}")
    return accuracy


def label_tree_multilabel(seed: int = 0) -> float:
    """Six binary labels in a hierarchy (a child label only with its parent). Returns test accuracy."""
    rng = np.random.default_rng(seed)
    F = 10
    edges = [(0, 1), (0, 2), (1, 3), (1, 4), (2, 5)]       # parent -> child in the label tree
    tree = so.TreeStructure(edges, n_states=2)              # each label is on (1) or off (0)
    model = so.TreeModel(tree, n_features=F)                # per-label weights + per-edge 2x2 scores

    w_true = model.zeros()                                  # synthetic data from a hierarchical model
    model.unpack(w_true)["unary"][:] = rng.normal(size=(F, 6, 2))
    model.unpack(w_true)["pairwise"][:] = [[0.0, -10.0], [0.0, 1.0]]  # child on without parent: forbidden
    X = [rng.normal(size=F) for _ in range(120)]
    Y = [tree.argmax(model.potentials(x, w_true)) for x in X]

    svm = so.StructuredSVM(model, solver="bcfw", lam=0.01, max_passes=10, random_state=seed)
    svm.fit(X[:80], Y[:80])
    accuracy = svm.score(X[80:], Y[80:])
    print(f"label tree: test label accuracy {accuracy:.3f}, labels of one test example {svm.predict(X[80:81])[0]}")
    return accuracy


if __name__ == "__main__":
    k_of_n_selection()
    bio_tagging()
    label_tree_multilabel()
