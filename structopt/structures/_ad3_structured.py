"""Structured factors of a factor graph: a library ``Structure`` placed over some of its variables.

AD3 (Martins et al., JMLR 2015, §6 "the generic factor") needs only the factor's MAP oracle: its local
QP ``max θ_α·q + η Σ_i a_i·q_i - (η/2) Σ_i ‖q_i‖²`` over the structure's marginal polytope is solved by a
primal active-set method over vertices μ(y) returned by the structure's ``argmax`` (column generation
with the equality-constrained QP on the active set; see :func:`solve_qp`). When the structure's
statistics are exactly one binary indicator per variable and the structure has its own Euclidean
``project``, the local QP is that projection instead (:attr:`StructuredFactor.projectable`).

How a structure's statistics z map to the variables' marginals is read off its documented hooks
(``structopt.hooks.HOOKS``), an affine map ``μ = Aᵀ z + b`` built once per factor:

- per-node hooks ``node_potentials`` (+ ``node_constant`` for a 0/1 encoding): ``Chain``,
  ``TreeStructure``, ``BinaryGrid``, ``LPStructure`` — one variable per node, in the order of the
  output array flattened (row-major for a grid);
- ``edge_potentials``: ``BipartiteMatching`` — one binary variable per (left, right) pair, row-major.

Since ⟨node_potentials(c), z⟩ + node_constant(c) = Σ_i c_i(y_i) for every output, column (i, s) of A
is ``flatten(node_potentials(e_is))`` and ``b_is = node_constant(e_is)`` (exact for every linear hook).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from structopt.errors import InvalidInputError
from structopt.hooks import has_hook, node_states
from structopt.potentials import flatten, unflatten
from structopt.structures.base import Structure


@dataclass
class ActiveSet:
    """A structured factor's active set (the AD3 warm start): vertices and their convex weights."""

    labels: np.ndarray  # (n, k) int64: each vertex's variable labels
    stats: np.ndarray  # (n, n_stats): each vertex's statistics
    values: np.ndarray  # (n,): θ_α·stats
    weights: np.ndarray  # (n,)

    def copy(self) -> ActiveSet:
        return ActiveSet(self.labels.copy(), self.stats.copy(), self.values.copy(), self.weights.copy())


