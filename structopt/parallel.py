"""Executors: where the batch passes of a solver run (serially, on local processes, or on dask).

A solver declares ``executor=`` and ``n_workers=`` (see :mod:`structopt.solvers.base`); the
``@solver`` declaration opens the executor for the run and closes what it started. The choices:

``None``
    Serial, in this process (the default).
``"processes"``
    ``n_workers`` local processes (one-process :class:`concurrent.futures.ProcessPoolExecutor`
    pools started by a fork server, one per chunk); no extra dependency.
``"dask"``
    A :class:`distributed.LocalCluster` of ``n_workers`` single-threaded worker processes,
    started for the run and closed after it.
a :class:`distributed.Client` or a scheduler address (``"tcp://host:8786"``)
    An existing dask cluster; the client is used as it is (and not closed), an address gets a
    client of its own for the run.

The examples are split into ``n_chunks`` contiguous chunks, each a sub-problem built once on a
worker (from data shipped once, with its build task) and kept there; a round sends the weights and
gets back sums (a weight-space vector and scalars, or compact statistics) added in chunk order.
The passes themselves are the functions of :mod:`structopt.batch`, so every executor computes the
same numbers, up to the order of floating-point additions.

Faults: a pass is a pure function of the weights, so a pass that loses a worker is simply rerun.
dask does that itself (a chunk lost with its worker is rebuilt from its task); a dead local
process is replaced (with its chunk) and the pass rerun once. A pass that still cannot complete raises
:class:`ParallelError`; no partial sum is ever returned.

Executors are the one place outside the problem that reads its pieces (``problem.model``, ``X``,
``Y``, ``loss``, ``lam``): they ship them to the workers, which build the chunks' sub-problems
(:class:`ChunkSpec`) and decode new inputs for ``predict``. The passes themselves use the
problem's operators only.

Ctrl-C: waiting for a pass wakes up on SIGINT. The pass is abandoned (its futures cancelled) and the
workers this executor started are killed rather than waited for (their oracle calls may run for
long and their answers are no longer wanted), so the :class:`KeyboardInterrupt` reaches the caller
within a second or two; a later pass on the same executor starts fresh workers. Workers of a
cluster the caller owns are left alone (a running task finishes there; its result is dropped).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import itertools
import multiprocessing
import numbers
import os
import pickle
import signal
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from structopt import batch
from structopt.errors import InvalidInputError, NotSupportedError, StructoptError
from structopt.potentials import Potentials
from structopt.problem import SSVMProblem

EXECUTORS = ("processes", "dask")
#: seconds to wait for dask workers to be running (a loaded machine starts worker processes slowly)
WORKER_WAIT_TIMEOUT = 120.0


class ParallelError(StructoptError):
    """A batch pass could not be completed by the workers (they died or became unreachable)."""


# --------------------------------------------------------------------------- chunks
@dataclass(frozen=True)
class ChunkSpec:
    """What a worker needs to build one chunk: examples ``start:stop`` of a problem."""

    model: Any
    X: list
    Y: list
    loss: Any
    lam: float
    start: int
    stop: int

    def build(self) -> SSVMProblem:
        return SSVMProblem(self.model, self.X, self.Y, self.loss, self.lam)


def chunk_bounds(n: int, n_chunks: int) -> np.ndarray:
    """Boundaries of ``min(n_chunks, n)`` contiguous chunks of sizes differing by at most one."""
    count = max(1, min(int(n_chunks), n))
    return np.linspace(0, n, count + 1).round().astype(np.int64)


def chunk_specs(problem: SSVMProblem, n_chunks: int) -> list[ChunkSpec]:
    """The problem split into contiguous chunks (inputs as the problem validated them)."""
    if problem.chunk_refusal is not None:
        raise NotSupportedError(f"parallel executors cannot run {problem!r}: {problem.chunk_refusal}")
    bounds = chunk_bounds(problem.n, n_chunks)
    return [ChunkSpec(problem.model, problem.X[a:b], problem.Y[a:b], problem.loss, problem.lam, int(a), int(b))
            for a, b in itertools.pairwise(bounds)]


def _unpicklable(obj: Any, path: str, depth: int = 4) -> tuple[str, Any] | None:
    """The innermost attribute (path, value) under ``obj`` that pickle refuses, or None if it pickles."""
    try:
        pickle.dumps(obj)
        return None
    except Exception:  # pickle raises PicklingError, AttributeError or TypeError: look inside
        pass
    if depth > 0:
        items = list(vars(obj).items()) if hasattr(obj, "__dict__") and not callable(obj) else []
        if isinstance(obj, dict):
            items = [(f"[{key!r}]", value) for key, value in obj.items()]
        elif isinstance(obj, (list, tuple)):
            items = [(f"[{i}]", value) for i, value in enumerate(obj)]
        for name, value in items:
            inner = _unpicklable(value, f"{path}.{name}" if not name.startswith("[") else f"{path}{name}",
                                 depth - 1)
            if inner is not None:
                return inner
    return path, obj


def check_picklable(problem: SSVMProblem, executor: str = "processes") -> None:
    """Refuse, naming the culprit, a model or loss that cannot be sent to worker processes by pickle.

    Raises
    ------
    InvalidInputError
        E.g. for ``LPStructure.from_builder(lambda n: ...)``: a lambda (or a function defined inside
        another function) pickles by name only, which worker processes cannot look up.
    """
    for root, obj in (("model", problem.model), ("loss", problem.loss)):
        found = _unpicklable(obj, root)
        if found is None:
            continue
        path, value = found
        reason = "pickle refuses it"
        try:
            pickle.dumps(value)
        except Exception as error:  # any pickling failure is reported the same way
            reason = f"{type(error).__name__}: {error}"
        name = getattr(value, "__qualname__", "")
        if name.endswith("<lambda>") or "<locals>" in name:
            what = "a lambda" if name.endswith("<lambda>") else "a function defined inside another function"
            hint = (f"{path} is {what} ({name}), which cannot be sent to worker processes; define it with def "
                    f"at module level, or use executor=None or 'dask' (dask sends functions with cloudpickle)")
        else:
            hint = (f"{path} ({type(value).__name__}) cannot be pickled ({reason}); executor={executor!r} sends "
                    "the model and the loss to worker processes with pickle (executor=None runs in this "
                    "process; 'dask' uses cloudpickle)")
        raise InvalidInputError(f"executor={executor!r}: {hint}")


def _run_on_chunk(chunk: SSVMProblem, name: str, args: tuple) -> Any:
    # runs on a worker: the pass functions are looked up by name so that tasks stay small
    return getattr(batch, name)(chunk, *args)


# --------------------------------------------------------------------------- the executor interface
class Executor:
    """Runs the batch passes of :mod:`structopt.batch` over a problem and reduces them in a fixed order.

    Subclasses provide :meth:`_map_subset` (one call of a pass function per chunk, answers in chunk
    order) and :meth:`close`; the passes below are shared.
    """

    def __init__(self, problem: SSVMProblem, bounds: np.ndarray):
        self.problem = problem
        self.bounds = bounds

    @property
    def n_chunks(self) -> int:
        return len(self.bounds) - 1

    # ----- to be provided
    def _map_subset(self, name: str, chunks: list[int], args: list[tuple]) -> list[Any]:
        """Run pass ``name`` on each chunk of ``chunks`` with its arguments; answers in that order."""
        raise NotImplementedError

    def _map(self, name: str, args_per_chunk: Sequence[tuple]) -> list[Any]:
        return self._map_subset(name, list(range(self.n_chunks)), list(args_per_chunk))

    def _map_inputs(self, name: str, args_per_chunk: Sequence[tuple]) -> list[Any]:
        """Like :meth:`_map` for passes over data sent with the call (prediction)."""
        return self._map(name, args_per_chunk)

    def close(self) -> None:
        """Release what the executor started (idempotent)."""

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----- passes
    def _same(self, *args: Any) -> list[tuple]:
        return [args] * self.n_chunks

    def run_pass(self, name: str, *args: Any) -> list[Any]:
        """Run the pass ``structopt.batch.<name>(chunk, *args)`` on every chunk; the answers in chunk order
        (unreduced: for measurements and for passes without a method here)."""
        if not callable(getattr(batch, name, None)):
            raise InvalidInputError(f"name: structopt.batch has no pass {name!r}")
        return self._map(name, self._same(*args))

    def hinge_losses(self, w: np.ndarray) -> np.ndarray:
        """``H_i(w)`` for every example (see :meth:`SSVMProblem.hinge_losses`)."""
        return np.concatenate(self._map("hinge_values", self._same(np.asarray(w, dtype=float))))

    def mean_hinge(self, w: np.ndarray) -> float:
        """``mean_i H_i(w)``: one pass, the chunks' sums added in chunk order."""
        parts = self._map("hinge_values", self._same(np.asarray(w, dtype=float)))
        return float(sum(float(np.sum(p)) for p in parts) / self.problem.n)

    def primal(self, w: np.ndarray) -> float:
        """``F(w)`` (see :meth:`SSVMProblem.primal`) with the hinge pass on the executor."""
        w = np.asarray(w, dtype=float)
        return 0.5 * self.problem.lam * float(w @ w) + self.mean_hinge(w)

    def fw_corner(self, w: np.ndarray, fused: bool | None = None) -> tuple[np.ndarray, float, float]:
        """Frank-Wolfe corner ``(w_s, mean loss, mean hinge)`` at ``w`` (:func:`structopt.batch.fw_corner`)."""
        n = self.problem.n
        parts = self._map("fw_corner", self._same(np.asarray(w, dtype=float), fused, n))
        w_s = parts[0][0].copy()
        for part in parts[1:]:
            w_s += part[0]
        return w_s, sum(p[1] for p in parts) / n, sum(p[2] for p in parts) / n

    def smooth_snapshot(self, w: np.ndarray, mu: float, kind: str, k: int
                        ) -> tuple[list[Potentials], np.ndarray, float]:
        """SVRG snapshot at ``w`` (:func:`structopt.batch.smooth_snapshot`): per-example compact statistics,
        the mean smoothed gradient and the mean smoothed hinge."""
        parts = self._map("smooth_snapshot", self._same(np.asarray(w, dtype=float), mu, kind, k, self.problem.n))
        diffs = [d for part in parts for d in part[0]]
        grad = parts[0][1].copy()
        for part in parts[1:]:
            grad += part[1]
        return diffs, grad, float(sum(p[2] for p in parts))

    def block_oracles(self, w: np.ndarray, indices: Sequence[int]) -> list[tuple[np.ndarray, np.ndarray, float]]:
        """``(stats, theta, loss)`` of each example of ``indices`` decoded at the same ``w``, in that order
        (:func:`structopt.batch.block_oracles`)."""
        indices = np.asarray(indices, dtype=np.int64)
        owner = np.searchsorted(self.bounds, indices, side="right") - 1
        args = [(np.asarray(w, dtype=float), indices[owner == c] - self.bounds[c]) for c in range(self.n_chunks)]
        busy = [c for c in range(self.n_chunks) if args[c][1].size]
        answers = dict(zip(busy, self._map_subset("block_oracles", busy, [args[c] for c in busy]), strict=True))
        cursor = dict.fromkeys(busy, 0)
        out = []
        for c in owner:
            out.append(answers[c][cursor[c]])
            cursor[c] += 1
        return out

    def predict(self, X: Sequence[Any], w: np.ndarray) -> list[Any]:
        """MAP outputs for new inputs ``X`` (see :meth:`SSVMProblem.predict`), split over the workers."""
        X = list(X)
        if not X:
            return []
        bounds = chunk_bounds(len(X), self.n_chunks)
        w = np.asarray(w, dtype=float)
        parts = self._map_inputs("predict", [(X[a:b], w) for a, b in itertools.pairwise(bounds)])
        return [y for part in parts for y in part]


