"""SparseMAP (Niculae, Martins, Blondel, Cardie, ICML 2018) over any structure, from its argmax oracle only.

``SparseMAP(θ) = argmax_{μ ∈ M} <θ, μ> − ½‖μ‖²`` is the Euclidean projection of the potentials θ onto
the marginal polytope ``M = conv{μ(y)}``. The forward is the active-set (min-norm-point) method of
:mod:`structopt.structures.backends` driven by the structure's ``argmax`` at ``θ − μ``: it returns μ*
as a sparse convex combination ``Σ_j α_j μ(y_j)`` of a few outputs, with the Frank–Wolfe gap as the
certificate of its accuracy. The backward is the Jacobian of the projection onto the affine hull of
the active face, ``∂μ*/∂θ = V (Z − s 1ᵀZ) Vᵀ`` (Prop. 1 of the paper), applied as a vector-Jacobian
product from the (small) Gram matrix of the active vertices.

Everything is numpy (float64) in the structure's own potentials layout, flattened by
:func:`structopt.potentials.flatten`; a framework's autograd wraps :func:`sparsemap` and
:func:`sparsemap_vjp`. A :class:`~structopt.structures.FactorGraph` gets SparseMAP over its marginal
polytope, with exact MAP (branch-and-bound) as the oracle.

LP-SparseMAP (Niculae & Martins 2020), the projection onto a factor graph's *local* polytope, is
:func:`lp_sparsemap`: here a QP over the structure's ``polytope()`` description (any structure; for one
whose description is exact it is SparseMAP), solved by cvxpy/Clarabel, with the backward through the
constraints tight at the optimum. The paper's AD3-based solver (a SparseMAP per factor) is not built.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from structopt.errors import InvalidInputError, NotSupportedError, refuse_nonfinite
from structopt.hooks import has_hook
from structopt.options import non_negative_int, positive, positive_int
from structopt.potentials import Potentials, flatten, unflatten

__all__ = ["LPSparseMAPResult", "SparseMAPResult", "face_directions", "lp_sparsemap", "lp_sparsemap_loss",
           "lp_sparsemap_vjp", "sparsemap", "sparsemap_loss", "sparsemap_vjp"]


@dataclass(frozen=True)
class SparseMAPResult:
    """The SparseMAP point, its active set and its certificate.

    Attributes
    ----------
    stats : Potentials
        ``μ* = Σ_j α_j μ(y_j)`` in the structure's statistics type (float64).
    outputs : list
        The active outputs ``y_j`` as the structure's ``argmax`` returns them.
    weights : (k,) array
        ``α_j > 0``, summing to 1.
    vertices : (k, d) array
        ``flatten(μ(y_j))``, affinely independent.
    gap : float
        Frank–Wolfe gap ``max_y <θ − μ*, μ(y) − μ*>`` at return (``‖μ* − μ_exact‖² <= gap``).
    iterations : int
        Oracle calls at ``θ − μ`` that added a vertex (the first argmax and the final certifying call
        are not counted).
    converged : bool
        ``gap <= tol``.
    face : (m, d) array or None
        Further vertices of the optimal face, outside the affine hull of ``vertices`` (None: none found):
        with them the backward spans the whole face (see ``face_tries`` of :func:`sparsemap`). They carry
        no weight.
    """

    stats: Potentials
    outputs: list
    weights: np.ndarray
    vertices: np.ndarray
    gap: float
    iterations: int
    converged: bool
    face: np.ndarray | None = None


# --------------------------------------------------------------------------- checks and the oracle (structopt.perturbed
# shares them; not part of the public API)
def check_theta(structure: Any, theta: Any, owner: str) -> tuple[np.ndarray, Potentials]:
    """``(flatten(theta), statistics template)`` after the checks every entry point makes before any work:
    potentials that are a NamedTuple of finite arrays in the full statistics layout."""
    if not (isinstance(theta, tuple) and hasattr(theta, "_fields")):
        raise InvalidInputError(f"{owner} needs theta as the structure's potentials (a NamedTuple of arrays), "
                                f"got {type(theta).__name__}")
    for label, field in zip(theta._fields, theta, strict=True):
        field = np.asarray(field)
        if field.dtype.kind not in "biuf":
            raise InvalidInputError(f"{owner} theta field {label} must be a numeric array, got dtype {field.dtype}")
        if field.dtype.kind == "f" and np.isneginf(field).any() and not np.isnan(field).any():
            # forbidden entries (which Chain's argmax honours) would make the projection's scores infinite
            raise InvalidInputError(f"{owner} theta potentials contain -inf ({label}); -inf entries (forbidden "
                                    "outputs) are not supported here: use the structure's masks (e.g. "
                                    "Chain(allowed=...)) or a large negative finite score")
    refuse_nonfinite(zip(theta._fields, theta, strict=True), f"{owner} theta")
    template = structure.expand(theta)
    flat = flatten(theta)
    size = flatten(template).size
    if size != flat.size:
        raise InvalidInputError(f"{owner} works in the statistics layout, but theta has {flat.size} entries and "
                                f"{structure.name}'s statistics have {size} (a compact layout, e.g. a shared "
                                "pairwise block): pass structure.expand(theta)")
    return flat, template


def _linear_oracle(structure: Any, oracle: Callable[[Potentials], Any] | None) -> Callable[[Potentials], Any]:
    """The exact linear maximisation oracle ``θ -> y``: ``oracle`` if given, else the structure's argmax,
    except where that argmax is not exact MAP at every direction: a structure with the ``map_labels`` hook
    (a ``FactorGraph`` or ``GraphStructure``, whose argmax may be AD3's relaxed point) gets its exact MAP,
    a ``BinaryGrid`` (min cut, supermodular directions only) gets :func:`_grid_oracle`. The classes are
    looked up among loaded modules only: a structure's class is loaded when it exists."""
    if oracle is not None:
        if not callable(oracle):
            raise InvalidInputError(f"oracle must be callable (theta -> output), got {type(oracle).__name__}")
        return oracle
    if has_hook(structure, "map_labels"):  # its argmax is a relaxation: exact MAP is the declared hook
        return lambda theta: structure.map_labels(theta, exact=True)
    import sys

    grids = sys.modules.get("structopt.structures.grid")  # only a loaded module can own the structure
    if grids is not None and isinstance(structure, grids.BinaryGrid):
        return _grid_oracle(structure)
    return structure.argmax


def _grid_oracle(structure: Any) -> Callable[[Potentials], Any]:
    """A binary grid's exact MAP at any direction: its own min-cut argmax where the direction is supermodular
    on every edge, else the exact MAP oracle of :mod:`structopt.marginals` on the grid as a pairwise MRF.

    SparseMAP asks for the argmax at ``θ − μ``, whose edges are not supermodular in general even when θ's
    are (``μ``'s interaction ``μ00 + μ11 − μ01 − μ10`` reaches 1), and the grid refuses those directions.
    """
    oracles: dict[tuple[int, int], tuple[Any, np.ndarray]] = {}

    def exact(theta: Potentials) -> np.ndarray:
        try:
            return structure.argmax(theta)
        except NotSupportedError:  # a direction that is not supermodular
            pass
        full = structure.expand(theta)
        H, W = full.unary.shape[:2]
        if (H, W) not in oracles:
            oracles[(H, W)] = _grid_mrf_oracle(H, W)
        oracle, order = oracles[(H, W)]
        tables = np.concatenate([full.horizontal.reshape(-1, 4), full.vertical.reshape(-1, 4)])[order]
        answer = oracle(np.concatenate([full.unary.ravel(), tables.ravel()]))
        return np.asarray(answer.assignment, dtype=np.int64).reshape(H, W)

    return exact


def _grid_mrf_oracle(H: int, W: int) -> tuple[Any, np.ndarray]:
    """The marginal-polytope MAP oracle of an H x W binary grid and the permutation from the grid's edge order
    (horizontal edges row-major, then vertical ones) to the MRF's (sorted pairs)."""
    from structopt.marginals.mrf import PairwiseMRF
    from structopt.marginals.oracles import MarginalPolytopeOracle

    node = np.arange(H * W).reshape(H, W)
    edges = np.concatenate([np.column_stack([node[:, :-1].ravel(), node[:, 1:].ravel()]),
                            np.column_stack([node[:-1, :].ravel(), node[1:, :].ravel()])]).reshape(-1, 2)
    mrf = PairwiseMRF.from_potentials([np.zeros(2)] * (H * W), edges, [np.zeros((2, 2))] * len(edges))
    position = {(int(i), int(j)): e for e, (i, j) in enumerate(edges)}
    order = np.array([position[(int(i), int(j))] for i, j in mrf.edges], dtype=np.int64)
    return MarginalPolytopeOracle(mrf), order


def vertex_oracle(structure: Any, theta: Potentials, template: Potentials, owner: str,
                   oracle: Callable[[Potentials], Any] | None = None) -> Callable[[np.ndarray], tuple[np.ndarray, Any]]:
    """``direction (flat) -> (flatten(μ(y)), y)`` with ``y`` the oracle's output at ``direction``."""
    argmax = _linear_oracle(structure, oracle)
    size = flatten(template).size

    def vertex(direction: np.ndarray) -> tuple[np.ndarray, Any]:
        y = argmax(unflatten(direction, theta))
        if isinstance(y, type(theta)):
            raise NotSupportedError(f"{owner} needs an oracle that returns outputs (vertices of the marginal "
                                    f"polytope); {structure.name}'s argmax returned a relaxed point: pass an exact "
                                    "oracle= (theta -> output)")
        mu = flatten(structure.stats(y, theta))
        if mu.size != size:
            raise InvalidInputError(f"{owner}: {structure.name}'s statistics have {mu.size} entries, its potentials "
                                    f"{size}; they must share one layout")
        return mu, y

    return vertex


def gold_stats(structure: Any, theta: Potentials, y_true: Any, size: int, owner: str) -> np.ndarray:
    """``flatten(μ(y_true))`` after the structure's own check of the output."""
    y = structure.validate_output(y_true, theta)
    mu = flatten(structure.stats(y, theta))
    if mu.size != size:
        raise InvalidInputError(f"{owner}: y_true's statistics have {mu.size} entries, theta {size}")
    return mu


def flat_gradient(grad: Any, size: int, owner: str) -> np.ndarray:
    """An upstream gradient as a finite flat (size,) float vector (potentials are flattened), or an error."""
    if isinstance(grad, tuple) and hasattr(grad, "_fields"):
        grad = flatten(grad)
    try:
        g = np.asarray(grad, dtype=float)
    except (TypeError, ValueError):
        raise InvalidInputError(f"{owner} needs grad as a flat float vector, got {type(grad).__name__}") from None
    if g.shape != (size,):
        raise InvalidInputError(f"{owner} needs grad of shape ({size},) (flattened potentials), got {g.shape}")
    if not np.all(np.isfinite(g)):
        raise InvalidInputError(f"{owner}: grad contains NaN or infinite values")
    return g


# --------------------------------------------------------------------------- forward
def sparsemap(structure: Any, theta: Potentials, *, tol: float = 1e-9, max_iter: int = 1000,
              warm_start: SparseMAPResult | None = None, oracle: Callable[[Potentials], Any] | None = None,
              face_tries: int = 2) -> SparseMAPResult:
    """SparseMAP: the projection of ``theta`` onto the marginal polytope, as a sparse mixture of outputs.

    Parameters
    ----------
    structure : Structure
        Any structure (built-in or a subclass); only its ``argmax``, ``stats`` and ``expand`` are used.
    theta : Potentials
        Potentials in the full statistics layout (``structure.expand(theta)`` for a compact one), finite.
    tol : float
        Stop when the Frank–Wolfe gap ``max_y <θ − μ, μ(y) − μ>`` is at most ``tol`` (absolute).
    max_iter : int
        Vertices added at most; the result then says ``converged=False``.
    warm_start : SparseMAPResult, optional
        A previous result on the same instance: its active set is the starting point (re-weighted for
        this ``theta`` first), which saves most oracle calls when ``theta`` moved little.
    oracle : callable, optional
        The exact linear maximisation oracle ``theta -> output`` (default: ``structure.argmax``; for a
        :class:`~structopt.structures.FactorGraph` or ``GraphStructure`` built with ``exact=False``,
        their exact MAP, since their argmax returns a relaxed point; for a
        :class:`~structopt.structures.BinaryGrid`, exact MAP also where ``θ − μ`` is not supermodular).
    face_tries : int
        At the optimum, oracle calls at ``θ − μ* + δr`` (r random, δ small) that find no new direction of the
        optimal face before the search for one stops (0: no search). The active set can span only a slice
        of the optimal face when that face is not a simplex: the vertices it misses would enter with weights
        below what the tolerance resolves (a 20 x 20 matching at ``tol=1e-9``: a few of ~90), or tied
        potentials (a grid's shared tables) put μ* on the slice exactly. μ* is right either way, its
        derivative is not: the backward needs the whole face. Each vertex found goes to ``result.face``;
        about ``face_tries`` + (vertices found) extra oracle calls.

    Returns
    -------
    SparseMAPResult

    Raises
    ------
    InvalidInputError
        For ``tol`` not > 0, ``max_iter`` < 1, non-finite or compact-layout ``theta``, or a warm start of
        another size; all before any oracle call.
    NotSupportedError
        When the oracle returns a relaxed point instead of an output.
    """
    from structopt.structures.backends import min_norm_active_set

    positive("sparsemap tol", tol)
    positive_int("sparsemap max_iter", max_iter)
    non_negative_int("sparsemap face_tries", face_tries)
    if warm_start is not None and not isinstance(warm_start, SparseMAPResult):
        raise InvalidInputError(f"sparsemap warm_start must be a SparseMAPResult, got {type(warm_start).__name__}")
    flat, template = check_theta(structure, theta, "sparsemap")
    if warm_start is not None and warm_start.vertices.shape[1] != flat.size:
        raise InvalidInputError(f"sparsemap warm_start has vertices of size {warm_start.vertices.shape[1]}, theta "
                                f"{flat.size}: it is from another instance")
    vertex = vertex_oracle(structure, theta, template, "sparsemap", oracle)
    start = None if warm_start is None else (warm_start.vertices, warm_start.weights, list(warm_start.outputs))
    active = min_norm_active_set(flat, vertex, tol=float(tol), max_iter=int(max_iter), start=start)
    converged = active.gap <= tol
    # (a forward stopped by max_iter is not at the optimum: no optimal face to complete)
    face = face_directions(vertex, flat, active.point, active.vertices, active.gap, int(face_tries)) \
        if active.status != "max_iter" and face_tries else None
    return SparseMAPResult(stats=unflatten(active.point, template), outputs=list(active.labels),
                           weights=active.weights, vertices=active.vertices, gap=active.gap,
                           iterations=active.iterations, converged=converged, face=face)


def face_directions(vertex: Callable[[np.ndarray], tuple[np.ndarray, Any]], theta: np.ndarray, mu: np.ndarray,
                    vertices: np.ndarray, gap: float, tries: int) -> np.ndarray | None:
    """Vertices of the face exposed by ``n = θ − μ*`` that leave the affine hull of the active ``vertices``.

    The argmax at ``n + δr`` is a vertex of that face maximising ``<r, .>`` over it when δ is below the score
    margin of the vertices outside it; one found outside the face (its score under ``n`` more than twice the
    forward's gap below ``<n, μ*>``) makes δ 100 times smaller. r is Gaussian, made orthogonal to the directions
    spanned so far: the vertices in their hull all score alike on it, so a face reaching beyond the hull
    has a vertex scoring higher (μ* is inside the face, so it has vertices on both sides of the hull), and
    one call finds it. Stops after ``tries`` calls in a row bring no new direction. Seeded: the same input
    gives the same answer.
    """
    n = theta - mu
    top = float(n @ mu)
    # in the face: a score under n within the forward's gap of the top (the oracle's last vertex scores the
    # gap above it) plus rounding; a looser test would take vertices the exact projection leaves out
    slack = 2.0 * gap + 1e-13 * max(1.0, float(np.abs(n).sum()))
    rng = np.random.default_rng(0)
    diff = vertices[1:] - vertices[0]  # the directions spanned so far, and their Gram matrix
    gram = diff @ diff.T
    solve = _gram_solver(gram)
    delta = 1e-6 * max(1.0, float(np.max(np.abs(n), initial=0.0)))
    found: list[np.ndarray] = []
    misses = 0
    while misses < tries:
        r = rng.standard_normal(theta.size)
        if len(diff):  # orthogonal to the directions found: the face's vertices in their hull tie on it
            r -= solve(diff @ r) @ diff
        v, _ = vertex(n + delta * r / max(float(np.max(np.abs(r))), 1e-300))
        if n @ v < top - slack:  # outside the face: the perturbation was too large
            delta *= 1e-2
            misses += 1
            continue
        w = v - vertices[0]
        inner = diff @ w
        # squared distance of w to the span of the directions so far (normal equations on their Gram matrix)
        spanned = float(inner @ solve(inner)) if len(diff) else 0.0
        if w @ w - spanned > 1e-9 * max(1.0, float(w @ w)):
            gram = np.block([[gram, inner[:, None]], [inner[None, :], np.array([[w @ w]])]])
            diff = np.vstack([diff, w])
            solve = _gram_solver(gram)
            found.append(v)
            misses = 0
        else:
            misses += 1
    return np.array(found) if found else None


def _gram_solver(gram: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """``b -> gram⁻¹ b`` by Cholesky (affinely independent directions: positive definite), least squares
    if it is numerically singular."""
    from scipy.linalg import cho_factor, cho_solve

    if not len(gram):
        return lambda b: b
    try:
        factor = cho_factor(gram, check_finite=False)
    except np.linalg.LinAlgError:
        return lambda b: np.linalg.lstsq(gram, b, rcond=None)[0]
    return lambda b: cho_solve(factor, b, check_finite=False)


# --------------------------------------------------------------------------- backward
def sparsemap_vjp(result: SparseMAPResult, grad: np.ndarray) -> np.ndarray:
    """Vector-Jacobian product of SparseMAP: ``(∂μ*/∂θ)ᵀ g`` for a flat upstream gradient ``g``.

    On the active set, ``μ*`` is the projection of θ onto the affine hull of the active vertices, so its
    Jacobian is the orthogonal projector onto their directions, ``V (Z − s 1ᵀZ) Vᵀ`` with ``Z = (VᵀV)⁻¹``
    and ``s = Z1 / 1ᵀZ1`` (Niculae et al. 2018, Prop. 1). It is computed as ``Dᵀ (D Dᵀ)⁻¹ D g`` with
    ``D`` the differences to the first vertex, which is the same matrix and needs no inverse of ``VᵀV``
    (singular when the origin is an active vertex). Symmetric, so it is also the Jacobian-vector product.
    Valid where the active face does not change (almost every θ). The vertices of ``result.face`` join the
    active ones: the derivative is the projector onto the whole optimal face's directions, also where the
    active set spans only a slice of it (see ``face_tries`` of :func:`sparsemap`).

    Parameters
    ----------
    result : SparseMAPResult
    grad : (d,) array (or the structure's potentials, flattened here)

    Returns
    -------
    (d,) array
    """
    if not isinstance(result, SparseMAPResult):
        raise InvalidInputError(f"sparsemap_vjp needs a SparseMAPResult, got {type(result).__name__}")
    vertices = result.vertices if result.face is None else np.vstack([result.vertices, result.face])
    g = flat_gradient(grad, vertices.shape[1], "sparsemap_vjp")
    if len(vertices) == 1:
        return np.zeros_like(g)  # a single vertex: μ* is locally constant
    diff = vertices[1:] - vertices[0]
    coef = np.linalg.lstsq(diff @ diff.T, diff @ g, rcond=None)[0]
    return coef @ diff


def sparsemap_loss(structure: Any, theta: Potentials, y_true: Any, **options: Any
                   ) -> tuple[float, np.ndarray, SparseMAPResult]:
    """The SparseMAP Fenchel–Young loss and its gradient in θ.

    ``L(θ; y) = <θ, μ*> − ½‖μ*‖² − <θ, μ(y)> + ½‖μ(y)‖² = ½‖θ − μ(y)‖² − ½‖θ − μ*‖²``, ≥ 0 and 0 exactly
    when ``μ* = μ(y)``; its gradient is ``μ* − μ(y)`` (Danskin: μ* maximises the inner problem).

    Parameters
    ----------
    structure, theta
        As for :func:`sparsemap`.
    y_true
        The gold output (checked by ``structure.validate_output``).
    **options
        Passed to :func:`sparsemap` (``tol``, ``max_iter``, ``warm_start``, ``oracle``, ``face_tries``).
        ``face_tries`` defaults to 0 here: the loss and its gradient need μ* only, not the optimal face
        that the layer's backward needs.

    Returns
    -------
    value : float
        The loss, clipped at 0: an inexact μ* lowers it by at most the returned gap, so a negative value
        is within the forward's certified accuracy.
    gradient : (d,) array
        ``flatten(μ*) − flatten(μ(y))``.
    result : SparseMAPResult
        The forward (for the caller's warm start and diagnostics).
    """
    unknown = sorted(set(options) - {"tol", "max_iter", "warm_start", "oracle", "face_tries"})
    if unknown:
        raise InvalidInputError(f"sparsemap_loss got unknown options {unknown}; it takes tol, max_iter, "
                                "warm_start, oracle and face_tries")
    flat, _ = check_theta(structure, theta, "sparsemap_loss")
    gold = gold_stats(structure, theta, y_true, flat.size, "sparsemap_loss")
    result = sparsemap(structure, theta, **{"face_tries": 0, **options})
    mu = flatten(result.stats)
    value = 0.5 * float((flat - gold) @ (flat - gold)) - 0.5 * float((flat - mu) @ (flat - mu))
    return max(value, 0.0), mu - gold, result


# --------------------------------------------------------------------------- LP-SparseMAP: the projection onto a
# polytope description (a factor graph's local polytope)
@dataclass(frozen=True)
class LPSparseMAPResult:
    """The projection of θ onto the structure's polytope description, its certificate and its derivative.

    Attributes
    ----------
    stats : Potentials
        ``μ* = argmin_{μ ∈ L} ½‖μ − θ‖²`` in the structure's statistics type (float64).
    aux : (n_aux,) array
        The auxiliary columns of the description at the optimum (empty without them).
    basis : (d, k) array
        Orthonormal basis of the directions μ* moves in: the statistics part of the null space of the
        constraints held tight. The Jacobian ``∂μ*/∂θ`` is ``basis basisᵀ``.
    n_active : int
        Inequality rows and bounds tight within ``tol`` (held tight by the backward), equalities not counted.
    violation : float
        Largest violation of the description by ``(μ*, aux)`` (primal feasibility).
    kkt : float
        Largest residual of stationarity ``θ − μ* = Σ λ_i a_i`` (multipliers fitted by bounded least squares,
        λ >= 0, on the tight rows, auxiliary columns included) and of dual feasibility (negative inequality
        multipliers).
    gap : float
        QP duality gap ``½‖μ* − θ‖² − D(λ)`` at those multipliers (≥ 0 up to rounding when ``kkt`` is small).
    """

    stats: Potentials
    aux: np.ndarray
    basis: np.ndarray
    n_active: int
    violation: float
    kkt: float
    gap: float


def _polytope_of(structure: Any, template: Potentials, owner: str) -> Any:
    """The structure's polytope description, or a NotSupportedError naming the structure."""
    from structopt.structures.base import Polytope

    try:
        poly = structure.polytope(template)
    except NotImplementedError:
        poly = None
    if not isinstance(poly, Polytope):
        raise NotSupportedError(f"{owner} needs a structure whose polytope() returns a Polytope; "
                                f"{getattr(structure, 'name', type(structure).__name__)} gives none")
    return poly


def _solve_projection(poly: Any, target: np.ndarray, name: str) -> tuple[np.ndarray, np.ndarray]:
    """``(z*, u*)``: the projection QP over the description, built by ``Polytope.cvxpy`` (as ``project_qp``),
    solved by Clarabel at tight tolerances."""
    import cvxpy as cp

    z, constraints = poly.cvxpy()
    problem = cp.Problem(cp.Minimize(0.5 * cp.sum_squares(z - target)), constraints)
    problem.solve(solver=cp.CLARABEL, tol_gap_abs=1e-11, tol_gap_rel=1e-11, tol_feas=1e-11)
    if problem.status in ("infeasible", "infeasible_inaccurate"):
        raise InvalidInputError(f"{name}'s polytope has no point: nothing to project onto")
    if problem.status not in ("optimal", "optimal_inaccurate"):
        raise RuntimeError(f"LP-SparseMAP projection QP of {name} failed: {problem.status}")
    aux = [v for v in problem.variables() if v.id != z.id]
    u = np.asarray(aux[0].value, dtype=float).ravel() if aux else np.zeros(0)
    return np.asarray(z.value, dtype=float).ravel(), u


def _rows(poly: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(A, b, G, h)``: the description as dense ``A x = b``, ``G x <= h`` over ``x = [z; u]``, the bounds of
    ``z`` and ``u`` included as rows of G (dense: the backward factorises them anyway)."""
    n = poly.n_stats + poly.n_aux
    A = np.zeros((0, n)) if poly.A_eq is None else _dense(poly.A_eq, n)
    b = np.zeros(0) if poly.A_eq is None else np.asarray(poly.b_eq, dtype=float).ravel()
    lower, upper = poly.bounds().T
    eye = np.eye(n)
    lo, hi = np.flatnonzero(np.isfinite(lower)), np.flatnonzero(np.isfinite(upper))
    blocks = [] if poly.A_ub is None else [_dense(poly.A_ub, n)]
    rhs = [] if poly.A_ub is None else [np.asarray(poly.b_ub, dtype=float).ravel()]
    G = np.vstack([*blocks, -eye[lo], eye[hi]])
    h = np.concatenate([*rhs, -lower[lo], upper[hi]])
    return A, b, G, h


def _dense(matrix: Any, n: int) -> np.ndarray:
    dense = matrix.toarray() if hasattr(matrix, "toarray") else np.asarray(matrix, dtype=float)
    return np.asarray(dense, dtype=float).reshape(-1, n)


def _null_directions(C: np.ndarray, d: int) -> np.ndarray:
    """Orthonormal basis of ``{z : exists u, C [z; u] = 0}`` (``z`` the first ``d`` columns): the null space
    of C by SVD, then the range of its ``z`` rows by a second SVD (this eliminates the auxiliary columns)."""
    n = C.shape[1]
    if C.shape[0]:
        _, sing, vt = np.linalg.svd(C)
        rank = int(np.sum(sing > 1e-10 * max(1.0, float(sing[0]))))
        null = vt[rank:].T
    else:
        null = np.eye(n)
    if null.shape[1] == 0:
        return np.zeros((d, 0))
    left, sing, _ = np.linalg.svd(null[:d], full_matrices=False)
    return left[:, sing > 1e-10]


def _multipliers(C: np.ndarray, residual: np.ndarray, n_eq: int) -> np.ndarray:
    """``argmin ‖Cᵀw − residual‖`` with the inequality part of ``w`` (after ``n_eq``) nonnegative."""
    from scipy.optimize import lsq_linear

    if not C.shape[0]:
        return np.zeros(0)
    lower = np.concatenate([np.full(n_eq, -np.inf), np.zeros(C.shape[0] - n_eq)])
    fit = lsq_linear(C.T, residual, bounds=(lower, np.full(C.shape[0], np.inf)), method="bvls")
    return np.asarray(fit.x, dtype=float)


def lp_sparsemap(structure: Any, theta: Potentials, *, tol: float = 1e-7) -> LPSparseMAPResult:
    """LP-SparseMAP: the Euclidean projection of ``theta`` onto the structure's polytope *description*.

    ``μ* = argmin_{μ ∈ L} ½‖μ − θ‖²`` with ``L`` what ``structure.polytope()`` describes: for a
    :class:`~structopt.structures.FactorGraph` the local polytope (Niculae & Martins 2020), an outer
    relaxation of the marginal polytope on a loopy graph, so μ* can be fractional where SparseMAP is a
    mixture of labelings; for a structure whose description is exact (a chain, a tree of tables) it is
    SparseMAP. The forward is one QP (cvxpy/Clarabel on ``Polytope.cvxpy``, like ``project_qp``), with its
    certificate: the primal violation, the KKT residual and the duality gap at multipliers fitted by
    bounded least squares (λ >= 0) on the tight rows.

    The backward (:func:`lp_sparsemap_vjp`): near θ, μ* is the projection onto the affine set where the
    constraints tight at μ* stay tight, so ``∂μ*/∂θ`` is the orthogonal projector onto the directions that
    keep them tight (auxiliary columns eliminated). Where a tight constraint has a zero multiplier (strict
    complementarity fails) the map is not differentiable; every constraint tight within ``tol`` is held
    tight, the one-sided derivative on the side where it stays tight (as sparsemax's support convention).
    Cost: a dense SVD of the tight rows, ``O(m n²)`` for ``m`` rows over
    ``n`` statistics and auxiliary columns: meant for small graphs (a few thousand entries at most).

    Parameters
    ----------
    structure : Structure
        Any structure with ``polytope()`` and ``expand``.
    theta : Potentials
        Potentials in the full statistics layout, finite.
    tol : float
        A constraint whose slack at the optimum is at most ``tol`` is tight (the QP is solved to ~1e-10).

    Returns
    -------
    LPSparseMAPResult

    Raises
    ------
    InvalidInputError
        For ``tol`` not > 0 or non-finite / compact-layout ``theta``, before any work.
    NotSupportedError
        For a structure without a ``polytope()`` description, before the solve.
    """
    positive("lp_sparsemap tol", tol)
    if not callable(getattr(structure, "polytope", None)) or not callable(getattr(structure, "expand", None)):
        raise NotSupportedError(f"lp_sparsemap needs a structure with polytope() and expand(), got "
                                f"{type(structure).__name__}")
    flat, template = check_theta(structure, theta, "lp_sparsemap")
    poly = _polytope_of(structure, template, "lp_sparsemap")
    if poly.n_stats != flat.size:
        raise InvalidInputError(f"lp_sparsemap: {structure.name}'s polytope has {poly.n_stats} statistics, theta "
                                f"{flat.size}")
    z, u = _solve_projection(poly, flat, structure.name)
    d = flat.size
    A, b, G, h = _rows(poly)
    x = np.concatenate([z, u])
    slack = h - G @ x
    violation = max(float(np.max(np.abs(A @ x - b), initial=0.0)), float(np.max(-slack, initial=0.0)))
    tight = np.flatnonzero(slack <= tol)
    C = np.vstack([A, G[tight]])
    # multipliers: θ − z = A_zᵀν + G_zᵀλ and 0 = A_uᵀν + G_uᵀλ on the tight rows, λ >= 0, by bounded least
    # squares (the local polytope's rows are redundant: the multipliers are not unique, and a plain
    # minimum-norm fit can pick negative λ where nonnegative ones exist)
    residual = np.concatenate([flat - z, np.zeros(u.size)])
    w = _multipliers(C, residual, A.shape[0])
    nu, lam = w[:A.shape[0]], w[A.shape[0]:]
    kkt = max(float(np.max(np.abs(C.T @ w - residual), initial=0.0)), float(np.max(-lam, initial=0.0)))
    s = C[:, :d].T @ w  # dual value at (ν, max(λ, 0)) with s the statistics part of Cᵀw
    dual = -0.5 * float(s @ s) + float(s @ flat) - float(nu @ b) - float(lam @ h[tight])
    gap = 0.5 * float((z - flat) @ (z - flat)) - dual
    return LPSparseMAPResult(stats=unflatten(z, template), aux=u, basis=_null_directions(C, d),
                             n_active=int(tight.size), violation=violation,
                             kkt=kkt, gap=gap)


def lp_sparsemap_vjp(result: LPSparseMAPResult, grad: np.ndarray) -> np.ndarray:
    """Vector-Jacobian product of LP-SparseMAP: ``(∂μ*/∂θ)ᵀ g = Q Qᵀ g`` with ``Q = result.basis``.

    The Jacobian is the orthogonal projector onto the directions that keep the tight constraints tight
    (see :func:`lp_sparsemap`), symmetric, so this is also the Jacobian-vector product.

    Parameters
    ----------
    result : LPSparseMAPResult
    grad : (d,) array (or the structure's potentials, flattened here)

    Returns
    -------
    (d,) array
    """
    if not isinstance(result, LPSparseMAPResult):
        raise InvalidInputError(f"lp_sparsemap_vjp needs an LPSparseMAPResult, got {type(result).__name__}")
    g = flat_gradient(grad, result.basis.shape[0], "lp_sparsemap_vjp")
    return result.basis @ (result.basis.T @ g)


def lp_sparsemap_loss(structure: Any, theta: Potentials, y_true: Any, *, tol: float = 1e-7
                      ) -> tuple[float, np.ndarray, LPSparseMAPResult]:
    """The LP-SparseMAP Fenchel–Young loss ``½‖θ − μ(y)‖² − ½‖θ − μ*‖²`` and its gradient ``μ* − μ(y)``.

    As :func:`sparsemap_loss` with the projection onto the polytope description (:func:`lp_sparsemap`);
    ≥ 0 since ``μ(y)`` lies in the description, 0 exactly when ``μ* = μ(y)``.

    Returns
    -------
    value : float
        The loss, clipped at 0 (the QP's accuracy can make an exact 0 slightly negative).
    gradient : (d,) array
    result : LPSparseMAPResult
    """
    positive("lp_sparsemap_loss tol", tol)
    flat, _ = check_theta(structure, theta, "lp_sparsemap_loss")
    gold = gold_stats(structure, theta, y_true, flat.size, "lp_sparsemap_loss")
    result = lp_sparsemap(structure, theta, tol=tol)
    mu = flatten(result.stats)
    value = 0.5 * float((flat - gold) @ (flat - gold)) - 0.5 * float((flat - mu) @ (flat - mu))
    return max(value, 0.0), mu - gold, result