class StructuredFactor:
    """A ``Structure`` over variables ``scope`` with scores ``theta`` (the structure's potentials).

    Parameters
    ----------
    structure : Structure
    scope : tuple of int
        Factor-graph variables, one per node (node hooks) or per (left, right) pair (matchings).
    theta : Potentials
        The structure's potentials; fixes the instance's shape (and the default scores).
    n_states : ndarray
        The factor graph's state counts (each scope variable must have the structure's).
    what : str
        Name used in error messages.
    use_project : bool
        Solve the local QP by the structure's ``project`` when it applies (else always active set).
    """

    def __init__(self, structure: Structure, scope: tuple[int, ...], theta: Any, n_states: np.ndarray, what: str,
                 use_project: bool = True):
        if not isinstance(structure, Structure):
            raise InvalidInputError(f"{what}: a structured factor needs a structopt Structure, got "
                                    f"{type(structure).__name__}")
        self.structure = structure
        self.scope = scope
        self.what = what
        try:
            self.like = structure.expand(theta)
        except InvalidInputError as err:
            raise InvalidInputError(f"{what}: {err}") from None
        self.theta = flatten(self.like).astype(np.float64)
        if not np.isfinite(self.theta).all():
            raise InvalidInputError(f"{what}: structured factor scores must be finite")
        self.n_stats = self.theta.size
        k = len(scope)
        y0 = structure.argmax(self.like)
        self.out_shape = np.shape(y0)
        if has_hook(structure, "node_potentials"):
            self.encoding = "node"
            binary = has_hook(structure, "node_constant")
            S = 2 if binary else node_states(structure, self.like)
            n_nodes = int(np.prod(self.out_shape))
        elif has_hook(structure, "edge_potentials") and hasattr(self.like, "edge"):
            self.encoding = "edge"
            S = 2
            n_nodes = int(np.size(self.like.edge))
        else:
            raise InvalidInputError(f"{what}: {structure.name} declares neither the per-node hooks (node_potentials) "
                                    f"nor edge_potentials, so its statistics cannot be tied to variables")
        if k != n_nodes:
            raise InvalidInputError(f"{what}: {structure.name} has {n_nodes} "
                                    f"{'nodes' if self.encoding == 'node' else 'edges'}; got {k} variables")
        bad = [v for v in scope if int(n_states[v]) != S]
        if bad:
            raise InvalidInputError(f"{what}: {structure.name} needs variables with {S} states; variable {bad[0]} has "
                                    f"{int(n_states[bad[0]])}")
        self.S = S
        self.k = k
        self.A, self.b = self._affine_map()
        self._check_map(y0)
        z_only = (self.n_stats == k and S == 2 and np.allclose(self.A[:, 1::2], np.eye(k))
                  and np.allclose(self.A[:, 0::2], -np.eye(k)) and np.allclose(self.b[0::2], 1.0)
                  and np.allclose(self.b[1::2], 0.0))
        #: the local QP is a Euclidean projection in the statistics space (declared capability: the
        #: statistics are the variables' indicators and the structure overrides ``project``)
        self.projectable = bool(use_project and z_only and type(structure).project is not Structure.project)

    # ------------------------------------------------------------------ the affine map
    def _affine_map(self) -> tuple[np.ndarray, np.ndarray]:

        k, S = self.k, self.S
        A = np.zeros((self.n_stats, k * S))
        b = np.zeros(k * S)
        st = self.structure
        for j in range(k):
            for s in range(S):
                if self.encoding == "node":
                    costs = np.zeros((k, S))
                    costs[j, s] = 1.0
                    costs = costs.reshape((*self.out_shape, S))
                    A[:, j * S + s] = flatten(st.expand(st.node_potentials(costs, self.like)))
                    if has_hook(st, "node_constant"):
                        b[j * S + s] = float(st.node_constant(costs))
                elif s == 1:
                    e = np.zeros(k)
                    e[j] = 1.0
                    col = flatten(st.expand(st.edge_potentials(e.reshape(np.shape(self.like.edge)), self.like)))
                    A[:, j * S + 1] = col
                    A[:, j * S] = -col
                    b[j * S] = 1.0
        return A, b

    def _check_map(self, y0: Any) -> None:
        # the image of a vertex must be one-hot per variable, else the hooks are not what we assume
        img = self.image(flatten(self.structure.stats(y0, self.like))).reshape(self.k, self.S)
        if not (np.allclose(img.sum(axis=1), 1.0) and np.allclose(img * (1 - img), 0.0)):
            raise InvalidInputError(f"{self.what}: {self.structure.name}'s hooks do not map an output to one state per "
                                    f"variable; it cannot be a structured factor")

    def image(self, z: np.ndarray) -> np.ndarray:
        """The variables' marginals (k·S entries, variable-major) of statistics ``z``."""
        return self.A.T @ z + self.b

    def labels_of(self, z: np.ndarray) -> np.ndarray:
        """Variable labels of a vertex's statistics."""
        return np.argmax(self.image(z).reshape(self.k, self.S), axis=1).astype(np.int64)

    # ------------------------------------------------------------------ outputs
    def to_output(self, labels: np.ndarray) -> Any | None:
        """The structure's output with these variable labels, or None when there is none."""
        labels = np.asarray(labels, dtype=np.int64)
        if self.encoding == "node":
            y = labels.reshape(self.out_shape)
        else:
            z = labels.reshape(np.shape(self.like.edge))
            if (z.sum(axis=1) > 1).any():
                return None
            y = np.where(z.any(axis=1), np.argmax(z, axis=1), -1)
        try:
            y = self.structure.validate_output(y, self.like)
        except InvalidInputError:
            return None
        if not np.array_equal(self.labels_of(flatten(self.structure.stats(y, self.like))), labels):
            return None
        return y

    def stats_of(self, labels: np.ndarray) -> np.ndarray | None:
        """Flat statistics of the output with these labels (None when there is no such output)."""
        y = self.to_output(labels)
        return None if y is None else flatten(self.structure.stats(y, self.like))

    def score(self, theta_block: np.ndarray, labels: np.ndarray) -> float:
        """``θ_α·stats`` of the labels' output, -inf when the labels are not an output."""
        z = self.stats_of(labels)
        return -np.inf if z is None else float(theta_block @ z)

    # ------------------------------------------------------------------ oracle calls
    def argmax(self, theta_block: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray, float, float]:
        """max over outputs of ``θ_α·z + c·μ(z)``: ``(labels, z, θ_α·z, the maximum)``.

        ``c`` holds finite per-(variable, state) scores (variable-major); forbidden states carry a
        large finite penalty (see :func:`penalised`).
        """
        pot = unflatten(theta_block + self.A @ c, self.like)
        y = self.structure.argmax(pot)
        z = flatten(self.structure.stats(y, self.like))
        value = float(theta_block @ z)
        return self.labels_of(z), z, value, value + float(c @ self.image(z))

    def new_active_set(self) -> ActiveSet:
        return ActiveSet(np.zeros((0, self.k), dtype=np.int64), np.zeros((0, self.n_stats)), np.zeros(0),
                         np.zeros(0))


def penalised(c: np.ndarray, allowed: np.ndarray, theta_block: np.ndarray) -> np.ndarray:
    """``c`` with forbidden entries replaced by a finite penalty larger than any score difference.

    A maximum over outputs with the penalty is >= the maximum over outputs avoiding the forbidden
    states, so a dual bound computed with it stays a valid upper bound.
    """
    if allowed.all():
        return c
    finite = np.abs(c[allowed]).sum() + np.abs(theta_block).sum()
    return np.where(allowed, c, -(1e3 * (1.0 + finite)))


def _onehot_sum(labels: np.ndarray, weights: np.ndarray, k: int, S: int) -> np.ndarray:
    m = np.zeros(k * S)
    if labels.shape[0]:
        np.add.at(m, (np.arange(k) * S)[None, :] + labels, weights[:, None])
    return m


