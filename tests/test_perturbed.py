"""The perturbed argmax and its Fenchel-Young loss: the Monte Carlo mean, F_ε and the Jacobian against exact
Gaussian integrals on the simplex, the 1/√M error rate, seeding, finite differences with common random numbers,
every registered structure's samples against enumeration, and bad input."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate
from scipy.special import ndtr

from structopt.errors import InvalidInputError
from structopt.perturbed import PerturbedResult, perturbed_argmax, perturbed_loss, perturbed_vjp
from structopt.potentials import flatten, unflatten
from structopt.structures import Chain, ChainPotentials, MultiClass
from structopt.structures.registry import registered_structures
from tests.test_sparsemap import CountingMultiClass  # an argmax that counts its calls

THETA = np.array([0.5, 0.0, -0.3, 0.2])
EPS = 0.7


def _pdf(z):
    return np.exp(-0.5 * z * z) / np.sqrt(2.0 * np.pi)


def _winner_density(theta: np.ndarray, eps: float, i: int):
    """z -> φ(z) P(class i wins | its noise is z) = φ(z) Π_{j≠i} Φ((θ_i − θ_j)/ε + z)."""
    others = np.delete(theta, i)
    return lambda z: _pdf(z) * np.prod(ndtr((theta[i] - others) / eps + z))


def exact_multiclass(theta: np.ndarray, eps: float) -> tuple[np.ndarray, float]:
    """E[onehot argmax(θ + εZ)] and F_ε(θ) = E[max_i θ_i + εZ_i] by one-dimensional quadrature."""
    p, value = np.zeros(theta.size), 0.0
    for i in range(theta.size):
        f = _winner_density(theta, eps, i)
        p[i] = integrate.quad(f, -12, 12, epsabs=1e-13, epsrel=1e-12)[0]
        value += integrate.quad(lambda z, f=f, i=i: (theta[i] + eps * z) * f(z), -12, 12, epsabs=1e-13,
                                epsrel=1e-12)[0]
    return p, value


def exact_jacobian(theta: np.ndarray, eps: float) -> np.ndarray:
    """∂p_i/∂θ_k = −(1/ε) ∫ φ(z) φ((θ_i − θ_k)/ε + z) Π_{j≠i,k} Φ((θ_i − θ_j)/ε + z) dz for k ≠ i; rows sum to 0
    (p is unchanged by adding a constant to θ)."""
    n = theta.size
    J = np.zeros((n, n))
    for i in range(n):
        for k in range(n):
            if k == i:
                continue
            rest = np.delete(theta, [i, k])
            def f(z, i=i, k=k, rest=rest):
                return _pdf(z) * _pdf((theta[i] - theta[k]) / eps + z) * np.prod(ndtr((theta[i] - rest) / eps + z))

            J[i, k] = -integrate.quad(f, -12, 12, epsabs=1e-12, epsrel=1e-10)[0] / eps
        J[i, i] = -J[i].sum()
    return J


@pytest.fixture(scope="module")
def reference():
    p, value = exact_multiclass(THETA, EPS)
    return p, value, exact_jacobian(THETA, EPS)


def _multiclass(theta=THETA):
    structure = MultiClass(theta.size)
    return structure, structure.Potentials(np.asarray(theta, dtype=float))


def test_mean_and_value_equal_the_exact_expectations_within_standard_errors(reference):
    p, value, _ = reference
    assert p.sum() == pytest.approx(1.0, abs=1e-9)
    structure, theta = _multiclass()
    M = 4000
    result = perturbed_argmax(structure, theta, epsilon=EPS, n_samples=M, seed=1)
    assert isinstance(result, PerturbedResult) and result.samples.shape == result.noise.shape == (M, 4)
    mean = flatten(result.stats)
    np.testing.assert_allclose(mean, result.samples.mean(axis=0), atol=1e-15)
    se = result.samples.std(axis=0) / np.sqrt(M)
    assert np.all(np.abs(mean - p) <= 4 * se)
    scores = np.max((THETA + EPS * result.noise), axis=1)
    assert result.value == pytest.approx(scores.mean(), abs=1e-12)
    assert abs(result.value - value) <= 4 * scores.std() / np.sqrt(M)


def test_error_shrinks_like_one_over_root_m(reference):
    p = reference[0]
    structure, theta = _multiclass()
    sizes = np.array([16, 64, 256, 1024])
    rms = []
    for M in sizes:
        errors = [np.sum((flatten(perturbed_argmax(structure, theta, epsilon=EPS, n_samples=int(M),
                                                   seed=1000 * int(M) + r).stats) - p) ** 2) for r in range(16)]
        rms.append(np.sqrt(np.mean(errors)))
    slope = np.polyfit(np.log(sizes), np.log(rms), 1)[0]
    assert -0.75 <= slope <= -0.3, (slope, rms)


def test_vjp_equals_the_exact_jacobian_within_standard_errors(reference):
    _, _, J = reference
    np.testing.assert_allclose(J, J.T, atol=1e-8)  # the Hessian of F_ε
    structure, theta = _multiclass()
    M = 4000
    result = perturbed_argmax(structure, theta, epsilon=EPS, n_samples=M, seed=2)
    for g in (np.array([1.0, -2.0, 0.5, 0.3]), np.eye(4)[2]):
        estimate = perturbed_vjp(result, g)
        a = result.samples @ g
        terms = (a - a.mean())[:, None] * result.noise / EPS * M / (M - 1)
        np.testing.assert_allclose(estimate, terms.mean(axis=0), atol=1e-12)
        assert np.all(np.abs(estimate - J.T @ g) <= 4 * terms.std(axis=0) / np.sqrt(M) + 1e-6)


def test_control_variate_lowers_the_variance_and_keeps_the_mean(reference):
    # the plain estimator (1/ε) mean(<g, μ_m> Z_m) against the control-variate one on the same samples
    _, _, J = reference
    structure, theta = _multiclass()
    g = np.array([1.0, 1.0, 1.0, 1.5])  # mostly a constant <g, μ>: the control variate removes it
    plain, controlled = [], []
    for seed in range(40):
        result = perturbed_argmax(structure, theta, epsilon=EPS, n_samples=64, seed=seed)
        plain.append((result.samples @ g) @ result.noise / (EPS * 64))
        controlled.append(perturbed_vjp(result, g))
    plain, controlled = np.array(plain), np.array(controlled)
    assert controlled.var(axis=0).sum() < 0.5 * plain.var(axis=0).sum()
    se = controlled.std(axis=0) / np.sqrt(len(controlled))
    assert np.all(np.abs(controlled.mean(axis=0) - J.T @ g) <= 4 * se + 1e-6)


def test_vjp_against_finite_differences_with_common_random_numbers():
    # the smoothed mean is smooth; with the same noise at θ ± h v its difference quotient estimates J v
    structure, theta = _multiclass()
    M, h = 4000, 0.1
    u, v = np.array([1.0, -2.0, 0.5, 0.3]), np.array([0.3, -1.0, 0.2, 0.5])
    plus = perturbed_argmax(structure, unflatten(THETA + h * v, theta), epsilon=EPS, n_samples=M, seed=3)
    minus = perturbed_argmax(structure, unflatten(THETA - h * v, theta), epsilon=EPS, n_samples=M, seed=3)
    np.testing.assert_array_equal(plus.noise, minus.noise)
    fd = u @ (flatten(plus.stats) - flatten(minus.stats)) / (2 * h)
    center = perturbed_argmax(structure, theta, epsilon=EPS, n_samples=M, seed=3)
    assert perturbed_vjp(center, u) @ v == pytest.approx(fd, rel=0.1)


@pytest.mark.slow
def test_vjp_against_finite_differences_on_a_chain():
    chain = Chain(2)
    rng = np.random.default_rng(6)
    theta = chain.expand(ChainPotentials(rng.normal(scale=0.5, size=(3, 2)), rng.normal(scale=0.5, size=(2, 2, 2))))
    flat = flatten(theta)
    M, h = 6000, 0.15
    u, v = rng.normal(size=flat.size), rng.normal(size=flat.size)
    plus = perturbed_argmax(chain, unflatten(flat + h * v, theta), n_samples=M, seed=4)
    minus = perturbed_argmax(chain, unflatten(flat - h * v, theta), n_samples=M, seed=4)
    fd = u @ (flatten(plus.stats) - flatten(minus.stats)) / (2 * h)
    center = perturbed_argmax(chain, theta, n_samples=M, seed=4)
    assert perturbed_vjp(center, u) @ v == pytest.approx(fd, rel=0.15, abs=0.05)


def test_seeding_reproduces_and_generators_are_accepted():
    structure, theta = _multiclass()
    a = perturbed_argmax(structure, theta, n_samples=8, seed=5)
    b = perturbed_argmax(structure, theta, n_samples=8, seed=5)
    c = perturbed_argmax(structure, theta, n_samples=8, seed=6)
    np.testing.assert_array_equal(a.noise, b.noise)
    np.testing.assert_array_equal(a.samples, b.samples)
    assert a.value == b.value and not np.array_equal(a.noise, c.noise)
    d = perturbed_argmax(structure, theta, n_samples=8, seed=np.random.default_rng(5))
    np.testing.assert_array_equal(a.noise, d.noise)
    one = perturbed_argmax(structure, theta, n_samples=1, seed=5)  # no control variate with one sample
    g = np.arange(4.0)
    np.testing.assert_allclose(perturbed_vjp(one, g), (one.samples[0] @ g) * one.noise[0] / 1.0)


# --------------------------------------------------------------------------- every structure, the loss
def _cases():
    rng = np.random.default_rng(12)
    sizes = {"chain": {"length": 3, "n_states": 2}, "multiclass": {"n_classes": 4},
             "matching": {"n_left": 3, "n_right": 3, "allow_unmatched": True}, "grid": {"height": 2, "width": 2},
             "box": {"height": 3, "width": 2}, "lp": {"n": 5}, "tree": {"n_nodes": 4, "n_states": 2},
             "factor_graph": {"n_vars": 3, "n_states": 2}, "dependency": {"n": 3}}
    assert set(sizes) <= set(registered_structures())
    for name in registered_structures():  # an unlisted structure runs at its example's default size
        structure, theta = registered_structures()[name].example(rng, integer=False, **sizes.get(name, {}))
        yield name, structure, structure.expand(theta)


CASES = list(_cases())


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_samples_are_the_best_outputs_of_each_perturbation(case):
    name, structure, theta = case
    result = perturbed_argmax(structure, theta, epsilon=1.5, n_samples=6, seed=0)
    vertices = np.array([flatten(structure.stats(y, theta)) for y in structure.enumerate(theta)])
    perturbed = flatten(theta) + 1.5 * result.noise
    best = np.max(perturbed @ vertices.T, axis=1)
    np.testing.assert_allclose(np.einsum("md,md->m", perturbed, result.samples), best, atol=1e-9, err_msg=name)
    assert all(np.any(np.all(vertices == s, axis=1)) for s in result.samples)
    assert result.value == pytest.approx(best.mean(), abs=1e-9)
    np.testing.assert_allclose(flatten(result.stats), result.samples.mean(axis=0), atol=1e-15)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_loss_is_nonnegative_its_gradient_matches_differences_and_zero_when_y_dominates(case):
    name, structure, theta = case
    rng = np.random.default_rng(13)
    outputs = structure.enumerate(theta)
    y = outputs[int(rng.integers(len(outputs)))]
    gold = flatten(structure.stats(y, theta))
    options = {"epsilon": 1.0, "n_samples": 8, "seed": 7}
    value, grad, result = perturbed_loss(structure, theta, y, **options)
    flat = flatten(theta)
    assert value >= 0.0
    assert value == pytest.approx(max(result.value - flat @ gold - result.noise.mean(axis=0) @ gold, 0.0), abs=1e-9)
    np.testing.assert_allclose(grad, flatten(result.stats) - gold, atol=1e-15)
    # with the same noise the estimate is piecewise linear in θ with exactly this gradient
    h, direction = 1e-7, rng.normal(size=flat.size)
    plus = perturbed_loss(structure, unflatten(flat + h * direction, theta), y, **options)[0]
    minus = perturbed_loss(structure, unflatten(flat - h * direction, theta), y, **options)[0]
    assert (plus - minus) / (2 * h) == pytest.approx(grad @ direction, abs=1e-5), name
    strong = unflatten(gold + 20.0 * (2.0 * gold - 1.0), theta)
    value, grad, result = perturbed_loss(structure, strong, y, **options)
    assert value == 0.0 and not grad.any(), name


def test_loss_is_positive_when_noise_makes_other_outputs_win(reference):
    structure, theta = _multiclass()
    value, grad, _ = perturbed_loss(structure, theta, 2, epsilon=EPS, n_samples=200, seed=1)
    F = reference[1]
    assert value > 0.3 and abs(value - (F - THETA[2])) < 0.1
    assert grad[2] < 0 and grad.sum() == pytest.approx(0.0, abs=1e-12)


# --------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(("theta", "options", "match"), [
    (np.array([0.0, np.nan, 1.0]), {}, "NaN"),
    (np.array([0.0, np.inf, 1.0]), {}, r"\+inf"),
    (np.zeros(3), {"epsilon": 0.0}, "epsilon"),
    (np.zeros(3), {"epsilon": -1.0}, "epsilon"),
    (np.zeros(3), {"epsilon": float("inf")}, "epsilon"),
    (np.zeros(3), {"n_samples": 0}, "n_samples"),
    (np.zeros(3), {"n_samples": 2.0}, "n_samples"),
    (np.zeros(3), {"seed": -1}, "seed"),
    (np.zeros(3), {"seed": "abc"}, "seed"),
])
def test_bad_input_is_refused_before_any_oracle_call(theta, options, match):
    structure = CountingMultiClass(3)
    CountingMultiClass.calls = 0
    with pytest.raises(InvalidInputError, match=match):
        perturbed_argmax(structure, structure.Potentials(theta), **options)
    with pytest.raises(InvalidInputError, match=match):
        perturbed_loss(structure, structure.Potentials(theta), 0, **options)
    assert CountingMultiClass.calls == 0


def test_bad_gradients_layouts_and_options():
    structure, theta = _multiclass()
    result = perturbed_argmax(structure, theta, n_samples=4)
    with pytest.raises(InvalidInputError, match="shape"):
        perturbed_vjp(result, np.zeros(3))
    with pytest.raises(InvalidInputError, match="PerturbedResult"):
        perturbed_vjp("result", np.zeros(4))
    with pytest.raises(InvalidInputError, match="unknown options"):
        perturbed_loss(structure, theta, 0, tol=1e-3)
    chain = Chain(2)
    compact = ChainPotentials(np.zeros((4, 2)), np.zeros((2, 2)))
    with pytest.raises(InvalidInputError, match=r"expand\(theta\)"):
        perturbed_argmax(chain, compact)
