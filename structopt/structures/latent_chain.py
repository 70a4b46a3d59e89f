"""A chain with hidden sub-states per label: the latent structure of the latent structural SVM.

Each of ``L`` observed labels has ``K`` hidden sub-states; the chain runs over the ``L * K`` expanded
states and the observed label of state ``s`` is ``s // K``. Outputs are expanded-state sequences
(int64, shape (T,)), so every oracle, the statistics, the polytope and the fused chain kernels are
:class:`~structopt.structures.chain.Chain`'s on ``L * K`` states, and a
:class:`~structopt.models.chain.ChainModel` over them (``structure=LatentChain(L, K)``) works as it is.

What the latent structure adds:

- :meth:`LatentChain.complete`, the latent completion oracle (hook ``complete``): the best expanded
  sequence whose labels are a given output's labels -- Viterbi on the potentials with the sub-states of
  every other label set to ``-inf`` (exact: the masked chain's outputs are exactly the completions);
- :meth:`LatentChain.label_loss`, the Hamming loss on labels (a
  :class:`~structopt.losses.WeightedHamming` whose cost is 1 between states of different labels), which
  depends on the observed part only, so loss-augmented decoding is the chain's Viterbi on the expanded
  states plus per-node costs (the fused kernels' per-node losses);
- :meth:`LatentChain.labels` (expanded states to labels) and :meth:`LatentChain.lift` (labels and
  sub-states to expanded states: the initial completions of a problem's gold outputs).
"""

from __future__ import annotations

import numpy as np

from structopt.errors import InvalidInputError, check_count, example_error
from structopt.structures.base import random_like
from structopt.structures.chain import Chain, ChainPotentials


class LatentChain(Chain):
    """Label sequences with ``n_substates`` hidden sub-states per label (a chain over ``L * K`` states).

    Parameters
    ----------
    n_labels : int
        Observed labels L (>= 1).
    n_substates : int
        Hidden sub-states K per label (>= 1; K = 1 is the plain chain).

    Notes
    -----
    Outputs are expanded-state sequences ``z`` (``labels(z) = z // K``). The chain's masks are not
    offered: every transition between expanded states is allowed.
    """

    name = "LatentChain"

    example_variants = (
        {"length": 1, "n_labels": 2, "n_substates": 2},
        {"length": 3, "n_labels": 2, "n_substates": 2},
        {"length": 4, "n_labels": 3, "n_substates": 2, "shared": False},
        {"length": 3, "n_labels": 2, "n_substates": 3},
    )

    @classmethod
    def example(cls, rng: np.random.Generator, *, integer: bool = True, length: int = 4, n_labels: int = 2,
                n_substates: int = 2, shared: bool = True) -> tuple[LatentChain, ChainPotentials]:
        """A random latent chain of ``length`` positions over ``n_labels`` labels of ``n_substates`` sub-states."""
        structure = cls(n_labels, n_substates)
        T, S = int(length), structure.n_states
        like = ChainPotentials(np.zeros((T, S)), np.zeros((S, S) if shared else (max(T - 1, 0), S, S)))
        return structure, random_like(like, rng, integer=integer)

    def __init__(self, n_labels: int, n_substates: int):
        self.n_labels = check_count(n_labels, "n_labels", "LatentChain")
        self.n_substates = check_count(n_substates, "n_substates", "LatentChain")
        super().__init__(self.n_labels * self.n_substates)
        # state_label[s] = s // K, the observed label of expanded state s
        self.state_label = np.arange(self.n_states, dtype=np.int64) // self.n_substates

    def __repr__(self) -> str:
        return f"LatentChain(n_labels={self.n_labels}, n_substates={self.n_substates})"

    # ------------------------------------------------------------------ labels <-> expanded states
    def labels(self, z) -> np.ndarray:
        """The observed labels ``z // K`` of expanded-state sequence ``z`` (int64)."""
        z = np.asarray(z, dtype=np.int64)
        if z.size and (z.min() < 0 or z.max() >= self.n_states):
            raise InvalidInputError(f"LatentChain: expanded states must be in [0, {self.n_states}), "
                                    f"got min {z.min()}, max {z.max()}")
        return z // self.n_substates

    def lift(self, labels, substates=None, index: int | None = None) -> np.ndarray:
        """Expanded states ``labels * K + substates`` (sub-state 0 everywhere when ``substates`` is None).

        Parameters
        ----------
        labels : (T,) int array
            Observed labels in ``[0, L)``.
        substates : (T,) int array or int, optional
            Sub-states in ``[0, K)``.
        index : int, optional
            Example index named in errors.
        """
        y = np.asarray(labels)
        if y.ndim != 1 or (y.size and (y.dtype.kind not in "iu" or y.min() < 0 or y.max() >= self.n_labels)):
            raise example_error(index, f"LatentChain.lift: labels must be a 1-D integer array with values in "
                                       f"[0, {self.n_labels})")
        h = np.zeros(y.shape, dtype=np.int64) if substates is None else np.broadcast_to(np.asarray(substates), y.shape)
        if h.size and (h.dtype.kind not in "iu" or h.min() < 0 or h.max() >= self.n_substates):
            raise example_error(index, f"LatentChain.lift: sub-states must be integers in [0, {self.n_substates})")
        return y.astype(np.int64) * self.n_substates + h.astype(np.int64)

    def label_cost(self) -> np.ndarray:
        """(L K, L K) 0/1 matrix: 1 between expanded states of different labels."""
        return (self.state_label[:, None] != self.state_label[None, :]).astype(float)

    def label_loss(self, normalize: bool = False):
        """The Hamming loss on labels, as a :class:`~structopt.losses.WeightedHamming` over the expanded states
        (decomposable, per node: the chain kernels' loss-augmented Viterbi takes it)."""
        from structopt.losses import WeightedHamming  # a loss is built on demand; structures do not import losses

        return WeightedHamming(self.label_cost(), normalize=normalize)

    # ------------------------------------------------------------------ the latent completion oracle
    def completion_potentials(self, theta: ChainPotentials, y) -> ChainPotentials:
        """``theta`` with ``-inf`` on every sub-state of a label other than ``labels(y)[t]`` at position t."""
        unary, _ = self.check_potentials(theta)
        labels = self.labels(y)
        if labels.shape != (unary.shape[0],):
            raise InvalidInputError(f"LatentChain.complete: the output has shape {labels.shape} but the potentials "
                                    f"have {unary.shape[0]} positions")
        keep = self.state_label[None, :] == labels[:, None]
        return ChainPotentials(np.where(keep, unary, -np.inf), np.asarray(theta.pairwise, dtype=float))

    def complete(self, theta: ChainPotentials, y) -> np.ndarray:
        """The best output with the labels of ``y``: ``argmax_h <theta, stats(labels(y), h)>``.

        Parameters
        ----------
        theta : ChainPotentials
            Potentials over the expanded states.
        y : (T,) int array
            An output (expanded states); only its labels ``y // K`` are read.

        Returns
        -------
        ndarray
            Expanded states ``z`` with ``labels(z) == labels(y)`` of the largest score (Viterbi on the
            potentials restricted to the given labels' sub-states: exact).
        """
        return self.argmax(self.completion_potentials(theta, y))


__all__ = ["LatentChain"]