def solve_qp(sf: StructuredFactor, theta_block: np.ndarray, a: np.ndarray, allowed: np.ndarray, eta: float,
             act: ActiveSet, max_inner: int) -> tuple[np.ndarray, np.ndarray, ActiveSet]:
    """The local QP ``max θ_α·z + η a·μ(z) - (η/2)‖μ(z)‖²`` over the structure's polytope.

    Returns the variables' marginals μ (k·S entries), the statistics z and the updated active set.
    Active-set method (Nocedal & Wright §16.5, as in AD3's generic factor): the equality-constrained
    QP on the active set (KKT system ``[ηG 1; 1ᵀ 0]``, G the vertices' agreement counts), a blocking
    step when a weight would turn negative, else the most violating vertex from ``argmax`` with
    scores ``θ_α + η(a - μ)``; a vertex whose image is an affine combination of the active ones comes
    in along the ray that keeps μ fixed (its objective rises linearly there).
    """
    k, S = sf.k, sf.S
    a = penalised(a, allowed, theta_block / max(eta, 1e-300))
    if sf.projectable and allowed.all():
        # binary indicators: ‖(1-z, z) - a‖² = 2(z - c)² + const with c = ½(1 - a0 + a1) [derived]
        c = 0.5 * (1.0 - a[0::2] + a[1::2]) + theta_block / (2.0 * eta)
        z = flatten(sf.structure.project(unflatten(c, sf.like)))
        z = np.clip(z, 0.0, 1.0)
        return sf.image(z), z, act
    ys, zs, vals, w = act.labels, act.stats, act.values, act.weights
    cols = (np.arange(k) * S)[None, :]
    if ys.shape[0] and not allowed.all():
        # members that use a state forbidden since (branch-and-bound clamps) leave the warm start
        ok = allowed[cols + ys].all(axis=1)
        ys, zs, vals, w = ys[ok], zs[ok], vals[ok], w[ok]
        w = w / w.sum() if w.size and w.sum() > 0 else w
    if ys.shape[0] == 0:
        lab, z, val, _ = sf.argmax(theta_block, eta * a)
        ys, zs, vals, w = lab[None, :], z[None, :], np.array([val]), np.ones(1)
    cap = k * (S - 1) + 1
    for _ in range(max_inner):
        n = ys.shape[0]
        s = vals + eta * a[cols + ys].sum(axis=1)
        G = (ys[:, None, :] == ys[None, :, :]).sum(axis=2).astype(float)
        KK = np.zeros((n + 1, n + 1))
        KK[:n, :n] = eta * G
        KK[:n, n] = 1.0
        KK[n, :n] = 1.0
        rhs = np.append(s, 1.0)
        sol = np.linalg.lstsq(KK, rhs, rcond=None)[0]
        wstar, tau = sol[:n], sol[n]
        if (wstar < -1e-14).any():
            # blocking step towards w*, dropping the first member to reach 0
            dec = (wstar < 0.0) & (wstar < w)
            alpha = min(1.0, float(np.min(w[dec] / (w[dec] - wstar[dec])))) if dec.any() else 1.0
            w = w + alpha * (wstar - w)
            keep = w > 1e-15
            ys, zs, vals, w = ys[keep], zs[keep], vals[keep], w[keep] / w[keep].sum()
            continue
        w = wstar
        m = _onehot_sum(ys, w, k, S)
        lab, z, val, reduced = sf.argmax(theta_block, eta * (a - m))
        scale = max(1.0, abs(reduced), abs(tau))
        if reduced <= tau + 1e-12 * scale or (ys == lab[None, :]).all(axis=1).any():
            break
        # affine dependence of the new image on the active ones (least squares on [m_a; 1])
        B = np.zeros((k * S + 1, n))
        for r in range(n):
            B[:k * S, r] = _onehot_sum(ys[r:r + 1], np.ones(1), k, S)
        B[k * S, :] = 1.0
        target = np.append(_onehot_sum(lab[None, :], np.ones(1), k, S), 1.0)
        coef, *_ = np.linalg.lstsq(B, target, rcond=None)
        if np.linalg.norm(B @ coef - target) < 1e-9:
            pos = coef > 1e-12
            if not pos.any():
                break
            alpha = float(np.min(w[pos] / coef[pos]))
            w = w - alpha * coef
            keep = w > 1e-15
            ys, zs, vals, w = ys[keep], zs[keep], vals[keep], w[keep]
            ys, zs = np.vstack([ys, lab]), np.vstack([zs, z])
            vals, w = np.append(vals, val), np.append(w, alpha)
            w = w / w.sum()
        else:
            if n >= cap:
                break
            ys, zs = np.vstack([ys, lab]), np.vstack([zs, z])
            vals, w = np.append(vals, val), np.append(w, 0.0)
    keep = w > 0.0
    act = ActiveSet(ys[keep], zs[keep], vals[keep], w[keep] / w[keep].sum())
    return _onehot_sum(act.labels, act.weights, k, S), act.weights @ act.stats, act
