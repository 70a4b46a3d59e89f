"""The chain fast paths of :mod:`structopt.torch` on a list of examples.

- log-partition and the CRF loss: chains whose marginals the chain kernels compute
  (``chain_kernels_serve(structure, {"marginals"})``: the structure's ``marginals`` is
  :class:`~structopt.structures.Chain`'s own and its ``kernel_oracles()`` list it, i.e. an unconstrained chain
  that does not override it) are padded into one (B, T, S) batch and run through the batched
  forward-backward kernel in one compiled call per number of labels;
- argmax and the hinge's loss-augmented decoding: chains whose ``argmax`` the kernels compute
  (``chain_kernels_serve(structure, {"argmax"})``, masks included) run through the batched Viterbi, one
  call per structure object, the loss's linear terms added to the potentials as ``Loss.augmented_argmax``
  does.

Anything else (an override, another structure, a loss with its own decoding hook) keeps the generic path.
The answers are the generic path's (tests hold them equal; the batched Viterbi breaks ties as
``Chain.argmax``).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from structopt.potentials import Potentials
from structopt.structures.chain import chain_kernels_serve
from structopt.torch._autograd import reduce_to
from structopt.torch._inputs import Example


def batchable(ex: Example, oracle: str = "marginals") -> bool:
    """Whether the batched chain kernels compute this example's ``oracle`` exactly (declared capability)."""
    return chain_kernels_serve(ex.structure, {oracle})


def chain_marginals(batch: list[Example]) -> dict[int, tuple[float, Potentials]]:
    """``{position in batch: (log Z, marginals summed onto θ's layout)}`` for the examples the batched chain
    kernel serves, grouped by number of labels; a group of one is left to the generic path."""
    groups: dict[int, list[int]] = defaultdict(list)
    for j, ex in enumerate(batch):
        if batchable(ex):
            groups[int(np.shape(ex.array[0])[1])].append(j)
    out: dict[int, tuple[float, Potentials]] = {}
    for members in groups.values():
        if len(members) > 1:
            out.update(zip(members, _group([batch[j] for j in members]), strict=True))
    return out


def _group(examples: list[Example]) -> list[tuple[float, Potentials]]:
    from structopt.structures._chain_batch import batch_marginals

    lengths = np.array([np.shape(ex.array[0])[0] for ex in examples], dtype=np.int64)
    B, T, S = len(examples), int(lengths.max()), int(np.shape(examples[0].array[0])[1])
    unary = np.zeros((B, T, S))
    for b, ex in enumerate(examples):
        unary[b, :lengths[b]] = ex.array[0]
    first = np.asarray(examples[0].array[1])
    shared = all(np.ndim(ex.array[1]) == 2 and np.array_equal(ex.array[1], first) for ex in examples)
    if shared:  # one transition table for the whole batch: the kernel sums its marginals over positions
        pairwise = first
    else:
        pairwise = np.zeros((B, max(T - 1, 0), S, S))
        for b, ex in enumerate(examples):
            pairwise[b, :lengths[b] - 1] = ex.structure.expand(ex.array)[1]
    log_z, node, pair = batch_marginals(unary, pairwise, lengths)
    answers = []
    for b, ex in enumerate(examples):
        L = int(lengths[b])
        marg = type(ex.array)(node[b, :L], pair[b] if shared else pair[b, :L - 1])
        answers.append((float(log_z[b]), marg if shared else reduce_to(marg, ex.array)))
    return answers


def chain_argmax(batch: list[Example], shifts: list[Potentials | None] | None = None) -> dict[int, np.ndarray]:
    """``{position in batch: argmax labels of θ + shift}`` for the examples the batched Viterbi serves, one
    kernel call per structure object (its masks); ``shifts[j]`` None leaves example j to the generic path."""
    groups: dict[int, list[int]] = defaultdict(list)
    for j, ex in enumerate(batch):
        if batchable(ex, "argmax") and (shifts is None or shifts[j] is not None):
            groups[id(ex.structure)].append(j)
    out: dict[int, np.ndarray] = {}
    for members in groups.values():
        if len(members) > 1:
            potentials = [batch[j].array if shifts is None else _shifted(batch[j].array, shifts[j]) for j in members]
            out.update(zip(members, _viterbi(batch[members[0]].structure, potentials), strict=True))
    return out


def _shifted(theta: Potentials, shift: Potentials) -> Potentials:
    return type(theta)(*(np.asarray(t, dtype=float) + np.asarray(c, dtype=float) for t, c in zip(theta, shift)))


def _viterbi(structure, potentials: list[Potentials]) -> list[np.ndarray]:
    from structopt.structures._chain_batch import batch_viterbi

    lengths = np.array([np.shape(p[0])[0] for p in potentials], dtype=np.int64)
    B, T, S = len(potentials), int(lengths.max()), int(np.shape(potentials[0][0])[1])
    unary = np.zeros((B, T, S))
    for b, p in enumerate(potentials):
        unary[b, :lengths[b]] = p[0]
    first = np.asarray(potentials[0][1])
    if all(np.ndim(p[1]) == 2 and np.array_equal(p[1], first) for p in potentials):
        pairwise = first
    else:
        pairwise = np.zeros((B, max(T - 1, 0), S, S))
        for b, p in enumerate(potentials):
            pairwise[b, :lengths[b] - 1] = np.broadcast_to(p[1], (lengths[b] - 1, S, S))
    start, end = structure.boundary_bias()
    labels, _ = batch_viterbi(unary, pairwise + structure.transition_bias(), lengths, start=start, end=end)
    return [labels[b, :lengths[b]].copy() for b in range(B)]
