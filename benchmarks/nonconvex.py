"""Non-convex structured prediction in miniature (Pillutla et al. §7, Fig. 4): chunking or localisation.

Measured results (both tasks, the commands below): ``nonconvex_results.md`` beside this file.

Two tasks (``--task``):

``chunking``
    CoNLL-2000: a chain whose unary potentials come from a two-layer network
    (``NonlinearChainModel``, tanh, ``--hidden`` units) over the hashed sparse token features, a
    linear transition block, Hamming loss; metric: test chunk F1 (conlleval).
``localization``
    The paper's task in miniature: Weizmann horses (``structopt.tasks.localization``,
    bag-of-words cells), cell scores from a two-layer network (``NonlinearBoxModel``, ELU as the
    paper) over the cell features, 1 - IoU loss; metric: test detection rate (IoU >= 0.5).

Both with ``lam = 1/n`` (the paper's non-convex setting). Methods, all from the same random start:

- PL-Casimir-SVRG: ``prox_linear(inner="casimir")`` for each ``eta`` in ``--etas`` (the paper
  grid-searches powers of 10), ``--inner-passes`` oracle passes per subproblem (the paper's 5
  Casimir-SVRG iterations are 10), top-K (K = ``--k``) smoothing ``mu / k`` with ``L_k = k L0``
  (the paper's defaults); the paper's inner variant (averaged iterate, prox-centre start, no
  guard) and the solver's defaults (averaged iterate, one SGD pass first, prev-iterate start,
  guard);
- SGD-const, SGD-t^-1/2, SGD-t^-1: ``sgd_nonconvex`` with ``gamma0`` from ``--gammas`` (the
  paper grid-searches it; the best final objective per schedule is plotted, all are in the JSON);
- the convex reference: the linear model (``ChainModel`` / ``BoxModel``) on the same features
  trained for the same budget by Casimir-SVRG-const and by BCFW (weighted averaging, no tuning).

Reported: training objective F against oracle calls / n (paper counting; the prox-linear
acceptance test and full gradients apart, in the JSON), the objective decrease per prox-linear
iteration, and the test metric of the non-linear models against the convex model.

Usage::

    python benchmarks/nonconvex.py --task chunking --train 300 --test 300 --passes 20     # a few minutes
    python benchmarks/nonconvex.py --task localization --train 200 --test 128 --passes 10 --etas 1 \
        --pl-Ls 3e4 3e5 --convex-L 1000 --gammas 1e-4 3e-4 1e-3
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from itertools import pairwise, product
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from structopt.losses import BoxLoss, Hamming, Loss
from structopt.models.nonlinear import NonlinearBoxModel, NonlinearChainModel, NonlinearModel
from structopt.nonconvex import NonconvexProblem
from structopt.problem import SSVMProblem
from structopt.solvers.bcfw import bcfw
from structopt.solvers.casimir import casimir_svrg
from structopt.solvers.prox_linear import prox_linear
from structopt.solvers.sgd_nonconvex import sgd_nonconvex
from structopt.tasks.conll import chunk_f1, load_conll2000
from structopt.tasks.localization import detection_rate, load_boxes

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
RESULTS = Path(__file__).resolve().parent / "results"


class Task(NamedTuple):
    train: dict
    test: dict
    linear_model: Any
    nonlinear_model: NonlinearModel
    loss: Loss
    metric: Callable[[list, list], float]  # (gold outputs, predictions) -> test metric


def chunking_task(args) -> Task:
    data = load_conll2000(args.data or DATA / "conll2000", n_features=args.features)
    train = {key: value[:args.train] for key, value in data["train"].items()}
    test = {key: value[:args.test] for key, value in data["test"].items()}
    tags = data["tags"]
    return Task(train, test, data["model"], NonlinearChainModel(args.features, args.hidden, len(tags)), Hamming(),
                lambda gold, pred: chunk_f1(gold, pred, tags)["f1"])


def localization_task(args) -> Task:
    data = load_boxes(args.data or DATA / "horses", dataset="horses")
    train = {key: value[:args.train] for key, value in data["train"].items()}
    test = {key: value[:args.test] for key, value in data["test"].items()}
    model = NonlinearBoxModel(data["model"].n_features, args.hidden, activation="elu")
    return Task(train, test, data["model"], model, BoxLoss(), detection_rate)


def metric_callback(problem: SSVMProblem, task: Task):
    """Trace extra: the task's metric of the MAP predictions on the test split."""
    def cb(w: np.ndarray) -> dict:
        return {"test_metric": task.metric(task.test["y"], problem.predict(task.test["X"], w))}
    return cb


