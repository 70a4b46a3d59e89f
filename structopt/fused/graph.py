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
"""

from __future__ import annotations

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


class GraphFamily(KernelFamily):
    """GraphModel problems trained with the relaxed AD3 oracle (see the module docstring)."""

    name = "graph"
    hinge_terms = staticmethod(passes.hinge_terms)
    adjoint_sum = staticmethod(passes.adjoint_sum)
    fw_pass = staticmethod(passes.fw_pass)
    oracle_steps = staticmethod(passes.oracle_steps)
    block_index = staticmethod(passes.block_index)
    bcfw_steps = staticmethod(passes.bcfw_steps)
    ssg_steps = staticmethod(passes.ssg_steps)

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
