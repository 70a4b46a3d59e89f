"""Mini-batch BCFW: duality gap against oracle calls for several batch sizes tau.

Usage::

    python benchmarks/minibatch_bcfw.py [--taus 1 4 16 64] [--passes 10] [--n-train N]
                                        [--out benchmarks/results/minibatch_bcfw]

Runs ``bcfw(problem, batch_size=tau)`` (line search over the joint direction, weighted
averaging, one permutation per pass) on OCR (the BCFW split, lam = 0.01) and on a small random
chain problem (200 sequences), and records, per tau, the certified gap and the primal
suboptimality after every pass. The x-axis is oracle calls (effective passes): a batch's tau
oracles run in parallel on an executor, so at equal calls a larger tau means fewer, wider rounds;
what it costs is progress per call, which this benchmark measures. The traces do not depend on the
executor (serial here). Writes ``minibatch_bcfw.json`` and ``minibatch_bcfw.png`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

from structopt.losses import Hamming
from structopt.models.chain import ChainModel
from structopt.problem import SSVMProblem
from structopt.solvers import bcfw


def ocr_problem(n_train: int | None) -> SSVMProblem:
    from structopt.tasks.ocr import load_ocr, paper_model_and_loss, split

    train, _ = split(load_ocr(None), "bcfw")
    model, loss = paper_model_and_loss()
    n = n_train or len(train["X"])
    return SSVMProblem(model, train["X"][:n], train["y"][:n], loss, 0.01)


def small_problem(n: int = 200, seed: int = 0) -> SSVMProblem:
    """Random chains (T in 3..8, 10 features, 4 states) labelled by a planted model plus noise."""
    rng = np.random.default_rng(seed)
    model = ChainModel(10, 4)
    w_true = rng.normal(size=model.n_params)
    X, Y = [], []
    for _ in range(n):
        x = rng.normal(size=(int(rng.integers(3, 9)), 10))
        theta = model.potentials(x, w_true)
        X.append(x)
        Y.append(model.structure.argmax(type(theta)(theta.unary + rng.normal(size=theta.unary.shape),
                                                    theta.pairwise)))
    return SSVMProblem(model, X, Y, Hamming(), 0.01)


def run(problem: SSVMProblem, taus: list[int], passes: float) -> dict:
    out = {}
    for tau in taus:
        start = time.perf_counter()
        result = bcfw(problem, max_passes=passes, batch_size=tau, random_state=0)
        out[str(tau)] = {"seconds": time.perf_counter() - start,
                         "passes": [r["passes"] for r in result.trace], "gap": [r["gap"] for r in result.trace],
                         "primal": [r["primal"] for r in result.trace], "dual": [r["dual"] for r in result.trace]}
        print(f"  tau={tau:4d}: gap after {passes:g} passes {result.trace[-1]['gap']:.5f}, primal "
              f"{result.trace[-1]['primal']:.5f} ({out[str(tau)]['seconds']:.1f}s)", flush=True)
    best_dual = max(max(v["dual"]) for v in out.values())
    for v in out.values():
        v["primal_suboptimality_bound"] = [p - best_dual for p in v["primal"]]
    return out


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 4))
    for ax, (name, runs) in zip(np.atleast_1d(axes), results.items(), strict=True):
        for tau, v in runs.items():
            ax.semilogy(v["passes"], v["gap"], "o-", ms=3, label=f"tau={tau}")
        ax.set_xlabel("oracle calls / n")
        ax.set_ylabel("duality gap")
        ax.set_title(name)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--taus", nargs="+", type=int, default=[1, 4, 16, 64])
    parser.add_argument("--passes", type=float, default=10)
    parser.add_argument("--n-train", type=int, default=None, help="first N OCR training words (default all)")
    parser.add_argument("--out", default="benchmarks/results/minibatch_bcfw")
    args = parser.parse_args()
    results = {}
    for name, problem in (("small chain (n=200)", small_problem()), ("OCR", ocr_problem(args.n_train))):
        print(f"{name}: n={problem.n}", flush=True)
        results[name] = run(problem, args.taus, args.passes)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "minibatch_bcfw.json").write_text(json.dumps({"meta": {"load": os.getloadavg(), "passes": args.passes},
                                                         "results": results}, indent=1))
    plot(results, out / "minibatch_bcfw.png")
    print(f"wrote {out / 'minibatch_bcfw.json'} and {out / 'minibatch_bcfw.png'}")


if __name__ == "__main__":
    main()
