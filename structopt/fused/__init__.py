"""Fused passes: whole passes over a dataset in one numba call, one home per kernel family.

A *kernel family* (:class:`KernelFamily`) is everything a model class needs for fused passes: the
packing of a problem's data into arrays, the kernels, and the solver loops over them (BCFW block
steps, FW and SSG passes, the hinge / gap evaluation pass, the extragradient z-pass). Families are
registered by exact model type (:func:`register_family`): a subclass of a registered model gets the
generic path unless it is registered itself (and then the family's capability checks still apply).

The fused-or-generic choice is made here only, by :func:`select`, for every solver: a family serves
a problem when it says so (:meth:`KernelFamily.refusal` is None: the model's and the structure's
methods are the ones its kernels reproduce, the loss is one it packs) and the weights are
unconstrained. :class:`FusedProblem` is the problem's view: the packed data, gold statistics and
scratch buffers, and the family's passes.

A fused path is an optimisation of the generic one: both compute the same iterates.
"""

from __future__ import annotations

import sys
from typing import Any, NamedTuple

import numpy as np

from structopt.errors import NotSupportedError
from structopt.potentials import narrowest_exact  # re-exported: the packs store exact data narrow
from structopt.registry import Registry


class FusedInputs(NamedTuple):
    """The public pieces of a problem a family packs (never the problem itself).

    Attributes
    ----------
    model, structure, loss
        As in :class:`~structopt.problem.SSVMProblem`.
    X, Y : list
        Validated inputs and gold outputs.
    terms : list of (Potentials, float), or None
        ``(c_i, const_i)`` of a decomposable loss per example (``SSVMProblem.loss_terms``), None for
        other losses.
    """

    model: Any
    structure: Any
    loss: Any
    X: list
    Y: list
    terms: list | None


class KernelFamily:
    """What a kernel family provides; subclass it and :func:`register_family` the model type.

    Numba solver loops are attributes (plain functions), called with the view's arrays:
    ``hinge_terms``, ``adjoint_sum``, ``fw_pass``, ``oracle_steps``, ``block_index``, ``bcfw_steps``,
    ``ssg_steps`` (signatures: :mod:`structopt.fused._chain_passes`); for the smoothed-oracle solvers
    ``smooth_snapshot``, ``lazy_smooth_steps``, ``smooth_oracle_only`` (:mod:`structopt.fused._chain_smooth`).
    """

    name = "family"

    def refusal(self, model: Any, structure: Any, loss: Any) -> str | None:
        """Why the kernels do not compute this model's, structure's and loss's oracles exactly, or None."""
        raise NotImplementedError

    def pack(self, inputs: FusedInputs) -> tuple[Any, np.ndarray] | str:
        """``(pack, sizes)``: the data packed for the kernels and the flat size of each example's
        potentials (= its compact statistics); or a string saying why the data cannot be packed."""
        raise NotImplementedError

    def smooth_refusal(self, structure: Any, kind: str) -> str | None:
        """Why the family has no smoothed passes (``kind`` "topk" or "entropy") for ``structure``, or None."""
        return f"the {self.name} kernel family has no smoothed-oracle passes"

    def smooth_pack(self, view: FusedProblem) -> Any:
        """Extra data the smoothed passes take (built once per view, on first use)."""
        raise NotSupportedError(self.smooth_refusal(view.problem.structure, "topk"))

    def zpass_refusal(self, structure: Any, geometry: str) -> str | None:
        """Why the family has no extragradient z-pass for ``structure`` in ``geometry``, or None."""
        return f"the {self.name} kernel family has no extragradient z-pass"

    def zpass(self, view: FusedProblem, geometry: str, **options: Any) -> Any:
        """The extragradient z-pass on ``view`` (an object with ``run``/``commit``/``state``/...)."""
        raise NotSupportedError(self.zpass_refusal(view.problem.structure, geometry))


def _load_families() -> None:
    # the built-in families register themselves on import
    import structopt.fused.chain
    import structopt.fused.graph  # noqa: F401


