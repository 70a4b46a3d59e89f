"""The graph kernel family: :class:`~structopt.models.graph.GraphModel` problems in whole fused passes.

A BCFW pass over loopy graphs is one numba call: per example the model's potentials, the relaxed
loss-augmented oracle (AD3, the structures' own kernel :func:`~structopt.structures._ad3_kernels.ad3_chunk`
from a fresh iterate at the training tolerances), the block step and the adjoint update
(:mod:`structopt.fused._graph_pack`, :mod:`structopt.fused._graph_passes`), where the generic path pays
Python's per-example costs (building potentials, checks, the factor graph's driver) around every oracle call.

The family serves a problem only where its kernels compute exactly that problem's oracles: a GraphModel
(registered by exact type) whose kernel methods are GraphModel's own, a structure whose
``kernel_oracles()`` cover the relaxed oracle (``GraphStructure`` without ``exact``, ``time_limit`` or
``warm_start``, which the kernels do not reproduce), and a decomposable loss that scores nodes only.

A pass over many large graphs can take long, so the family's passes run their compiled loops in chunks of
consecutive examples (about ``CHUNK_SECONDS`` each, by the measured time per example) and return to Python
between chunks, where Ctrl-C raises: a pass is interrupted within a chunk plus one example's oracle call.
The chunks carry the pass's running state (BCFW's scalars, SSG's step count, the passes' running sums, added
in the same order), so a chunked pass is the same bits as one call over all examples.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from structopt.fused import FusedInputs, KernelFamily, register_family
from structopt.fused import _graph_passes as passes
from structopt.fused._graph_pack import pack_graph_problem
from structopt.models.graph import GraphModel
from structopt.structures.base import unchanged_methods

#: what the kernels reproduce: the model's methods and the structure's oracles
KERNEL_METHODS = ("potentials", "add_features", "reduce_stats", "features_sqnorm", "unpack", "blocks",
                  "_pairwise_weights", "_blocks_of")
KERNEL_ORACLES = frozenset({"argmax", "stats", "score", "expand"})
#: seconds of compiled work between two returns to Python (Ctrl-C is honoured there)
CHUNK_SECONDS = 0.25
#: examples in a pass's first chunk (later chunks: CHUNK_SECONDS by the measured time per example, at most 4x
#: the previous one)
FIRST_CHUNK = 4


def in_chunks(n: int, run: Callable[[int, int], None], chunk_seconds: float | None = None) -> None:
    """``run(start, stop)`` on consecutive ranges covering ``range(n)`` (called once, on ``(0, 0)``, when n is 0:
    it loads the kernel), each about ``chunk_seconds`` (default ``CHUNK_SECONDS``) by the time measured so far."""
    seconds = CHUNK_SECONDS if chunk_seconds is None else chunk_seconds
    start, size = 0, FIRST_CHUNK
    while True:
        stop = min(n, start + size)
        t0 = time.perf_counter()
        run(start, stop)
        if stop >= n:
            return
        per_example = (time.perf_counter() - t0) / (stop - start)
        size = int(min(max(seconds / max(per_example, 1e-9), 1.0), 4 * size))
        start = stop


def hinge_terms(w: np.ndarray, pack: Any, offsets: np.ndarray, gold: np.ndarray, theta_buf: np.ndarray,
                stats_buf: np.ndarray, out: np.ndarray) -> None:
    """:func:`~structopt.fused._graph_passes.hinge_terms` in chunks."""
    in_chunks(offsets.shape[0] - 1,
              lambda a, b: passes.hinge_terms(w, pack, offsets, gold, theta_buf, stats_buf, out, a, b))


def fw_pass(w: np.ndarray, lam: float, n: int, gold: np.ndarray, offsets: np.ndarray, pack: Any, w_s: np.ndarray,
            theta_buf: np.ndarray, stats_buf: np.ndarray) -> tuple[float, float]:
    """:func:`~structopt.fused._graph_passes.fw_pass` in chunks (the running sums carried from chunk to chunk)."""
    sums = [0.0, 0.0]

    def run(a: int, b: int) -> None:
        sums[:] = passes.fw_pass(w, lam, n, gold, offsets, pack, w_s, theta_buf, stats_buf, a, b, sums[0], sums[1])

    in_chunks(offsets.shape[0] - 1, run)
    return sums[0], sums[1]


def oracle_steps(order: np.ndarray, w: np.ndarray, pack: Any, offsets: np.ndarray, theta_buf: np.ndarray,
                 stats_buf: np.ndarray) -> float:
    """:func:`~structopt.fused._graph_passes.oracle_steps` in chunks of ``order``."""
    order = np.asarray(order, dtype=np.int64)
    total = [0.0]

    def run(a: int, b: int) -> None:
        total[0] = passes.oracle_steps(order[a:b], w, pack, offsets, theta_buf, stats_buf, total[0])

    in_chunks(order.shape[0], run)
    return total[0]


def bcfw_steps(order: np.ndarray, *args: Any) -> None:
    """:func:`~structopt.fused._graph_passes.bcfw_steps` in chunks of ``order`` (the steps' scalars, written back
    by each chunk, carry the state)."""
    order = np.asarray(order, dtype=np.int64)
    in_chunks(order.shape[0], lambda a, b: passes.bcfw_steps(order[a:b], *args))


def ssg_steps(order: np.ndarray, lam: float, w: np.ndarray, w_avg: np.ndarray, k0: int, *args: Any) -> int:
    """:func:`~structopt.fused._graph_passes.ssg_steps` in chunks of ``order`` (the step count carried)."""
    order = np.asarray(order, dtype=np.int64)
    k = [k0]

    def run(a: int, b: int) -> None:
        k[0] = passes.ssg_steps(order[a:b], lam, w, w_avg, k[0], *args)

    in_chunks(order.shape[0], run)
    return k[0]


class GraphFamily(KernelFamily):
    """GraphModel problems trained with the relaxed AD3 oracle (see the module docstring)."""

    name = "graph"
    hinge_terms = staticmethod(hinge_terms)
    adjoint_sum = staticmethod(passes.adjoint_sum)
    fw_pass = staticmethod(fw_pass)
    oracle_steps = staticmethod(oracle_steps)
    block_index = staticmethod(passes.block_index)
    bcfw_steps = staticmethod(bcfw_steps)
    ssg_steps = staticmethod(ssg_steps)

    def refusal(self, model: Any, structure: Any, loss: Any) -> str | None:
        changed = sorted(set(KERNEL_METHODS) - unchanged_methods(model, GraphModel, KERNEL_METHODS))
        if changed:
            return f"{type(model).__name__} overrides {', '.join(changed)}, which the graph kernels compute"
        missing = sorted(KERNEL_ORACLES - structure.kernel_oracles())
        if missing:
            return f"{structure!r}'s kernel_oracles() do not cover {', '.join(missing)}"
        if not loss.decomposable:
            return f"{loss!r} is not decomposable (linear in the statistics)"
        return None

    def pack(self, inputs: FusedInputs) -> tuple[Any, np.ndarray] | str:
        model = inputs.model
        costs, consts, graphs, sizes = [], [], [], []
        zeros = model.zeros()
        for x, (c, const) in zip(inputs.X, inputs.terms, strict=True):
            if np.any(np.asarray(c.pairwise) != 0):
                return f"{inputs.loss!r} scores edges; the graph kernels take per-node losses only"
            costs.append(np.asarray(c.unary, dtype=float))
            consts.append(const)
            graphs.append(model.potentials(x, zeros).factor_graph)
            sizes.append(x.nodes.shape[0] * model.n_states + x.edges.shape[0] * model.n_states ** 2)
        return pack_graph_problem(model, inputs.X, costs, np.array(consts), graphs), np.array(sizes, dtype=np.int64)


GRAPH = GraphFamily()
register_family(GraphModel, GRAPH)
