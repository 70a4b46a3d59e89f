"""Seed 000 §7.2 with a torch network: prox-linear (Casimir-SVRG inner loops) against SGD and Adam on OCR.

The Casimir paper's non-convex experiment (Pillutla et al. §7.2, Fig. 4) trains a non-linear score map by
PL-Casimir-SVRG and by the stochastic subgradient method; here the score map is a small CNN
(:class:`OCRConvChain`, declared as the network ``"nonconvex_torch_cnn"``) over the 16x8 letters of the
embedded OCR words, giving a chain's unary potentials, with a learned transition block, in a
:class:`~structopt.torch.TorchModel`. The objective is the paper's (59),

    F(w) = (1/n) sum_i max_y [Delta(y_i, y) + <psi(x_i; w), mu(y) - mu(y_i)>] + (lam/2) ||w||^2,

with the Hamming loss normalised by word length (the OCR task's loss) and ``lam = 1/n`` (the paper's non-convex
setting). Methods, all from the same random start (the network's initialisation, ``--seed``):

- PL-Casimir-SVRG: ``prox_linear(inner="casimir")`` with step ``eta`` (``--eta``), ``--inner-passes``
  oracle passes per subproblem, top-K smoothing (K = 5) ``mu / k`` with ``L_k = k L0`` (the solver's
  defaults; ``L0`` estimated at the start);
- SGD: ``sgd_nonconvex`` with ``gamma_t = gamma0 / sqrt(t)`` (SGD-t^-1/2) for each ``gamma0`` in ``--gammas``
  (``auto``: the solver's own ``1 / (L + lam)``);
- Adam: ``torch.optim.Adam`` on the module, minibatches of ``--batch`` words, the same objective (the mean
  structured hinge of the batch plus ``lam/2 ||w||^2``), for each learning rate in ``--lrs``.

Reported against passes (oracle calls / n, the paper's counting: the inner solvers' full gradients and the
prox-linear acceptance test are not counted; Adam: one call per word per epoch): the objective F and the test
letter error on the ``train ocr`` split's test words (fold 0, 626 words), and the optimisation time.

Usage (measured results: ``nonconvex_torch_results.md``)::

    python benchmarks/nonconvex_torch.py                       # n_train 500, 12 passes: ~10 min on a shared core
    python benchmarks/nonconvex_torch.py --n-train 200 --passes 6 --gammas auto --lrs 1e-3  # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from structopt.losses import Hamming
from structopt.nonconvex import NonconvexProblem
from structopt.solvers.prox_linear import prox_linear
from structopt.solvers.sgd_nonconvex import sgd_nonconvex
from structopt.structures.chain import Chain, ChainPotentials
from structopt.tasks.ocr import letter_error, load_ocr, split
from structopt.torch import TorchModel, register_network, structured_loss

HERE = Path(__file__).resolve().parent


class OCRConvChain(nn.Module):
    """Chain potentials of a word's letters (T, 128 pixels of 16x8 images): two 3x3 convolutions with ELU and
    2x2 average pooling (smooth, as the prox-linear theory asks), a linear read-out to the 26 letters, and a
    learned (26, 26) transition block."""

    def __init__(self, channels: list[int] | None = None, n_states: int = 26):
        super().__init__()
        c1, c2 = channels or [8, 16]
        self.conv1 = nn.Conv2d(1, c1, 3, padding=1)
        self.conv2 = nn.Conv2d(c1, c2, 3, padding=1)
        self.out = nn.Linear(c2 * 4 * 2, n_states)
        self.pairwise = nn.Parameter(torch.zeros(n_states, n_states))

    def forward(self, x: torch.Tensor) -> ChainPotentials:
        h = x.reshape(-1, 1, 16, 8)
        h = F.avg_pool2d(F.elu(self.conv1(h)), 2)
        h = F.avg_pool2d(F.elu(self.conv2(h)), 2)
        return ChainPotentials(self.out(h.flatten(1)), self.pairwise)


register_network("nonconvex_torch_cnn")(OCRConvChain)


def _model(seed: int) -> TorchModel:
    return TorchModel(Chain(26), "nonconvex_torch_cnn", {"channels": [8, 16]}, seed=seed)


def _test_error(model: TorchModel, test: dict):
    return lambda w: {"test_letter_error": letter_error(test["y"], model.predict_batch(test["X"], w))}


def _records(trace: list[dict]) -> list[dict]:
    keys = ("passes", "time", "primal", "test_letter_error", "full_grad_passes", "objective_passes", "accepted")
    return [{key: record[key] for key in keys if key in record} for record in trace]


def run_prox_linear(problem, model, test, w0, args) -> dict:
    result = prox_linear(problem, max_passes=args.passes, w0=w0, random_state=args.seed, eta=args.eta,
                         inner_passes=args.inner_passes, callback=_test_error(model, test), progress=True)
    return {"method": f"PL-Casimir-SVRG (eta {args.eta:g}, {args.inner_passes:g} passes per step)",
            "L0": result.info["L0"], "trace": _records(result.trace)}


def run_sgd(problem, model, test, w0, args, gamma0: float | None) -> dict:
    result = sgd_nonconvex(problem, max_passes=args.passes, w0=w0, random_state=args.seed, schedule="sqrt",
                           gamma0=gamma0, eval_every=args.eval_every, callback=_test_error(model, test), progress=True)
    gamma = result.info["gamma0"]
    return {"method": f"SGD t^-1/2 (gamma0 {gamma:.3g}{', auto' if gamma0 is None else ''})", "gamma0": gamma,
            "trace": _records(result.trace)}


def run_adam(problem, model, X, Y, test, w0, args, lr: float) -> dict:
    """Adam on the module: each epoch one pass over the words in minibatches; F and the test error after each."""
    model.set_weights(w0)
    module, loss, lam = model.module, Hamming(normalize=True), problem.lam
    inputs = [model.validate_input(x, i) for i, x in enumerate(X)]
    optimiser = torch.optim.Adam(module.parameters(), lr=lr)
    rng = np.random.default_rng(args.seed)
    evaluate = _test_error(model, test)
    trace, clock = [], 0.0

    def record(passes: float) -> None:
        w = model.get_weights()
        trace.append({"passes": passes, "time": clock, "primal": problem.primal(w), **evaluate(w)})
        print(f"  adam lr {lr:g}: {passes:g} passes, F {trace[-1]['primal']:.4f}, "
              f"test error {trace[-1]['test_letter_error']:.4f}", flush=True)

    record(0.0)
    n, epochs = len(inputs), int(np.ceil(args.passes))
    for epoch in range(1, epochs + 1):
        start = time.perf_counter()
        module.train()
        for batch in np.array_split(rng.permutation(n), max(1, n // args.batch)):
            thetas = [module(inputs[i].tensors) for i in batch]
            value = structured_loss(model.structure, thetas, [Y[i] for i in batch], "hinge", loss).mean()
            value = value + 0.5 * lam * sum((p * p).sum() for p in module.parameters())
            optimiser.zero_grad()
            value.backward()
            optimiser.step()
        module.eval()
        clock += time.perf_counter() - start
        if epoch % max(1, round(args.eval_every)) == 0 or epoch == epochs:
            record(float(epoch))
    return {"method": f"Adam (lr {lr:g}, batch {args.batch})", "lr": lr, "trace": trace}


def plot(results: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_f, ax_e) = plt.subplots(1, 2, figsize=(9, 3.4), dpi=80)
    start = results[0]["trace"][0]["primal"]
    lowest = min(r["primal"] for run in results for r in run["trace"])
    for run in results:
        passes = [r["passes"] for r in run["trace"]]
        diverged = max(r["primal"] for r in run["trace"]) > 10 * start  # drawn off the scale, said in the legend
        ax_f.plot(passes, [r["primal"] for r in run["trace"]], marker=".",
                  label=run["method"] + (" [diverged: F > 10 F0]" if diverged else ""))
        ax_e.plot(passes, [r["test_letter_error"] for r in run["trace"]], marker=".")
    ax_f.set(xlabel="passes (oracle calls / n)", ylabel="training objective F", yscale="log",
             ylim=(0.7 * lowest, 1.5 * start))
    ax_e.set(xlabel="passes (oracle calls / n)", ylabel="test letter error")
    ax_f.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _title(summary: dict) -> str:
    return (f"OCR, CNN + chain ({summary['n_params']:,} weights), n = {summary['n_train']}, λ = 1/n: "
            "prox-linear vs SGD vs Adam")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n-train", type=int, default=500, help="training words (the first of the split)")
    parser.add_argument("--passes", type=float, default=12)
    parser.add_argument("--eta", type=float, default=1.0, help="prox-linear step")
    parser.add_argument("--inner-passes", type=float, default=4.0, help="oracle passes per prox-linear subproblem")
    parser.add_argument("--gammas", nargs="+", default=["auto", "0.1"], help="SGD gamma0 values ('auto': the solver's)")
    parser.add_argument("--lrs", nargs="+", type=float, default=[1e-3, 1e-2], help="Adam learning rates")
    parser.add_argument("--batch", type=int, default=16, help="Adam's minibatch (words)")
    parser.add_argument("--eval-every", type=float, default=2.0, help="passes between evaluations (SGD, Adam)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(HERE / "nonconvex_torch"), help="writes OUT.json and OUT.png")
    parser.add_argument("--replot", action="store_true", help="redraw OUT.png from OUT.json, no training")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    out = Path(args.out)
    if args.replot:
        summary = json.loads(out.with_suffix(".json").read_text())
        plot(summary["results"], out.with_suffix(".png"), _title(summary))
        return

    train, test = split(load_ocr(), "bcfw")
    X, Y = train["X"][:args.n_train], train["y"][:args.n_train]
    model = _model(args.seed)
    problem = NonconvexProblem(model, X, Y, Hamming(normalize=True), lam=1.0 / len(X))
    w0 = model.initial_weights(args.seed)
    print(f"OCR bcfw split: {len(X)} training words, {len(test['X'])} test words; CNN with {model.n_params:,} "
          f"weights; lam = 1/n; F at the start {problem.primal(w0):.4f}", flush=True)
    started = time.time()
    results = []
    print("PL-Casimir-SVRG", flush=True)
    results.append(run_prox_linear(problem, model, test, w0, args))
    for gamma in args.gammas:
        print(f"SGD gamma0 {gamma}", flush=True)
        results.append(run_sgd(problem, model, test, w0, args, None if gamma == "auto" else float(gamma)))
    for lr in args.lrs:
        print(f"Adam lr {lr:g}", flush=True)
        results.append(run_adam(problem, model, X, Y, test, w0, args, lr))
    summary = {"n_train": len(X), "n_test": len(test["X"]), "n_params": model.n_params, "lam": problem.lam,
               "seed": args.seed, "passes": args.passes, "torch_threads": torch.get_num_threads(),
               "cpu_count": os.cpu_count(), "load_average_at_end": os.getloadavg(),
               "wall_seconds": time.time() - started, "results": results}
    out.with_suffix(".json").write_text(json.dumps(summary, indent=1))
    plot(results, out.with_suffix(".png"), _title(summary))
    for run in results:
        last = run["trace"][-1]
        print(f"{run['method']}: {last['passes']:g} passes, F {last['primal']:.4f}, test error "
              f"{last['test_letter_error']:.4f}, {last['time']:.0f}s")
    print(f"wrote {out.with_suffix('.json')} and {out.with_suffix('.png')} ({time.time() - started:.0f}s)")


if __name__ == "__main__":
    main()
