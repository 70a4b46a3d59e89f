"""Long stages say what they do: stage lines on stderr (with --no-progress too), bars over images only
without it, and the test session's first line when numba's cache for this source version is empty."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _shared_data import SHARED_DATA, needs_data
from _synthetic_horses import write_synthetic_horses

from structopt.cli import main
from structopt.progress import QUIET, Progress, as_progress, count

ROOT = Path(__file__).resolve().parents[1]


def test_progress_helper_prints_stage_lines_and_bars_only_when_asked(capsys):
    assert as_progress(False) is QUIET and as_progress(True) == Progress() and as_progress(QUIET) is QUIET
    assert count(8936, "sentence") == "8,936 sentences" and count(1, "image") == "1 image"
    for progress, lines, bar in ((QUIET, False, False), (Progress(bars=False), True, False), (Progress(), True, True)):
        assert list(progress.items(range(5), 5, "features", "images")) == list(range(5))
        progress.stage("computing features of 5 images")
        captured = capsys.readouterr()
        assert captured.out == ""
        assert ("computing features of 5 images\n" in captured.err) == lines
        assert ("features:" in captured.err and "/5 [" in captured.err) == bar, captured.err  # tqdm's "i/5 [...]"


def test_a_stage_is_announced_only_once_it_takes_long(capsys):
    import time

    with Progress(bars=False).if_long("reading 9 images", after=0.05):
        time.sleep(0.5)
    assert capsys.readouterr().err == "reading 9 images\n"  # said once, from the timer, while the block ran
    with Progress(bars=False).if_long("reading 1 image", after=5.0):
        pass
    with QUIET.if_long("reading 9 images", after=0.0):
        time.sleep(0.2)
    time.sleep(0.1)
    assert capsys.readouterr().err == ""  # a short block, or a quiet library call, says nothing


def test_horses_loader_reports_its_images(tmp_path, capsys):
    from structopt.tasks.horses import load_horses

    write_synthetic_horses(tmp_path, 4, seed=1, height=30, width=40, foreground=0.7, background=0.3, noise=0.05)
    load_horses(tmp_path)
    assert capsys.readouterr().err == ""  # a library call is silent by default
    load_horses(tmp_path, progress=True)
    err = capsys.readouterr().err
    assert "computing pixel features of 4 images" in err and "pixel features:" in err and "/4 [" in err


@needs_data("conll2000")
def test_train_conll_says_what_it_reads_and_does_with_no_progress(tmp_path, capsys):
    data = tmp_path / "conll"
    data.mkdir()
    for name, n in (("train.txt", 30), ("test.txt", 10)):
        sentences = (SHARED_DATA / "conll2000" / name).read_text().split("\n\n")[:n]
        (data / name).write_text("\n\n".join(sentences) + "\n")
    assert main(["train", "conll", "--data", str(data), "--passes", "0.5", "--out", str(tmp_path / "run"),
                 "--no-progress"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == ["read CoNLL-2000 train (30 sentences), test (10 sentences); computing hashed features",
                   "split: train on train.txt, test on test.txt (training on 30, testing on 10)",
                   "training CoNLL-2000 chunking with bcfw, λ=0.01, n=30"]
    assert json.loads((tmp_path / "run" / "trace.json").read_text())["n_train"] == 30


def _pytest_header(cache: Path) -> str:
    """The first lines a test session prints (collection only, one small module) with ``cache`` as numba's."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}
    env.pop("STRUCTOPT_NUMBA_CACHE_DIR", None)  # a parent session's mark would pin the parent's directory
    done = subprocess.run([sys.executable, "-m", "pytest", "tests/test_cli_checkout.py", "--collect-only", "-q",
                           "-p", "no:cacheprovider"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def test_a_fresh_numba_cache_is_announced_at_the_start_of_the_tests(tmp_path):
    cache = tmp_path / "numba"
    first = _pytest_header(cache)
    assert "numba kernels are compiling on this first run: a few minutes" in first.splitlines()[0]
    # once a kernel is compiled into this source version's directory, nothing is said
    (version,) = (cache / "structopt").glob("src-*")
    (version / "kernel.nbi").write_bytes(b"")
    assert "numba kernels are compiling" not in _pytest_header(cache)


def test_each_boosted_fit_of_the_stacked_score_is_a_stage_line(capsys):
    import numpy as np

    from structopt.tasks.horses_superpixels import _cross_fit

    rng = np.random.default_rng(0)
    nodes = [rng.normal(size=(12, 3)) for _ in range(7)]
    labels = [(x[:, 0] > 0).astype(np.int64) for x in nodes]
    is_train = np.array([True] * 6 + [False])
    scores, _ = _cross_fit(nodes, labels, is_train, 3, 0, True, "auto-context stage 1")
    assert len(scores) == 7 and all(s.shape == (12,) for s in scores)
    assert capsys.readouterr().err.splitlines() == [
        "auto-context stage 1: boosted trees 1 of 4 (fold 1: 4 training images)",
        "auto-context stage 1: boosted trees 2 of 4 (fold 2: 4 training images)",
        "auto-context stage 1: boosted trees 3 of 4 (fold 3: 4 training images)",
        "auto-context stage 1: boosted trees 4 of 4 (all 6 training images, for the other images)"]
    _cross_fit(nodes, labels, is_train, 3, 0)
    assert capsys.readouterr().err == ""  # a library call is silent by default


@pytest.mark.slow
@needs_data("horses")
def test_localization_says_when_it_fits_its_codebooks_and_foreground_classifier(tmp_path, monkeypatch, capsys):
    from structopt.tasks import localization as loc

    monkeypatch.setenv("STRUCTOPT_CACHE", str(tmp_path))  # a fresh cache: the codebooks are fitted
    loc.load_boxes(SHARED_DATA / "horses", dataset="horses", progress=Progress(bars=False))
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "computing horses cell descriptors of 328 images (cached for the next run)"
    assert err[1].startswith("fitting the visual-word codebooks (k-means: ") and \
        err[1].endswith("on 200 training images, then counting them per cell")
    assert err[2:] == ["fitting the foreground cell classifier on 200 training images"]
