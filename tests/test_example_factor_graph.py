"""examples/factor_graph.py runs: the budget, the CRF beats thresholding, the fertility holds."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "factor_graph.py"


def test_example_runs(capsys):
    spec = importlib.util.spec_from_file_location("factor_graph_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = module.main()
    np.testing.assert_array_equal(out["entities"], [0, 0, 1, 0, 1, 0, 0])  # the two best, under the budget
    assert out["accuracy"] >= out["noisy"] + 0.08
    align = out["alignment"]
    assert align.sum(axis=1).max() <= 2 and align.sum(axis=0).max() <= 2 and align.sum() > 0
    assert "(b) test accuracy" in capsys.readouterr().out
