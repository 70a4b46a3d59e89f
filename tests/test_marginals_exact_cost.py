"""``exact`` inference estimates its cost before any work (issue 32: it ran 6.5 minutes with no word)."""

from __future__ import annotations

import time

import numpy as np
import pytest
from _marginals_models import ising_grid, random_mrf, random_tree_edges

from structopt.cli import main
from structopt.errors import NotSupportedError
from structopt.marginals import exact as exact_module
from structopt.marginals import exact_inference, read_uai
from structopt.marginals.exact import elimination_cost, elimination_order, elimination_width
from tests._shared_data import SHARED_DATA, needs_data


@pytest.mark.parametrize("seed", range(6))
def test_the_estimate_counts_the_tables_elimination_builds(seed, monkeypatch):
    rng = np.random.default_rng(seed)
    mrf = ising_grid(int(rng.integers(2, 5)), int(rng.integers(3, 6)), 1.0, rng)
    order = elimination_order(mrf)
    cost = elimination_cost(mrf, order)
    built = []
    real_zeros = np.zeros

    def counting_zeros(shape, *args, **kwargs):  # every table _eliminate builds starts as np.zeros(shape)
        out = real_zeros(shape, *args, **kwargs)
        built.append(out.size)
        return out

    monkeypatch.setattr(exact_module.np, "zeros", counting_zeros)
    exact_module._log_z_elimination(mrf, order, [mrf.unary(v) for v in range(mrf.n_nodes)], 1 << 22)
    monkeypatch.undo()
    assert cost.entries == sum(built) and cost.largest_table == max(built) == elimination_width(mrf, order)
    assert cost.eliminations == 1 + int(mrf.cards.sum())
    tree = random_mrf([3] * 7, random_tree_edges(7, rng), rng)
    assert elimination_cost(tree).treewidth == 1


def test_a_run_estimated_too_long_is_refused_before_any_work_and_a_long_one_announced(monkeypatch, capsys):
    mrf = ising_grid(4, 5, 1.0, np.random.default_rng(0))  # 2**20 assignments: elimination

    def no_work(*args, **kwargs):
        raise AssertionError("eliminated before refusing")

    with monkeypatch.context() as patch:
        patch.setattr(exact_module, "_log_z_elimination", no_work)
        with pytest.raises(NotSupportedError, match=r"exact inference is estimated at about .* s: 41 eliminations over "
                                                    r"a min-fill order of treewidth \d+, .* above max_seconds=1e-06 "
                                                    r"\(Python API\); use barrier_fw \(--method bfw"):
            exact_inference(mrf, max_seconds=1e-6)
        with pytest.raises(NotSupportedError, match=r"table of .* entries \(> max_table=4; min-fill treewidth"):
            exact_inference(mrf, max_table=4)
    monkeypatch.setattr(exact_module, "EXACT_WARN_SECONDS", 0.0)
    result = exact_inference(mrf, max_seconds=None)
    assert "structopt: exact inference estimated at about" in capsys.readouterr().err
    assert np.isfinite(result.log_z)


@needs_data("uai")
def test_infer_exact_on_a_segmentation_is_refused_at_once_with_the_estimate(tmp_path, capsys):
    path = SHARED_DATA / "uai" / "Segmentation_11.uai"
    cost = elimination_cost(read_uai(path))
    assert cost.seconds > 120  # measured: about 0.5 s per elimination, 457 eliminations
    start = time.perf_counter()
    assert main(["infer", str(path), "--method", "exact", "--out", str(tmp_path / "x.MAR")]) == 2
    assert time.perf_counter() - start < 5
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "exact inference is estimated at about" in err[0] and "--method bfw" in err[0]
    assert not (tmp_path / "x.MAR").exists()