class SerialExecutor(Executor):
    """The passes in this process, on the whole problem as one chunk."""

    def __init__(self, problem: SSVMProblem):
        super().__init__(problem, np.array([0, problem.n], dtype=np.int64))

    def _map_subset(self, name: str, chunks: list[int], args: list[tuple]) -> list[Any]:
        return [_run_on_chunk(self.problem, name, a) for a in args]

    def hinge_losses(self, w: np.ndarray) -> np.ndarray:
        return self.problem.hinge_losses(w)

    def mean_hinge(self, w: np.ndarray) -> float:
        return self.problem.mean_hinge(w)


# --------------------------------------------------------------------------- local processes
_WORKER_CHUNK: list[SSVMProblem] = []  # the chunk a process-pool worker holds


def _install(spec: ChunkSpec) -> None:
    # process initializer: build the worker's chunk once, before its first task
    _one_blas_thread()
    _WORKER_CHUNK[:] = [spec.build()]


def _pool_task(name: str, args: tuple) -> Any:
    return _run_on_chunk(_WORKER_CHUNK[0], name, args)


def _inputs_task(model: Any, name: str, args: tuple) -> Any:
    return getattr(batch, name)(_ModelOnly(model), *args)


class _ModelOnly:
    """Enough of a problem for :func:`structopt.batch.predict` where no chunk is needed."""

    def __init__(self, model: Any):
        self.model = model

    def predict(self, X: Sequence[Any], w: np.ndarray) -> list[Any]:
        return self.model.predict_batch(X, w)  # the one prediction path (Model.predict_batch)


