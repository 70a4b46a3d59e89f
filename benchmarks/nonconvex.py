"""Non-convex structured prediction in miniature (Pillutla et al. §7, Fig. 4) on CoNLL-2000 chunking.

The paper's non-convex experiment is object localisation with a small network on AlexNet features;
boxes are not in this branch, so the same comparison runs on chunking: a chain whose unary
potentials come from a two-layer network (``NonlinearChainModel``, tanh, ``--hidden`` units) over
the hashed sparse token features, a linear transition block, Hamming loss, ``lam = 1/n`` (the
paper's non-convex setting). Methods, all from the same random start:

- PL-Casimir-SVRG: ``prox_linear(inner="casimir")`` for each ``eta`` in ``--etas`` (the paper
  grid-searches powers of 10), ``--inner-passes`` oracle passes per subproblem (the paper's 5
  Casimir-SVRG iterations are 10), top-K (K = 5) smoothing ``mu / k`` with ``L_k = k L0`` (the
  paper's defaults); the paper's inner variant (averaged iterate, prox-centre start) and the
  practical one of the convex benchmark (last iterate, one SGD pass first);
- SGD-const, SGD-t^-1/2, SGD-t^-1: ``sgd_nonconvex`` with ``gamma0`` from ``--gammas`` (the
  paper grid-searches it; the best final objective per schedule is plotted, all are in the JSON);
- the convex reference: the linear ``ChainModel`` on the same features trained for the same
  budget by Casimir-SVRG-const and by BCFW (weighted averaging, no tuning).

Reported: training objective F against oracle calls / n (paper counting; the prox-linear
acceptance test and full gradients apart, in the JSON), the objective decrease per prox-linear
iteration, and test chunk F1 (conlleval) of the non-linear models against the convex model.

Usage::

    python benchmarks/nonconvex.py --train 300 --test 300 --passes 20     # a few minutes
"""

from __future__ import annotations

import argparse
import json
import time
from itertools import pairwise
from pathlib import Path

import numpy as np

from structopt.losses import Hamming
from structopt.models.nonlinear import NonlinearChainModel
from structopt.nonconvex import NonconvexProblem
from structopt.problem import SSVMProblem
from structopt.problems.conll import chunk_f1, load_conll2000
from structopt.solvers.bcfw import bcfw
from structopt.solvers.casimir import casimir_svrg
from structopt.solvers.prox_linear import prox_linear
from structopt.solvers.sgd_nonconvex import sgd_nonconvex

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
RESULTS = Path(__file__).resolve().parent / "results"


def f1_callback(problem: SSVMProblem, test: dict, tags: list[str]):
    """Trace extra: conlleval F1 of the MAP predictions on the test split."""
    def cb(w: np.ndarray) -> dict:
        return {"test_f1": chunk_f1(test["y"], problem.predict(test["X"], w), tags)["f1"]}
    return cb


def summary(name: str, res, wall: float) -> dict:
    last = res.trace[-1]
    print(f"  {name:24s} passes={last['passes']:.1f} F={last['primal']:.4f} test_f1={last['test_f1']:.4f} "
          f"opt_time={last['time']:.1f}s wall={wall:.1f}s", flush=True)
    return {"method": name, "trace": res.trace, "wall": wall,
            "final": {"passes": last["passes"], "primal": last["primal"], "test_f1": last["test_f1"]},
            "info": {k: v for k, v in res.info.items() if isinstance(v, (int, float, str))}}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=DATA / "conll2000")
    ap.add_argument("--train", type=int, default=300, help="training sentences (first ones)")
    ap.add_argument("--test", type=int, default=300, help="test sentences (first ones)")
    ap.add_argument("--features", type=int, default=2**14, help="hashing dimension")
    ap.add_argument("--hidden", type=int, default=16)
    ap.add_argument("--passes", type=float, default=20)
    ap.add_argument("--etas", type=float, nargs="+", default=[10.0, 100.0])
    ap.add_argument("--inner-passes", type=float, default=4)
    ap.add_argument("--mu", type=float, default=1.0)
    ap.add_argument("--gammas", type=float, nargs="+", default=[0.01, 0.03, 0.1])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=RESULTS / "nonconvex.json")
    args = ap.parse_args(argv)

    t = time.perf_counter()
    data = load_conll2000(args.data, n_features=args.features)
    train = {k: v[:args.train] for k, v in data["train"].items()}
    test = {k: v[:args.test] for k, v in data["test"].items()}
    tags, n = data["tags"], len(train["X"])
    lam = 1.0 / n
    print(f"CoNLL-2000 chunking: n={n} test={len(test['X'])} F={args.features} S={len(tags)} lam=1/n "
          f"(loaded in {time.perf_counter() - t:.1f}s)", flush=True)
    out: dict = {"args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                 "n": n, "n_test": len(test["X"]), "runs": []}

    linear = SSVMProblem(data["model"], train["X"], train["y"], Hamming(), lam)
    t = time.perf_counter()
    res = casimir_svrg(linear, schedule="const", mu=args.mu, k=5, max_passes=args.passes, random_state=args.seed,
                       callback=f1_callback(linear, test, tags))
    out["convex"] = summary("convex casimir-const", res, time.perf_counter() - t)
    t = time.perf_counter()
    res = bcfw(linear, max_passes=args.passes, random_state=args.seed, callback=f1_callback(linear, test, tags))
    out["convex_bcfw"] = summary("convex bcfw-wavg", res, time.perf_counter() - t)

    model = NonlinearChainModel(args.features, args.hidden, len(tags))
    problem = NonconvexProblem(model, train["X"], train["y"], Hamming(), lam)
    w0 = model.initial_weights(args.seed)
    cb = f1_callback(problem, test, tags)
    out["n_params"] = {"linear": data["model"].n_params, "nonlinear": model.n_params}

    variants = {"paper": {}, "practical": {"iterate": "last", "sgd_init": True}}
    for eta in args.etas:
        for variant, inner_options in variants.items():
            t = time.perf_counter()
            res = prox_linear(problem, inner="casimir", eta=eta, inner_passes=args.inner_passes, mu=args.mu,
                              inner_options=inner_options, max_passes=args.passes, w0=w0, random_state=args.seed,
                              callback=cb)
            run = summary(f"PL-Casimir-{variant} eta={eta:g}", res, time.perf_counter() - t)
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

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1, default=float))
    plot(out, args.out.with_suffix(".png"))
    print(f"wrote {args.out} and {args.out.with_suffix('.png')}")
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
        ax_t.plot(passes, [e["test_f1"] for e in run["trace"]], marker=".", label=run["method"])
    for key, style in (("convex", "k--"), ("convex_bcfw", "k:")):
        convex = out[key]
        ax_t.plot([e["passes"] for e in convex["trace"]], [e["test_f1"] for e in convex["trace"]], style,
                  label=f"linear chain, {convex['method'].split(' ')[1]}")
    ax_f.set(xlabel="oracle calls / n", ylabel="training objective F", yscale="log",
             title=f"non-convex chain, CoNLL-2000 (n={out['n']}, lam=1/n)")
    ax_t.set(xlabel="oracle calls / n", ylabel="test chunk F1")
    ax_f.legend(fontsize=8)
    ax_t.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
