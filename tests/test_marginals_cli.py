"""``structopt infer``: log Z and time printed, marginals written, clear errors for bad files."""

from __future__ import annotations

import importlib
import itertools
import json
import math
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from _shared_data import SHARED_DATA, needs_data

from structopt import cli
from structopt.cli import main
from structopt.marginals import exact_inference, read_mar, read_uai

UAI = SHARED_DATA / "uai"

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


def _err_lines(capsys) -> tuple[str, list[str]]:
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return captured.out, captured.err.strip().splitlines()


# --------------------------------------------------------------------------- budgets, partial results, Ctrl-C
def test_help_states_the_default_time_limit_and_the_iteration_options(capsys):
    with pytest.raises(SystemExit):
        main(["infer", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"(default {cli.INFER_TIME_LIMIT:g})" in text and "--max-iter N" in text and "--tol TOL" in text
    assert "marked partial" in text


@pytest.fixture
def spy_infer(monkeypatch):
    """Record the options ``structopt infer`` passes, and run nothing."""
    seen = []

    def spy(model, method, **options):
        seen.append((method, options))
        raise KeyboardInterrupt  # also: a plain Ctrl-C (no partial result) is one line and exit 130

    monkeypatch.setattr(importlib.import_module("structopt.marginals.infer"), "infer", spy)
    return seen


@pytest.mark.parametrize("method", ["bfw", "trbp", "bp", "mf", "exact"])
def test_iterative_methods_get_the_default_time_limit(model_file, tmp_path, capsys, spy_infer, method):
    path, _ = model_file
    assert main(["infer", str(path), "--method", method, "--out", str(tmp_path / "m.MAR"), "--no-progress"]) == 130
    assert _err_lines(capsys)[1] == ["structopt: interrupted"]
    (called, options), = spy_infer
    expected = {} if method == "exact" else {"progress": False, "time_limit": cli.INFER_TIME_LIMIT}
    assert called == method and options == expected
    assert not (tmp_path / "m.MAR").exists()


def test_max_iter_tol_and_time_limit_are_passed_on(model_file, tmp_path, spy_infer):
    path, _ = model_file
    main(["infer", str(path), "--method", "trbp", "--out", str(tmp_path / "m.MAR"), "--max-iter", "7", "--tol",
          "0.01", "--time-limit", "2.5"])
    assert spy_infer == [("trbp", {"progress": True, "time_limit": 2.5, "max_iter": 7, "tol": 0.01})]


@pytest.mark.parametrize("flag, value", [("--time-limit", "5"), ("--max-iter", "3"), ("--tol", "0.1")])
def test_exact_refuses_iteration_options(model_file, tmp_path, capsys, spy_infer, flag, value):
    path, _ = model_file
    assert main(["infer", str(path), "--method", "exact", flag, value]) == 2
    assert _err_lines(capsys)[1] == [f"structopt: error: {flag} does not apply to --method exact (it does not "
                                     "iterate)"]
    assert spy_infer == []


@pytest.mark.parametrize("where", ["directory", "under_a_file"])
def test_out_is_checked_before_inference(model_file, tmp_path, capsys, spy_infer, where):
    path, _ = model_file
    if where == "directory":
        out, message = tmp_path, f"--out {tmp_path} is a directory; give a file path"
    else:
        (tmp_path / "file").write_text("")
        out = tmp_path / "file" / "m.MAR"
        message = f"--out {out}: {tmp_path / 'file'} is an existing file, not a directory"
    assert main(["infer", str(path), "--out", str(out)]) == 2
    assert _err_lines(capsys)[1] == [f"structopt: error: {message}"]
    assert spy_infer == []  # no inference ran


def test_unconverged_run_writes_its_iterate_marked_partial_and_warns(model_file, tmp_path, capsys):
    path, _ = model_file
    out = tmp_path / "m.MAR"
    assert main(["infer", str(path), "--method", "bp", "--max-iter", "2", "--tol", "0", "--out", str(out),
                 "--no-progress"]) == 0
    stdout, err = _err_lines(capsys)
    assert "| PARTIAL (iteration budget spent) |" in stdout and f"marginals in {out}" in stdout
    assert len(err) == 1 and err[0].startswith("structopt: warning: bp did not converge: budget of 2 sweeps spent "
                                               "(--max-iter) after 2 sweeps, largest message change ")
    assert "> tol 0 (--tol)" in err[0]
    summary = json.loads((tmp_path / "m.MAR.json").read_text())
    assert (summary["status"], summary["converged"], summary["partial"], summary["iterations"]) == (
        "max_iter", False, True, 2)
    assert summary["residual"] > 0 and summary["log_z"] == pytest.approx(float(stdout.split("log Z ")[1].split()[0]))
    assert [m.size for m in read_mar(out)] == [2, 2, 3, 2]


def test_converged_run_says_so_without_warning(model_file, tmp_path, capsys):
    path, _ = model_file
    assert main(["infer", str(path), "--method", "trbp", "--out", str(tmp_path / "m.MAR"), "--no-progress"]) == 0
    stdout, err = _err_lines(capsys)
    assert "| converged |" in stdout and err == []
    summary = json.loads((tmp_path / "m.MAR.json").read_text())
    assert summary["status"] == "converged" and summary["partial"] is False


def test_ctrl_c_writes_the_partial_result_and_exits_130(model_file, tmp_path, capsys, monkeypatch):
    path, _ = model_file
    baselines = importlib.import_module("structopt.marginals.baselines")
    real, calls = baselines._sweep, []

    def sweep(*args):  # Ctrl-C lands when the (uninterruptible) numba sweep returns
        calls.append(real(*args))
        if len(calls) == 5:
            raise KeyboardInterrupt
        return calls[-1]

    monkeypatch.setattr(baselines, "_sweep", sweep)
    out = tmp_path / "m.MAR"
    assert main(["infer", str(path), "--method", "trbp", "--tol", "0", "--max-iter", "1000", "--out", str(out),
                 "--no-progress"]) == 130
    stdout, err = _err_lines(capsys)
    assert err == [f"structopt: interrupted; partial marginals and log Z written to {out} and {out}.json"]
    assert "| PARTIAL (interrupted) |" in stdout
    summary = json.loads((tmp_path / "m.MAR.json").read_text())
    assert (summary["status"], summary["partial"], summary["iterations"]) == ("interrupted", True, 4)
    assert all(m.sum() == pytest.approx(1.0) for m in read_mar(out))
    assert not list(tmp_path.glob("*.tmp"))


@needs_data("uai")
def test_grids_12_trbp_and_bp_warn_that_they_did_not_converge(tmp_path, capsys):
    for method in ("trbp", "bp"):
        out = tmp_path / f"{method}.MAR"
        assert main(["infer", str(UAI / "Grids_12.uai"), "--method", method, "--out", str(out), "--no-progress"]) == 0
        stdout, err = _err_lines(capsys)
        assert "PARTIAL (iteration budget spent)" in stdout
        assert len(err) == 1 and err[0].startswith(f"structopt: warning: {method} did not converge: budget of 1000 "
                                                   "sweeps spent (--max-iter)")
        assert "its last iterate (partial); a larger --max-iter (e.g. 4000) would go further" in err[0]


@needs_data("uai")
def test_time_limit_on_a_slow_model_writes_the_partial_result(tmp_path, capsys):
    """Barrier Frank-Wolfe on a segmentation model runs for hours; in-process with a short limit (see the subprocess
    test below for the command)."""
    out = tmp_path / "seg.MAR"
    start = time.perf_counter()
    assert main(["infer", str(UAI / "Segmentation_11.uai"), "--time-limit", "0.5", "--out", str(out),
                 "--no-progress"]) == 0
    assert time.perf_counter() - start < 10
    stdout, err = _err_lines(capsys)
    assert "PARTIAL (time limit reached)" in stdout
    assert len(err) == 1 and "bfw did not converge: time limit of 0.5 s reached (--time-limit)" in err[0]
    assert "a longer --time-limit (e.g. 2) would go further" in err[0]
    strict_upper = json.loads((tmp_path / "seg.MAR.json").read_text())["upper_bound"]
    if strict_upper is not None:  # the certified bound is repeated in the warning
        assert f"log Z <= {strict_upper:.6f} holds (certified" in err[0]
    strict = json.loads((tmp_path / "seg.MAR.json").read_text(),  # no Infinity/NaN: other readers refuse them
                        parse_constant=lambda name: pytest.fail(f"{name} in the JSON summary"))
    assert strict["status"] == "time_limit" and strict["partial"] is True
    assert len(read_mar(out)) == 228


def _without_compile_lines(stderr: str) -> str:
    """``stderr`` without the command's numba compile announcements (printed only when the cache is cold)."""
    return "".join(line for line in stderr.splitlines(keepends=True)
                   if not line.startswith(("structopt: compiling", "structopt: still compiling")))


def _structopt(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "structopt", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
@needs_data("uai")
def test_time_limit_2_as_a_command(tmp_path):
    out = tmp_path / "seg.MAR"
    start = time.monotonic()
    done = _structopt("infer", str(UAI / "Segmentation_11.uai"), "--time-limit", "2", "--out", str(out),
                      "--no-progress")
    stdout, stderr = done.communicate(timeout=120)
    assert done.returncode == 0 and time.monotonic() - start < 60
    assert "PARTIAL (time limit reached)" in stdout
    stderr = _without_compile_lines(stderr)  # a cold numba cache says so first
    assert stderr.splitlines() == [line for line in stderr.splitlines() if line.startswith("structopt: warning: bfw "
                                                                                           "did not converge: time "
                                                                                           "limit of 2 s")]
    assert len(stderr.splitlines()) == 1
    assert json.loads((tmp_path / "seg.MAR.json").read_text())["partial"] is True and len(read_mar(out)) == 228


@pytest.mark.slow
@needs_data("uai")
@pytest.mark.parametrize(("model", "method"), [("Grids_12.uai", "trbp"), ("Segmentation_11.uai", "bfw")])
def test_sigint_to_infer_exits_130_with_one_line_and_the_partial_result(tmp_path, model, method):
    """A real Ctrl-C. The bfw case needs CP-SAT to hand SIGINT back to Python (structopt.interrupt)."""
    out = tmp_path / "m.MAR"
    warm = _structopt("infer", str(UAI / model), "--method", method, "--max-iter", "1", "--out", str(out),
                      "--no-progress")
    warm.communicate(timeout=300)  # numba kernels compiled and cached: the run below is in its loop soon
    process = _structopt("infer", str(UAI / model), "--method", method, "--max-iter", "100000000", "--tol", "0",
                         "--time-limit", "600", "--out", str(out), "--no-progress")
    try:
        time.sleep(6)
        assert process.poll() is None
        sent = time.monotonic()
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=60)
        waited = time.monotonic() - sent
    finally:
        process.kill()
    assert process.returncode == 130, (stdout, stderr)
    stderr = _without_compile_lines(stderr)
    assert stderr.splitlines() == [f"structopt: interrupted; partial marginals and log Z written to {out} and "
                                   f"{out}.json"]
    assert "PARTIAL (interrupted)" in stdout and waited < 10, waited
    assert json.loads((tmp_path / "m.MAR.json").read_text())["status"] == "interrupted"


@pytest.mark.parametrize("method", ["auto", "ad3", "bnb", "lp", "cpsat"])
def test_infer_map_writes_the_labels_and_a_certified_bound(model_file, tmp_path, capsys, method):
    path, _ = model_file
    mrf = read_uai(path)
    best = max(itertools.product(*(range(k) for k in mrf.cards)), key=lambda y: mrf.score(np.array(y)))
    out = tmp_path / f"{method}.MPE"
    assert main(["infer", str(path), "--task", "map", "--method", method, "--out", str(out)]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"cycle.uai map {method}: log-score ")
    log_score, bound = float(line.split("log-score ")[1].split()[0]), float(line.split("upper bound ")[1].split()[0])
    assert bound >= mrf.score(np.array(best)) - 1e-6 >= log_score - 1e-6
    header, body = out.read_text().splitlines()
    labels = np.array(body.split()[1:], dtype=int)
    assert header == "MPE" and int(body.split()[0]) == 4
    assert mrf.score(labels) == pytest.approx(log_score, abs=1e-6)  # printed to 6 decimals
    if method in ("auto", "bnb", "cpsat"):  # exact methods
        assert "proven optimal" in line and log_score == pytest.approx(mrf.score(np.array(best)), abs=1e-6)
    summary = json.loads(out.with_name(out.name + ".json").read_text())
    assert summary["method"] == method and summary["partial"] is False and summary["labels"] == str(out)
    assert summary["upper_bound"] == pytest.approx(bound, abs=1e-6) and summary["optimal"] == ("not proven" not in line)


def test_infer_map_defaults_to_auto(model_file, tmp_path, capsys, monkeypatch):
    path, _ = model_file
    monkeypatch.chdir(tmp_path)
    assert main(["infer", str(path), "--task", "map"]) == 0
    line = capsys.readouterr().out
    assert line.startswith("cycle.uai map auto: log-score ") and "proven optimal" in line
    assert (tmp_path / "cycle.uai.auto.MPE").is_file() and (tmp_path / "cycle.uai.auto.MPE.json").is_file()


def test_infer_map_and_marginal_methods_are_not_mixed(model_file, tmp_path, capsys):
    path, _ = model_file
    assert main(["infer", str(path), "--method", "ad3", "--out", str(tmp_path / "x")]) == 2
    assert "add --task map" in capsys.readouterr().err
    assert main(["infer", str(path), "--task", "map", "--method", "trbp", "--out", str(tmp_path / "x")]) == 2
    assert "--task map takes --method auto, ad3" in capsys.readouterr().err
    assert main(["infer", str(path), "--task", "map", "--tol", "0.1", "--out", str(tmp_path / "x")]) == 2
    assert "--tol does not apply to --task map" in capsys.readouterr().err