#: model type -> its kernel family (exact types: a subclass of a registered model is not served)
FAMILIES: Registry[KernelFamily] = Registry("kernel family", load=_load_families, label=lambda key: key.__name__,
                                            unknown="no {kind} is registered for {name!r}; registered: {names}")


def register_family(model_type: type, family: KernelFamily) -> None:
    """Serve problems whose model is exactly of ``model_type`` with ``family`` (subclasses: register them)."""
    if not isinstance(model_type, type) or not isinstance(family, KernelFamily):
        raise TypeError("register_family(model_type, family) takes a class and a KernelFamily")
    FAMILIES.add(model_type, family, replace=True)


def family_of(model: Any) -> KernelFamily | None:
    """The family registered for ``type(model)`` exactly, or None."""
    return FAMILIES.get(type(model))


_announced: set[str] = set()
#: examples per numba call of a snapshot pass (a fraction of a second on CoNLL NER)
SNAPSHOT_CHUNK = 512


class FusedProblem:
    """A problem with its family's packed data, gold statistics, scratch buffers and passes.

    Flat compact statistics of example i live at ``offsets[i]:offsets[i+1]`` of concatenated arrays
    (the layout of ``SSVMProblem.compact_gold_stats``). ``gold`` is the problem's stored copy, in the
    narrowest dtype that holds its values exactly (:func:`narrowest_exact`; the kernels read it into
    float64 arithmetic). ``family`` holds the solver loops; call them through the view's methods,
    which pass its arrays.
    """

    def __init__(self, problem: Any, family: KernelFamily, pack: Any, sizes: np.ndarray):
        self.problem = problem
        self.family = family
        self.pack = pack
        self.gold, self.offsets = problem.compact_gold_stats(stored=True)
        if not np.array_equal(np.diff(self.offsets), sizes):
            raise RuntimeError("fused kernels and the problem disagree on the statistics layout")
        width = int(sizes.max())
        self.theta_buf = np.empty(width)
        self.stats_buf = np.empty(width)
        self.direction_buf = np.empty(width)
        self._hinges = np.empty(2 * problem.n)
        self._smooth_pack: Any = None

    def warm_up(self, *passes: str, verbose: bool = False) -> None:
        """Load (or, the first time on this machine, compile) the named passes now, so that the cost
        is not charged to the first iteration; says so once per process when ``verbose``.

        ``passes`` among ``"hinge_terms"``, ``"adjoint_sum"``, ``"fw_pass"``, ``"oracle_steps"``
        (each called on zero examples, with the argument types of the real calls).
        """
        if verbose and self.family.name not in _announced:
            print(f"structopt: loading {self.family.name} kernels (compiled once per machine, then cached)…",
                  file=sys.stderr, flush=True)
        _announced.add(self.family.name)
        w = np.zeros(self.problem.n_params)
        none = self.offsets[:1]  # zero examples
        calls = {
            "hinge_terms": lambda: self.family.hinge_terms(w, self.pack, none, self.gold, self.theta_buf,
                                                           self.stats_buf, self._hinges),
            "adjoint_sum": lambda: self.family.adjoint_sum(self.gold, none, 1.0, w, self.pack),
            "fw_pass": lambda: self.fw_pass(w, self.problem.n, w, none),
            "oracle_steps": lambda: self.oracle_only(np.zeros(0, dtype=np.int64), w),
        }
        for name in passes:
            calls[name]()

    def hinge_terms(self, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(H_i(w), Delta(y_i, y_i*))`` for every example, in one fused pass (views of a buffer)."""
        self.family.hinge_terms(np.ascontiguousarray(w, dtype=np.float64), self.pack, self.offsets, self.gold,
                                self.theta_buf, self.stats_buf, self._hinges)
        n = self.problem.n
        return self._hinges[:n], self._hinges[n:]

    def mean_hinge(self, w: np.ndarray) -> float:
        """``mean_i H_i(w)`` in one fused pass."""
        return float(np.mean(self.hinge_terms(w)[0]))

    def oracle_only(self, order: np.ndarray, w: np.ndarray) -> float:
        """The oracle calls of a pass over ``order`` at fixed ``w``, nothing else (timing baseline)."""
        return self.family.oracle_steps(np.asarray(order, dtype=np.int64), w, self.pack, self.offsets,
                                        self.theta_buf, self.stats_buf)

    def add_adjoint(self, blocks: np.ndarray, scale: float, out: np.ndarray) -> None:
        """``out += scale * sum_i A_i^T blocks_i`` for concatenated compact statistics ``blocks``."""
        self.family.adjoint_sum(blocks, self.offsets, scale, out, self.pack)

    def fw_pass(self, w: np.ndarray, n_total: int, w_s: np.ndarray, offsets: np.ndarray | None = None
                ) -> tuple[float, float]:
        """One oracle pass at ``w`` adding ``sum_i A_i^T (gold_i - stats_i*) / (lam n_total)`` to ``w_s``;
        returns ``(sum of losses, sum of hinges)`` (``offsets``: a prefix of the examples)."""
        return self.family.fw_pass(w, self.problem.lam, n_total, self.gold,
                                   self.offsets if offsets is None else offsets, self.pack, w_s, self.theta_buf,
                                   self.stats_buf)

    def ssg_steps(self, order: np.ndarray, w: np.ndarray, w_avg: np.ndarray, k: int, averaging: bool) -> int:
        """Pegasos steps on ``order`` (in place on ``w``, ``w_avg``); returns the step count."""
        return self.family.ssg_steps(order, self.problem.lam, w, w_avg, k, averaging, self.gold, self.offsets,
                                     self.pack, self.theta_buf, self.stats_buf)

    def block_index(self, m: np.ndarray) -> tuple:
        """The index the family's ``bcfw_steps`` keeps beside the block statistics ``m``."""
        return self.family.block_index(m, self.offsets, self.pack)

    def bcfw_steps(self, order: np.ndarray, line_search: bool, averaging: bool, state: Any, scalars: np.ndarray,
                   stages: int = 5, gaps: np.ndarray | None = None) -> None:
        """BCFW block steps on ``order`` over a ``BlockState`` (``scalars = [ell, v, k]`` in and out);
        ``gaps`` (n values, optional) receives each visited block's exact gap (gap sampling)."""
        p = self.problem
        self.family.bcfw_steps(order, line_search, averaging, p.n, p.lam, state.w, state.m, state.r, state.offsets,
                               state.ell_i, scalars, self.pack, self.theta_buf, self.stats_buf, self.direction_buf,
                               *state.fused_index, stages, gaps)

    # ------------------------------------------------------------------ smoothed oracles (SVRG, Casimir, SGD)
    def smooth_refusal(self, kind: str) -> str | None:
        """Why the smoothed passes below do not serve this problem with smoothing ``kind``, or None."""
        return self.family.smooth_refusal(self.problem.structure, kind)

    def _smooth_args(self, mu: float, kind: str, k: int) -> tuple:
        if self._smooth_pack is None:
            self._smooth_pack = self.family.smooth_pack(self)
        return float(mu), kind == "entropy", int(k), self.pack, self.gold, self.offsets, self._smooth_pack

    def smooth_snapshot(self, w: np.ndarray, mu: float, kind: str, k: int) -> tuple[np.ndarray, np.ndarray, float]:
        """SVRG snapshot at ``w`` in one pass: ``(diffs, grad, value)`` with ``diffs`` the examples' smoothed
        gradient statistics (flat, at ``offsets``), ``grad = mean_i A_i^T diffs_i`` and ``value`` the mean
        smoothed hinge (:func:`structopt.batch.smooth_snapshot`)."""
        diffs = np.empty(int(self.offsets[-1]))
        grad = np.zeros(self.problem.n_params)
        w = np.ascontiguousarray(w, dtype=np.float64)
        args = self._smooth_args(mu, kind, k)
        value, n = 0.0, self.problem.n
        for start in range(0, n, SNAPSHOT_CHUNK):  # Python (and so Ctrl-C) gets control back between chunks
            value += self.family.smooth_snapshot(w, *args, 1.0 / n, diffs, grad, start, min(n, start + SNAPSHOT_CHUNK))
        return diffs, grad, float(value)

    def node_potentials(self, w: np.ndarray) -> np.ndarray:
        """The node potentials of every example at ``w`` (the family's layout; the steps' ``c_theta``)."""
        return self.family.all_node_potentials(self, np.ascontiguousarray(w, dtype=np.float64))

    def smooth_steps(self, order: np.ndarray, rho: float, gamma: float, omega: float, mu: float, kind: str, k: int,
                     snapshot: np.ndarray | None, v: np.ndarray, c: np.ndarray | None, c_theta: np.ndarray | None,
                     P: np.ndarray, scalars: np.ndarray) -> None:
        """Lazy steps ``w <- rho w - gamma A_i^T d - gamma c`` for i in ``order`` on ``w = a v + b c`` (in place
        on ``v``, ``P`` and ``scalars = [a, b, B, C, weight]``, the fields of
        :class:`structopt.solvers._lazy.LazyIterate`); ``d`` is the smoothed gradient statistics at ``w``
        minus ``snapshot``'s (None: nothing subtracted); ``c_theta = node_potentials(c)``, computed once
        for the steps of an epoch."""
        empty = np.empty(0)
        self.family.lazy_smooth_steps(np.asarray(order, dtype=np.int64), float(rho), float(gamma), float(omega),
                                      *self._smooth_args(mu, kind, k), empty if snapshot is None else snapshot,
                                      snapshot is not None, v, empty if c is None else c,
                                      np.empty((0, 0)) if c_theta is None else c_theta, c is not None, P, scalars,
                                      self.stats_buf)

    def smooth_oracle_only(self, order: np.ndarray, w: np.ndarray, mu: float, kind: str, k: int) -> float:
        """The smoothed oracle calls of a pass over ``order`` at fixed ``w``, nothing else (timing baseline)."""
        return float(self.family.smooth_oracle_only(np.asarray(order, dtype=np.int64),
                                                    np.ascontiguousarray(w, dtype=np.float64),
                                                    *self._smooth_args(mu, kind, k), self.stats_buf))

    def zpass(self, geometry: str, **options: Any) -> Any:
        """The family's extragradient z-pass (see :meth:`KernelFamily.zpass`)."""
        return self.family.zpass(self, geometry, **options)


def build(problem: Any) -> tuple[FusedProblem | None, str]:
    """``(view, "")`` when a family serves ``problem``, else ``(None, reason)``. Use :func:`select`."""
    family = family_of(problem.model)
    if family is None:
        return None, f"no kernel family is registered for {type(problem.model).__name__}"
    if problem.constrained:
        return None, "the fused kernels do not project constrained weights"
    reason = family.refusal(problem.model, problem.structure, problem.loss)
    if reason is None:
        terms = [problem.loss_terms(i) for i in range(problem.n)] if problem.loss.decomposable else None
        packed = family.pack(FusedInputs(problem.model, problem.structure, problem.loss, problem.X, problem.Y, terms))
        if not isinstance(packed, str):
            return FusedProblem(problem, family, *packed), ""
        reason = packed
    return None, reason


def select(problem: Any, requested: bool | None = None, *, zpass: str | None = None) -> FusedProblem | None:
    """The fused view of ``problem`` for a solver, or None for the generic path: the one place where
    the choice is made.

    Parameters
    ----------
    problem : SSVMProblem
    requested : bool, optional
        None uses the fused path when available, False never, True demands it (raising
        :class:`NotSupportedError` with the reason when it is not available).
    zpass : str, optional
        The extragradient geometry: the family must also have a z-pass for the structure in it.
    """
    if requested is False:
        return None
    view = problem.fused()
    reason = getattr(problem, "fused_refusal", "the problem has no fused view")
    if view is not None and zpass is not None:
        reason = view.family.zpass_refusal(problem.structure, zpass)
        view = None if reason is not None else view
    if view is None and requested:
        raise NotSupportedError(f"{problem.model!r} with {problem.loss!r} has no fused "
                                f"{'extragradient pass' if zpass else 'kernels'}: {reason}")
    return view


__all__ = ["FAMILIES", "FusedInputs", "FusedProblem", "KernelFamily", "build", "family_of", "narrowest_exact",
           "register_family", "select"]
