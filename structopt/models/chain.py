"""Linear chain model: unary weights over token features plus a shared transition matrix."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from structopt.codecs import exact_type, register_codec
from structopt.errors import MAX_ABS_FEATURE, InvalidInputError, check_count, example_error
from structopt.models._kernels import csr_add_outer
from structopt.models.base import Model, feature_matrix, model_structure
from structopt.structures.base import check_flag
from structopt.structures.chain import Chain, ChainPotentials

ChainInput = np.ndarray | sp.csr_matrix


class ChainModel(Model):
    """``theta_t(s) = <x_t, W_unary[:, s]> (+ extras)``, ``theta(a, b) = W_pairwise[a, b]``.

    Parameters
    ----------
    n_features : int
        Token feature dimension F; inputs are (T, F) dense arrays or scipy.sparse CSR matrices.
    n_states : int
        Number of labels S.
    start_end : bool, default False
        Add per-state scores for the first and the last position (blocks ``start``, ``end``).
    bias : bool, default False
        Add a per-state bias at every position (block ``bias``).
    allowed, allowed_start, allowed_end : bool arrays, optional
        Forbidden transitions / first / last labels of the chain (see :class:`Chain`); honoured by
        every oracle and by the fused kernels.
    structure : Chain, optional
        The chain structure to use instead of ``Chain(n_states, allowed, allowed_start, allowed_end)``:
        a configured :class:`Chain` or an instance of a subclass (e.g. one overriding an oracle, which
        then takes the generic path: the fused kernels serve only what ``kernel_oracles()`` lists).
        Its ``n_states`` must equal ``n_states``; masks then belong to it (not to this call).

    Notes
    -----
    Fused passes over a whole problem are the chain kernel family's (:mod:`structopt.fused.chain`).
    """

    @classmethod
    def example(cls, rng: np.random.Generator) -> tuple[ChainModel, list[np.ndarray]]:
        """A 3-state chain with a forbidden transition, start/end and bias weights, and four sequences of 1-4
        tokens (see :meth:`Model.example`)."""
        allowed = np.ones((3, 3), dtype=bool)
        allowed[0, 2] = False
        return cls(4, 3, start_end=True, bias=True, allowed=allowed), \
            [rng.normal(size=(int(rng.integers(1, 5)), 4)) for _ in range(4)]

    def __init__(self, n_features: int, n_states: int, start_end: bool = False, bias: bool = False,
                 allowed: np.ndarray | None = None, allowed_start: np.ndarray | None = None,
                 allowed_end: np.ndarray | None = None, structure: Chain | None = None):
        self.n_features = check_count(n_features, "n_features", "ChainModel")
        self.n_states = check_count(n_states, "n_states", "ChainModel")
        self.start_end = check_flag(start_end, "start_end", "ChainModel")
        self.bias = check_flag(bias, "bias", "ChainModel")
        if structure is not None and (allowed is not None or allowed_start is not None or allowed_end is not None):
            raise InvalidInputError("ChainModel takes masks either as allowed/allowed_start/allowed_end or inside "
                                    "structure, not both")
        self.structure = model_structure("ChainModel", Chain, structure,
                                         lambda: Chain(self.n_states, allowed, allowed_start, allowed_end),
                                         n_states=self.n_states)

    def __repr__(self) -> str:
        custom = self.structure.constrained or type(self.structure) is not Chain
        masks = f", structure={self.structure!r}" if custom else ""
        return (f"ChainModel(n_features={self.n_features}, n_states={self.n_states}, "
                f"start_end={self.start_end}, bias={self.bias}{masks})")

    @property
    def blocks(self) -> list[tuple[str, tuple[int, ...]]]:
        F, S = self.n_features, self.n_states
        blocks = [("unary", (F, S)), ("pairwise", (S, S))]
        if self.start_end:
            blocks += [("start", (S,)), ("end", (S,))]
        if self.bias:
            blocks += [("bias", (S,))]
        return blocks

    def validate_input(self, x: ChainInput, index: int | None = None) -> ChainInput:
        x = feature_matrix(x, self.n_features, index, f"chain input (T, {self.n_features})", "T")
        values = x.data if sp.issparse(x) else x
        if values.size and np.abs(values).max() > MAX_ABS_FEATURE:
            raise example_error(index, f"chain input has values up to {np.abs(values).max():.3g}; scores would "
                                       f"overflow: rescale the features below {MAX_ABS_FEATURE:g}")
        return x

    def potentials(self, x: ChainInput, w: np.ndarray) -> ChainPotentials:
        blocks = self.unpack(w)
        unary = np.asarray(x @ blocks["unary"])  # a fresh array: safe to add to in place
        if self.bias:
            unary += blocks["bias"]
        if self.start_end:
            unary[0] += blocks["start"]
            unary[-1] += blocks["end"]
        pairwise = blocks["pairwise"]
        # O(T S) here instead of O(d) on w: NaN or infinite weights that this input uses show up
        if not (np.isfinite(unary).all() and np.isfinite(pairwise).all()):
            raise InvalidInputError("the weights give NaN or infinite chain potentials for this input "
                                    "(NaN or infinite entries in the weight vector w?)")
        return ChainPotentials(unary, pairwise)

    def reduce_stats(self, mu: ChainPotentials) -> ChainPotentials:
        """Sum per-position edge statistics into the shared (S, S) block the weights see."""
        edge = np.asarray(mu.pairwise)
        return ChainPotentials(mu.unary, edge.sum(axis=0) if edge.ndim == 3 else edge)

    def features_sqnorm(self, x: ChainInput, mu: ChainPotentials) -> float:
        """``||A_x^T mu||^2`` through the token Gram matrix ``x x^T`` (no weight-sized vector)."""
        node = np.asarray(mu.unary, dtype=float)
        gram = x @ x.T
        gram = gram.toarray() if sp.issparse(gram) else gram
        value = float(np.sum(node * (gram @ node)))
        edge = np.asarray(mu.pairwise, dtype=float)
        edge = edge.sum(axis=0) if edge.ndim == 3 else edge
        value += float(np.sum(edge * edge))
        if self.start_end:
            value += float(node[0] @ node[0] + node[-1] @ node[-1])
        if self.bias:
            total = node.sum(axis=0)
            value += float(total @ total)
        return value

    def add_features(self, x: ChainInput, mu: ChainPotentials, out: np.ndarray, scale: float = 1.0) -> None:
        blocks = self.unpack(out)
        node = np.asarray(mu.unary, dtype=float)
        if node.shape != (x.shape[0], self.n_states):
            raise InvalidInputError(f"statistics of shape {node.shape} do not match input of length {x.shape[0]}")
        if sp.issparse(x):
            csr_add_outer(x.indptr, x.indices, x.data, node, blocks["unary"], scale)
        else:
            blocks["unary"] += scale * (x.T @ node)
        edge = np.asarray(mu.pairwise, dtype=float)
        blocks["pairwise"] += scale * (edge.sum(axis=0) if edge.ndim == 3 else edge)
        if self.start_end:
            blocks["start"] += scale * node[0]
            blocks["end"] += scale * node[-1]
        if self.bias:
            blocks["bias"] += scale * node.sum(axis=0)



# ----- saving (structopt.saved_model): the codecs of ChainModel and of its structure
def _describe_chain_model(model: ChainModel) -> dict:
    exact_type(model.structure, Chain, "a ChainModel whose structure is")
    s = model.structure
    return {"n_features": model.n_features, "n_states": model.n_states, "start_end": model.start_end,
            "bias": model.bias, "allowed": s.allowed, "allowed_start": s.allowed_start, "allowed_end": s.allowed_end}


register_codec("ChainModel", ChainModel, _describe_chain_model,
               ("n_features", "n_states", "start_end", "bias", "allowed", "allowed_start", "allowed_end"))
register_codec("Chain", Chain, lambda s: {"n_states": s.n_states, "allowed": s.allowed,
                                          "allowed_start": s.allowed_start, "allowed_end": s.allowed_end},
               ("n_states", "allowed", "allowed_start", "allowed_end"), kind="structure")
