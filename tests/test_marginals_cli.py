"""``structopt infer``: log Z and time printed, marginals written, clear errors for bad files."""

from __future__ import annotations

import math

import numpy as np
import pytest

from structopt.cli import main
from structopt.marginals import exact_inference, read_mar, read_uai

MODEL = """MARKOV
4
2 2 3 2
8
1 0
1 1
1 2
1 3
2 0 1
2 1 2
2 2 3
2 3 0
2
0.5 1.5
2
1.0 2.0
3
1.0 0.5 2.0
2
3.0 1.0
4
2.0 0.5 0.5 2.0
6
1.0 3.0 0.5 2.0 0.2 1.0
6
0.5 1.0 2.0 1.5 1.0 0.3
4
1.0 2.0 2.0 0.5
"""


@pytest.fixture
def model_file(tmp_path):
    path = tmp_path / "cycle.uai"
    path.write_text(MODEL)
    exact = exact_inference(read_uai(path))
    (tmp_path / "cycle.uai.PR").write_text(f"PR\n{exact.log_z / math.log(10):.12f}\n")
    return path, exact


@pytest.mark.parametrize("method, tol", [("exact", 1e-6), ("bfw", 0.6), ("trbp", 1.0), ("bp", 1.0), ("mf", 1.0)])
def test_infer_prints_log_z_and_writes_marginals(model_file, tmp_path, capsys, method, tol):
    path, exact = model_file
    out = tmp_path / f"{method}.MAR"
    assert main(["infer", str(path), "--method", method, "--out", str(out), "--no-progress"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"cycle.uai {method}: log Z ") and f"exact {exact.log_z:.6f}" in line and "s |" in line
    log_z = float(line.split("log Z ")[1].split()[0])
    assert abs(log_z - exact.log_z) <= tol
    marginals = read_mar(out)
    assert [m.size for m in marginals] == [2, 2, 3, 2]
    for m, e in zip(marginals, exact.marginals):
        assert m.sum() == pytest.approx(1.0, abs=1e-8)
        if method == "exact":
            np.testing.assert_allclose(m, e, atol=1e-9)


def test_infer_default_output_in_current_directory(model_file, tmp_path, monkeypatch, capsys):
    path, _ = model_file
    monkeypatch.chdir(tmp_path)
    assert main(["infer", str(path), "--method", "trbp", "--no-progress"]) == 0
    assert (tmp_path / "cycle.uai.trbp.MAR").exists()


@pytest.mark.parametrize("text, message", [
    ("MARKOV\n2\n2 2\n1\n3 0 1 1\n", "repeats a variable"),
    ("MARKOV\n3\n2 2 2\n1\n3 0 1 2\n8\n1 1 1 1 1 1 1 1\n", "only pairwise models"),
    ("MARKOV\n2\n2 2\n1\n2 0 1\n4\n1 1 1\n", "file ends early"),
])
def test_infer_bad_file_gives_a_clear_error(tmp_path, capsys, text, message):
    path = tmp_path / "bad.uai"
    path.write_text(text)
    assert main(["infer", str(path), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("structopt: error: ") and message in err and "Traceback" not in err


def test_infer_missing_file(tmp_path, capsys):
    assert main(["infer", str(tmp_path / "none.uai")]) == 2
    assert "no such file" in capsys.readouterr().err
