"""Linear matching model: edge scores are linear in per-edge features."""

from __future__ import annotations

import numpy as np

from structopt.codecs import exact_type, register_codec
from structopt.errors import MAX_ABS_FEATURE, InvalidInputError, check_count, example_error, numeric_array
from structopt.models.base import Model, model_structure
from structopt.structures.base import check_flag
from structopt.structures.matching import BipartiteMatching, MatchingPotentials


class MatchingModel(Model):
    """``theta_jk = <x[j, k], w_edge>`` for an edge-feature array ``x`` of shape (L, R, F).

    Parameters
    ----------
    n_features : int
        Edge feature dimension F.
    allow_unmatched : bool, default False
        Partial matchings (:class:`BipartiteMatching` with ``allow_unmatched=True``). The model
        then has a second block ``unmatched`` of two weights: the score of leaving a left node
        unmatched and that of leaving a right node unmatched (the same for every node). They act
        as a learned threshold on edge scores: a matching with m edges gains
        ``(L - m) w_left + (R - m) w_right`` from them. With ``structure``, that structure's setting is
        used and True must agree with it.
    structure : BipartiteMatching, optional
        The structure to run on (a subclass, or one with fixed sides); default
        ``BipartiteMatching(allow_unmatched=allow_unmatched)``.

    Notes
    -----
    The adjoint is ``features(x, mu) = (sum_jk mu_jk x[j, k], [sum_j mu_left_j, sum_k mu_right_k])``.
    Inputs are dense float arrays; sentences of any size share one model.
    """

    @classmethod
    def example(cls, rng: np.random.Generator) -> tuple[MatchingModel, list[np.ndarray]]:
        """Three 3 x 3 matchings with 2 features per pair, unmatched allowed (see :meth:`Model.example`)."""
        return cls(2, allow_unmatched=True), [rng.normal(size=(3, 3, 2)) for _ in range(3)]

    def __init__(self, n_features: int, allow_unmatched: bool = False, *,
                 structure: BipartiteMatching | None = None):
        self.n_features = check_count(n_features, "n_features", "MatchingModel")
        allow = check_flag(allow_unmatched, "allow_unmatched", "MatchingModel")
        self.structure = model_structure("MatchingModel", BipartiteMatching, structure,
                                         lambda: BipartiteMatching(allow_unmatched=allow),
                                         **({"allow_unmatched": True} if allow else {}))
        self.allow_unmatched = self.structure.allow_unmatched

    def __repr__(self) -> str:
        return f"MatchingModel(n_features={self.n_features}, allow_unmatched={self.allow_unmatched})"

    @property
    def blocks(self) -> list[tuple[str, tuple[int, ...]]]:
        blocks = [("edge", (self.n_features,))]
        if self.allow_unmatched:
            blocks.append(("unmatched", (2,)))
        return blocks

    def validate_input(self, x: np.ndarray, index: int | None = None) -> np.ndarray:
        x = numeric_array(x, "matching input", index)
        if x.ndim != 3 or x.shape[2] != self.n_features:
            raise example_error(index, f"matching input must be an edge-feature array of shape "
                                       f"(n_left, n_right, {self.n_features}), got {x.shape}")
        if not self.allow_unmatched and x.shape[0] > x.shape[1]:
            raise example_error(index, f"{x.shape[0]} left nodes cannot all be matched into {x.shape[1]} right "
                                       "nodes: use allow_unmatched=True")
        if x.size and np.max(np.abs(x)) > MAX_ABS_FEATURE:
            raise example_error(index, f"matching input has features beyond {MAX_ABS_FEATURE:g} in magnitude, "
                                       "whose squares overflow: rescale the features")
        return x

    def potentials(self, x: np.ndarray, w: np.ndarray) -> MatchingPotentials:
        blocks = self.unpack(numeric_array(w, "weight vector w"))
        L, R = x.shape[:2]
        edge = x.reshape(L * R, self.n_features) @ blocks["edge"]
        edge = edge.reshape(L, R)
        if self.allow_unmatched:
            w_left, w_right = blocks["unmatched"]
            return MatchingPotentials(edge, np.full(L, w_left), np.full(R, w_right))
        return MatchingPotentials(edge, np.zeros(0), np.zeros(0))

    def add_features(self, x: np.ndarray, mu: MatchingPotentials, out: np.ndarray, scale: float = 1.0) -> None:
        blocks = self.unpack(out)
        edge = np.asarray(mu.edge if isinstance(mu, MatchingPotentials) else mu, dtype=float)
        L, R = x.shape[:2]
        if edge.shape != (L, R):
            raise InvalidInputError(f"statistics of shape {edge.shape} do not match an input with ({L}, {R}) edges")
        blocks["edge"] += scale * (edge.reshape(L * R) @ x.reshape(L * R, self.n_features))
        if self.allow_unmatched and isinstance(mu, MatchingPotentials):
            blocks["unmatched"][0] += scale * float(np.sum(mu.unmatched_left))
            blocks["unmatched"][1] += scale * float(np.sum(mu.unmatched_right))



# ----- saving (structopt.saved_model): the codecs of MatchingModel and of its structure
def _describe_matching_model(model: MatchingModel) -> dict:
    exact_type(model.structure, BipartiteMatching, "a MatchingModel whose structure is")
    return {"n_features": model.n_features, "allow_unmatched": model.allow_unmatched}


register_codec("MatchingModel", MatchingModel, _describe_matching_model, ("n_features", "allow_unmatched"))
register_codec("BipartiteMatching", BipartiteMatching,
               lambda s: {"n_left": s.n_left, "n_right": s.n_right, "allow_unmatched": s.allow_unmatched},
               ("n_left", "n_right", "allow_unmatched"), kind="structure")
