"""What a new user sees: a kernel compiling on its first call says so (nothing sits silent for minutes), the numba
cache survives edits of modules that only name numba, and wrong inputs are one line naming the argument."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numba
import pytest

from structopt import _numba_cache
from structopt._numba_cache import CompileNotice, announce_compiles, stop_announcing

ROOT = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------- compile stage lines
@pytest.fixture
def lines():
    said: list[str] = []
    yield said
    stop_announcing()


def _fresh_kernels():
    """Two kernels never compiled in this process (no disk cache): ``outer`` calls ``inner``."""
    @numba.njit
    def inner(x):
        return x + 1

    @numba.njit
    def outer(x):
        return inner(x) * 2

    return inner, outer


def test_a_compiling_kernel_is_announced_once_per_stage_and_loads_are_not(lines):
    announce_compiles(lines.append, every=60.0)
    _, outer = _fresh_kernels()
    assert outer(1) == 4
    assert len(lines) == 1, lines
    first = lines[0]
    assert first.startswith("structopt: compiling numba kernels on their first use")
    assert str(_numba_cache.CACHE_DIR) in first and first.endswith("_fresh_kernels.<locals>.outer")  # names it
    assert outer(2) == 6  # compiled: a call compiles nothing, says nothing
    again, _ = _fresh_kernels()
    assert again(1.5) == 2.5  # another kernel within `every` seconds of the last line: one stage, no new line
    assert len(lines) == 1, lines
    stop_announcing()
    _, quiet = _fresh_kernels()
    assert quiet(1) == 4 and len(lines) == 1  # removed: nothing more


def test_later_kernels_get_a_line_once_the_last_line_is_old(lines):
    notice = announce_compiles(lines.append, every=0.05)
    _, outer = _fresh_kernels()
    outer(1)
    time.sleep(0.1)
    _, later = _fresh_kernels()
    later(1)
    started = [line for line in lines if not line.startswith("structopt: still compiling")]  # the watcher's aside
    assert len(started) == 2 and started[1].startswith("structopt: compiling numba kernel "), lines
    assert notice.kernels == 2  # the kernels a kernel compiles inside its own compilation are not counted
    assert re.search(r"outer \(kernel 2 of this run, the first began \d+ s ago\)$", started[1]), started


def test_a_long_compilation_gets_a_line_every_few_seconds():
    said: list[str] = []
    notice = CompileNotice(said.append, every=0.05)  # numba's events, driven by hand: a compilation that lasts
    start = SimpleNamespace(data={"dispatcher": SimpleNamespace(py_func=_fresh_kernels)})
    try:
        notice.on_start(start)
        deadline = time.monotonic() + 30
        while len(said) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        notice.on_end(start)
        assert len(said) >= 3 and all(line.startswith("structopt: still compiling numba kernel test_cli_newuser."
                                                      "_fresh_kernels") for line in said[1:]), said
        time.sleep(0.2)
        count = len(said)
        time.sleep(0.2)
        assert len(said) == count  # nothing compiles: the watcher is quiet
    finally:
        notice.close()


def test_the_numba_cache_is_keyed_on_the_modules_that_import_numba_only(tmp_path):
    package = tmp_path / "package"
    package.mkdir()
    (package / "kernels.py").write_text("import numba\n\n@numba.njit\ndef f(x):\n    return x\n")
    (package / "cli.py").write_text("# calls the numba cache helper\nfrom package._numba_cache import x\n")
    before = _numba_cache._source_digest(package)
    (package / "cli.py").write_text("# numba is named here, and changed\nfrom package._numba_cache import y\n")
    assert _numba_cache._source_digest(package) == before  # a module that merely names numba
    (package / "kernels.py").write_text("from numba import njit\n\n@njit\ndef f(x):\n    return x + 1\n")
    assert _numba_cache._source_digest(package) != before


def _structopt(args: list[str], cache: Path, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "PYTHONUNBUFFERED": "1"}
    env.pop("STRUCTOPT_NUMBA_CACHE_DIR", None)  # the test session's mark would pin its own cache directory
    return subprocess.run([sys.executable, "-m", "structopt", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=1800)


@pytest.mark.slow
def test_the_command_announces_compilation_into_a_fresh_cache_and_not_after(tmp_path):
    """A new user's first command compiles its kernels: the first stderr line after the stage lines says so;
    the same command again loads them and says nothing about compiling."""
    cache = tmp_path / "numba"
    args = ["train", "ocr", "--n-train", "5", "--passes", "0.2", "--no-progress", "--out", str(tmp_path / "run")]
    first = _structopt(args, cache, tmp_path)
    assert first.returncode == 0, first.stderr
    err = first.stderr.splitlines()
    compiling = [i for i, line in enumerate(err) if line.startswith("structopt: compiling numba kernels on their "
                                                                      "first use")]
    assert len(compiling) == 1, first.stderr
    assert err[compiling[0] - 1].startswith(("training OCR", "structopt: loading chain kernels")), first.stderr
    second = _structopt(args, cache, tmp_path)
    assert second.returncode == 0 and "compiling" not in second.stderr, second.stderr


# --------------------------------------------------------------------------- wrong inputs: one line each
def _one_error(capsys) -> str:
    err = [line for line in capsys.readouterr().err.strip().splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("structopt: error: ") and "Traceback" not in err[0], err
    return err[0]


@pytest.fixture
def no_training(monkeypatch):
    """Building a task fails the test: the errors come before any data is read."""
    from structopt import cli

    def refuse(args):
        raise AssertionError("the task was built before the error was reported")

    for name in list(cli.TASKS):
        monkeypatch.setitem(cli.TASKS, name, refuse)


def test_a_checkpoint_that_is_not_this_solvers_is_refused_before_the_data(tmp_path, capsys, no_training):
    import numpy as np

    from structopt.archive import write_archive
    from structopt.cli import main
    from structopt.models import MultiClassModel
    from structopt.saved_model import save_model
    from structopt.solvers.base import CHECKPOINT_FORMAT

    model = tmp_path / "model.npz"
    save_model(model, MultiClassModel(n_features=2, n_classes=3), np.zeros(6), task="ocr")
    out = tmp_path / "run"
    assert main(["train", "ocr", "--out", str(out), "--checkpoint", str(model)]) == 2
    assert _one_error(capsys) == (f"structopt: error: --checkpoint {model} is not a checkpoint (a saved model, which "
                                  "train writes to --out); an existing file is resumed: give a checkpoint of this "
                                  "run, or a new path to start one")
    other = tmp_path / "ssg.ckpt"
    write_archive(other, {"format": CHECKPOINT_FORMAT, "kind": "structopt checkpoint", "solver": "ssg"}, {})
    assert main(["train", "ocr", "--out", str(out), "--checkpoint", str(other), "--solver", "fw"]) == 2
    assert _one_error(capsys) == (f"structopt: error: --checkpoint {other} was written by ssg, not by frank_wolfe "
                                  "(--solver); give a new path to start a run with it")
    assert not out.exists() and model.is_file() and other.is_file()  # nothing written, nothing removed


def test_infer_names_its_file_argument_when_it_is_a_directory_or_missing(tmp_path, capsys):
    from structopt.cli import main

    for task in ("marginals", "map"):
        assert main(["infer", str(tmp_path), "--task", task, "--out", str(tmp_path / "out")]) == 2
        assert _one_error(capsys) == (f"structopt: error: FILE {tmp_path} is a directory; give a .uai file (UAI "
                                      "MARKOV format)")
        assert main(["infer", str(tmp_path / "no.uai"), "--task", task, "--out", str(tmp_path / "out")]) == 2
        assert _one_error(capsys).endswith(f"FILE {tmp_path / 'no.uai'}: no such file; give a .uai file (UAI MARKOV "
                                           "format)")
        assert not (tmp_path / "out").exists()


def test_a_text_input_that_is_a_directory_is_named_so(tmp_path):
    from structopt.errors import InvalidInputError
    from structopt.tasks._data import read_text_lines

    with pytest.raises(InvalidInputError, match=f"^{tmp_path} is a directory; a text file is read here$"):
        read_text_lines(tmp_path)


def test_gold_tags_of_another_task_are_refused_and_a_few_unknown_ones_said():
    from structopt.cli_tasks import _foreign_tags
    from structopt.errors import InvalidInputError

    ner = ["O", "B-LOC", "B-MISC", "B-ORG", "B-PER", "I-LOC", "I-MISC", "I-ORG", "I-PER"]
    assert _foreign_tags(Path("a.txt"), ["O", "B-PER", "I-PER", "O"], ner) == []
    chunks = ["B-NP", "I-NP", "B-VP", "O", "B-PP", "B-NP", "B-ADJP", "I-ADJP", "B-SBAR"]
    with pytest.raises(InvalidInputError, match=r"^INPUT a\.txt: its gold tags B-ADJP, B-NP, B-PP, B-SBAR, \.\.\. "
                                                r"\(8 of 9 tokens\) are not among the model's \(O, B-LOC, B-MISC, "
                                                r"B-ORG, \.\.\.\): the data of another task\?"):
        _foreign_tags(Path("a.txt"), chunks, ner)
    (warning,) = _foreign_tags(Path("a.txt"), ["B-PER", "I-PER", "B-LOC", "B-EVENT", "O", "O"], ner)
    assert warning.startswith("INPUT a.txt: its gold tags B-EVENT (1 of 6 tokens)") and \
        warning.endswith("; they score as errors")


# --------------------------------------------------------------------------- a long predict says so
def test_predict_says_what_it_does_once_it_takes_long_and_predicts_the_same(tmp_path, capsys, monkeypatch):
    from structopt import cli
    from structopt.cli import main

    run = tmp_path / "run"
    assert main(["train", "ocr", "--n-train", "10", "--passes", "0.5", "--out", str(run), "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["predict", str(run / "model.npz"), "--out", str(tmp_path / "quick.txt")]) == 0
    assert "predicting" not in capsys.readouterr().err  # a short run prints its results only
    monkeypatch.setattr(cli, "PREDICT_QUIET_SECONDS", 0.0)
    for flags, bar in (([], True), (["--no-progress"], False)):
        out = tmp_path / f"long{len(flags)}.txt"
        assert main(["predict", str(run / "model.npz"), "--out", str(out), *flags]) == 0
        err = capsys.readouterr().err
        assert f"predicting 626 examples with {run / 'model.npz'} (1 done in 0 s)\n" in err
        assert ("predicting:" in err and "/20 [" in err) == bar, err  # the bar counts the 20 batches left
        assert out.read_text() == (tmp_path / "quick.txt").read_text()  # batches change no prediction


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs PyTorch")
def test_network_training_says_so_when_loading_torch_and_the_data_takes_long(tmp_path, capsys, monkeypatch):
    from structopt import cli
    from structopt.cli import main
    from structopt.errors import InvalidInputError

    pytest.importorskip("torch")  # imported: what remains in the block is the task's own loading

    def refuse(args):  # a refusal at once: one line
        raise InvalidInputError("refused by the test")

    def slow(args):  # where the data reading happens: the line comes while it runs
        time.sleep(0.5)
        raise InvalidInputError("stopped here by the test")

    monkeypatch.setattr(cli.TASKS["ocr"], "net", refuse)
    assert main(["train", "ocr", "--net", "mlp", "--out", str(tmp_path / "run")]) == 2
    assert capsys.readouterr().err.splitlines() == ["structopt: error: refused by the test"]
    monkeypatch.setattr(cli.TASKS["ocr"], "net", slow)
    monkeypatch.setattr(cli, "PREDICT_QUIET_SECONDS", 0.1)
    assert main(["train", "ocr", "--net", "mlp", "--out", str(tmp_path / "run")]) == 2
    assert capsys.readouterr().err.splitlines() == ["ocr --net mlp: loading PyTorch and the data",
                                                    "structopt: error: stopped here by the test"]
