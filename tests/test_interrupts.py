"""Ctrl-C (SIGINT) during every kind of long call becomes a prompt KeyboardInterrupt.

Each test sends SIGINT to this process from a timer thread while a call runs that would take
20 s to minutes, and asserts that KeyboardInterrupt arrives well before (bounds are generous: a
loaded machine must not make them flaky; the measured latency is milliseconds).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from _marginals_models import ising_grid
from _reference import random_chain_problem

import structopt as so
from structopt.interrupt import interruptible
from structopt.parallel import start_local_cluster
from structopt.structures._ilp import ILP, solve_cpsat, solve_highs, solve_scip

#: seconds from SIGINT to KeyboardInterrupt that every test accepts (measured: milliseconds)
BOUND = 10.0
ROOT = Path(__file__).resolve().parents[1]
UAI = ROOT.parent / "shared" / "data" / "uai" / "Segmentation_12.uai"

pytestmark = pytest.mark.skipif(signal.getsignal(signal.SIGINT) is not signal.default_int_handler,
                                reason="SIGINT is not handled by Python's default handler in this test run")


@contextlib.contextmanager
def sigint_during(delay: float = 0.3):
    """Send SIGINT to this process ``delay`` s into the block (only while the block still runs).

    Yields a dict that gets ``sent`` (perf_counter) when the signal went out; the block must end in
    KeyboardInterrupt, caught here, whose arrival time is stored as ``caught``.
    """
    record: dict[str, float] = {}
    lock = threading.Lock()
    running = [True]

    def fire() -> None:
        with lock:
            if running[0]:
                record["sent"] = time.perf_counter()
                os.kill(os.getpid(), signal.SIGINT)
        # a lost signal must fail the test, never hang it: signal again while the block still runs
        # (the latency assertion below still measures from the first signal)
        while not stop.wait(BOUND):
            with lock:
                if running[0]:
                    record["resent"] = record.get("resent", 0) + 1
                    os.kill(os.getpid(), signal.SIGINT)

    stop = threading.Event()
    timer = threading.Timer(delay, fire)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            try:
                yield record
            finally:
                record["caught"] = time.perf_counter()
                with lock:
                    running[0] = False
    finally:
        timer.cancel()
        stop.set()
    assert "sent" in record, "the call ended before the signal was sent"
    assert "resent" not in record, "the first SIGINT was lost"
    assert record["caught"] - record["sent"] < BOUND


def independent_sets(n: int = 300, m: int = 1400, seed: int = 0) -> ILP:
    """Maximum independent set of a random graph: minutes for every exact backend at this size."""
    rng = np.random.default_rng(seed)
    edges = np.array(sorted({tuple(sorted(rng.choice(n, 2, replace=False))) for _ in range(m)}))
    rows = np.repeat(np.arange(len(edges)), 2)
    A = sp.csr_matrix((np.ones(rows.size), (rows, edges.ravel())), shape=(len(edges), n))
    return ILP(n, None, None, A, np.ones(len(edges)))


# --------------------------------------------------------------------------- the mechanism
def test_block_without_signal_changes_nothing():
    stops = []
    with interruptible(lambda: stops.append(1)) as interrupt:
        assert interrupt.requested is False
    assert stops == []
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert signal.set_wakeup_fd(-1) == -1  # restored (and left unset)


def test_signal_in_block_stops_and_raises_after_it():
    stopped = threading.Event()
    with sigint_during(0.1):
        with interruptible(stopped.set) as interrupt:
            assert stopped.wait(BOUND), "the stop function was called from the watcher"
            assert interrupt.requested
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert signal.set_wakeup_fd(-1) == -1


def test_error_of_a_stopped_solver_becomes_keyboard_interrupt():
    stopped = threading.Event()
    with sigint_during(0.1):
        with interruptible(stopped.set):
            stopped.wait(BOUND)
            raise RuntimeError("solver returned status UNKNOWN")  # what a stopped solver reports


def test_nested_blocks_stop_every_solver_and_the_inner_one_raises():
    outer, inner = threading.Event(), threading.Event()
    reached = []
    with sigint_during(0.1):
        with interruptible(outer.set):
            with interruptible(inner.set):
                assert inner.wait(BOUND) and outer.wait(BOUND)
            reached.append("after inner")  # not reached: the inner block raises
    assert reached == []


def test_other_threads_and_other_handlers_are_left_alone():
    seen = []

    def worker() -> None:
        with interruptible(lambda: None) as interrupt:
            seen.append(interrupt.active)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen == [False]
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with interruptible(lambda: None) as interrupt:
            assert not interrupt.active
            os.kill(os.getpid(), signal.SIGINT)  # ignored, as the caller asked
            time.sleep(0.05)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


# --------------------------------------------------------------------------- exact ILP backends
@pytest.mark.parametrize("solve", [solve_cpsat, solve_highs, solve_scip], ids=["cpsat", "highs", "scip"])
def test_ilp_backends_stop_on_sigint(solve):
    tiny = ILP(3, None, None, None, None)
    # warm-up: a signal inside a first import (pandas, under OR-Tools) would break the module for good
    assert solve(tiny, np.array([1.0, -1.0, 2.0])).tolist() == [1, 0, 1]
    ilp = independent_sets()
    with sigint_during():
        solve(ilp, np.ones(ilp.n))
    assert solve(tiny, np.array([1.0, -1.0, 2.0])).tolist() == [1, 0, 1]  # usable again


def test_lp_structure_training_stops_on_sigint(tmp_path):
    import cvxpy as cp

    ilp = independent_sets()
    z = cp.Variable(ilp.n, boolean=True)
    structure = so.LPStructure(z, [ilp.A_ub @ z <= 1])
    rng = np.random.default_rng(0)
    X = [rng.normal(size=(ilp.n, 2)) for _ in range(2)]
    Y = [np.zeros(ilp.n, dtype=np.int64) for _ in range(2)]
    problem = so.SSVMProblem(so.FeatureModel(structure, n_features=2), X, Y, so.Hamming(), lam=0.1)
    with sigint_during():  # the first loss-augmented oracle is a maximum independent set
        so.solvers.bcfw(problem, max_passes=5, checkpoint=tmp_path / "run.ckpt")


# --------------------------------------------------------------------------- marginal inference oracles
def test_map_oracle_cpsat_stops_on_sigint():
    from structopt.marginals.oracles import _CpSatMap

    small = ising_grid(2, 2, 3.0, np.random.default_rng(0))
    _CpSatMap(small, None)(small.theta)  # imports done first
    mrf = ising_grid(32, 32, 3.0, np.random.default_rng(0), field=0.1)  # frustrated: minutes for CP-SAT
    with sigint_during():
        _CpSatMap(mrf, None)(mrf.theta)


@pytest.mark.skipif(not UAI.is_file(), reason="needs ../shared/data/uai (UAI 2014 instances)")
def _compiled_kernels() -> int:
    """How many numba specialisations structopt's loaded modules hold (compiled or loaded from cache)."""
    from numba.core.registry import CPUDispatcher

    return sum(len(obj.overloads) for name, module in list(sys.modules.items())
               if name.startswith("structopt") and module is not None
               for obj in list(vars(module).values()) if isinstance(obj, CPUDispatcher))


