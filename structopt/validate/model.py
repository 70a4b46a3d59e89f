"""Check a model's linear map against its adjoint and its declared layouts (:func:`check_model`).

Like :func:`~structopt.validate.check_structure`, the checks are a table (:data:`MODEL_CHECKS`) of
functions of one input, each returning ``(ok, detail)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from structopt.structures.base import add, flatten, inner, random_like, scale
from structopt.validate.oracles import gap
from structopt.validate.report import ModelCheckReport, ModelCheckRow


@dataclass
class ModelCase:
    """One input under check: the model, the input ``x`` (validated), its index and the tolerance."""

    model: Any
    x: Any
    index: int
    rtol: float
    rng: np.random.Generator

    def weights(self) -> np.ndarray:
        """Random weights."""
        return self.rng.normal(size=self.model.n_params)

    def random_stats(self, theta: Any) -> Any:
        """Random statistics in the full layout of ``structure.expand(theta)``."""
        return random_like(self.model.structure.expand(theta), self.rng)

    def close(self, a: float, b: float) -> bool:
        """``|a - b| <= rtol (1 + |a| + |b|)``."""
        return abs(a - b) <= self.rtol * (1.0 + abs(a) + abs(b))


def check_potentials_type(case: ModelCase) -> tuple[bool, str]:
    """``potentials(x, w)`` is the structure's ``Potentials`` NamedTuple and ``expand`` accepts it."""
    structure, i = case.model.structure, case.index
    declared = getattr(structure, "Potentials", None)
    theta = case.model.potentials(case.x, case.weights())
    if not (isinstance(theta, tuple) and hasattr(theta, "_fields")):
        return False, f"example {i}: potentials are a {type(theta).__name__}, not a NamedTuple of arrays"
    if declared is not None and type(theta) is not declared:
        return False, f"example {i}: potentials are {type(theta).__name__}, structure declares {declared.__name__}"
    structure.expand(theta)
    from structopt.models.feature import FLAT_RULE, FeatureModel

    if isinstance(case.model, FeatureModel):  # its layout rule, in one line
        return True, f"{type(theta).__name__}, shape {np.shape(theta[0])}: {FLAT_RULE}"
    return True, type(theta).__name__


def check_linearity(case: ModelCase) -> tuple[bool, str]:
    """``potentials(x, a w1 + b w2) = a potentials(x, w1) + b potentials(x, w2)``."""
    model, x = case.model, case.x
    w1, w2 = case.weights(), case.weights()
    a, b = case.rng.normal(size=2)
    lhs = flatten(model.structure.expand(model.potentials(x, a * w1 + b * w2)))
    rhs = flatten(model.structure.expand(add(scale(model.potentials(x, w1), a), model.potentials(x, w2), b)))
    diff = gap(lhs, rhs)
    return diff <= case.rtol * (1.0 + float(np.max(np.abs(rhs), initial=0.0))), f"max deviation {diff:.1e}"


def check_adjoint(case: ModelCase) -> tuple[bool, str]:
    """``<A_x w, mu> = <w, A_x^T mu>`` for random w and statistics-shaped mu."""
    w = case.weights()
    theta = case.model.potentials(case.x, w)
    mu = case.random_stats(theta)
    lhs, rhs = inner(theta, mu), float(w @ case.model.features(case.x, mu))
    ok = case.close(lhs, rhs)
    return ok, f"<A w, mu> = {lhs:.6g}, <w, A^T mu> = {rhs:.6g}" + ("" if ok else f" (example {case.index})")


def check_reduce_stats(case: ModelCase) -> tuple[bool, str]:
    """``reduce_stats(mu)`` flattens to the potentials' size, with the same inner product and features."""
    model, x, i = case.model, case.x, case.index
    theta = model.potentials(x, case.weights())
    mu = case.random_stats(theta)
    reduced = flatten(model.reduce_stats(mu))
    flat_theta = flatten(theta)
    if reduced.size != flat_theta.size:
        return False, (f"example {i}: reduce_stats flattens to {reduced.size} entries, the potentials to "
                       f"{flat_theta.size}")
    lhs, rhs = inner(theta, mu), float(flat_theta @ reduced)
    if not case.close(lhs, rhs):
        return False, f"example {i}: <theta, mu> = {lhs:.6g} but <theta, reduce_stats(mu)> = {rhs:.6g}"
    g_full, g_red = model.features(x, mu), model.features(x, model.reduce_stats(mu))
    diff = gap(g_full, g_red)
    ok = diff <= case.rtol * (1.0 + float(np.max(np.abs(g_full), initial=0.0)))
    return ok, f"same size, inner product and features (deviation {diff:.1e})" if ok else \
        f"example {i}: features of reduce_stats(mu) differ by {diff:.1e}"