class ProcessExecutor(Executor):
    """``n_workers`` local processes, each holding one chunk (shipped once, when the process starts).

    One single-process pool per chunk pins every chunk to its process, so no example is stored
    twice and a broken process is replaced on its own.
    """

    def __init__(self, problem: SSVMProblem, n_workers: int):
        check_picklable(problem, "processes")
        specs = chunk_specs(problem, n_workers)
        super().__init__(problem, np.array([s.start for s in specs] + [specs[-1].stop], dtype=np.int64))
        self._specs = specs
        self._pools: list[concurrent.futures.ProcessPoolExecutor | None] = [None] * len(specs)
        for c in range(len(specs)):
            self._start(c)

    def _start(self, c: int) -> None:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["structopt.parallel"])
        self._pools[c] = concurrent.futures.ProcessPoolExecutor(1, mp_context=context, initializer=_install,
                                                               initargs=(self._specs[c],))

    def _submit_all(self, submit: Callable[[], list[tuple[int, concurrent.futures.Future]]]) -> list[Any]:
        # a pass is pure: if a worker dies, replace it and run the pass once more
        for c, pool in enumerate(self._pools):
            if pool is None:  # abandoned after an interrupt: fresh workers
                self._start(c)
        for attempt in (1, 2):
            futures = submit()
            broken = set()
            results = []
            try:
                for c, future in futures:
                    try:
                        results.append(future.result())  # interruptible: a SIGINT raises KeyboardInterrupt here
                    except concurrent.futures.process.BrokenProcessPool as error:
                        broken.add(c)
                        failure = error
            except KeyboardInterrupt:
                self._abandon()
                raise
            if not broken:
                return results
            for c in broken:
                self._pools[c].shutdown(wait=True, cancel_futures=True)
                self._start(c)
            if attempt == 2:
                raise ParallelError(f"a worker process died twice during one batch pass ({failure}); the pass "
                                    "was abandoned (no partial result is used)")
        raise AssertionError("unreachable")

    def _abandon(self) -> None:
        # Ctrl-C during a pass: kill the workers instead of waiting for their (possibly hours-long) tasks
        for c, pool in enumerate(self._pools):
            if pool is None:
                continue
            for process in list(getattr(pool, "_processes", {}).values()):
                with contextlib.suppress(OSError, AttributeError):
                    process.kill()
            pool.shutdown(wait=True, cancel_futures=True)
            self._pools[c] = None

    def _map_subset(self, name: str, chunks: list[int], args: list[tuple]) -> list[Any]:
        return self._submit_all(lambda: [(c, self._pools[c].submit(_pool_task, name, a))
                                         for c, a in zip(chunks, args, strict=True)])

    def _map_inputs(self, name: str, args_per_chunk: Sequence[tuple]) -> list[Any]:
        model = self.problem.model
        return self._submit_all(lambda: [(c, self._pools[c].submit(_inputs_task, model, name, a))
                                         for c, a in enumerate(args_per_chunk)])

    def worker_pids(self) -> list[int]:
        """Process ids of the live workers (for tests and monitoring)."""
        return [pid for pool in self._pools if pool is not None for pid in pool._processes]

    def close(self) -> None:
        for c, pool in enumerate(self._pools):
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)
                self._pools[c] = None


