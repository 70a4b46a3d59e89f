"""Exact structural SVM optimum by cvxpy over enumerated outputs (small problems only, tests)."""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import scipy.sparse as sp

from structopt.losses import Hamming
from structopt.models.chain import ChainModel
from structopt.models.multiclass import MultiClassModel
from structopt.problem import SSVMProblem


def exact_primal(problem: SSVMProblem) -> tuple[float, np.ndarray]:
    """Solve ``min lam/2 ||w||^2 + mean_i xi_i`` s.t. ``xi_i >= Delta(y_i, y) + <w, Phi(x_i, y) - Phi(x_i, y_i)>``
    for every enumerated output y (and the problem's weight constraints); returns ``(F*, w*)``, F*
    re-evaluated by ``problem.primal``."""
    model, structure = problem.model, problem.structure
    rows, offsets, losses = [], [], []
    for i in range(problem.n):
        x = problem.X[i]
        like = model.potentials(x, model.zeros())
        gold = model.joint_feature(x, problem.Y[i])
        for y in structure.enumerate(like):
            rows.append(model.joint_feature(x, y) - gold)
            offsets.append(i)
            losses.append(problem.loss(problem.Y[i], y))
    A = np.array(rows)
    w = cp.Variable(problem.n_params)
    xi = cp.Variable(problem.n)
    E = np.zeros((len(rows), problem.n))
    E[np.arange(len(rows)), offsets] = 1.0
    cons = [E @ xi >= np.array(losses) + A @ w]
    if problem.constrained:
        cons.append(w[problem.nonnegative_indices] >= 0)
    objective = cp.Minimize(0.5 * problem.lam * cp.sum_squares(w) + cp.sum(xi) / problem.n)
    cp.Problem(objective, cons).solve(solver=cp.CLARABEL, tol_gap_abs=1e-10, tol_gap_rel=1e-10, tol_feas=1e-10)
    w_star = np.asarray(w.value, dtype=float)
    return problem.primal(w_star), w_star


def random_chain_problem(seed: int, n: int = 8, n_features: int = 3, n_states: int = 3, max_len: int = 3,
                         lam: float = 0.1, noise: float = 0.5) -> SSVMProblem:
    """A tiny chain SSVM with Hamming loss: Gaussian features, labels from a planted chain model
    plus noise (so that learning helps and F* is well below F(0))."""
    rng = np.random.default_rng(seed)
    model = ChainModel(n_features, n_states)
    w_true = rng.normal(size=model.n_params)
    X, Y = [], []
    for _ in range(n):
        T = int(rng.integers(1, max_len + 1))
        x = rng.normal(size=(T, n_features))
        theta = model.potentials(x, w_true)
        noisy = type(theta)(theta.unary + noise * rng.normal(size=theta.unary.shape), theta.pairwise)
        X.append(x)
        Y.append(model.structure.argmax(noisy))
    return SSVMProblem(model, X, Y, Hamming(), lam)


def random_multiclass_problem(seed: int, n: int = 20, n_features: int = 4, n_classes: int = 4,
                              lam: float = 0.1, noise: float = 0.5) -> SSVMProblem:
    """A tiny multiclass SSVM with 0-1 loss, labels from a planted linear model plus noise."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, n_features))
    Y = np.argmax(X @ rng.normal(size=(n_features, n_classes)) + noise * rng.normal(size=(n, n_classes)), axis=1)
    return SSVMProblem(MultiClassModel(n_features, n_classes), list(X), list(Y), Hamming(), lam)


def sparse_chain_problem(seed: int, n: int = 6, n_features: int = 40, lam: float = 0.05) -> SSVMProblem:
    """A small chain SSVM with sparse CSR token features and random labels."""
    rng = np.random.default_rng(seed)
    X, Y = [], []
    for _ in range(n):
        T = int(rng.integers(1, 5))
        X.append(sp.random(T, n_features, density=0.1, random_state=rng, format="csr"))
        Y.append(rng.integers(0, 3, size=T))
    return SSVMProblem(ChainModel(n_features, 3), X, Y, Hamming(), lam)


def _smoothed_objective(problem: SSVMProblem, w: np.ndarray, mu: float, kind: str) -> tuple[float, np.ndarray]:
    results = problem.smooth_oracle_batch(w, mu, kind)
    return (np.mean([r.value for r in results]) + 0.5 * problem.lam * w @ w,
            np.mean([r.grad for r in results], axis=0) + problem.lam * w)


def smoothed_value(problem: SSVMProblem, w: np.ndarray, mu: float, kind: str = "entropy") -> float:
    """The smoothed objective ``mean_i f_{i,mu}(w) + lam/2 ||w||^2``."""
    return float(_smoothed_objective(problem, w, mu, kind)[0])


def smoothed_optimum(problem: SSVMProblem, mu: float, kind: str = "entropy") -> tuple[float, np.ndarray]:
    """Minimum of the smoothed objective ``mean_i f_{i,mu}(w) + lam/2 ||w||^2`` by L-BFGS."""
    import scipy.optimize

    def objective(w):
        return _smoothed_objective(problem, w, mu, kind)

    found = scipy.optimize.minimize(objective, np.zeros(problem.n_params), jac=True, method="L-BFGS-B",
                                    options={"gtol": 1e-12, "ftol": 1e-15, "maxiter": 5000})
    return float(found.fun), found.x
