"""A two-layer network over feature rows: forward pass, Jacobian-vector and vector-Jacobian products.

``out = act(X W1 + b1) W2 + b2`` for a row matrix ``X`` (N, F), dense or CSR; weights
``W1`` (F, H), ``b1`` (H,), ``W2`` (H, O), ``b2`` (O,). The forward pass at a point is cached in
an :class:`MLPTangent`; the products with the Jacobian at that point are

    JVP:  d out = (act'(A) * (X dW1 + db1)) W2 + act(A) dW2 + db2
    VJP:  dW2 += act(A)^T G,  db2 += sum G,  D = (G W2^T) * act'(A),  dW1 += X^T D,  db1 += sum D

with ``A = X W1 + b1``. Everything is a matrix product over all rows at once; the sparse
``X^T D`` is added in place by a numba kernel that touches only the rows of ``W1`` whose features
occur in ``X``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from structopt.errors import InvalidInputError
from structopt.models._kernels import csr_add_outer

ACTIVATIONS = ("tanh", "elu")


def activate(a: np.ndarray, activation: str) -> tuple[np.ndarray, np.ndarray]:
    """``(act(a), act'(a))`` elementwise; both activations are C^1 with a Lipschitz derivative."""
    if activation == "tanh":
        h = np.tanh(a)
        return h, 1.0 - h * h
    if activation == "elu":
        neg = np.expm1(np.minimum(a, 0.0))  # exp(a) - 1 on the negative side, no overflow on the other
        return np.where(a > 0.0, a, neg), np.where(a > 0.0, 1.0, neg + 1.0)
    raise InvalidInputError(f"activation must be one of {', '.join(ACTIVATIONS)}, got {activation!r}")


@dataclass(frozen=True)
class MLPTangent:
    """The forward pass of the network at one point, enough for products with its Jacobian there.

    Attributes
    ----------
    x : ndarray or csr_matrix
        Input rows (N, F).
    hidden : ndarray
        ``act(A)`` (N, H).
    slope : ndarray
        ``act'(A)`` (N, H).
    w2 : ndarray
        The output layer ``W2`` (H, O) at the point.
    out : ndarray
        The network's output (N, O) at the point.
    """

    x: np.ndarray | sp.csr_matrix
    hidden: np.ndarray
    slope: np.ndarray
    w2: np.ndarray
    out: np.ndarray


def forward(x: np.ndarray | sp.csr_matrix, w1: np.ndarray, b1: np.ndarray, w2: np.ndarray, b2: np.ndarray,
            activation: str, scale: float = 1.0) -> MLPTangent:
    """The network at the point ``scale * (W1, b1, W2, b2)`` (the scale lets stochastic methods keep
    ``w = a v`` without rescaling ``v``)."""
    pre = np.asarray(x @ w1)
    pre = scale * (pre + b1) if scale != 1.0 else pre + b1
    hidden, slope = activate(pre, activation)
    w2 = scale * w2  # a copy: the tangent must not alias weights that a step then updates
    out = hidden @ w2 + (scale * b2 if scale != 1.0 else b2)
    return MLPTangent(x, hidden, slope, w2, out)


def jvp(t: MLPTangent, dw1: np.ndarray, db1: np.ndarray, dw2: np.ndarray, db2: np.ndarray) -> np.ndarray:
    """``J (dW1, db1, dW2, db2)``: the first-order change of the output (N, O)."""
    dpre = np.asarray(t.x @ dw1) + db1
    return (t.slope * dpre) @ t.w2 + t.hidden @ dw2 + db2


def vjp(t: MLPTangent, g: np.ndarray, w1: np.ndarray, b1: np.ndarray, w2: np.ndarray, b2: np.ndarray,
        scale: float = 1.0) -> None:
    """In place ``(W1, b1, W2, b2) += scale * J^T g`` for an output cotangent ``g`` (N, O)."""
    d = (g @ t.w2.T) * t.slope
    w2 += scale * (t.hidden.T @ g)
    b2 += scale * g.sum(axis=0)
    if sp.issparse(t.x):
        csr_add_outer(t.x.indptr, t.x.indices, t.x.data, d, w1, scale)
    else:
        w1 += scale * (t.x.T @ d)
    b1 += scale * d.sum(axis=0)


def vjp_sqnorm(t: MLPTangent, g: np.ndarray) -> float:
    """``||J^T g||^2`` without a weight-sized vector: the first layer's block through the row Gram
    matrix, ``||X^T D||^2 = <D, (X X^T) D>``."""
    d = (g @ t.w2.T) * t.slope
    gram = t.x @ t.x.T
    gram = gram.toarray() if sp.issparse(gram) else gram
    w2, b2, b1 = t.hidden.T @ g, g.sum(axis=0), d.sum(axis=0)
    return float(np.sum(d * (gram @ d)) + np.sum(w2 * w2) + b2 @ b2 + b1 @ b1)