# --------------------------------------------------------------------------- dask
def _import_distributed():
    try:
        import distributed
    except ImportError:
        raise InvalidInputError("executor: dask is not installed; pip install 'structopt-learn[dask]' "
                                "(or use executor='processes')") from None
    return distributed


def _dask_chunk_task(chunk: SSVMProblem, name: str, args: tuple) -> Any:
    return _run_on_chunk(chunk, name, args)


def _one_blas_thread() -> None:
    # a worker runs its chunk on one core; BLAS threads inside it would only oversubscribe the machine
    # (the per-example products are small)
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1, user_api="blas")


def _build_chunk(spec: ChunkSpec) -> SSVMProblem:
    _one_blas_thread()
    return spec.build()


def start_local_cluster(attempts: int = 3, **options: Any) -> Any:
    """A :class:`distributed.LocalCluster`, retried when its start fails on a loaded machine.

    dask gives its IO-loop thread and its workers fixed start-up deadlines (10 s for the loop);
    with many busy processes per core those can pass before the cluster is up, which fails the
    start with an AssertionError or a TimeoutError although nothing is wrong. A pass is pure, so
    starting again is safe.
    """
    distributed = _import_distributed()
    for attempt in range(1, attempts + 1):
        try:
            return distributed.LocalCluster(**options)
        except (AssertionError, TimeoutError, RuntimeError, OSError) as error:
            if attempt == attempts:
                raise ParallelError(f"executor: a local dask cluster failed to start {attempts} times "
                                    f"({type(error).__name__}: {error})") from error
    raise AssertionError("unreachable")