def summary(name: str, res, wall: float) -> dict:
    last = res.trace[-1]
    print(f"  {name:30s} passes={last['passes']:.1f} F={last['primal']:.4f} test={last['test_metric']:.4f} "
          f"opt_time={last['time']:.1f}s wall={wall:.1f}s", flush=True)
    return {"method": name, "trace": res.trace, "wall": wall,
            "final": {"passes": last["passes"], "primal": last["primal"], "test_metric": last["test_metric"]},
            "info": {k: v for k, v in res.info.items() if isinstance(v, (int, float, str))}}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--task", choices=("chunking", "localization"), default="chunking")
    ap.add_argument("--data", type=Path, default=None, help="data directory (default ../shared/data/<corpus>)")
    ap.add_argument("--train", type=int, default=300, help="training examples (first ones)")
    ap.add_argument("--test", type=int, default=300, help="test examples (first ones)")
    ap.add_argument("--features", type=int, default=2**14, help="hashing dimension (chunking)")
    ap.add_argument("--hidden", type=int, default=16)
    ap.add_argument("--passes", type=float, default=20)
    ap.add_argument("--etas", type=float, nargs="+", default=[10.0, 100.0])
    ap.add_argument("--inner-passes", type=float, default=4)
    ap.add_argument("--mu", type=float, default=1.0)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--convex-L", type=float, default=None, help="L of the convex Casimir run (default: estimated)")
    ap.add_argument("--pl-Ls", type=float, nargs="+", default=None,
                    help="grid of prox-linear L0 (default: the local estimate; boxes need a grid, as in the paper)")
    ap.add_argument("--gammas", type=float, nargs="+", default=[0.01, 0.03, 0.1])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="JSON path (default results/nonconvex_<task>.json)")
    args = ap.parse_args(argv)
    out_path = args.out or RESULTS / f"nonconvex_{args.task}.json"

    t = time.perf_counter()
    task = chunking_task(args) if args.task == "chunking" else localization_task(args)
    n = len(task.train["X"])
    lam = 1.0 / n
    print(f"{args.task}: n={n} test={len(task.test['X'])} lam=1/n (loaded in {time.perf_counter() - t:.1f}s)",
          flush=True)
    out: dict = {"args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                 "task": args.task, "n": n, "n_test": len(task.test["X"]), "runs": []}

    linear = SSVMProblem(task.linear_model, task.train["X"], task.train["y"], task.loss, lam)
    t = time.perf_counter()
    res = casimir_svrg(linear, schedule="const", mu=args.mu, k=args.k, L=args.convex_L, max_passes=args.passes,
                       random_state=args.seed, callback=metric_callback(linear, task))
    out["convex"] = summary("convex casimir-const", res, time.perf_counter() - t)
    t = time.perf_counter()
    res = bcfw(linear, max_passes=args.passes, random_state=args.seed, callback=metric_callback(linear, task))
    out["convex_bcfw"] = summary("convex bcfw-wavg", res, time.perf_counter() - t)

    model = task.nonlinear_model
    problem = NonconvexProblem(model, task.train["X"], task.train["y"], task.loss, lam)
    w0 = model.initial_weights(args.seed)
    cb = metric_callback(problem, task)
    out["n_params"] = {"linear": task.linear_model.n_params, "nonlinear": model.n_params}

    # the paper's inner Casimir-SVRG, and the solver's defaults (averaged output, one SGD pass first,
    # prev-iterate start, divergence guard: conll_casimir_results.md)
    variants = {"paper": {"iterate": "average", "sgd_init": False, "warm_start": "prox-center", "guard": False},
                "default": {}}
    for eta, L0, (variant, inner_options) in product(args.etas, args.pl_Ls or [None], variants.items()):
        t = time.perf_counter()
        res = prox_linear(problem, inner="casimir", eta=eta, inner_passes=args.inner_passes, mu=args.mu, k=args.k,
                          L=L0, inner_options=inner_options, max_passes=args.passes, w0=w0, random_state=args.seed,
                          callback=cb)
        name = f"PL-Casimir-{variant} eta={eta:g}" + ("" if L0 is None else f" L0={L0:g}")
        run = summary(name, res, time.perf_counter() - t)
        run["decrease_per_prox_iter"] = [a["primal"] - b["primal"] for a, b in pairwise(res.trace)]
        run["accepted"] = [e["accepted"] for e in res.trace[1:]]
        out["runs"].append(run)
        print("   decrease of F per prox-linear iteration: "
              + ", ".join(f"{d:.4f}" for d in run["decrease_per_prox_iter"]), flush=True)

    for schedule in ("const", "sqrt", "linear"):
        for gamma0 in args.gammas:
            t = time.perf_counter()
            res = sgd_nonconvex(problem, schedule=schedule, gamma0=gamma0, max_passes=args.passes, w0=w0,
                                random_state=args.seed, callback=cb)
            out["runs"].append(summary(f"SGD-{schedule} gamma0={gamma0:g}", res, time.perf_counter() - t))

    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(out, indent=1, default=float))
    plot(out, out_path.with_suffix(".png"))
    print(f"wrote {out_path} and {out_path.with_suffix('.png')}")
    return out


def plot(out: dict, path: Path) -> None:
    """Objective and test F1 against oracle calls / n; SGD: the best gamma0 per schedule."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    best: dict[str, dict] = {}
    for run in out["runs"]:
        family = run["method"].split(" ")[0]  # best eta / gamma0 per method
        if family not in best or run["final"]["primal"] < best[family]["final"]["primal"]:
            best[family] = run
    fig, (ax_f, ax_t) = plt.subplots(1, 2, figsize=(11, 4))
    for run in best.values():
        passes = [e["passes"] for e in run["trace"]]
        ax_f.plot(passes, [e["primal"] for e in run["trace"]], marker=".", label=run["method"])
        ax_t.plot(passes, [e["test_metric"] for e in run["trace"]], marker=".", label=run["method"])
    for key, style in (("convex", "k--"), ("convex_bcfw", "k:")):
        convex = out[key]
        ax_t.plot([e["passes"] for e in convex["trace"]], [e["test_metric"] for e in convex["trace"]], style,
                  label=f"linear model, {convex['method'].split(' ')[1]}")
    what = {"chunking": ("chain, CoNLL-2000", "test chunk F1"),
            "localization": ("boxes, horses", "test detection rate")}
    title, metric = what[out["task"]]
    ax_f.set(xlabel="oracle calls / n", ylabel="training objective F", yscale="log",
             title=f"non-convex {title} (n={out['n']}, lam=1/n)")
    ax_t.set(xlabel="oracle calls / n", ylabel=metric)
    ax_f.legend(fontsize=8)
    ax_t.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
