"""Factor graphs over discrete variables, with MAP by AD3 (LP-MAP with certificates) and exact MAP.

A :class:`FactorGraph` holds discrete variables (any number of states each) and factors over
subsets of them:

- dense tables over 1-3 variables (``add_table``; many pairwise ones at once: ``add_pairwise_tables``),
  scored by a table per factor;
- logic factors on binary variables (``add_logic``/``add_budget``): ``"xor"`` (exactly one on),
  ``"atmost1"``, ``"or"`` (at least one on) and budgets (at most k on). They are hard constraints
  with no score;
- structured factors (``add_structure``): a library ``Structure`` (``Chain``, ``TreeStructure``,
  ``BinaryGrid``, ``LPStructure`` over one variable per node; ``BipartiteMatching`` over one binary
  variable per pair) with its own potentials, tied to the variables through its per-node or
  per-edge hooks. AD3 solves its local QP with only its ``argmax`` (the generic factor's active-set
  method, :mod:`._ad3_structured`), or its ``project`` when its statistics are the variables' 0/1
  indicators. Its entries in ``factors`` are the structure's flattened potentials / statistics; its
  polytope rows are the structure's own (auxiliary variables included) plus the agreement of its
  variables' marginals. CP-SAT refuses graphs with structured factors (use ``"bnb"``).

Potentials and statistics share :class:`FactorGraphPotentials`: ``unary`` holds every variable's
per-state scores (variable i at ``unary_slice(i)``), ``factors`` every dense table's entries
(factor f at ``table_slice(f)``, row-major with the last scope variable changing fastest; logic
factors hold no entries). ``-inf`` entries forbid a state or a configuration (NaN and +inf are
refused). The statistics of a labeling are one-hot indicators; those of a relaxed answer are the
variables' and tables' marginals. The polytope is the *local* polytope (simplex per variable,
marginalisation constraints per table, ``lo <= Σ μ_i(1) <= hi`` per logic factor, which describes
each logic factor's own marginal polytope exactly); for graphs with cycles it is an outer
relaxation of the marginal polytope.

MAP (:meth:`FactorGraph.map`):

- ``"auto"``: AD3, then CP-SAT (branch-and-bound with structured factors) while a gap remains
  (:meth:`FactorGraph.auto`).
- ``"ad3"``: AD3 (Martins et al., JMLR 2015) in numba (:mod:`._ad3_kernels`): the LP-MAP optimum with
  a certified upper bound (the best dual value g(λ)) and the best rounded labeling (lower bound);
  ``optimal`` when the two meet. On a tree of tables the relaxation is tight.
- ``"bnb"``: exact, branch-and-bound over AD3 (bound by the dual, branch on the most fractional
  variable, prune by the incumbent).
- ``"cpsat"``: exact, OR-Tools CP-SAT on the same model with integer-scaled scores (stated
  resolution), the answer re-scored exactly.
- ``"lp"``: HiGHS on the local polytope; the LP value is the upper bound, rounding gives labels.
- ``"ad3_bnb"`` (prediction's default, :meth:`FactorGraph.map_labels`): AD3 at its default tolerance with
  its certificate, then branch-and-bound only while a gap remains, within a budget (seconds and nodes).

As a :class:`~structopt.structures.base.Structure`, ``argmax`` is the *relaxed* oracle by default:
it returns the statistics of the LP-MAP point found by AD3 (a fractional vertex of the local
polytope in general, approximate to AD3's tolerance), or the labeling when AD3 certifies it
optimal; ``FactorGraph(..., exact=True)`` makes it return the exact MAP labeling
(branch-and-bound). :meth:`FactorGraph.map_labels` always returns a labeling (exact MAP, or
AD3's rounding), whatever ``exact`` says. The per-node loss hooks ``states_per_node`` (the largest
state count) and ``node_potentials(costs)`` serve Hamming losses (see ``structopt.contract.HOOKS``).

Duplicate tables over the same set of variables are refused (add the tables yourself); logic
factors may repeat.

This module holds the class (building, layout, validation, scoring, the Structure interface); the
methods live one per module beside it, behind the class's public methods: ``_fg_ad3`` (AD3's
drivers), ``_fg_bnb``, ``_fg_cpsat``, ``_fg_lp`` (the local polytope and HiGHS), ``_fg_search``
(rounding, the feasibility repair, ``"auto"``), ``_fg_topk``; their shared types are in
``_fg_types`` and the MAP options' checks in ``_fg_options``.
"""

from __future__ import annotations

import itertools
import math
import numbers
import time
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from structopt.errors import InvalidInputError, NotSupportedError, example_error, refuse_nonfinite
from structopt.potentials import flatten
from structopt.structures import _ad3_kernels as K
from structopt.structures import _fg_ad3, _fg_bnb, _fg_cpsat, _fg_lp, _fg_search, _fg_topk
from structopt.structures._ad3_structured import StructuredFactor
from structopt.structures._fg_options import MAP_METHODS, MAP_OPTIONS, accepted_options, check_map_options  # noqa: F401
from structopt.structures._fg_types import (  # noqa: F401  (re-exported: the factor-graph modules' shared names)
    AD3_TIGHT,
    AD3_TOL,
    AUTO_AD3_SHARE,
    LP_AD3_ITERATIONS,
    LP_AD3_SECONDS,
    PREDICT_NODES,
    PREDICT_SECONDS,
    REPAIR_SECONDS,
    ROUNDING_SWEEPS,
    TOPK_MAX_SUBPROBLEMS,
    AD3State,
    FactorGraphPotentials,
    MAPInterrupted,
    MAPSolution,
    _Flat,
    check_time_limit,
)
from structopt.structures.base import Polytope, Structure, random_like, unsupported
from structopt.structures.registry import register_structure

_LOGIC_KINDS = {"xor": K.XOR, "atmost1": K.ATMOST1, "or": K.OR}
_KIND_NAMES = {K.DENSE: "table", K.XOR: "xor", K.ATMOST1: "atmost1", K.OR: "or", K.BUDGET: "budget",
               K.STRUCT: "structure"}
MAX_TABLE_ARITY = 3

