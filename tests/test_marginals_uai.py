"""The shipped UAI instances (../shared/data/uai): reading, exact references, Barrier FW vs TRBP."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from structopt.marginals import barrier_fw, exact_inference, read_mar, read_pr, read_uai, trbp

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "uai"
INSTANCES = sorted(p.stem for p in DATA.glob("*.uai"))
pytestmark = pytest.mark.skipif(not INSTANCES, reason=f"no UAI instances in {DATA}")


def load(name: str):
    path = DATA / f"{name}.uai"
    return read_uai(path), read_pr(f"{path}.PR"), read_mar(f"{path}.MAR")


def marginal_l1(marginals, reference) -> float:
    return float(np.mean([np.abs(a - b).sum() for a, b in zip(marginals, reference)]))


@pytest.mark.parametrize("name", INSTANCES)
def test_instances_read_as_binary_pairwise_models(name):
    mrf, log_z, reference = load(name)
    assert mrf.is_binary() and len(reference) == mrf.n_nodes
    assert np.isfinite(mrf.theta).all()
    assert all(r.sum() == pytest.approx(1.0, abs=1e-4) for r in reference)
    assert 0 < mrf.n_edges <= 4 * mrf.n_nodes
    assert np.isfinite(log_z)


def test_elimination_reproduces_pr_and_mar_on_the_planar_grid():
    mrf, log_z, reference = load("Grids_12")  # 10×10, no wrap-around: treewidth 10
    exact = exact_inference(mrf, method="elimination")
    assert exact.log_z == pytest.approx(log_z, abs=1e-3)  # .PR holds 6 significant digits of log10 Z
    assert marginal_l1(exact.marginals, reference) < 1e-5


@pytest.mark.slow
@pytest.mark.parametrize("name", ["Grids_12", "Grids_13"])  # planar (elimination MAP) and toroidal (CP-SAT)
def test_barrier_fw_beats_trbp_and_bounds_log_z(name):
    mrf, log_z, reference = load(name)
    baseline = trbp(mrf)
    result = barrier_fw(mrf, time_limit=30.0)
    assert result.upper_bound >= log_z - 1e-3
    assert abs(result.log_z - log_z) < abs(baseline.log_z - log_z)
    assert marginal_l1(result.marginals, reference) < marginal_l1(baseline.marginals, reference)
