"""examples/convergence.py runs and its certificate holds: no method's primal falls below BCFW's lower bound."""

from __future__ import annotations

import runpy
from pathlib import Path

import matplotlib

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "convergence.py"


def test_example_runs_and_the_gap_brackets_every_primal(capsys):
    matplotlib.use("Agg")  # the script ends with plt.show()
    namespace = runpy.run_path(str(EXAMPLE), run_name="convergence_example")
    runs = namespace["runs"]
    assert set(runs) == {"bcfw", "frank_wolfe", "ssg"}
    lower = max(r["primal"] - r["gap"] for name in ("bcfw", "frank_wolfe") for r in runs[name].trace)
    for name, result in runs.items():
        assert all(r["primal"] >= lower - 1e-9 for r in result.trace), name  # the dual bound is valid
        assert result.trace[-1]["passes"] >= 15
    assert runs["bcfw"].trace[-1]["gap"] < runs["frank_wolfe"].trace[-1]["gap"]  # BCFW: n block steps per pass
    assert "gap" not in runs["ssg"].trace[-1]
    assert len(namespace["fig"].axes) == 2
    assert "optimum in [" in capsys.readouterr().out
