"""Executors (structopt.parallel): the same traces serially, on local processes and on dask;
mini-batch BCFW; option validation; checkpoints across executors."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from _reference import random_chain_problem, random_multiclass_problem

import structopt as so
from structopt.cli import main
from structopt.errors import InvalidInputError
from structopt.losses import MatchingHamming
from structopt.models.matching import MatchingModel
from structopt.parallel import ParallelError, ProcessExecutor, chunk_bounds, open_executor, start_local_cluster
from structopt.solvers import bcfw, casimir_svrg, dual_extragradient, frank_wolfe, sgd, ssg, svrg
from structopt.solvers._blocks import BlockState, PythonBlockUpdater
from structopt.solvers._minibatch import MiniBatchUpdater

distributed = pytest.importorskip("distributed")
dask = pytest.importorskip("dask")


def matching_problem(seed: int = 0, n: int = 8) -> so.SSVMProblem:
    rng = np.random.default_rng(seed)
    model = MatchingModel(n_features=3, allow_unmatched=True)
    X = [rng.normal(size=(int(rng.integers(2, 4)), int(rng.integers(2, 4)), 3)) for _ in range(n)]
    w_true = rng.normal(size=model.n_params)
    Y = [model.structure.argmax(model.potentials(x, w_true + 0.5 * rng.normal(size=model.n_params))) for x in X]
    return so.SSVMProblem(model, X, Y, MatchingHamming(1.0, 3.0), lam=0.1)


PROBLEMS = {
    "chain": lambda: random_chain_problem(0, n=12, max_len=4),
    "matching": matching_problem,
    "multiclass": lambda: random_multiclass_problem(0, n=20),
}

#: one short run of every solver (each exercises its batch pass on the executor)
RUNS = {
    "frank_wolfe": lambda p, **kw: frank_wolfe(p, max_passes=3, **kw),
    "bcfw": lambda p, **kw: bcfw(p, max_passes=2, random_state=0, **kw),
    "bcfw_minibatch": lambda p, **kw: bcfw(p, max_passes=2, batch_size=4, random_state=0, **kw),
    "ssg": lambda p, **kw: ssg(p, max_passes=2, random_state=0, **kw),
    "sgd": lambda p, **kw: sgd(p, max_passes=2, random_state=0, **kw),
    "svrg": lambda p, **kw: svrg(p, max_passes=4, mu=0.5, random_state=0, **kw),
    "casimir": lambda p, **kw: casimir_svrg(p, max_passes=4, random_state=0, **kw),
    "extragradient": lambda p, **kw: dual_extragradient(p, max_passes=2, power_iters=5, random_state=0, **kw),
}


def assert_same_trace(a: list[dict], b: list[dict]) -> None:
    """Every recorded number but the wall time agrees to 1e-9."""
    assert len(a) == len(b)
    for ra, rb in zip(a, b):
        assert set(ra) == set(rb)
        for key in ra:
            if key != "time":
                assert ra[key] == pytest.approx(rb[key], rel=1e-9, abs=1e-9), key


@pytest.fixture(scope="module")
def client():
    """Two single-threaded dask workers in this process (cheap to start; processes are the slow tests')."""
    with start_local_cluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0",
                                  silence_logs=40) as cluster, distributed.Client(cluster, set_as_default=False) as c:
        yield c


@pytest.fixture(scope="module")
def problems():
    return {name: make() for name, make in PROBLEMS.items()}


# one structure is enough for the extragradient, whose only executor pass is the primal evaluation
@pytest.mark.parametrize("run, kind", [(run, kind) for run in sorted(RUNS) for kind in sorted(PROBLEMS)
                                       if run != "extragradient" or kind == "chain"])
def test_dask_trace_equals_serial(client, problems, kind, run):
    problem = problems[kind]
    serial = RUNS[run](problem)
    remote = RUNS[run](problem, executor=client, n_workers=2)
    assert_same_trace(serial.trace, remote.trace)
    np.testing.assert_allclose(remote.w, serial.w, rtol=1e-9, atol=1e-12)


@pytest.fixture(scope="module")
def process_pools(problems):
    pools = {name: ProcessExecutor(problem, 2) for name, problem in problems.items() if name != "multiclass"}
    yield pools
    for pool in pools.values():
        pool.close()