@pytest.mark.slow  # in two CI runs from a cold numba cache (the other worker compiling) the first SIGINT took
# over 10 s to land; it passes alone and with a warm cache: kept in the slow suite until that is explained
def test_barrier_fw_on_uai_segmentation_stops_on_sigint():
    from structopt.marginals.infer import infer

    # imports and every kernel on the path compiled first (a signal inside numba's compiler can be swallowed
    # by llvmlite's callbacks): from a cold cache on a loaded machine a 2 s run may spend its time compiling
    # and stop before later phases, so warm up until a run compiles nothing new
    for _ in range(6):
        before = _compiled_kernels()
        infer(UAI, "bfw", time_limit=2.0)
        if _compiled_kernels() == before:
            break
    with sigint_during(1.0):  # unlimited iterations and tol 0: runs for hours otherwise
        infer(UAI, "bfw", max_iter=None, tol=1e-12)


# --------------------------------------------------------------------------- checkpoints
def test_interrupted_run_leaves_a_readable_checkpoint(tmp_path):
    problem = random_chain_problem(3, n=30, max_len=6)
    path = tmp_path / "run.ckpt"
    # compile first: a signal inside numba's compiler can be swallowed by llvmlite's callbacks
    so.solvers.bcfw(problem, max_passes=1, checkpoint=path, fused=False, random_state=0)
    with sigint_during(1.0):  # checkpoints every 1/30 pass: the signal lands in or between writes
        so.solvers.bcfw(problem, max_passes=10**6, checkpoint=path, checkpoint_every=1 / 30, fused=False,
                        random_state=0, time_limit=120)
    assert path.is_file()
    resumed = so.solvers.bcfw(problem, max_passes=10**6, checkpoint_every=1 / 30, time_limit=0.2, resume=path,
                              fused=False, random_state=0)  # refuses a torn or corrupted file
    assert resumed.trace


