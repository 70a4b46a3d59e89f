"""The batched chain SparseMAP of :mod:`structopt.torch.relaxed`: every chain of a list in one compiled call.

A chain whose ``argmax``, ``stats`` and ``expand`` the chain kernels reproduce (declared capability:
``chain_kernels_serve(structure, {"argmax", "stats", "expand"})``, masks included) is solved by
:mod:`structopt.structures._chain_sparsemap_kernels`: the generic active-set method of
:func:`structopt.sparsemap.sparsemap` step for step, over the batched Viterbi, for a whole padded group of
chains (same number of labels, same masks) per call. The Fenchel–Young loss needs only μ*; the layer's
backward, the Jacobian-vector product through each active set, is one compiled call for the group too.
Anything else (an override of those oracles, another structure, LP-SparseMAP) keeps the generic path.

Long batches are split into calls of about :data:`BUDGET` units of work each (about 0.05 s), so Ctrl-C is
honoured between them; one chain is never split (at most ``max_iter`` cycles: a fraction of a second on
CoNLL-sized chains at the default 1,000).
"""

from __future__ import annotations

import sys
import threading
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

from structopt.potentials import Potentials
from structopt.structures.chain import chain_kernels_serve
from structopt.torch._inputs import Example

#: the oracles the batched kernel reproduces (SparseMAP uses nothing else of the structure)
ORACLES = frozenset({"argmax", "stats", "expand"})
#: work per compiled call, in the kernel's units (~Viterbi and Gram-system flops; about 0.05 s): Ctrl-C is
#: honoured between calls
BUDGET = 20_000_000
#: seconds a first call may take before it says that numba compiles (once per machine, then cached)
ANNOUNCE_AFTER = 2.0
_loaded: set[str] = set()


def batchable(ex: Example) -> bool:
    """Whether the batched chain SparseMAP solves this example exactly as the generic path (declared capability)."""
    return chain_kernels_serve(ex.structure, ORACLES)


@dataclass
class GroupResult:
    """The active sets of a padded group of chains (``members``: positions in the caller's batch)."""

    members: list[int]
    unary: np.ndarray        # (B, T, S) the potentials, zeros past each length
    pairwise: np.ndarray     # (1, 1, S, S) shared or (B, max(T-1, 1), S, S) per position (full layout)
    shared: bool
    lengths: np.ndarray      # (B,)
    node: np.ndarray         # (B, T, S) μ* (unary statistics), zeros past each length
    pair: np.ndarray         # (B, T-1, S, S) μ* (edge statistics)
    active: np.ndarray       # (n, T) active label sequences, rows offsets[b]:offsets[b+1] for example b
    weights: np.ndarray      # (n,)
    offsets: np.ndarray      # (B + 1,)
    gaps: np.ndarray         # (B,)
    iterations: np.ndarray   # (B,)
    status: np.ndarray       # (B,) 0 optimal, 1 repeated, 2 max_iter

    def labels(self, b: int) -> np.ndarray:
        """The active label sequences of example b, (k, L)."""
        return self.active[self.offsets[b]:self.offsets[b + 1], :self.lengths[b]]


def groups(batch: list[Example], members: list[int]) -> list[list[int]]:
    """``members`` split by number of labels and masks (one kernel call shares them)."""
    out: dict[tuple, list[int]] = defaultdict(list)
    keys: dict[int, tuple] = {}  # per structure object (a batch usually shares one)
    for j in members:
        s = batch[j].structure
        if id(s) not in keys:
            start, end = s.boundary_bias()
            keys[id(s)] = (s.n_states, start.tobytes(), end.tobytes(), s.transition_bias().tobytes())
        out[keys[id(s)]].append(j)
    return list(out.values())


def _padded(examples: list[Example]) -> tuple[np.ndarray, np.ndarray, bool, np.ndarray]:
    """``(unary (B, T, S), pairwise (1, 1, S, S) or (B, T-1, S, S), shared, lengths)`` of a group."""
    lengths = np.array([np.shape(ex.array[0])[0] for ex in examples], dtype=np.int64)
    B, T, S = len(examples), int(lengths.max()), int(np.shape(examples[0].array[0])[1])
    unary = np.zeros((B, T, S))
    for b, ex in enumerate(examples):
        unary[b, :lengths[b]] = ex.array[0]
    first = np.asarray(examples[0].array[1], dtype=float)
    if all(np.ndim(ex.array[1]) == 2 and np.array_equal(ex.array[1], first) for ex in examples):
        return unary, np.ascontiguousarray(first.reshape(1, 1, S, S)), True, lengths
    pairwise = np.zeros((B, max(T - 1, 1), S, S))
    for b, ex in enumerate(examples):
        pairwise[b, :lengths[b] - 1] = np.broadcast_to(ex.array[1], (lengths[b] - 1, S, S))
    return unary, pairwise, False, lengths