@pytest.mark.parametrize("kind", ["chain", "matching"])
@pytest.mark.parametrize("run", ["frank_wolfe", "bcfw_minibatch", "svrg"])
def test_process_trace_equals_serial(problems, process_pools, kind, run):
    problem = problems[kind]
    serial = RUNS[run](problem)
    assert_same_trace(serial.trace, RUNS[run](problem, executor=process_pools[kind]).trace)
    assert process_pools[kind].worker_pids(), "an executor passed in is not closed by the solver"


def test_processes_option_starts_and_closes_its_pool():
    problem = random_chain_problem(1, n=6)
    serial = frank_wolfe(problem, max_passes=2)
    assert_same_trace(serial.trace, frank_wolfe(problem, max_passes=2, executor="processes", n_workers=2).trace)


def test_batch_evaluations_and_predict(client, problems):
    for problem in problems.values():
        rng = np.random.default_rng(3)
        w = rng.normal(size=problem.n_params)
        with open_executor(problem, client, n_workers=3) as ex:
            assert ex.n_chunks == 3
            np.testing.assert_allclose(problem.hinge_losses(w, ex), problem.hinge_losses(w), rtol=1e-12)
            assert problem.primal(w, ex) == pytest.approx(problem.primal(w), rel=1e-12)
            predicted, expected = problem.predict(problem.X, w, ex), problem.predict(problem.X, w)
            assert all(np.array_equal(a, b) for a, b in zip(predicted, expected, strict=True))
            order = [5, 0, 7, 0, problem.n - 1]  # across chunks, out of order, repeated
            for (stats, theta, loss), i in zip(ex.block_oracles(w, order), order, strict=True):
                d = problem.decode(i, w)
                assert loss == problem.loss(problem.Y[i], d.y)
                np.testing.assert_allclose(theta, so.structures.base.flatten(d.theta))
                assert stats @ theta == pytest.approx(problem.structure.score(d.theta, d.y))


def test_chunks_are_contiguous_and_balanced():
    assert chunk_bounds(10, 3).tolist() == [0, 3, 7, 10]
    assert chunk_bounds(2, 5).tolist() == [0, 1, 2]
    assert chunk_bounds(7, 1).tolist() == [0, 7]