class DaskExecutor(Executor):
    """Passes on a dask.distributed cluster: chunks built on the workers once, weights sent per round.

    Parameters
    ----------
    problem : SSVMProblem
    target : "dask", str or distributed.Client
        ``"dask"`` starts a LocalCluster of ``n_workers`` processes for the run; an address gets a
        client of its own; a Client is used as it is.
    n_workers : int, optional
        Workers of the local cluster, and the number of chunks (default: the cluster's workers).
    processes : bool
        LocalCluster only: worker processes (default) or threads in this process (cheap to start;
        enough when the oracles release the GIL or for tests).
    """

    def __init__(self, problem: SSVMProblem, target: Any, n_workers: int | None = None, processes: bool = True):
        distributed = _import_distributed()
        self._cluster = None
        self._own_client = True
        if isinstance(target, distributed.Client):
            self.client, self._own_client = target, False
        elif target == "dask":
            import dask

            # dask's nannies start workers with MALLOC_TRIM_THRESHOLD_=65536, which turns off glibc's
            # adaptive mmap threshold: every array over 128 kB is then mapped and unmapped afresh,
            # and the horse-segmentation oracles ran 45% slower. Our workers keep their data for the
            # whole run and allocate the same temporaries each round, so glibc's default suits them.
            with dask.config.set({"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}):
                self._cluster = start_local_cluster(n_workers=n_workers or 1, threads_per_worker=1,
                                                    processes=processes, dashboard_address=":0", silence_logs=40)
            self.client = distributed.Client(self._cluster, set_as_default=False)
        else:
            try:
                self.client = distributed.Client(target, set_as_default=False, timeout=30)
            except OSError as error:
                raise ParallelError(f"executor: cannot reach the dask scheduler at {target!r} ({error})") from None
        try:
            self._start_chunks(problem, n_workers, distributed)
        except BaseException:  # including KeyboardInterrupt while waiting: release what was started
            self.close()
            raise

    def _start_chunks(self, problem: SSVMProblem, n_workers: int | None, distributed: Any) -> None:
        workers = self._wait_for_workers(n_workers if self._cluster is not None else 1)
        specs = chunk_specs(problem, n_workers or len(workers))
        super().__init__(problem, np.array([s.start for s in specs] + [specs[-1].stop], dtype=np.int64))
        self._killed = distributed.KilledWorker
        # One chunk per worker, round robin. The chunk's examples travel once, inside its build task
        # (rather than client.scatter): the scheduler keeps the task, so a chunk lost with its worker
        # is rebuilt elsewhere (allow_other_workers) and the pass goes on. Scattered data has no such
        # lineage. The price is the data's size in the scheduler's memory, hence the silenced warning.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Sending large graph", category=UserWarning)
            self._chunks = [self.client.submit(_build_chunk, spec, pure=False, workers=[workers[c % len(workers)]],
                                               allow_other_workers=True)
                            for c, spec in enumerate(specs)]
        self._gather(self._chunks)  # fail now, not in the first pass, if a chunk cannot be built

    def _wait_for_workers(self, count: int | None) -> list[str]:
        """Addresses of the cluster's workers, once ``count`` (at least one) are running.

        A loaded machine starts worker processes slowly, and a worker may be briefly away (restarted
        by its nanny, reconnecting): wait for them, generously, instead of failing at once.
        """
        count = max(1, count or 1)
        try:
            self.client.wait_for_workers(count, timeout=WORKER_WAIT_TIMEOUT)
        except (TimeoutError, OSError) as error:
            raise ParallelError(f"executor: the dask cluster did not have {count} running worker(s) within "
                                f"{WORKER_WAIT_TIMEOUT:g} s ({type(error).__name__}: {error})") from None
        try:
            workers = sorted(self.client.scheduler_info(n_workers=-1)["workers"])
        except TypeError:  # older distributed: no n_workers argument
            workers = sorted(self.client.scheduler_info()["workers"])
        if not workers:  # left again in between: extremely unlikely; say so rather than divide by zero
            raise ParallelError("executor: the dask cluster has no workers")
        return workers

    def _gather(self, futures: list) -> list[Any]:
        if self.client is None:
            raise ParallelError("executor: this DaskExecutor is closed (it was closed, or interrupted by Ctrl-C)")
        try:
            return self.client.gather(futures)  # waits in short interruptible steps
        except self._killed as error:
            raise ParallelError(f"dask workers died repeatedly while running a batch pass ({error}); "
                                "the pass was abandoned (no partial result is used)") from error
        except KeyboardInterrupt:
            self._abandon(futures)
            raise

    def _abandon(self, futures: list) -> None:
        # Ctrl-C during a pass: cancel it; a cluster we started is killed and closed (its workers may be
        # inside hours-long oracle calls, which a graceful close would wait for)
        with contextlib.suppress(Exception):
            self.client.cancel(futures, force=True)
        if self._cluster is not None:
            for worker in list(getattr(self._cluster, "workers", {}).values()):
                process = getattr(getattr(worker, "process", None), "process", None)  # a Nanny's worker process
                if process is None or getattr(process, "pid", None) is None:
                    continue
                worker.auto_restart = False
                with contextlib.suppress(OSError):
                    os.kill(process.pid, signal.SIGKILL)
            self.close()

    def _map_subset(self, name: str, chunks: list[int], args: list[tuple]) -> list[Any]:
        if self.client is None:
            return self._gather([])
        futures = [self.client.submit(_dask_chunk_task, self._chunks[c], name, a, pure=False)
                   for c, a in zip(chunks, args, strict=True)]
        return self._gather(futures)

    def _map_inputs(self, name: str, args_per_chunk: Sequence[tuple]) -> list[Any]:
        if self.client is None:
            return self._gather([])
        model = self.problem.model
        futures = [self.client.submit(_inputs_task, model, name, a, pure=False) for a in args_per_chunk]
        return self._gather(futures)

    def close(self) -> None:
        chunks, self._chunks = getattr(self, "_chunks", []), []
        for future in chunks:
            future.release()
        if self._own_client and getattr(self, "client", None) is not None:
            self.client.close()
            self.client = None
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None


# --------------------------------------------------------------------------- options
def executor_option(name: str, value: Any) -> None:
    """None, "processes", "dask", a scheduler address ("tcp://..."), a distributed.Client or an Executor."""
    if value is None or value in EXECUTORS or isinstance(value, Executor):
        return
    if isinstance(value, str):
        if "://" in value or ":" in value:
            return
        raise InvalidInputError(f"{name} must be None, 'processes', 'dask', a scheduler address such as "
                                f"'tcp://host:8786' or a distributed.Client; got {value!r}")
    if type(value).__name__ == "Client" and type(value).__module__.startswith("distributed"):
        return
    raise InvalidInputError(f"{name} must be None, 'processes', 'dask', a scheduler address or a "
                            f"distributed.Client; got {type(value).__name__}")


def n_workers_option(name: str, value: Any) -> None:
    """None or an integer >= 1."""
    if value is None:
        return
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) or value < 1:
        raise InvalidInputError(f"{name} must be None or an integer >= 1, got {value!r}")


def default_workers() -> int:
    """Local workers when ``n_workers`` is not given: the usable cores."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def open_executor(problem: SSVMProblem, executor: Any = None, n_workers: int | None = None) -> Executor:
    """An executor for ``problem`` (see the module docstring); close it (or use ``with``) after the run.

    An :class:`Executor` passed in is returned as it is (the caller keeps ownership); it must have
    been opened on the same problem.
    """
    executor_option("executor", executor)
    n_workers_option("n_workers", n_workers)
    if isinstance(executor, Executor):
        if executor.problem is not problem:
            raise InvalidInputError("executor: this Executor was opened on another problem")
        return executor
    if executor is None:
        if n_workers not in (None, 1):
            raise InvalidInputError(f"n_workers={n_workers} needs an executor ('processes' or 'dask')")
        return SerialExecutor(problem)
    if executor == "processes":
        return ProcessExecutor(problem, n_workers or default_workers())
    if executor == "dask":
        return DaskExecutor(problem, "dask", n_workers or default_workers())
    return DaskExecutor(problem, executor, n_workers)


@contextlib.contextmanager
def executor_scope(problem: SSVMProblem, executor: Any = None, n_workers: int | None = None
                   ) -> Iterator[Executor]:
    """:func:`open_executor` for the duration of a ``with`` block, closing only what it opened."""
    opened = open_executor(problem, executor, n_workers)
    try:
        yield opened
    finally:
        if opened is not executor:
            opened.close()


__all__ = ["EXECUTORS", "ChunkSpec", "DaskExecutor", "Executor", "ParallelError", "ProcessExecutor",
           "SerialExecutor", "check_picklable", "chunk_bounds", "executor_scope", "open_executor",
           "start_local_cluster"]
