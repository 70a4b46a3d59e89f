"""Shared test configuration: hypothesis profiles and brute-force reference helpers."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

# modest example counts: the default suite must stay fast on a loaded 2-core machine
settings.register_profile("default", max_examples=25, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=300, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("default")


def pytest_sessionstart(session: pytest.Session) -> None:
    """Say at the start, on a fresh clone, why the first tests sit silent for minutes: numba compiles every
    kernel into an empty cache (the directory of this source version, :mod:`structopt._numba_cache`)."""
    if hasattr(session.config, "workerinput"):  # an xdist worker: the controller says it once
        return
    from structopt._numba_cache import CACHE_DIR

    if next(CACHE_DIR.rglob("*.nbi"), None) is None:  # stops at the first compiled kernel: the usual case costs ~0
        line = (f"numba kernels are compiling on this first run: a few minutes (cache {CACHE_DIR}; later runs "
                "reuse it)")
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(line, yellow=True)
        else:
            print(line, file=sys.stderr, flush=True)


def _simplex_projection_bisection(v: np.ndarray, iters: int = 200) -> np.ndarray:
    """Projection onto the simplex from its KKT conditions: u = max(v - tau, 0), sum u = 1.

    Independent of structopt's sort-based method: tau is found by bisection.
    """
    v = np.asarray(v, dtype=float)
    lo, hi = v.min() - 1.0, v.max()  # sum at lo >= 1, sum at hi = 0
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        if np.maximum(v - mid, 0.0).sum() > 1.0:
            lo = mid
        else:
            hi = mid
    return np.maximum(v - 0.5 * (lo + hi), 0.0)


def _l2_smoothed_max(z: np.ndarray, mu: float) -> tuple[float, np.ndarray]:
    """``max_{u in simplex} <u, z> - mu/2 (||u||^2 - 1)`` by bisection (reference)."""
    u = _simplex_projection_bisection(np.asarray(z, dtype=float) / mu)
    return float(u @ z - 0.5 * mu * (u @ u - 1.0)), u


def _entropy_smoothed_max(z: np.ndarray, mu: float) -> tuple[float, np.ndarray]:
    """``mu log sum exp(z / mu)`` and the softmax, with the max shift done here (reference)."""
    z = np.asarray(z, dtype=float)
    m = z.max()
    w = np.exp((z - m) / mu)
    return float(m + mu * np.log(w.sum())), w / w.sum()


def _brute(structure, theta):
    """All outputs of an instance with their flat statistics and scores."""
    outs = structure.enumerate(theta)
    stats = [structure.stats(y, theta) for y in outs]
    flat = np.array([np.concatenate([np.ravel(f) for f in m]) for m in stats])
    scores = np.array([structure.score(theta, y) for y in outs])
    return types.SimpleNamespace(outputs=outs, stats=stats, flat=flat, scores=scores)


@pytest.fixture(scope="session")
def ref():
    """Reference implementations written for the tests (independent of structopt's)."""
    return types.SimpleNamespace(simplex=_simplex_projection_bisection, l2_max=_l2_smoothed_max,
                                 entropy_max=_entropy_smoothed_max, brute=_brute)


@pytest.fixture
def rng():
    return np.random.default_rng(12345)