# --------------------------------------------------------------------------- mini-batch BCFW
def test_minibatch_of_one_block_is_bcfw():
    problem = random_chain_problem(2, n=10)
    order = np.random.default_rng(0).integers(0, problem.n, size=35)
    states = [BlockState.initial(problem) for _ in range(2)]
    PythonBlockUpdater(problem, states[0]).run(order, line_search=True)
    with open_executor(problem) as ex:
        MiniBatchUpdater(problem, states[1], ex, 1).run(order, line_search=True)
    np.testing.assert_allclose(states[1].w, states[0].w, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(states[1].m, states[0].m, rtol=1e-10, atol=1e-12)
    assert states[1].ell == pytest.approx(states[0].ell, rel=1e-10)
    np.testing.assert_allclose(states[1].averaged(problem)[0], states[0].averaged(problem)[0], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("kind", ["chain", "multiclass"])
def test_minibatch_of_all_blocks_is_batch_frank_wolfe(problems, kind):
    problem = problems[kind]
    fw = frank_wolfe(problem, max_passes=4)
    mb = bcfw(problem, max_passes=4, batch_size=problem.n, averaging="none", random_state=0)
    # FW records the iterate each pass starts from; mini-batch BCFW the one the pass ends at
    for before, after in zip(fw.trace[1:], mb.trace[:-1]):
        assert after["dual"] == pytest.approx(before["dual"], rel=1e-9, abs=1e-12)
        assert after["primal"] == pytest.approx(before["primal"], rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("kind", sorted(PROBLEMS))
@pytest.mark.parametrize("tau", [3, 8])
def test_minibatch_gap_is_certified(client, problems, kind, tau):
    problem = problems[kind]
    for averaging in ("weighted", "none"):
        result = bcfw(problem, max_passes=6, batch_size=tau, averaging=averaging, random_state=1,
                      executor=client, n_workers=2)
        duals = [r["dual_iterate"] for r in result.trace]
        assert np.all(np.diff(duals) >= -1e-12), "line search over the joint direction ascends the dual"
        for r in result.trace:
            assert r["gap"] >= -1e-10
            assert r["primal"] - r["dual"] == pytest.approx(r["gap"], abs=1e-12)
        assert result.trace[-1]["gap"] < result.trace[0]["gap"]


def test_minibatch_fixed_step_and_uniform_sampling_stay_feasible(problems):
    problem = problems["chain"]
    result = bcfw(problem, max_passes=4, batch_size=5, line_search=False, sampling="uniform", random_state=0)
    for r in result.trace:
        assert r["gap"] >= -1e-10
        assert r["primal"] - r["dual"] == pytest.approx(r["gap"], abs=1e-12)


# --------------------------------------------------------------------------- options and checkpoints
@pytest.mark.parametrize("options, match", [
    ({"executor": "threads"}, "executor"),
    ({"executor": 3}, "executor"),
    ({"executor": "dask", "n_workers": 0}, "n_workers"),
    ({"n_workers": 2}, "n_workers"),
    ({"batch_size": 0}, "batch_size"),
])
def test_bad_parallel_options_are_refused(problems, options, match):
    with pytest.raises(InvalidInputError, match=match):
        bcfw(problems["chain"], max_passes=1, **options)


def test_missing_dask_is_named(problems, monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # makes `import distributed` fail
    with pytest.raises(InvalidInputError, match=r"dask is not installed.*\[dask\]"):
        frank_wolfe(problems["chain"], max_passes=1, executor="dask")


def test_checkpoint_resumes_across_executors(client, problems, tmp_path):
    problem = problems["chain"]
    path = tmp_path / "run.ckpt"
    whole = bcfw(problem, max_passes=4, batch_size=3, random_state=0)
    bcfw(problem, max_passes=2, batch_size=3, random_state=0, checkpoint=path)
    resumed = bcfw(problem, max_passes=4, batch_size=3, random_state=0, resume=path, executor=client, n_workers=2)
    assert_same_trace(whole.trace, resumed.trace)
    with pytest.raises(InvalidInputError, match="solver options"):
        bcfw(problem, max_passes=4, batch_size=2, random_state=0, resume=path)


# --------------------------------------------------------------------------- command line
def _train(tmp_path, name, *args) -> dict:
    out = tmp_path / name
    assert main(["train", "ocr", "--n-train", "40", "--passes", "2", "--solver", "fw", "--out", str(out),
                 "--no-progress", *args]) == 0
    return json.loads((out / "trace.json").read_text())


def test_cli_runs_on_a_dask_scheduler(client, tmp_path):
    serial = _train(tmp_path, "serial")
    remote = _train(tmp_path, "remote", "--scheduler", client.scheduler.address, "--workers", "2")
    assert_same_trace(serial["trace"], remote["trace"])


def test_cli_refuses_bad_worker_counts(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:  # refused by the argument parser, before any work
        main(["train", "ocr", "--n-train", "5", "--workers", "0", "--out", str(tmp_path), "--no-progress"])
    assert stop.value.code == 2
    assert "--workers" in capsys.readouterr().err


# --------------------------------------------------------------------------- faults
class GateHamming(so.Hamming):
    """Hamming loss that waits while the file ``gate`` exists (announcing itself in ``<pid>.waiting``
    beside it): a test can kill a worker in the middle of a pass, whatever the machine's load."""

    def __init__(self, gate: Path):
        super().__init__()
        self.gate = Path(gate)

    def __call__(self, y_true, y_pred) -> float:
        if self.gate.exists():
            (self.gate.parent / f"{os.getpid()}.waiting").touch()
            deadline = time.monotonic() + 120.0
            while self.gate.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
        return super().__call__(y_true, y_pred)


def gated_problem(gate: Path) -> so.SSVMProblem:
    fast = random_chain_problem(4, n=24, max_len=4)
    return so.SSVMProblem(fast.model, fast.X, fast.Y, GateHamming(gate), fast.lam)


def kill_in_next_pass(gate: Path, victim: int, killed: list[int]):
    """A callback that, at the first evaluation, closes the gate and SIGKILLs ``victim`` once it waits there
    (inside a task of the next pass), then opens the gate again for the others."""
    def kill() -> None:
        marker = gate.parent / f"{victim}.waiting"
        deadline = time.monotonic() + 120.0
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(victim, signal.SIGKILL)
        gate.unlink()

    def callback(w):
        if not killed:
            killed.append(victim)
            gate.touch()
            threading.Thread(target=kill, daemon=True).start()
        return {}
    return callback


def assert_dead(pid: int) -> None:
    deadline = time.monotonic() + 60.0  # a killed process is gone at once; its parent may reap it late
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        with contextlib.suppress(OSError), open(f"/proc/{pid}/stat") as fh:
            if fh.read().split(")")[-1].split()[0] == "Z":  # killed, not yet reaped
                return
        time.sleep(0.1)
    raise AssertionError(f"process {pid} is still alive")


@pytest.mark.slow
def test_killed_dask_worker_mid_pass_gives_the_serial_trace(tmp_path):
    gate = tmp_path / "gate"
    problem = gated_problem(gate)
    serial = frank_wolfe(problem, max_passes=3, fused=False)
    with start_local_cluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                                  silence_logs=50) as cluster, distributed.Client(cluster, set_as_default=False) as c:
        c.wait_for_workers(2, timeout=120)
        killed: list[int] = []
        pids = list(c.run(os.getpid).values())
        result = frank_wolfe(problem, max_passes=3, fused=False, executor=c,
                             callback=kill_in_next_pass(gate, pids[0], killed))
        assert_dead(killed[0])
    assert_same_trace(serial.trace, result.trace)  # the lost chunk was rebuilt and its task rerun


@pytest.mark.slow
def test_killed_process_worker_mid_pass_gives_the_serial_trace(tmp_path):
    gate = tmp_path / "gate"
    problem = gated_problem(gate)
    serial = frank_wolfe(problem, max_passes=3, fused=False)
    killed: list[int] = []
    with ProcessExecutor(problem, 2) as pool:
        pool.mean_hinge(problem.model.zeros())  # workers up
        result = frank_wolfe(problem, max_passes=3, fused=False, executor=pool,
                             callback=kill_in_next_pass(gate, pool.worker_pids()[0], killed))
        assert killed[0] not in pool.worker_pids(), "the broken pool was replaced"
    assert_dead(killed[0])
    assert_same_trace(serial.trace, result.trace)


@pytest.mark.slow
def test_worker_loss_beyond_retries_fails_clearly_and_the_checkpoint_resumes(tmp_path):
    gate = tmp_path / "gate"
    problem = gated_problem(gate)
    serial = frank_wolfe(problem, max_passes=3, fused=False)
    path = tmp_path / "fw.ckpt"
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}), \
            start_local_cluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                                     silence_logs=50) as cluster, \
            distributed.Client(cluster, set_as_default=False) as c:
        c.wait_for_workers(2, timeout=120)
        killed: list[int] = []
        pids = list(c.run(os.getpid).values())
        with pytest.raises(ParallelError, match="died"):
            frank_wolfe(problem, max_passes=3, fused=False, executor=c, checkpoint=path,
                        callback=kill_in_next_pass(gate, pids[0], killed))
    resumed = frank_wolfe(problem, max_passes=3, fused=False, resume=path)
    assert_same_trace(serial.trace, resumed.trace)


# --------------------------------------------------------------------------- sending problems to workers
def test_processes_refuse_a_lambda_builder_naming_the_cause():
    import cvxpy as cp

    def declare(n):  # a def inside a function pickles by name only, like a lambda
        z = cp.Variable(n, boolean=True)
        return z, [cp.sum(z) <= 2]

    rng = np.random.default_rng(0)
    X = [rng.normal(size=(k, 2)) for k in (3, 4)]
    Y = [np.zeros(k, dtype=np.int64) for k in (3, 4)]
    for builder, what in ((lambda n: declare(n), "is a lambda"), (declare, "is a function defined inside")):
        structure = so.LPStructure.from_builder(builder)
        problem = so.SSVMProblem(so.FeatureModel(structure, n_features=2), X, Y, so.Hamming(), lam=0.1)
        with pytest.raises(InvalidInputError, match=rf"model\.structure\._builder {what}.*def at module level"):
            frank_wolfe(problem, max_passes=1, executor="processes", n_workers=2)
        # dask sends functions with cloudpickle; serial needs no pickling
        assert frank_wolfe(problem, max_passes=1).trace


def test_executor_waits_for_workers_that_start_late():
    problem = random_multiclass_problem(1, n=6)
    with start_local_cluster(n_workers=0, threads_per_worker=1, processes=False, dashboard_address=":0",
                                  silence_logs=40) as cluster, \
            distributed.Client(cluster, set_as_default=False) as c:
        timer = threading.Timer(0.5, cluster.scale, (1,))  # the cluster has no worker when the run starts
        timer.start()
        try:
            result = frank_wolfe(problem, max_passes=2, executor=c)
        finally:
            timer.cancel()
    assert_same_trace(frank_wolfe(problem, max_passes=2).trace, result.trace)
