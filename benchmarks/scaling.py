"""Time per batch pass against the number of workers, and a cost model that predicts it.

Usage::

    python benchmarks/scaling.py [--tasks ocr ocr-generic alignment] [--workers 1 2] [--repeats 5]
                                 [--executors dask processes] [--out benchmarks/results/scaling]

For each task it times one batch Frank-Wolfe pass (:meth:`structopt.parallel.Executor.fw_corner`,
the pass FW, the gap evaluations and the SVRG snapshots are made of) serially and on
``N`` workers of each executor (a dask ``LocalCluster`` of single-threaded processes; the local
process pool), and measures what a round costs besides the oracles: the same round with a pass
that does no oracle work (:func:`structopt.batch.echo`), and the bytes sent and received.

Cost model. With ``T_1`` the serial pass (oracle work), ``b_N`` the load imbalance (largest chunk
times ``N / n``) and ``r_N`` the measured empty round on ``N`` workers (scheduling ``N`` tasks,
shipping ``w`` to each, returning ``N`` weight-sized sums, serialisation),

    T_N = b_N T_1 / N + r_N,      speed-up S_N = T_1 / T_N.

``r_N`` is fitted as ``r_0 + c N`` (a fixed round trip plus a per-task cost) from the measured
``N``; a pass pays off on ``N`` workers when ``T_1 > r_N N / (N - 1)``, i.e. per example when the
oracle costs more than ``t* = r_N N / ((N - 1) n)``. The JSON holds the measured and predicted
times side by side, the break-even oracle cost per executor, and the machine's load average
during the run: on a shared machine the wall-clock times, and above all the speed-ups, are only
as good as the cores that were free (re-run on a quiet machine for real numbers).

Measured on 2026-11-25 on the project's 2-core machine, other work paused (load average 1.6
during the run), median of 5 FW passes, ms (speed-up over serial in brackets):

=============  =======  ======================  ======================  ===========================
task           serial   dask N=1 / N=2          processes N=1 / N=2     empty round dask / processes
=============  =======  ======================  ======================  ===========================
ocr (fused)       51    62 / 38 (1.35x)         53 / 29 (1.76x)         11-15 / 0.4-0.6
ocr-generic      713    919 / 512 (1.39x)       735 / 380 (1.88x)       10-12 / 0.5-0.8
alignment         44    63 / 46 (0.95x)         46 / 22 (1.96x)         11-12 / 0.4-0.5
grid (horses)    162    173 / 101 (1.60x)       159 / 82 (1.98x)        10 / 0.4-0.5
box (raccoon)     24    31 / 36 (0.66x)         26 / 13 (1.86x)         11 / 0.4-0.5
=============  =======  ======================  ======================  ===========================

The horses grid pass on 2 dask workers takes 0.62x the serial pass (0.57-0.58x in separate runs
of the same pass), with the serial trace. Before the local cluster unset dask's
``MALLOC_TRIM_THRESHOLD_=65536`` it took 0.87x: a chunk took 104 ms on a worker against 77 ms in
this process, the same as in this process started with that variable (107 ms), since glibc then
maps and unmaps every array over 128 kB afresh. Bytes per round: 66 kB out and back per worker on
OCR (d = 4,082), 1-13 kB on the other tasks; a round costs the same whatever the data size.
The model holds to 3% for the process pool and to 1-10% for dask on the tasks above break-even
(grid: 91 ms predicted, 101 measured); below it (box, alignment) dask's rounds vary more than the
oracle work they carry. Break-even on 2 workers: dask above ~2 r_2 = 20-30 ms of oracle work per
pass (92 us per horse image, 5 us per OCR word), the process pool above ~1-1.5 ms.

Tasks: ``ocr`` (chain, fused numba oracles, ~tens of microseconds per word), ``ocr-generic``
(the same chain through the per-example Python path, ~10x dearer), ``alignment`` (Hansards
matchings, scipy assignment), ``grid`` (horse segmentation, min-cut per image), ``box``
(raccoon localization, 1 - IoU branch-and-bound per image); the last three read
``../shared/data`` (or ``--data``).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import platform
import time
from pathlib import Path

import numpy as np

from structopt.parallel import DaskExecutor, ProcessExecutor, SerialExecutor, chunk_bounds
from structopt.problem import SSVMProblem


# --------------------------------------------------------------------------- tasks
def task_ocr(args) -> tuple[SSVMProblem, bool | None]:
    from structopt.tasks.ocr import load_ocr, paper_model_and_loss, split

    train, _ = split(load_ocr(None), "bcfw")
    model, loss = paper_model_and_loss()
    n = args.n_train or len(train["X"])
    return SSVMProblem(model, train["X"][:n], train["y"][:n], loss, 0.01), None


def task_ocr_generic(args) -> tuple[SSVMProblem, bool | None]:
    problem, _ = task_ocr(args)
    return problem, False


def task_alignment(args) -> tuple[SSVMProblem, bool | None]:
    from structopt.losses import MatchingHamming
    from structopt.models.matching import MatchingModel
    from structopt.tasks.alignment import load_alignment

    task = load_alignment(args.data)
    n = args.n_train or len(task.X_train)
    model = MatchingModel(task.n_features, allow_unmatched=True)
    return SSVMProblem(model, task.X_train[:n], task.Y_train[:n], MatchingHamming(1.0, 3.0), 0.01), None


def task_grid(args) -> tuple[SSVMProblem, bool | None]:
    from structopt.losses import Hamming
    from structopt.tasks.horses import load_horses

    data = load_horses(args.data)
    n = args.n_train or len(data["train"]["X"])
    return SSVMProblem(data["model"], data["train"]["X"][:n], data["train"]["y"][:n], Hamming(normalize=True),
                       0.001), None


def task_box(args) -> tuple[SSVMProblem, bool | None]:
    from structopt.losses import BoxLoss
    from structopt.tasks.localization import load_boxes

    data = load_boxes(args.data, dataset="raccoon")
    n = args.n_train or len(data["train"]["X"])
    return SSVMProblem(data["model"], data["train"]["X"][:n], data["train"]["y"][:n], BoxLoss(), 0.01), None


TASKS = {"ocr": task_ocr, "ocr-generic": task_ocr_generic, "alignment": task_alignment, "grid": task_grid,
         "box": task_box}


# --------------------------------------------------------------------------- measurements
def timed(run, repeats: int) -> dict[str, float]:
    """Median wall and main-process CPU seconds of ``run()`` over ``repeats`` calls (after one warm-up)."""
    run()
    wall, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        run()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return {"wall": float(np.median(wall)), "cpu_main": float(np.median(cpu)), "wall_min": float(np.min(wall))}


def open_parallel(kind: str, problem: SSVMProblem, n_workers: int):
    if kind == "dask":
        return DaskExecutor(problem, "dask", n_workers)
    return ProcessExecutor(problem, n_workers)


def round_bytes(problem: SSVMProblem, w: np.ndarray, fused, n_chunks: int) -> dict[str, int]:
    """Bytes one FW round moves: per chunk, the pickled arguments out and the pickled answer back."""
    bounds = chunk_bounds(problem.n, n_chunks)
    sent = len(pickle.dumps((w, fused, problem.n), protocol=pickle.HIGHEST_PROTOCOL))
    answer = (np.zeros_like(w), 0.0, 0.0)
    received = len(pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL))
    chunks = len(bounds) - 1
    return {"sent_per_task": sent, "received_per_task": received, "tasks": chunks,
            "per_round": chunks * (sent + received)}


def measure(name: str, args) -> dict:
    problem, fused = TASKS[name](args)
    serial = SerialExecutor(problem)
    w, _, _ = serial.fw_corner(problem.model.zeros(), fused)  # non-trivial weights: the first FW corner
    out: dict = {"n": problem.n, "n_params": problem.n_params, "fused": fused,
                 "serial": timed(lambda: serial.fw_corner(w, fused), args.repeats)}
    t1 = out["serial"]["wall"]
    out["oracle_seconds_per_example"] = t1 / problem.n
    reference = serial.fw_corner(w, fused)
    for kind in args.executors:
        rows = {}
        for n_workers in args.workers:
            with open_parallel(kind, problem, n_workers) as ex:
                answer = ex.fw_corner(w, fused)
                assert np.allclose(answer[0], reference[0], rtol=1e-9, atol=1e-12), "parallel pass differs"
                bounds = ex.bounds
                rows[n_workers] = {
                    "pass": timed(lambda ex=ex: ex.fw_corner(w, fused), args.repeats),
                    "empty_round": timed(lambda ex=ex: ex.run_pass("echo", w), args.repeats),
                    "imbalance": float(np.max(np.diff(bounds)) * (len(bounds) - 1) / problem.n),
                    "bytes": round_bytes(problem, w, fused, n_workers),
                }
        out[kind] = fit_model(t1, problem.n, rows)
    return out


def fit_model(t1: float, n: int, rows: dict[int, dict]) -> dict:
    """Predicted pass times ``b_N T_1 / N + r_N`` next to the measured ones, the fitted round cost
    ``r_N = r_0 + c N`` and the break-even oracle cost per example for N = 2, 4, 8, 16."""
    counts = sorted(rows)
    rounds = np.array([rows[k]["empty_round"]["wall"] for k in counts])
    if len(counts) > 1:
        c, r0 = np.polyfit(np.array(counts, dtype=float), rounds, 1)
        c = max(float(c), 0.0)
        r0 = float(np.mean(rounds - c * np.array(counts)))
    else:
        c, r0 = 0.0, float(rounds[0])
    for k in counts:
        predicted = rows[k]["imbalance"] * t1 / k + rows[k]["empty_round"]["wall"]
        rows[k]["predicted_pass"] = predicted
        rows[k]["measured_speedup"] = t1 / rows[k]["pass"]["wall"]
        rows[k]["predicted_speedup"] = t1 / predicted
    break_even = {}
    for k in (2, 4, 8, 16):
        r_k = r0 + c * k
        break_even[k] = {"round_seconds": r_k, "min_pass_seconds": r_k * k / (k - 1),
                         "min_oracle_seconds_per_example": r_k * k / ((k - 1) * n)}
    return {"workers": {str(k): v for k, v in rows.items()}, "round_model": {"r0": r0, "per_task": c},
            "break_even": {str(k): v for k, v in break_even.items()}}


def report(name: str, res: dict) -> None:
    print(f"\n{name}: n={res['n']}, d={res['n_params']}, serial pass {res['serial']['wall'] * 1e3:.1f} ms "
          f"({res['oracle_seconds_per_example'] * 1e6:.0f} us per example)")
    for kind in ("dask", "processes"):
        if kind not in res:
            continue
        for k, row in res[kind]["workers"].items():
            print(f"  {kind:9s} N={k}: pass {row['pass']['wall'] * 1e3:7.1f} ms "
                  f"(model {row['predicted_pass'] * 1e3:7.1f}),"
                  f" empty round {row['empty_round']['wall'] * 1e3:6.1f} ms, {row['bytes']['per_round'] / 1e3:.0f} kB"
                  f"/round, speed-up {row['measured_speedup']:.2f} (model {row['predicted_speedup']:.2f})")
        b = res[kind]["break_even"]["2"]
        print(f"  {kind:9s} pays off on 2 workers above {b['min_pass_seconds'] * 1e3:.1f} ms of oracle work per pass "
              f"({b['min_oracle_seconds_per_example'] * 1e6:.1f} us per example here)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", nargs="+", default=["ocr", "ocr-generic", "alignment", "grid", "box"],
                        choices=sorted(TASKS))
    parser.add_argument("--workers", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--executors", nargs="+", default=["dask", "processes"], choices=["dask", "processes"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--n-train", type=int, default=None, help="first N training examples of each task")
    parser.add_argument("--data", default=None, help="data path for the tasks that read ../shared/data")
    parser.add_argument("--out", default="benchmarks/results/scaling")
    args = parser.parse_args()
    results = {"meta": {"machine": platform.platform(), "cpus": os.cpu_count(), "repeats": args.repeats,
                        "load_before": os.getloadavg()}, "tasks": {}}
    for name in args.tasks:
        try:
            res = measure(name, args)
        except (ImportError, AttributeError, FileNotFoundError) as error:  # task absent from this installation
            print(f"\n{name}: skipped ({type(error).__name__}: {error})")
            results["tasks"][name] = {"skipped": str(error)}
            continue
        results["tasks"][name] = res
        report(name, res)
    results["meta"]["load_after"] = os.getloadavg()
    print(f"\nload average before {results['meta']['load_before']}, after {results['meta']['load_after']} "
          f"on {os.cpu_count()} CPUs")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "scaling.json").write_text(json.dumps(results, indent=1))
    print(f"wrote {out / 'scaling.json'}")


if __name__ == "__main__":
    main()
