"""A problem's fused view: whole passes of its model's numba kernels, no Python per example.

A model that has fused kernels returns them from ``Model.fused_kernels(problem)`` as
:class:`FusedKernels`: the problem packed for its kernel family and the module of solver loops
written for that family (e.g. :mod:`structopt.solvers._chain_passes`). :class:`FusedProblem` adds
the gold statistics and scratch buffers and runs the passes every solver needs; the solvers' own
fused loops are called through ``passes``.

A fused path is an optimisation of the generic one: a model offers kernels only when its structure
declares (``Structure.kernel_oracles``) that they compute exactly its oracles, so a subclass that
changes an oracle falls back to the generic path.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any, NamedTuple

import numpy as np

from structopt.errors import NotSupportedError


class FusedKernels(NamedTuple):
    """What a model supplies for fused passes.

    Attributes
    ----------
    family : str
        Kernel family (``"chain"``); solvers with family-specific passes check it.
    pack : NamedTuple
        The problem's data packed for the family's kernels.
    sizes : ndarray
        Flat size of each example's potentials (= its compact statistics).
    passes : module
        The family's fused solver loops (``bcfw_steps``, ``ssg_steps``, ``fw_pass``, ``hinge_terms``,
        ``adjoint_sum``, ``oracle_steps``).
    """

    family: str
    pack: Any
    sizes: np.ndarray
    passes: ModuleType


_announced: set[str] = set()


class FusedProblem:
    """A problem with its model's fused kernels, gold statistics and scratch buffers.

    Flat compact statistics of example i live at ``offsets[i]:offsets[i+1]`` of concatenated arrays
    (the layout of ``SSVMProblem.compact_gold_stats``).
    """

    def __init__(self, problem: Any, kernels: FusedKernels):
        self.problem = problem
        self.kernels = kernels
        self.passes = kernels.passes
        self.pack = kernels.pack
        self.gold, self.offsets = problem.compact_gold_stats()
        if not np.array_equal(np.diff(self.offsets), kernels.sizes):
            raise RuntimeError("fused kernels and the problem disagree on the statistics layout")
        width = int(kernels.sizes.max())
        self.theta_buf = np.empty(width)
        self.stats_buf = np.empty(width)
        self.direction_buf = np.empty(width)
        self._hinges = np.empty(2 * problem.n)

    def warm_up(self, *passes: str, verbose: bool = False) -> None:
        """Load (or, the first time on this machine, compile) the named passes now, so that the cost
        is not charged to the first iteration; says so once per process when ``verbose``.

        ``passes`` among ``"hinge_terms"``, ``"adjoint_sum"``, ``"fw_pass"``, ``"oracle_steps"``
        (each called on zero examples, with the argument types of the real calls).
        """
        if verbose and self.kernels.family not in _announced:
            print(f"structopt: loading {self.kernels.family} kernels (compiled once per machine, then cached)…",
                  file=sys.stderr, flush=True)
        _announced.add(self.kernels.family)
        w = np.zeros(self.problem.n_params)
        none = self.offsets[:1]  # zero examples
        calls = {
            "hinge_terms": lambda: self.passes.hinge_terms(w, self.pack, none, self.gold, self.theta_buf,
                                                           self.stats_buf, self._hinges),
            "adjoint_sum": lambda: self.passes.adjoint_sum(self.gold, none, 1.0, w, self.pack),
            "fw_pass": lambda: self.passes.fw_pass(w, self.problem.lam, self.problem.n, self.gold, none, self.pack,
                                                   w, self.theta_buf, self.stats_buf),
            "oracle_steps": lambda: self.passes.oracle_steps(np.zeros(0, dtype=np.int64), w, self.pack, self.offsets,
                                                             self.theta_buf, self.stats_buf),
        }
        for name in passes:
            calls[name]()

    def hinge_terms(self, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(H_i(w), Delta(y_i, y_i*))`` for every example, in one fused pass (views of a buffer)."""
        self.passes.hinge_terms(np.ascontiguousarray(w, dtype=np.float64), self.pack, self.offsets, self.gold,
                                self.theta_buf, self.stats_buf, self._hinges)
        n = self.problem.n
        return self._hinges[:n], self._hinges[n:]

    def mean_hinge(self, w: np.ndarray) -> float:
        """``mean_i H_i(w)`` in one fused pass."""
        return float(np.mean(self.hinge_terms(w)[0]))

    def oracle_only(self, order: np.ndarray, w: np.ndarray) -> float:
        """The oracle calls of a pass over ``order`` at fixed ``w``, nothing else (timing baseline)."""
        return self.passes.oracle_steps(np.asarray(order, dtype=np.int64), w, self.pack, self.offsets,
                                        self.theta_buf, self.stats_buf)

    def add_adjoint(self, blocks: np.ndarray, scale: float, out: np.ndarray) -> None:
        """``out += scale * sum_i A_i^T blocks_i`` for concatenated compact statistics ``blocks``."""
        self.passes.adjoint_sum(blocks, self.offsets, scale, out, self.pack)


def select_fused(problem: Any, fused: bool | None = None) -> FusedProblem | None:
    """The fused view of ``problem``, or None for the generic path.

    ``fused=None`` uses it when available, ``False`` never, ``True`` demands it (and says why not).
    """
    if fused is False:
        return None
    view = problem.fused()
    if view is None and fused:
        raise NotSupportedError(f"{problem.model!r} with {problem.loss!r} has no fused kernels: they need a model "
                                "that provides them, a decomposable per-node loss, no weight constraints, and a "
                                "structure whose kernel_oracles() cover argmax (see structopt.fused)")
    return view
