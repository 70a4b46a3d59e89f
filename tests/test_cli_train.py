"""`structopt train` on the other built-in tasks and with other solvers."""

from __future__ import annotations

import json

import pytest
from _shared_data import needs_data

from structopt import cli
from structopt.cli import main


def _run(tmp_path, capsys, *args):
    out = tmp_path / "run"
    assert main(["train", *args, "--out", str(out), "--no-progress"]) == 0
    return json.loads((out / "trace.json").read_text()), capsys.readouterr().out.strip().splitlines()[-1]


@needs_data("hansards")
def test_alignment_task(tmp_path, capsys):
    summary, closing = _run(tmp_path, capsys, "alignment", "--passes", "3")
    assert "heldout aer" in closing
    assert summary["n_train"] == 284 and 0.0 < summary["heldout_aer"] < 0.37  # below the Dice baseline
    assert summary["trace"][-1]["gap"] >= 0.0


def test_lam_zero_means_one_over_n_and_other_solvers_run(tmp_path, capsys):
    summary, _ = _run(tmp_path, capsys, "ocr", "--n-train", "100", "--passes", "2", "--lam", "0", "--solver", "sgd")
    assert summary["lam"] == pytest.approx(1 / 100)
    assert summary["solver"] == "sgd" and len(summary["trace"]) >= 2


@pytest.mark.slow
def test_conll_task(tmp_path, capsys):
    summary, closing = _run(tmp_path, capsys, "conll", "--passes", "1", "--n-train", "2000")
    assert "test chunk f1" in closing and summary["test_chunk_f1"] > 0.8


@pytest.mark.parametrize(("argv", "expected"), [
    (["ocr"], 0.01), (["horses"], 0.001), (["localization"], 0.1),
    (["localization", "--dataset", "raccoon"], 0.001), (["localization", "--lam", "0.5"], 0.5),
    (["localization", "--lam", "0"], 1 / 40)])
def test_default_lam_is_the_tasks_own(argv, expected):
    args = cli.build_parser().parse_args(["train", *argv])
    assert cli._lam(args, 40, cli._task_key(args)) == pytest.approx(expected)


def test_the_tasks_build_the_problem_type_their_solver_list_is_derived_from():
    args = cli.build_parser().parse_args(["train", "ocr", "--n-train", "5"])
    problem = cli.TASKS["ocr"](args).problem
    assert type(problem) is cli._task_problem_type()  # the other tasks build theirs the same way (SSVMProblem)


def _run_err(tmp_path, capsys, *args) -> tuple[dict, str]:
    out = tmp_path / "run"
    assert main(["train", *args, "--out", str(out), "--no-progress"]) == 0
    return json.loads((out / "trace.json").read_text()), capsys.readouterr().err


def test_n_train_beyond_the_training_examples_is_said(tmp_path, capsys):
    """--n-train 1000000 used all 6,251 OCR words without a word: every task now warns (one place, cli._train)."""
    summary, err = _run_err(tmp_path, capsys, "ocr", "--n-train", "1000000", "--passes", "0.01")
    assert summary["n_train"] == 6251
    assert "structopt: warning: --n-train 1,000,000 exceeds the 6,251 training examples; using all 6,251" in err
    _, err = _run_err(tmp_path, capsys, "ocr", "--n-train", "6251", "--passes", "0.01")
    assert "warning" not in err  # exactly all: nothing to say


def test_n_train_warning_holds_for_own_data_too(tmp_path, capsys):
    import numpy as np
    from test_own_data import _sentences, _write_conll

    train = _write_conll(tmp_path / "train.txt", _sentences(np.random.default_rng(0), 12))
    summary, err = _run_err(tmp_path, capsys, "sequence", "--train", str(train), "--test-fraction", "0.25", "--n-train",
                      "50", "--passes", "1")
    assert summary["n_train"] == 9
    assert "--n-train 50 exceeds the 9 training examples; using all 9" in err
