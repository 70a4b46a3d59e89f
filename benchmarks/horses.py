"""Weizmann horses: solvers side by side on the grid model and the unary-only model, and oracle costs.

Usage::

    OPENBLAS_NUM_THREADS=1 python benchmarks/horses.py [--data DIR] [--n-train N] [--passes 10]
        [--time-limit 300] [--lam 1e-3] [--out benchmarks/results/horses.json]

For each solver (BCFW, SSG, Casimir-SVRG with top-5 smoothing (options in ``SOLVERS``), Euclidean
dual extragradient) and
each model (``model``: contrast-sensitive Potts grid; ``unary_model``: the same pixel features,
pixels labelled independently), one run of ``--passes`` effective passes (or ``--time-limit``
seconds) on the training split, then the test pixel accuracy and foreground IoU. A solver whose
iterate leaves the supermodular region is refused by the min-cut oracles with NotSupportedError
(the pairwise weights must stay >= 0, ``GridModel.nonnegative_blocks``): the run is then reported
as refused with the message, never approximated. Also reported: the cost per call of every grid
oracle on this task's loss-augmented potentials, per min-cut backend (see
``benchmarks/mincut_backends.py``).

Set ``OPENBLAS_NUM_THREADS=1``: the generic solver path takes BLAS dot products of ~10^4 entries,
which a multi-threaded OpenBLAS makes 1000 times slower on a loaded machine.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

# Casimir's defaults (mu = 1, the step from its estimated smoothness) diverge here (train primal ~400 after 10
# passes, against 1 at w = 0): scores are per-pixel averages, far below 1. mu = 0.01 with a step of 0.1 was the best
# of mu in {0.1, 0.01, 0.001} x step in {10, 1, 0.1} after 3 passes on the first 60 images.
SOLVERS = {"bcfw": {}, "ssg": {}, "casimir": {"kind": "topk", "k": 5, "mu": 0.01, "learning_rate": 0.1},
           "extragradient": {}}


def run(data: dict, model_name: str, solver: str, args: argparse.Namespace) -> dict:
    from structopt.errors import NotSupportedError
    from structopt.losses import Hamming
    from structopt.problem import SSVMProblem
    from structopt.solvers import get_solver
    from structopt.tasks.horses import segmentation_scores

    train, test = data["train"], data["test"]
    X, Y = train["X"][: args.n_train], train["y"][: args.n_train]
    problem = SSVMProblem(data[model_name], X, Y, Hamming(normalize=True), args.lam)
    row = {"model": model_name, "solver": solver, "n_train": problem.n}
    start = time.perf_counter()
    try:
        result = get_solver(solver)(problem, max_passes=args.passes, time_limit=args.time_limit, random_state=0,
                                    **SOLVERS[solver])
    except NotSupportedError as exc:
        row.update(refused=str(exc), seconds=time.perf_counter() - start)
        return row
    last = result.trace[-1]
    pred = problem.predict(test["X"], result.w)
    row.update(seconds=time.perf_counter() - start, passes=last["passes"], train_primal=last["primal"],
               gap=last.get("gap"), seconds_per_pass=last["time"] / max(last["passes"], 1e-12),
               **{f"test_{k}": v for k, v in segmentation_scores(test["y"], pred).items()})
    if problem.model.pairwise:
        row["pairwise_weights"] = problem.model.unpack(result.w)["pairwise"].tolist()
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=None)
    parser.add_argument("--n-train", type=int, default=None, help="first N training images (default all)")
    parser.add_argument("--passes", type=float, default=10)
    parser.add_argument("--time-limit", type=float, default=300.0, help="seconds per run")
    parser.add_argument("--lam", type=float, default=1e-3)
    parser.add_argument("--solvers", nargs="*", default=list(SOLVERS))
    parser.add_argument("--out", default="benchmarks/results/horses.json")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from mincut_backends import bench, horse_instances

    from structopt.tasks.horses import load_horses

    data = load_horses(args.data)
    rows = []
    for solver in args.solvers:
        for model_name in ("unary_model", "model"):
            row = run(data, model_name, solver, args)
            rows.append(row)
            if "refused" in row:
                print(f"{solver:14s} {model_name:12s} refused after {row['seconds']:.1f}s: {row['refused'][:160]}")
            else:
                gap = f"{row['gap']:.4f}" if row["gap"] is not None else "-"
                print(f"{solver:14s} {model_name:12s} {row['passes']:5.1f} passes "
                      f"{row['seconds_per_pass']:6.2f} s/pass "
                      f"primal {row['train_primal']:.4f} gap {gap} | test IoU {row['test_foreground_iou']:.4f} "
                      f"accuracy {row['test_pixel_accuracy']:.4f}", flush=True)
    oracles = bench("horses", horse_instances(args.data, 40))
    print("oracle cost per call at the task's size (ms):", json.dumps(oracles["argmax"]), oracles["ms_per_call"])
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": platform.platform(), "args": vars(args), "runs": rows,
                               "oracles": oracles}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