def check_features_sqnorm(case: ModelCase) -> tuple[bool, str]:
    """``features_sqnorm(x, mu)`` equals ``||features(x, mu)||^2``."""
    model, x = case.model, case.x
    mu = case.random_stats(model.potentials(x, model.zeros()))
    g = model.features(x, mu)
    lhs, rhs = float(model.features_sqnorm(x, mu)), float(g @ g)
    ok = abs(lhs - rhs) <= case.rtol * (1.0 + rhs)
    return ok, f"{lhs:.6g} vs ||features||^2 = {rhs:.6g}" + ("" if ok else f" (example {case.index})")


#: the rows of :func:`check_model` after ``validate_input``: (name, check, repeated for every trial)
MODEL_CHECKS: tuple[tuple[str, Callable[[ModelCase], tuple[bool, str]], bool], ...] = (
    ("potentials_type", check_potentials_type, False),
    ("linearity", check_linearity, True),
    ("adjoint", check_adjoint, True),
    ("reduce_stats", check_reduce_stats, True),
    ("features_sqnorm", check_features_sqnorm, True),
)


def check_model(model: Any, X: Sequence[Any], n_trials: int = 3, max_examples: int = 5, rtol: float = 1e-9,
                random_state: int | np.random.Generator | None = 0) -> ModelCheckReport:
    """Check a model's linear map against its adjoint and its declared layouts on a few inputs.

    Rows (each the worst case over the first ``max_examples`` inputs and ``n_trials`` random draws):

    - ``validate_input``: every input is accepted (the error message otherwise; for a
      :class:`~structopt.models.feature.FeatureModel` it states the layout rule a structure must follow).
    - ``potentials_type``: ``potentials(x, w)`` is the structure's potentials type (its declared
      ``Potentials`` NamedTuple when it has one) and ``structure.expand`` accepts it.
    - ``linearity``: ``potentials(x, a w1 + b w2) = a potentials(x, w1) + b potentials(x, w2)``.
    - ``adjoint``: ``<A_x w, mu> = <w, A_x^T mu>`` for random w and random statistics-shaped mu
      (the full layout of ``structure.expand``), i.e. ``potentials`` and ``features`` agree.
    - ``reduce_stats``: ``reduce_stats(mu)`` flattens to the potentials' size, has the same inner
      product with the potentials (flat, no broadcasting) and the same ``features``.
    - ``features_sqnorm``: equals ``||features(x, mu)||^2``.

    Exceptions raised by the model are reported as failures with their message.

    Parameters
    ----------
    model : Model
    X : sequence of inputs
    n_trials : int
        Random (w, mu) draws per input.
    max_examples : int
        Inputs checked (the first ones).
    rtol : float
        Relative tolerance (scaled by the magnitudes of the products compared).
    random_state : int, Generator or None

    Returns
    -------
    ModelCheckReport
    """
    rng = random_state if isinstance(random_state, np.random.Generator) else np.random.default_rng(random_state)
    examples = list(X)[: int(max_examples)]
    worst: dict[str, tuple[bool, str]] = {}

    def record(check: str, ok: bool, detail: str) -> None:
        if check not in worst or (worst[check][0] and not ok):
            worst[check] = (ok, detail)

    for i, raw in enumerate(examples):
        try:
            x = model.validate_input(raw, i)
        except Exception as exc:  # reported, then the other checks of this input are meaningless
            record("validate_input", False, f"example {i}: {type(exc).__name__}: {exc}")
            continue
        record("validate_input", True, f"{len(examples)} inputs accepted")
        case = ModelCase(model, x, i, rtol, rng)
        for name, check, repeated in MODEL_CHECKS:
            for _ in range(int(n_trials) if repeated else 1):
                try:
                    ok, detail = check(case)
                except Exception as exc:  # a crash is a failed check, reported with its message
                    ok, detail = False, f"example {i}: {type(exc).__name__}: {exc}"
                record(name, ok, detail)
    return ModelCheckReport(repr(model), len(examples), [ModelCheckRow(n, ok, d) for n, (ok, d) in worst.items()])