# --------------------------------------------------------------------------- executors
class GatedHamming(so.Hamming):
    """Hamming loss that waits (in small sleeps) until ``release`` is set: a pass that lasts until released."""

    release = threading.Event()

    def __call__(self, y_true, y_pred) -> float:
        deadline = time.monotonic() + 120.0
        while not self.release.is_set() and time.monotonic() < deadline:
            time.sleep(0.01)
        return super().__call__(y_true, y_pred)


def test_dask_pass_wakes_up_on_sigint_and_is_cancelled():
    distributed = pytest.importorskip("distributed")
    from structopt.parallel import open_executor

    fast = random_chain_problem(5, n=6, max_len=4)
    problem = so.SSVMProblem(fast.model, fast.X, fast.Y, GatedHamming(), fast.lam)
    GatedHamming.release.clear()
    with start_local_cluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0",
                                  silence_logs=40) as cluster, \
            distributed.Client(cluster, set_as_default=False) as client:
        executor = open_executor(problem, client, n_workers=2)
        try:
            with sigint_during():
                executor.fw_corner(problem.model.zeros(), False)  # the generic pass evaluates the loss
        finally:
            GatedHamming.release.set()  # let the worker threads finish the abandoned tasks
        w = np.random.default_rng(0).normal(size=problem.n_params)
        assert executor.primal(w) == pytest.approx(problem.primal(w), rel=1e-12)  # the client's cluster still works
        executor.close()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["processes", "dask"])
def test_worker_processes_are_killed_on_sigint(kind):
    if kind == "dask":
        pytest.importorskip("distributed")
    from structopt.parallel import open_executor

    ilp = independent_sets()
    structure = so.LPStructure(*_lp_declaration(ilp))
    rng = np.random.default_rng(0)
    X = [rng.normal(size=(ilp.n, 2)) for _ in range(2)]
    Y = [np.zeros(ilp.n, dtype=np.int64) for _ in range(2)]
    problem = so.SSVMProblem(so.FeatureModel(structure, n_features=2), X, Y, so.Hamming(), lam=0.1)
    executor = open_executor(problem, kind, n_workers=2)
    executor.run_pass("echo", problem.model.zeros())  # workers up, chunks built
    pids = (executor.worker_pids() if kind == "processes"
            else list(executor.client.run(os.getpid).values()))
    assert len(pids) == 2
    try:
        with sigint_during(0.5):  # every worker is inside a maximum independent set
            executor.mean_hinge(problem.model.zeros())
    finally:
        executor.close()
    deadline = time.monotonic() + 60.0
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in pids), "the workers were killed, not left computing"


def _lp_declaration(ilp: ILP):
    import cvxpy as cp

    z = cp.Variable(ilp.n, boolean=True)
    return z, [ilp.A_ub @ z <= 1]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError, ValueError):  # a zombie not yet reaped counts as dead
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    return True


# --------------------------------------------------------------------------- command line
@pytest.mark.slow
@pytest.mark.skipif(not UAI.is_file(), reason="needs ../shared/data/uai (UAI 2014 instances)")
def test_structopt_infer_exits_promptly_on_sigint(tmp_path):
    command = [sys.executable, "-m", "structopt", "infer", str(UAI), "--no-progress", "--out",
               str(tmp_path / "out.MAR")]
    process = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        time.sleep(4.0)  # imports done and inference under way on an idle machine; earlier is fine too
        sent = time.perf_counter()
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=60)
        assert time.perf_counter() - sent < 15.0
        assert process.returncode != 0
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