def _as_index(value: Any, what: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise InvalidInputError(f"{what} must be an integer, got {value!r}")
    return int(value)


@register_structure("factor_graph")
class FactorGraph(Structure):
    """Discrete variables and factors over them (dense tables, logic factors); MAP by AD3.

    Parameters
    ----------
    n_states : sequence of int
        Number of states of each variable (each >= 1).
    exact : bool
        When True, :meth:`argmax` returns the exact MAP labeling (branch-and-bound over AD3)
        instead of the LP-MAP point.
    time_limit : float, optional
        Seconds allowed to :meth:`argmax` (None: no limit).

    Examples
    --------
    >>> fg = FactorGraph(n_states=[2, 3, 2])
    >>> f = fg.add_table([0, 1], np.zeros((2, 3)))
    >>> g = fg.add_logic("xor", [0, 2])
    >>> theta = fg.potentials(unary=[[0, 1], [0, 0, 2], [1, 0]])
    >>> fg.map(theta).labels                          # doctest: +SKIP
    array([1, 2, 0])
    """

    name = "FactorGraph"
    Potentials = FactorGraphPotentials

    example_variants = ({"n_vars": 1, "n_states": 3}, {"n_vars": 3, "n_states": 2}, {"n_vars": 4, "n_states": 3})

    @classmethod
    def example(cls, rng: np.random.Generator, *, integer: bool = True, n_vars: int = 4, n_states: int = 2,
                exact: bool | None = None) -> tuple[FactorGraph, FactorGraphPotentials]:
        """A random forest of dense pairwise tables (its local polytope is exact) over ``n_vars``
        variables of ``n_states`` states. ``exact`` defaults to ``integer``: ties make the LP-MAP
        optimum a face, whose interior point the relaxed argmax would return instead of a labeling."""
        fg = cls([int(n_states)] * int(n_vars), exact=integer if exact is None else exact)
        for v in range(1, fg.n_vars):
            if rng.random() < 0.8:
                fg.add_table([int(rng.integers(0, v)), v])
        return fg, random_like(fg.potentials(), rng, integer=integer)

    def __init__(self, n_states: Sequence[int], exact: bool = False, time_limit: float | None = None):
        if isinstance(n_states, np.ndarray) and n_states.ndim == 1 and np.issubdtype(n_states.dtype, np.integer):
            states = n_states.astype(np.int64)  # an integer array: checked at once (no Python loop over variables)
        else:
            try:
                states = np.array([_as_index(s, "a state count") for s in n_states], dtype=np.int64)
            except TypeError:
                raise InvalidInputError(f"n_states must be a sequence of integers, got {n_states!r}") from None
        if not states.size:
            raise InvalidInputError("a FactorGraph needs at least one variable")
        bad = np.flatnonzero(states < 1)
        if bad.size:
            i = int(bad[0])
            raise InvalidInputError(f"variable {i} has {int(states[i])} states; each variable needs at least 1")
        self.n_states = states
        self.exact = bool(exact)
        check_time_limit("FactorGraph time_limit", time_limit)
        self.time_limit = None if time_limit is None else float(time_limit)
        self._kinds_list: list[int] = []
        self._scopes_list: list[tuple[int, ...]] = []
        self._params_list: list[int] = []
        self._tables_list: list[np.ndarray | None] = []
        self._table_scopes_dict: dict[frozenset[int], int] = {}
        # pairwise tables added in bulk (add_pairwise_tables) on a graph without other factors: kept as one
        # (E, 2) array, the per-factor lists above made from it only when something asks for them
        self._bulk_edges: np.ndarray | None = None
        self._structs: dict[int, StructuredFactor] = {}
        self._unary_list: list[np.ndarray] | None = None
        self._flat: _Flat | None = None

    # the per-factor lists, made from a bulk edge array on first use
    def _lists(self) -> None:
        edges = self._bulk_edges
        if edges is None:
            return
        self._bulk_edges = None
        scopes = [tuple(e) for e in edges.tolist()]
        self._kinds_list = [K.DENSE] * len(scopes)
        self._scopes_list = scopes
        self._params_list = [0] * len(scopes)
        self._tables_list = [np.zeros((int(self.n_states[a]), int(self.n_states[b]))) for a, b in scopes]
        self._table_scopes_dict = {frozenset(sc): f for f, sc in enumerate(scopes)}

    @property
    def _kinds(self) -> list[int]:
        self._lists()
        return self._kinds_list

    @property
    def _scopes(self) -> list[tuple[int, ...]]:
        self._lists()
        return self._scopes_list

    @property
    def _params(self) -> list[int]:
        self._lists()
        return self._params_list

    @property
    def _tables(self) -> list[np.ndarray | None]:
        self._lists()
        return self._tables_list

    @property
    def _table_scopes(self) -> dict[frozenset[int], int]:
        self._lists()
        return self._table_scopes_dict

    @property
    def _unary(self) -> list[np.ndarray]:
        if self._unary_list is None:
            self._unary_list = [np.zeros(int(s)) for s in self.n_states]
        return self._unary_list

    def __repr__(self) -> str:
        return f"FactorGraph(n_vars={self.n_vars}, n_factors={self.n_factors}, exact={self.exact})"

    # ------------------------------------------------------------------ building
    @property
    def n_vars(self) -> int:
        """Number of variables."""
        return int(self.n_states.size)

    @property
    def n_factors(self) -> int:
        """Number of factors (tables and logic factors)."""
        return len(self._kinds_list) if self._bulk_edges is None else int(self._bulk_edges.shape[0])

    def _scope(self, variables: Sequence[int], what: str) -> tuple[int, ...]:
        try:
            scope = tuple(_as_index(v, f"{what}: a variable") for v in variables)
        except TypeError:
            raise InvalidInputError(f"{what}: variables must be a sequence of integers, got {variables!r}") from None
        if not scope:
            raise InvalidInputError(f"{what}: a factor needs at least one variable")
        for v in scope:
            if not 0 <= v < self.n_vars:
                raise InvalidInputError(f"{what}: variable {v} is out of range 0..{self.n_vars - 1}")
        if len(set(scope)) != len(scope):
            raise InvalidInputError(f"{what}: variable repeated in the scope {list(scope)}")
        return scope

    def add_table(self, variables: Sequence[int], table: Any = None) -> int:
        """Add a dense table factor over 1-3 distinct variables; return its index.

        Parameters
        ----------
        variables : sequence of int
            The scope, in the order of the table's axes.
        table : array_like, optional
            Scores, shape ``(n_states[v] for v in variables)`` (default zeros), used by
            :meth:`potentials`; ``-inf`` forbids a configuration, NaN and +inf are refused.

        Raises
        ------
        InvalidInputError
            Out-of-range or repeated variables, more than 3 variables, a second table over the same
            set of variables (refused rather than merged: add the tables yourself), a shape that does
            not match the state counts, NaN or +inf entries.
        """
        what = f"table factor {self.n_factors}"
        scope = self._scope(variables, what)
        if len(scope) > MAX_TABLE_ARITY:
            raise InvalidInputError(f"{what}: tables cover at most {MAX_TABLE_ARITY} variables, got {len(scope)}")
        key = frozenset(scope)
        if key in self._table_scopes:
            raise InvalidInputError(f"{what}: duplicate table over variables {sorted(scope)} (factor "
                                    f"{self._table_scopes[key]} already covers them; add the tables into one)")
        shape = tuple(int(self.n_states[v]) for v in scope)
        values = np.zeros(shape) if table is None else self._check_table(table, shape, what)
        self._table_scopes[key] = self.n_factors
        return self._append(K.DENSE, scope, 0, values)

    def add_pairwise_tables(self, edges: Any) -> np.ndarray:
        """Add one zero table per row ``(u, v)`` of ``edges`` (shape (E, 2)) at once; return their indices.

        The same checks as :meth:`add_table`, made on the whole array (no Python loop over edges): variables
        in range, distinct, no two tables over the same pair (either order). On a graph without factors the
        tables stay one array until a per-factor view is asked for, so building the factor graph of a pairwise
        MRF (``structopt.marginals.map_inference``) costs one compiled pass, which also builds the flat arrays.
        """
        arr = np.asarray(edges)
        if arr.size == 0:
            arr = arr.reshape(0, 2)
        if arr.ndim != 2 or arr.shape[1] != 2 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
            raise InvalidInputError(f"pairwise tables: edges must be an integer array of shape (E, 2), got "
                                    f"{arr.dtype} {arr.shape}")
        arr = np.ascontiguousarray(arr, dtype=np.int64)
        first = self.n_factors
        if first == 0 and self._bulk_edges is None:
            # one compiled pass checks the rows and builds the flat arrays; the array checks below run only to
            # name what is wrong
            layout = K.pairwise_layout(self.n_states, arr)
            if layout[0]:
                # the kernel's own copy of the rows: the graph does not change when the caller's array does
                self._bulk_edges = layout[8].reshape(-1, 2)
                self._flat = _Flat(self.n_states, *layout[1:])
                return np.arange(arr.shape[0])
            self._check_pairwise(arr, first)
            raise AssertionError("pairwise_layout refused edges that the array checks accept")
        self._check_pairwise(arr, first)
        taken = [sc for sc in map(frozenset, arr.tolist()) if sc in self._table_scopes]
        if taken:
            raise InvalidInputError(f"duplicate table over variables {sorted(taken[0])} (factor "
                                    f"{self._table_scopes[taken[0]]} already covers them; add the tables into one)")
        return np.array([self.add_table(e) for e in arr.tolist()], dtype=np.int64)

    def _check_pairwise(self, arr: np.ndarray, first: int) -> None:
        # the checks of add_pairwise_tables on an (E, 2) int64 array, by array operations: the first bad row named
        out = np.flatnonzero(((arr < 0) | (arr >= self.n_vars)).any(axis=1))
        if out.size:
            e = int(out[0])
            raise InvalidInputError(f"table factor {first + e}: a variable of {arr[e].tolist()} is out of range "
                                    f"0..{self.n_vars - 1}")
        loops = np.flatnonzero(arr[:, 0] == arr[:, 1])
        if loops.size:
            e = int(loops[0])
            raise InvalidInputError(f"table factor {first + e}: variable repeated in the scope {arr[e].tolist()}")
        key = np.minimum(arr[:, 0], arr[:, 1]) * self.n_vars + np.maximum(arr[:, 0], arr[:, 1])
        order = np.argsort(key, kind="stable")
        dup = np.flatnonzero(key[order][1:] == key[order][:-1])
        if dup.size:
            a, b = int(order[dup[0]]), int(order[dup[0] + 1])
            raise InvalidInputError(f"table factor {first + b}: duplicate table over variables "
                                    f"{sorted(arr[b].tolist())} (factor {first + a} already covers them; add the "
                                    f"tables into one)")

    @staticmethod
    def _check_table(table: Any, shape: tuple[int, ...], what: str) -> np.ndarray:
        try:
            values = np.array(table, dtype=np.float64)
        except (TypeError, ValueError):
            raise InvalidInputError(f"{what}: the table is not a numeric array") from None
        if values.shape != shape:
            raise InvalidInputError(f"{what}: table shape {values.shape} does not match the variables' state "
                                    f"counts {shape}")
        if np.isnan(values).any():
            raise InvalidInputError(f"{what}: the table contains NaN")
        if np.isposinf(values).any():
            raise InvalidInputError(f"{what}: the table contains +inf")
        return values

    def _binary_scope(self, variables: Sequence[int], what: str) -> tuple[int, ...]:
        scope = self._scope(variables, what)
        bad = [v for v in scope if self.n_states[v] != 2]
        if bad:
            raise InvalidInputError(f"{what}: logic factors need binary variables; variable {bad[0]} has "
                                    f"{int(self.n_states[bad[0]])} states")
        return scope

    def add_logic(self, kind: str, variables: Sequence[int]) -> int:
        """Add a hard logic factor on binary variables: ``"xor"`` (exactly one is 1), ``"atmost1"`` or ``"or"``."""
        if kind not in _LOGIC_KINDS:
            raise InvalidInputError(f"unknown logic factor {kind!r}; use one of {sorted(_LOGIC_KINDS)} "
                                    f"(or add_budget)")
        scope = self._binary_scope(variables, f"{kind} factor {self.n_factors}")
        return self._append(_LOGIC_KINDS[kind], scope, 0, None)

    def add_budget(self, variables: Sequence[int], k: int) -> int:
        """Add a hard budget factor on binary variables: at most ``k`` of them are 1."""
        what = f"budget factor {self.n_factors}"
        scope = self._binary_scope(variables, what)
        if isinstance(k, (bool, np.bool_)) or not isinstance(k, numbers.Integral):
            raise InvalidInputError(f"{what}: the budget must be an integer, got {k!r}")
        if not 0 <= int(k) <= len(scope):
            raise InvalidInputError(f"{what}: budget {int(k)} is outside 0..{len(scope)} (the scope's size)")
        return self._append(K.BUDGET, scope, int(k), None)

    def add_structure(self, structure: Structure, variables: Any, scores: Any, *, use_project: bool = True) -> int:
        """Add a structured factor: a library ``Structure`` over some variables; return its index.

        Parameters
        ----------
        structure : Structure
            A structure with the per-node hooks (``Chain``, ``TreeStructure``, ``BinaryGrid``,
            ``LPStructure``: one variable per node, in the order of its output array flattened) or
            ``edge_potentials`` (``BipartiteMatching``: one binary variable per (left, right) pair,
            row-major).
        variables : array_like of int
            The variables, one per node / pair (any shape; flattened row-major).
        scores : Potentials
            The structure's potentials (they fix the instance's shape); its entries in
            :meth:`potentials`' ``factors`` are ``flatten(structure.expand(scores))``.
        use_project : bool
            Solve AD3's local QP by the structure's Euclidean ``project`` when its statistics are
            exactly the variables' 0/1 indicators (matchings without unmatched scores, ``LPStructure``);
            otherwise (or False) by the active-set method on its ``argmax``.

        Raises
        ------
        InvalidInputError
            Variables out of range or repeated, a count that does not match the structure's nodes,
            state counts other than the structure's, non-finite scores, or a structure without the hooks.
        """
        what = f"structured factor {self.n_factors}"
        scope = self._scope(np.asarray(variables).ravel().tolist() if np.ndim(variables) else variables, what)
        sf = StructuredFactor(structure, scope, scores, self.n_states, what, use_project=use_project)
        f = self._append(K.STRUCT, scope, 0, sf.theta.copy())
        self._structs[f] = sf
        return f

    def structured(self, f: int) -> StructuredFactor:
        """The :class:`~structopt.structures._ad3_structured.StructuredFactor` of factor ``f``."""
        if f not in self._structs:
            raise InvalidInputError(f"factor {f} is not a structured factor")
        return self._structs[f]

    def set_unary(self, variable: int, scores: Any) -> None:
        """Set the default unary scores of ``variable`` (used by :meth:`potentials`)."""
        i = _as_index(variable, "variable")
        if not 0 <= i < self.n_vars:
            raise InvalidInputError(f"variable {i} is out of range 0..{self.n_vars - 1}")
        self._unary[i] = self._check_table(scores, (int(self.n_states[i]),), f"unary scores of variable {i}")

    def _append(self, kind: int, scope: tuple[int, ...], param: int, table: np.ndarray | None) -> int:
        self._lists()
        self._kinds.append(kind)
        self._scopes.append(scope)
        self._params.append(param)
        self._tables.append(table)
        self._flat = None
        return len(self._kinds) - 1

    def factor(self, f: int) -> tuple[str, tuple[int, ...], int]:
        """``(kind, scope, budget)`` of factor ``f`` (kind: "table", "xor", "atmost1", "or", "budget")."""
        return _KIND_NAMES[self._kinds[f]], self._scopes[f], self._params[f]

    # ------------------------------------------------------------------ layout
    @property
    def flat(self) -> _Flat:
        """The flat arrays the kernels run on (rebuilt after the graph changes)."""
        if self._flat is None:
            self._flat = self._build_flat()
        return self._flat

    def _build_flat(self) -> _Flat:
        if self._bulk_edges is not None:
            return self._build_flat_pairwise(self._bulk_edges)
        vstates = self.n_states
        n = vstates.size
        voff = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(vstates, out=voff[1:])
        fkind = np.array(self._kinds, dtype=np.int64)
        fparam = np.array(self._params, dtype=np.int64)
        sizes = np.array([len(s) for s in self._scopes], dtype=np.int64)
        fptr = np.zeros(fkind.size + 1, dtype=np.int64)
        np.cumsum(sizes, out=fptr[1:])
        evar = np.array([v for s in self._scopes for v in s], dtype=np.int64)
        eoff = np.zeros(evar.size + 1, dtype=np.int64)
        np.cumsum(vstates[evar], out=eoff[1:])
        dense = fkind == K.DENSE
        tsize = np.array([int(np.prod(vstates[list(s)])) if d else (self._structs[f].n_stats if f in self._structs
                                                                     else 0)
                          for f, (s, d) in enumerate(zip(self._scopes, dense))], dtype=np.int64)
        toff = np.zeros(fkind.size + 1, dtype=np.int64)
        np.cumsum(tsize, out=toff[1:])
        # an affinely independent active set has at most Σ S_j - k + 1 members
        cap = np.zeros(fkind.size, dtype=np.int64)
        if evar.size:
            cap = np.where(dense, np.add.reduceat(vstates[evar], fptr[:-1]) - sizes + 1, 0)
        aoff = np.zeros(fkind.size + 1, dtype=np.int64)
        np.cumsum(cap, out=aoff[1:])
        deg = np.bincount(evar, minlength=n).astype(np.int64)
        vptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(deg, out=vptr[1:])
        vedge = np.argsort(evar, kind="stable").astype(np.int64)
        efac = np.repeat(np.arange(fkind.size, dtype=np.int64), sizes)
        return _Flat(vstates, voff, deg, vptr, vedge, fkind, fparam, fptr, evar, eoff, toff, aoff, efac,
                     K.bfs_order(n, fptr, evar, vptr, vedge, efac))

    def _build_flat_pairwise(self, edges: np.ndarray) -> _Flat:
        # _build_flat for a graph of pairwise tables only (checked by add_pairwise_tables), in one compiled pass
        layout = K.pairwise_layout(self.n_states, edges)
        if not layout[0]:
            raise AssertionError("pairwise_layout refused edges that add_pairwise_tables accepted")
        return _Flat(self.n_states, *layout[1:])

    def unary_slice(self, i: int) -> slice:
        """Entries of variable ``i`` in ``unary``."""
        return slice(int(self.flat.voff[i]), int(self.flat.voff[i + 1]))

    def table_slice(self, f: int) -> slice:
        """Entries of dense or structured factor ``f`` in ``factors`` (empty for logic factors)."""
        return slice(int(self.flat.toff[f]), int(self.flat.toff[f + 1]))

    def potentials(self, unary: Sequence[Any] | None = None, tables: dict[int, Any] | None = None
                   ) -> FactorGraphPotentials:
        """Assemble potentials from the tables given to :meth:`add_table` and the unary scores.

        Parameters
        ----------
        unary : sequence of arrays, optional
            Per-variable scores (default: those set by :meth:`set_unary`, else zeros).
        tables : dict, optional
            Factor index -> table, overriding the tables given to :meth:`add_table` (for a
            structured factor: the structure's potentials, overriding those given to :meth:`add_structure`).
        """
        fl = self.flat
        if unary is not None:
            if len(unary) != self.n_vars:
                raise InvalidInputError(f"unary: {len(unary)} arrays for {self.n_vars} variables")
            us = [self._check_table(u, (int(self.n_states[i]),), f"unary scores of variable {i}")
                  for i, u in enumerate(unary)]
        else:
            us = self._unary
        out = np.zeros(int(fl.toff[-1]))
        tables = tables or {}
        for f, table in enumerate(self._tables):
            if f in self._structs:
                sf = self._structs[f]
                block = sf.theta if f not in tables else flatten(sf.structure.expand(tables[f]))
                if block.size != sf.n_stats or not np.isfinite(block).all():
                    raise InvalidInputError(f"structured factor {f}: scores must be finite potentials shaped like "
                                            f"those given to add_structure")
                out[fl.toff[f]:fl.toff[f + 1]] = block
                continue
            if self._kinds[f] != K.DENSE:
                continue
            if f in tables:
                shape = tuple(int(self.n_states[v]) for v in self._scopes[f])
                table = self._check_table(tables[f], shape, f"table factor {f}")
            out[fl.toff[f]:fl.toff[f + 1]] = table.ravel()
        return FactorGraphPotentials(np.concatenate(us).astype(np.float64), out)

    def check_theta(self, theta: Any, index: int | None = None) -> FactorGraphPotentials:
        """``theta`` as float arrays of the right sizes; NaN / +inf refused, -inf (forbidden) kept."""
        if not isinstance(theta, tuple) or len(theta) != 2:
            raise example_error(index, f"FactorGraph potentials must be FactorGraphPotentials(unary, factors), got "
                                       f"{type(theta).__name__}")
        fl = self.flat
        fields = []
        for name, arr, size in (("unary", theta[0], int(fl.voff[-1])), ("factors", theta[1], int(fl.toff[-1]))):
            try:
                arr = np.asarray(arr, dtype=np.float64).ravel()
            except (TypeError, ValueError):
                raise example_error(index, f"FactorGraph potentials: {name} is not numeric") from None
            if arr.size != size:
                raise example_error(index, f"FactorGraph potentials: {name} has {arr.size} entries, expected {size}")
            refuse_nonfinite(((name, arr),), "FactorGraph", index, allow_neginf=True)
            fields.append(arr)
        for f in self._structs:
            block = fields[1][fl.toff[f]:fl.toff[f + 1]]
            if not np.isfinite(block).all():
                raise example_error(index, f"FactorGraph potentials: structured factor {f} has -inf scores (only "
                                           f"tables and unary scores may forbid entries)")
        return FactorGraphPotentials(*fields)

    # ------------------------------------------------------------------ scoring
    def score_labels(self, theta: FactorGraphPotentials, y: np.ndarray) -> float:
        """Exact score of labeling ``y`` (-inf when it breaks a logic factor or hits a -inf entry)."""
        theta = self.check_theta(theta)
        y = self.validate_output(y)
        return self._score(theta, y)

    def _score(self, theta: FactorGraphPotentials, y: np.ndarray) -> float:
        # unchecked: theta and y already validated
        fl = self.flat
        total = float(K.score_labels(y, fl.n_vars, fl.voff, theta.unary, fl.fkind, fl.fparam, fl.fptr, fl.evar,
                                     fl.vstates, theta.factors, fl.toff))
        for f, sf in self._structs.items():
            if total == -np.inf:
                break
            total += sf.score(theta.factors[fl.toff[f]:fl.toff[f + 1]], y[list(sf.scope)])
        return total

    # ------------------------------------------------------------------ AD3
    def new_state(self, theta: FactorGraphPotentials, eta: float | None = None) -> AD3State:
        """A fresh AD3 iterate: uniform marginals over allowed states, λ = 0, empty active sets."""
        return _fg_ad3.new_state(self, theta, eta)

    def ad3(self, theta: FactorGraphPotentials, *, max_iter: int = 100_000, time_limit: float | None = None,
            tol_gap: float = AD3_TOL, tol_lp: float = AD3_TOL, tol_res: float | None = None, bound_every: int = 10,
            max_inner: int = 50, tau: float = 1.0, adapt_eta: bool = True, eta_iters: int = 500,
            state: AD3State | None = None,
            chunk_seconds: float = 0.1, stop_upper: float = -np.inf) -> tuple[MAPSolution, AD3State]:
        """Run AD3; return the solution and the final iterate (a warm start for another run).

        Parameters
        ----------
        theta : FactorGraphPotentials
        max_iter : int
            Iteration cap (this call).
        time_limit : float, optional
            Seconds; checked between chunks of iterations.
        tol_gap : float
            ``optimal`` when the best labeling's score >= upper bound - tol_gap·(1 + ``|upper|``) (a relative
            gap; default :data:`AD3_TOL` = 1e-6).
        tol_lp : float
            LP convergence: residuals below ``tol_res`` and ``|g(λ) - primal| <= tol_lp·(1 + |g|)`` (default
            1e-6: the bound within about 1e-8 of the LP optimum on 100-node 5-state graphs, in a third to a
            half of the iterations 1e-9 takes). ``tol_gap = tol_lp = 1e-9`` (:data:`AD3_TIGHT`) is the earlier
            default, still what the relaxed training oracle uses. Every stop reports the certified bound
            (``upper_bound``, the best dual value g(λ), valid whatever the tolerances) and the labeling's exact
            score.
        tol_res : float, optional
            Residual tolerance (sums of squares); default ``max(tol_lp, 1e-7)²`` per agreement entry (a
            root-mean-square residual of 1e-6 at the default, as the C++ AD3's; 1e-14 per entry at 1e-9).
        bound_every : int
            Iterations between evaluations of the rounded labelings, the primal objective and η's
            balancing, and of g(λ) (which a graph of binary pairwise tables without -inf entries gets at
            every iteration, fused into the local QPs at little cost).
        max_inner : int
            Cap on active-set iterations per dense factor per AD3 iteration.
        tau : float
            Multiplier step factor in (0, (1+√5)/2).
        adapt_eta : bool
            Residual balancing of η (Boyd et al. 2011, §3.4.1) ...
        eta_iters : int
            ... during the first ``eta_iters`` iterations of this call only; η is then frozen (ADMM
            converges for a fixed η, while balancing that never stops can keep toggling η and stall:
            on 100-node loopy graphs some calls ran 100,000 iterations without converging).
        state : AD3State, optional
            Warm start (its bounds are reset: they belong to the problem it came from).
        chunk_seconds : float
            Target seconds per compiled chunk (the loop returns to Python between chunks, so Ctrl-C
            and time limits are honoured within about this long).
        stop_upper : float
            Stop (status ``"below_target"``) once the certified bound is <= this value.
        """
        check_time_limit("time_limit", time_limit)
        return self._ad3(self.check_theta(theta), max_iter=max_iter, time_limit=time_limit, tol_gap=tol_gap,
                         tol_lp=tol_lp, tol_res=tol_res, bound_every=bound_every, max_inner=max_inner, tau=tau,
                         adapt_eta=adapt_eta, eta_iters=eta_iters, state=state, chunk_seconds=chunk_seconds,
                         stop_upper=stop_upper)

    def _ad3(self, theta: FactorGraphPotentials, **options: Any) -> tuple[MAPSolution, AD3State]:
        # AD3 on checked potentials: the internal entry point (branch-and-bound nodes, argmax, map)
        return _fg_ad3.ad3(self, theta, **options)

    def _ad3_solution(self, state: AD3State, best_y: np.ndarray, status: str, done: int, tol_gap: float, t0: float,
                      trace: list[dict], theta: FactorGraphPotentials | None = None) -> MAPSolution:
        return _fg_ad3.ad3_solution(self, state, best_y, status, done, tol_gap, t0, trace, theta)

    def _ad3_loop(self, *args: Any, **options: Any) -> tuple[int, int]:
        return _fg_ad3.ad3_loop(self, *args, **options)

    def _pair_fast(self, theta: FactorGraphPotentials) -> np.ndarray:
        return _fg_ad3.pair_fast(self, theta)

    def _ad3_structured(self, theta: FactorGraphPotentials, state: AD3State, t0: float, **options: Any
                        ) -> tuple[MAPSolution, AD3State]:
        # AD3 on a graph with structured factors (one compiled iteration at a time, see _fg_ad3)
        return _fg_ad3.ad3_structured(self, theta, state, t0, **options)

    # ------------------------------------------------------------------ branch and bound
    def bnb(self, theta: FactorGraphPotentials, *, time_limit: float | None = None, node_iter: int = 3000,
            max_nodes: int = 100_000, tol: float = 1e-9, state: AD3State | None = None) -> MAPSolution:
        """Exact MAP by branch-and-bound over AD3.

        Each node runs AD3 (warm-started from its parent) on the graph with some states forbidden
        (-inf unaries); its bound is the best dual value (capped by the parent's, valid since the
        child's labelings are a subset). A node closes when its rounded labeling meets its bound or
        the bound does not beat the incumbent. Otherwise it branches on the most fractional variable
        i with its likeliest state s: ``y_i = s`` versus ``y_i != s``. Best-bound order.
        ``optimal`` is True when every node closed (within ``tol``·(1+|bound|)). ``state`` warm-starts
        the root node (e.g. ``root_state`` of a previous answer on nearby potentials: a sequence of
        oracle calls); any iterate is a valid start, the bounds are recomputed.
        """
        check_time_limit("time_limit", time_limit)
        return self._bnb(self.check_theta(theta), time_limit=time_limit, node_iter=node_iter, max_nodes=max_nodes,
                         tol=tol, state=state)

    def _bnb(self, theta: FactorGraphPotentials, **options: Any) -> MAPSolution:
        # branch-and-bound on checked potentials (each node runs the unchecked AD3 entry point)
        return _fg_bnb.bnb(self, theta, **options)

    # ------------------------------------------------------------------ CP-SAT
    def cpsat(self, theta: FactorGraphPotentials, *, time_limit: float | None = None, resolution_bits: int = 30,
              num_workers: int = 1, tol: float = 1e-9, relative_gap: float | None = None,
              hint: np.ndarray | None = None) -> MAPSolution:
        """Exact MAP with OR-Tools CP-SAT on the same model, scores scaled to integers.

        Every score coefficient is rounded to a multiple of ``resolution = max|coef| / 2**resolution_bits``
        (scores are first shifted so that each block's best entry is 0). The answer is re-scored
        exactly in float; the upper bound is CP-SAT's bound over the rounded scores plus the largest
        total rounding error (half a unit per term). ``optimal`` means CP-SAT proved the rounded
        problem optimal and the exact score meets that bound within ``tol``·(1+|bound|) plus the
        rounding slack. ``relative_gap`` stops the search once CP-SAT's own relative gap is below it
        (``status`` is then ``"gap_limit"``). ``hint`` (a labeling, e.g. AD3's) is CP-SAT's first guess.
        Ctrl-C stops the search and raises :class:`MAPInterrupted` carrying the best labeling found so far
        and CP-SAT's bound at the stop.
        """
        return _fg_cpsat.cpsat(self, theta, time_limit=time_limit, resolution_bits=resolution_bits,
                               num_workers=num_workers, tol=tol, relative_gap=relative_gap, hint=hint)

    def _cpsat_answer(self, theta: FactorGraphPotentials, *args: Any) -> MAPSolution:
        return _fg_cpsat.cpsat_answer(self, theta, *args)

    # ------------------------------------------------------------------ LP (HiGHS)
    def local_polytope(self, theta: FactorGraphPotentials | None = None
                       ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray]:
        """Rows ``lower <= A [z; u] <= upper`` of the local polytope in the flat statistics layout.

        Variables' simplices, marginalisation of every table onto each of its variables,
        ``lo <= Σ z_i(1) <= hi`` per logic factor, and per structured factor its own polytope on its
        statistics block (its auxiliary variables u appended after the statistics) plus the agreement
        of its variables' marginals ``Aᵀ z_α + b = z_i``; with ``theta``, rows fixing the statistics
        of -inf entries at 0. The fourth value is the (n_aux, 2) bounds of u (the statistics lie in
        [0, 1]).
        """
        return _fg_lp.local_polytope(self, theta)

    @staticmethod
    def _with_aux_bounds(A: Any, lo: np.ndarray, hi: np.ndarray, c: np.ndarray, aux_bounds: np.ndarray
                         ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray]:
        return _fg_lp.with_aux_bounds(A, lo, hi, c, aux_bounds)

    def lp(self, theta: FactorGraphPotentials) -> MAPSolution:
        """The local-polytope LP with HiGHS (interruptible); rounding of its optimum gives the labels.

        The labels are the best of the LP optimum's roundings (:meth:`_round`) and, when they miss the
        LP value, of a short AD3 run's (``LP_AD3_ITERATIONS`` iterations, at most ``LP_AD3_SECONDS``).
        The LP value is an upper bound on the MAP value (to HiGHS' feasibility/optimality tolerances,
        about 1e-7); ``optimal`` when the rounded labeling's exact score meets it.
        """
        return _fg_lp.lp(self, theta)

    def _round(self, theta: FactorGraphPotentials, p: np.ndarray, qt: np.ndarray) -> tuple[np.ndarray, float]:
        return _fg_search.round_relaxed(self, theta, p, qt)

    def _repair(self, theta: FactorGraphPotentials, sol: MAPSolution, time_limit: float | None) -> MAPSolution:
        return _fg_search.repair(self, theta, sol, time_limit)

    # ------------------------------------------------------------------ AD3, then an exact search
    def auto(self, theta: FactorGraphPotentials, *, time_limit: float | None = None, tol: float = 1e-9,
             num_workers: int = 1) -> MAPSolution:
        """AD3, then an exact search while a gap remains: the default MAP method.

        AD3 runs first (at most ``AUTO_AD3_SHARE`` of the time limit); when its rounded labeling does
        not meet its bound, CP-SAT (hinted with AD3's labeling; branch-and-bound over AD3 on graphs with
        structured factors, which CP-SAT cannot model) runs for the rest of the time. The answer is the
        better labeling of the two with the smaller of the two certified bounds; ``optimal`` when they
        meet. On the UAI grids AD3's LP bound leaves a gap of about 23% that CP-SAT closes in about a
        second, while branch-and-bound leaves 7-11% after 20 s (benchmarks/map_default_results.md).
        Ctrl-C raises :class:`MAPInterrupted` with the better labeling so far and the smaller bound.
        """
        return _fg_search.auto(self, theta, time_limit=time_limit, tol=tol, num_workers=num_workers)

    @staticmethod
    def _combine(first: MAPSolution, second: MAPSolution, t0: float, tol: float) -> MAPSolution:
        return _fg_search.combine(first, second, t0, tol)

    # ------------------------------------------------------------------ one entry point
    def map(self, theta: FactorGraphPotentials | None = None, method: str = "ad3", time_limit: float | None = None,
            **options: Any) -> MAPSolution:
        """MAP of the factor graph by ``method`` in {"auto", "ad3", "bnb", "cpsat", "lp", "ad3_bnb"} (see the module
        docstring).

        ``theta`` defaults to :meth:`potentials`; ``options`` go to the method (:meth:`auto`, :meth:`ad3`,
        :meth:`bnb`, :meth:`cpsat`), each checked before any work against the one table of the methods'
        options (``structures._fg_options.MAP_OPTIONS``, which ``map_inference`` checks too). ``"ad3"`` and
        ``"lp"`` return a labeling whenever the hard factors allow one (an exact feasibility search repairs an
        empty rounding) and say ``"infeasible"`` only when proven.
        """
        check_map_options(method, options, "FactorGraph.map")
        check_time_limit("time_limit", time_limit)
        theta = self.potentials() if theta is None else theta
        if method == "auto":
            return self.auto(theta, time_limit=time_limit, **options)
        if method == "ad3":
            t0 = time.perf_counter()
            sol = self.ad3(theta, time_limit=time_limit, **options)[0]
            left = None if time_limit is None else time_limit - (time.perf_counter() - t0)
            return self._repair(self.check_theta(theta), sol, left)
        if method == "bnb":
            return self.bnb(theta, time_limit=time_limit, **options)
        if method == "cpsat":
            return self.cpsat(theta, time_limit=time_limit, **options)
        if method == "ad3_bnb":
            return _fg_search.ad3_bnb(self, self.check_theta(theta), time_limit=time_limit, **options)
        return self.lp(theta)

    # ------------------------------------------------------------------ Structure interface
    def argmax(self, theta: FactorGraphPotentials) -> Any:
        """The relaxed oracle by default: AD3's LP-MAP point (statistics, fractional in general).

        Returns the labeling (int64 array) when AD3 certifies it optimal, else the relaxed point as
        :class:`FactorGraphPotentials` (marginals, feasible up to AD3's residual tolerance). With
        ``exact=True``: the exact MAP labeling by branch-and-bound (within ``time_limit``).
        """
        return self.oracle(theta, self.exact, self.time_limit)

    def oracle(self, theta: FactorGraphPotentials, exact: bool, time_limit: float | None, *,
               checked: bool = False) -> np.ndarray | FactorGraphPotentials:
        """:meth:`argmax` with explicit options: the exact MAP labeling (``exact``), else AD3's certified
        labeling or its relaxed point. ``checked=True`` skips :meth:`check_theta` for callers whose
        potentials already passed an equivalent check (``GraphStructure``)."""
        theta = theta if checked else self.check_theta(theta)
        if exact:
            sol = self._bnb(theta, time_limit=time_limit)
            if sol.labels is None:
                raise InvalidInputError("FactorGraph potentials forbid every labeling (no feasible output)")
            return sol.labels
        return self.relaxed_oracle(theta, time_limit, checked=True)[0]

    def relaxed_oracle(self, theta: FactorGraphPotentials, time_limit: float | None = None,
                       state: AD3State | None = None, *, checked: bool = False
                       ) -> tuple[np.ndarray | FactorGraphPotentials, AD3State]:
        """The relaxed oracle (AD3's certified labeling or LP-MAP point) from the iterate ``state``
        (a warm start: the previous call's, for a sequence of nearby potentials), and AD3's final
        iterate. Any start is valid; the answer meets the same tolerances as a cold start's."""
        theta = theta if checked else self.check_theta(theta)
        sol, state = self._ad3(theta, time_limit=time_limit, state=state, tol_gap=AD3_TIGHT, tol_lp=AD3_TIGHT)
        if sol.status == "infeasible":
            raise InvalidInputError("FactorGraph potentials forbid every labeling (no feasible output)")
        if sol.optimal:  # AD3 certified its rounded labeling: the LP optimum is (also) this vertex
            return sol.labels, state
        return sol.marginals, state

    def map_labels(self, theta: FactorGraphPotentials, exact: bool | None = None, time_limit: float | None = None
                   ) -> np.ndarray:
        """A labeling for prediction, whatever :attr:`exact` says.

        ``exact=None`` (the default): AD3 at its default tolerance, then branch-and-bound only while a gap
        remains, within :data:`PREDICT_SECONDS` and :data:`PREDICT_NODES` (``map(method="ad3_bnb")``, whose
        answer carries the certificate: optimal when the bound meets the labeling's score). ``True``: the
        exact MAP labeling (branch-and-bound to the end). ``False``: AD3's best rounded labeling alone
        (optimal when AD3 certifies it, a heuristic otherwise). ``time_limit`` defaults to the graph's own.

        Raises
        ------
        InvalidInputError
            When the potentials and logic factors leave no feasible labeling (or none was found in time).
        """
        check_time_limit("time_limit", time_limit)
        return self.labels_checked(self.check_theta(theta), exact, time_limit)

    def labels_checked(self, theta: FactorGraphPotentials, exact: bool | None = None, time_limit: float | None = None
                       ) -> np.ndarray:
        """:meth:`map_labels` on potentials that already passed :meth:`check_theta` (or an equivalent check)."""
        if exact is not None and not isinstance(exact, (bool, np.bool_)):
            raise InvalidInputError(f"exact must be True, False or None, got {exact!r}")
        limit = self.time_limit if time_limit is None else time_limit
        if exact is None:
            sol = _fg_search.ad3_bnb(self, theta, time_limit=limit)
        elif exact:
            sol = self._bnb(theta, time_limit=limit)
        else:
            sol = self._repair(theta, self._ad3(theta, time_limit=limit)[0], limit)
        if sol.labels is None:
            raise InvalidInputError("FactorGraph potentials forbid every labeling (no feasible output found)")
        return sol.labels

    # ----- per-node loss hooks (Hamming, WeightedHamming; see structopt.contract.HOOKS)
    @property
    def states_per_node(self) -> int:
        """The largest state count of a variable: per-node costs are ``(n_vars, states_per_node)``
        arrays, entries beyond a variable's own state count unused (the per-node loss hook)."""
        return int(self.n_states.max())

    def node_potentials(self, costs: np.ndarray, like: FactorGraphPotentials | None = None
                        ) -> FactorGraphPotentials:
        """Potentials with per-variable scores ``costs[i, :n_states[i]]`` and no table scores."""
        costs = np.asarray(costs, dtype=np.float64)
        if costs.shape != (self.n_vars, self.states_per_node):
            raise InvalidInputError(f"FactorGraph node costs must have shape ({self.n_vars}, {self.states_per_node}),"
                                    f" got {costs.shape}")
        unary = costs.ravel() if (self.n_states == costs.shape[1]).all() else \
            np.concatenate([costs[i, :s] for i, s in enumerate(self.n_states)])
        return FactorGraphPotentials(unary, np.zeros(int(self.flat.toff[-1])))

    def stats(self, y: Any, like: FactorGraphPotentials | None = None) -> FactorGraphPotentials:
        """One-hot statistics of a labeling, or a relaxed point (FactorGraphPotentials) unchanged."""
        fl = self.flat
        if isinstance(y, tuple) and len(y) == 2:
            return self.check_theta(y)
        y = self.validate_output(y)
        unary = np.zeros(int(fl.voff[-1]))
        unary[fl.voff[:-1] + y] = 1.0
        factors = np.zeros(int(fl.toff[-1]))
        dense = np.flatnonzero(fl.fkind == K.DENSE)
        for f in dense:
            scope = fl.evar[fl.fptr[f]:fl.fptr[f + 1]]
            factors[fl.toff[f] + np.ravel_multi_index(tuple(y[scope]), tuple(fl.vstates[scope]))] = 1.0
        for f, sf in self._structs.items():
            z = sf.stats_of(y[list(sf.scope)])
            if z is None:
                raise InvalidInputError(f"labeling: variables {list(sf.scope)} are not an output of structured factor "
                                        f"{f} ({sf.structure.name})")
            factors[fl.toff[f]:fl.toff[f + 1]] = z
        return FactorGraphPotentials(unary, factors)

    def outputs(self, theta: FactorGraphPotentials) -> Iterator[np.ndarray]:
        """Every labeling that satisfies the logic factors and avoids -inf entries (tiny graphs only; a
        violated logic factor scores -inf)."""
        theta = self.check_theta(theta)
        for labels in itertools.product(*(range(int(s)) for s in self.n_states)):
            y = np.array(labels, dtype=np.int64)
            if np.isfinite(self.score_labels(theta, y)):
                yield y

    def polytope(self, theta: FactorGraphPotentials) -> Polytope:
        """The local polytope (see :meth:`local_polytope`) as equality and inequality rows."""
        theta = self.check_theta(theta)
        A, lo, hi, aux_bounds = self.local_polytope()
        eq = lo == hi
        A_eq, b_eq = A[eq], lo[eq]
        # one-sided rows (-inf lower or +inf upper) only on their finite side
        up_rows = np.flatnonzero(~eq & np.isfinite(hi))
        lo_rows = np.flatnonzero(~eq & np.isfinite(lo))
        A_ub = sp.vstack([A[up_rows], -A[lo_rows]]).tocsr() if up_rows.size + lo_rows.size else None
        b_ub = np.concatenate([hi[up_rows], -lo[lo_rows]]) if up_rows.size + lo_rows.size else None
        like = FactorGraphPotentials(np.zeros_like(theta.unary), np.zeros_like(theta.factors))
        n_aux = aux_bounds.shape[0]
        return Polytope(A_eq, b_eq, A_ub, b_ub, like, n_aux, aux_bounds if n_aux else None)

    def expand(self, theta: FactorGraphPotentials) -> FactorGraphPotentials:
        return self.check_theta(theta)

    def validate_output(self, y: Any, like: Any = None, index: int | None = None) -> np.ndarray:
        arr = np.asarray(y)
        if arr.shape != (self.n_vars,) or not (np.issubdtype(arr.dtype, np.integer) or arr.size == 0):
            raise example_error(index, f"a FactorGraph labeling must be an integer array of shape ({self.n_vars},), "
                                       f"got {arr.dtype} {arr.shape}")
        arr = arr.astype(np.int64)
        bad = np.flatnonzero((arr < 0) | (arr >= self.n_states))
        if bad.size:
            i = int(bad[0])
            raise example_error(index, f"labeling: variable {i} has state {int(arr[i])}, outside 0.."
                                       f"{int(self.n_states[i]) - 1}")
        return arr

    def topk(self, theta: FactorGraphPotentials, k: int) -> tuple[list[np.ndarray], np.ndarray]:
        """The ``k`` best labelings (fewer when fewer exist) and their scores, exactly.

        Lawler's partition (:func:`~structopt.structures._partition_topk.partition_topk`, shared with
        ``BipartiteMatching.topk``): after the j-th best labeling y is taken from a subproblem (a set of
        clamps), the rest of that subproblem splits into disjoint subproblems "the first t variables
        (in the subproblem's free order) as in y, variable t not in its state in y" — y's no-good
        constraint written as clamps, which branch-and-bound takes as -inf unaries. Every subproblem
        is solved exactly by :meth:`bnb`, so at most ``k·n_vars + 1`` of them are solved; ``k`` is
        refused when that exceeds :data:`TOPK_MAX_SUBPROBLEMS` (MAP is NP-hard: the K best would cost
        that many exact solves). Ties between equal scores are ordered arbitrarily.

        Raises
        ------
        InvalidInputError
            ``k`` not a positive integer, or potentials forbidding every labeling.
        NotSupportedError
            ``k·n_vars`` beyond the budget.
        RuntimeError
            A subproblem not proven optimal within ``time_limit`` (the list would not be exact).
        """
        return _fg_topk.topk(self, theta, k)

    @unsupported
    def marginals(self, theta: FactorGraphPotentials) -> tuple[float, FactorGraphPotentials]:
        raise NotSupportedError("FactorGraph has no exact marginals: the log-partition of a loopy factor graph is "
                                "#P-hard; structopt.marginals (TRW, Barrier Frank-Wolfe, BP) serves approximate "
                                "ones for pairwise models")


def brute_force_map(fg: FactorGraph, theta: FactorGraphPotentials) -> tuple[float, list[np.ndarray]]:
    """Best score and every labeling reaching it, by enumeration (tests only; -inf and [] if none)."""
    best, arg = -math.inf, []
    for y in fg.outputs(theta):
        s = fg.score_labels(theta, y)
        if s > best + 1e-12:
            best, arg = s, [y]
        elif abs(s - best) <= 1e-12:
            arg.append(y)
    return best, arg