def solve_group(batch: list[Example], members: list[int], tol: float, max_iter: int,
                warm: list[np.ndarray] | None = None) -> GroupResult:
    """SparseMAP of the examples ``members`` of ``batch`` (one group of :func:`groups`), in compiled calls of
    about :data:`BUDGET` units of work. ``warm``: one label sequence per member to start from instead of the
    argmax at θ (the generic path's ``warm_start`` with that single vertex)."""
    from structopt.structures import _chain_sparsemap_kernels as ker

    examples = [batch[j] for j in members]
    unary, pairwise, shared, lengths = _padded(examples)
    B, T, S = unary.shape
    structure = examples[0].structure
    start, end = structure.boundary_bias()
    bias = structure.transition_bias()
    masked = bool(structure.constrained)
    warm_labels = np.zeros((B, T), dtype=np.int64)
    if warm is not None:
        for b, y in enumerate(warm):
            warm_labels[b, :lengths[b]] = y
    node = np.zeros((B, T, S))
    pair = np.zeros((B, max(T - 1, 0), S, S))
    active = np.zeros((8 * B, T), dtype=np.int64)
    weights = np.zeros(8 * B)
    offsets = np.zeros(B + 1, dtype=np.int64)
    gaps, iterations, status = np.zeros(B), np.zeros(B, dtype=np.int64), np.zeros(B, dtype=np.int64)
    args = (unary, pairwise, shared, np.ascontiguousarray(start, dtype=float), np.ascontiguousarray(end, dtype=float),
            np.ascontiguousarray(bias, dtype=float), masked, lengths, float(tol), int(max_iter), warm is not None,
            warm_labels)
    i = 0
    while i < B:  # Python between the calls: a Ctrl-C raises here
        with _announce_compile("sparsemap_chunk"), _interrupt_as_such():
            i, active, weights = ker.sparsemap_chunk(*args, i, BUDGET, node, pair, active, weights, offsets, gaps,
                                                     iterations, status)
    return GroupResult(members, unary, pairwise, shared, lengths, node, pair, active, weights, offsets, gaps,
                       iterations, status)


def vjp_group(result: GroupResult, grad_node: np.ndarray, grad_pair: np.ndarray,
              extra: list[np.ndarray | None] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(∂μ*/∂θ)ᵀ g`` of every example of a group in one compiled call; ``extra[b]``: further vertices of
    example b's optimal face (label sequences, see ``face_tries`` of :func:`structopt.sparsemap.sparsemap`)
    that join its active set."""
    from structopt.structures import _chain_sparsemap_kernels as ker

    active, offsets = result.active, result.offsets
    if extra is not None and any(e is not None for e in extra):
        rows, bounds = [], [0]
        for b in range(len(result.members)):
            block = result.active[offsets[b]:offsets[b + 1]]
            if extra[b] is not None:
                more = np.zeros((len(extra[b]), active.shape[1]), dtype=np.int64)
                more[:, :result.lengths[b]] = extra[b]
                block = np.vstack([block, more])
            rows.append(block)
            bounds.append(bounds[-1] + len(block))
        active, offsets = np.ascontiguousarray(np.vstack(rows)), np.array(bounds, dtype=np.int64)
    out_node, out_pair = np.zeros_like(grad_node), np.zeros_like(grad_pair)
    with _announce_compile("vjp_batch"):
        ker.vjp_batch(active, offsets, result.lengths, np.ascontiguousarray(grad_node, dtype=float),
                      np.ascontiguousarray(grad_pair, dtype=float), out_node, out_pair)
    return out_node, out_pair


def gold_stats(lengths: np.ndarray, gold: list[np.ndarray], S: int) -> tuple[np.ndarray, np.ndarray]:
    """``μ(y)`` of each gold sequence, padded as a group's μ*."""
    B, T = len(gold), int(lengths.max())
    node = np.zeros((B, T, S))
    pair = np.zeros((B, max(T - 1, 0), S, S))
    labels = np.concatenate([np.asarray(y, dtype=np.int64) for y in gold])
    example = np.repeat(np.arange(B), lengths)
    position = np.arange(labels.size) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    node[example, position, labels] = 1.0
    inner = position[:-1] < np.repeat(lengths - 1, lengths)[:-1]  # an edge (t, t + 1) inside one example
    pair[example[:-1][inner], position[:-1][inner], labels[:-1][inner], labels[1:][inner]] = 1.0
    return node, pair


def onto_theta(node: np.ndarray, pair: np.ndarray, L: int, like: Potentials) -> Potentials:
    """A padded full-layout row (one example's) summed onto θ's layout (a shared transition table: summed over
    positions)."""
    unary = node[:L].copy()
    if np.ndim(like[1]) == 2:
        return type(like)(unary, pair[:L - 1].sum(axis=0) if L > 1 else np.zeros(np.shape(like[1])))
    return type(like)(unary, pair[:L - 1].copy())


class _interrupt_as_such:
    """A SIGINT whose handler ran inside numba's dispatcher (while it typed the arguments) comes out as a
    SystemError ("returned a result with an exception set") caused by the KeyboardInterrupt: raise the
    interrupt itself."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, error: Any, trace: Any) -> None:
        if isinstance(error, SystemError) and isinstance(error.__cause__, KeyboardInterrupt):
            raise KeyboardInterrupt from None


class _announce_compile:
    """Say on stderr when a kernel's first call in the process is slow (numba compiling it)."""

    def __init__(self, name: str):
        self.name = name

    def __enter__(self) -> None:
        self.timer = None
        if self.name not in _loaded:
            self.timer = threading.Timer(ANNOUNCE_AFTER, lambda: print(
                "structopt: compiling the batched chain SparseMAP kernels (once per machine, then cached)…",
                file=sys.stderr, flush=True))
            self.timer.daemon = True
            self.timer.start()

    def __exit__(self, *exc: Any) -> None:
        if self.timer is not None:
            self.timer.cancel()
        _loaded.add(self.name)
