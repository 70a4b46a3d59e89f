"""Faults during ``structopt train ocr --checkpoint``: kill -9 while training and while writing the
checkpoint, and a full disk; a resumed run must end exactly where an uninterrupted one does.

Each test runs the command in subprocesses (about 10-20 s each, numba compilation included).
"""

from __future__ import annotations

import inspect
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from structopt.solvers.bcfw import bcfw

pytestmark = pytest.mark.slow

ARGS = ["train", "ocr", "--n-train", "600", "--passes", "6", "--seed", "0", "--no-progress"]
if "checkpoint_every" in inspect.signature(bcfw).parameters:  # write a checkpoint at every pass
    ARGS += ["--checkpoint-every", "1"]
COMPARED = ("passes", "oracle_calls", "primal", "dual", "gap", "dual_iterate")  # all but wall time


def _command(out: Path, checkpoint: Path) -> list[str]:
    return [*ARGS, "--out", str(out), "--checkpoint", str(checkpoint)]


def _run(args: list[str], timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "structopt", *args], capture_output=True, text=True,
                          timeout=timeout)


def _records(out: Path) -> list[dict]:
    trace = json.loads((out / "trace.json").read_text())["trace"]
    return [{key: record[key] for key in COMPARED if key in record} for record in trace]


def _wait_for(path: Path, process: subprocess.Popen, timeout: float = 300) -> None:
    stop = time.monotonic() + timeout
    while not path.exists():
        assert process.poll() is None, f"the run ended before {path} appeared: {process.communicate()}"
        assert time.monotonic() < stop, f"{path} did not appear within {timeout}s"
        time.sleep(0.02)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> list[dict]:
    """The trace of an uninterrupted run."""
    tmp = tmp_path_factory.mktemp("reference")
    done = _run(_command(tmp / "out", tmp / "state.pkl"))
    assert done.returncode == 0, done.stderr
    return _records(tmp / "out")


def _resume_and_compare(tmp: Path, checkpoint: Path, reference: list[dict]) -> None:
    done = _run(_command(tmp / "out", checkpoint))
    assert done.returncode == 0, done.stderr
    assert f"resuming from {checkpoint}" in done.stderr
    assert _records(tmp / "out") == reference
    summary = json.loads((tmp / "out" / "trace.json").read_text())
    assert summary["passes"] == reference[-1]["passes"] and summary["resumed"] is True


def test_kill_during_training_then_resume_equals_an_uninterrupted_run(tmp_path, reference):
    checkpoint = tmp_path / "state.pkl"
    process = subprocess.Popen([sys.executable, "-m", "structopt", *_command(tmp_path / "out", checkpoint)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(checkpoint, process)
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.wait(timeout=60)
    assert process.returncode == -signal.SIGKILL
    assert not (tmp_path / "out" / "trace.json").exists()  # killed before the end
    _resume_and_compare(tmp_path, checkpoint, reference)


# A child that runs the command with os.replace patched: at the third write of the checkpoint
# the temporary file is cut in half (what a write interrupted by kill -9 or a full disk leaves),
# then the child either waits to be killed or fails as on a full disk.
DRIVER = """
import errno, os, sys, time
from pathlib import Path

checkpoint, marker, mode, args = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4:]
real_replace, writes = os.replace, [0]

def replace(src, dst, *rest, **kw):
    if Path(dst) == checkpoint:
        writes[0] += 1
        if writes[0] == 3:
            with open(src, "r+b") as fh:
                fh.truncate(os.path.getsize(src) // 2)
            marker.write_text(mode)
            if mode == "kill":
                time.sleep(600)
            raise OSError(errno.ENOSPC, "No space left on device", str(src))
    return real_replace(src, dst, *rest, **kw)

os.replace = replace
from structopt.cli import main
sys.exit(main(args))
"""


def _start_driver(tmp: Path, checkpoint: Path, marker: Path, mode: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", DRIVER, str(checkpoint), str(marker), mode,
                             *_command(tmp / "out", checkpoint)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_kill_during_the_checkpoint_write_keeps_the_previous_checkpoint(tmp_path, reference):
    checkpoint, marker = tmp_path / "state.pkl", tmp_path / "writing"
    process = _start_driver(tmp_path, checkpoint, marker, "kill")
    try:
        _wait_for(marker, process)
        before = checkpoint.read_bytes()
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.communicate(timeout=60)
    assert process.returncode == -signal.SIGKILL
    assert checkpoint.read_bytes() == before  # the half-written temporary never replaced it
    _resume_and_compare(tmp_path, checkpoint, reference)


def test_full_disk_during_a_checkpoint_write_is_one_line_and_loses_nothing(tmp_path, reference):
    checkpoint, marker = tmp_path / "state.pkl", tmp_path / "writing"
    process = _start_driver(tmp_path, checkpoint, marker, "full")
    _, err = process.communicate(timeout=600)
    assert marker.exists() and process.returncode not in (0, None)
    lines = err.strip().splitlines()
    assert "No space left on device" in lines[-1] and "Traceback" not in err, err
    assert not any(line.startswith("  File ") for line in lines)
    _resume_and_compare(tmp_path, checkpoint, reference)
