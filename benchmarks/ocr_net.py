"""OCR (``structopt train ocr``'s bcfw split) with a small CNN + linear chain against the linear chain model.

Usage::

    OPENBLAS_NUM_THREADS=1 python benchmarks/ocr_net.py [--epochs 20] [--n-train N] [--seed 0] [--threads 1]
        [--runs linear,structopt,pytorch-crf,hinge] [--out benchmarks/ocr_net_results.md]

Runs, one after the other in one process, on the same words (train: folds 1-9, 6,251 words; test: fold 0,
626 words):

- ``linear``: the BCFW paper's chain model (pixels, per-letter bias, start/end, transitions; Hamming loss
  normalised by word length) trained by BCFW, λ = 0.01, 20 passes — exactly ``structopt train ocr``;
- ``structopt``: :class:`structopt.tasks.ocr_net.OCRNet` (the CNN) with structopt's ``ChainCRF``, CRF loss;
- ``pytorch-crf``: the same CNN with pytorch-crf's ``CRF``, CRF loss (same initial parameters: the CNN is
  built from the same seed and the chain scores are drawn in the same order);
- ``hinge``: the same CNN with structopt's chain and the structured hinge (Hamming loss).

The networks train with the same seed and options (:class:`structopt.tasks.ocr_net.TrainOptions`); the test
letter error is measured after every epoch (not timed). Times are CPU seconds of the process (process time)
and wall seconds; the machine's load average is printed beside them.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench import use_checkout, write_keeping_findings  # noqa: E402

RUNS = ("linear", "structopt", "pytorch-crf", "hinge")
LABELS = {"linear": "linear chain (BCFW, 20 passes)", "structopt": "CNN + structopt ChainCRF (CRF loss)",
          "pytorch-crf": "CNN + pytorch-crf CRF (CRF loss)", "hinge": "CNN + structopt chain (hinge loss)"}


def run_linear(train, test, n_train):
    from structopt.problem import SSVMProblem
    from structopt.solvers import get_solver
    from structopt.tasks.ocr import letter_error, paper_model_and_loss

    X, Y = train["X"][:n_train], train["y"][:n_train]
    model, loss = paper_model_and_loss()
    problem = SSVMProblem(model, X, Y, loss, 0.01)
    cpu, wall = time.process_time(), time.perf_counter()
    result = get_solver("bcfw")(problem, max_passes=20, random_state=0, progress=False)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    error = letter_error(test["y"], problem.predict(test["X"], result.w))
    return {"error": error, "cpu": cpu, "wall": wall, "epochs": 20, "curve": []}


def run_net(kind, train, test, args):
    import torch

    from structopt.tasks import ocr_net

    torch.manual_seed(args.seed)
    net = ocr_net.OCRNet(crf="pytorch-crf" if kind == "pytorch-crf" else "structopt")
    words = ocr_net.Words(train["X"][:args.n_train], train["y"][:args.n_train])
    options = ocr_net.TrainOptions(epochs=args.epochs, seed=args.seed, threads=args.threads,
                                   loss="hinge" if kind == "hinge" else "crf")
    curve = []
    walls = []
    clock = [time.perf_counter()]

    def on_epoch(epoch, record):
        walls.append(time.perf_counter() - clock[0])
        curve.append(ocr_net.evaluate(net, test["X"], test["y"], threads=args.threads))
        print(f"  {kind} epoch {epoch}: loss {record['loss']:.4f}, test letter error {curve[-1]:.4f}, "
              f"{record['seconds']:.1f} s CPU, load {os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True)
        clock[0] = time.perf_counter()

    info = ocr_net.train(net, words, options, progress=False, on_epoch=on_epoch)
    layer = layer_seconds(net, words, options) if kind != "hinge" else None
    return {"error": curve[-1], "cpu": info["seconds"], "wall": sum(walls), "epochs": args.epochs, "curve": curve,
            "layer": layer}


def layer_seconds(net, words, options) -> float:
    """CPU seconds the chain layer alone takes over one epoch's batches: its NLL forward and backward on each
    batch's emissions (computed first, untimed, by the trained CNN), as a training step calls it."""
    import numpy as np
    import torch

    torch.set_num_threads(options.threads)
    order = np.random.default_rng(options.seed).permutation(len(words))
    batches = []
    with torch.no_grad():
        for i in range(0, len(words), options.batch_size):
            images, mask, lengths, tags = words.batch(order[i:i + options.batch_size])
            batches.append((net.emissions(images, mask), tags, lengths, mask))
    start = time.process_time()
    for emissions, tags, lengths, mask in batches:
        leaf = emissions.clone().requires_grad_(True)
        (net.nll(leaf, tags, lengths, mask) / int(lengths.sum())).backward()
    return time.process_time() - start


def warm_kernels() -> None:
    """Load the chain CRF layer's compiled kernels (numba's cache) before any clock starts."""
    import torch

    from structopt.torch import ChainCRF

    crf = ChainCRF(3)
    emissions = torch.zeros(2, 4, 3, requires_grad=True)
    lengths = torch.tensor([4, 2])
    crf(emissions, torch.zeros(2, 4, dtype=torch.int64), lengths=lengths, reduction="sum").backward()
    crf.decode(emissions, lengths=lengths)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--n-train", type=int, default=None, help="the first N training words (default all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runs", default=",".join(RUNS), help=f"comma-separated, from {', '.join(RUNS)}")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "ocr_net_results.md")
    args = parser.parse_args()
    runs = args.runs.split(",")
    unknown = sorted(set(runs) - set(RUNS))
    if unknown:
        parser.error(f"unknown runs {unknown}; choose from {', '.join(RUNS)}")
    use_checkout(ROOT)
    import torch

    from structopt.tasks.ocr import load_ocr, split

    train, test = split(load_ocr(), "bcfw")
    warm_kernels()
    n_words = len(train["X"][:args.n_train])
    results = {}
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    loads = [os.getloadavg()[0]]
    for kind in runs:
        print(f"running {kind}", file=sys.stderr, flush=True)
        results[kind] = run_linear(train, test, args.n_train) if kind == "linear" else run_net(kind, train, test, args)
        loads.append(os.getloadavg()[0])
        print(f"{kind}: test letter error {results[kind]['error']:.4f}, {results[kind]['cpu']:.1f} s CPU",
              file=sys.stderr, flush=True)

    lines = [
        "# OCR: a small CNN + linear chain against the linear chain model",
        "",
        f"Generated by `benchmarks/ocr_net.py --epochs {args.epochs} --seed {args.seed} --threads {args.threads}"
        + (f" --n-train {args.n_train}" if args.n_train else "") + f"` ({platform.machine()}, Python "
        f"{platform.python_version()}, torch {torch.__version__}, {started}; 2 cores shared with other engineers' "
        f"jobs, 1-minute load average {min(loads):.1f}–{max(loads):.1f} during the runs). `structopt train ocr`'s "
        f"bcfw split: train on {n_words:,} words (folds 1-9), test on fold 0 ({len(test['X'])} words, "
        f"{sum(len(y) for y in test['y']):,} letters). CNN: `structopt.tasks.ocr_net.OCRNet` (conv 3x3 32 → "
        "pool → conv 3x3 64 → pool → 256 hidden, dropout 0.3 → 26 letter scores) + transitions, start and end "
        f"scores; Adam, lr 2e-3 with a cosine decay, 32 words a batch, letters shifted by up to 1 pixel at random; "
        f"seed {args.seed} for every network (the same initial parameters). CPU = process time of training "
        "(evaluation excluded); per epoch = total / epochs. Chain layer: the CPU time of the CRF layer's NLL forward "
        "and backward alone over one epoch's batches (emissions of the trained CNN), measured after training.",
        "",
        "| model | test letter error | epochs (passes) | CPU s per epoch | CPU s total | wall s total | "
        "chain layer CPU s per epoch (share) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for kind, r in results.items():
        per_epoch = r["cpu"] / r["epochs"]
        layer = "" if r.get("layer") is None else f"{r['layer']:.2f} ({100 * r['layer'] / per_epoch:.0f}%)"
        lines.append(f"| {LABELS[kind]} | {r['error']:.4f} ({100 * r['error']:.1f}%) | {r['epochs']} | "
                     f"{per_epoch:.2f} | {r['cpu']:.1f} | {r['wall']:.1f} | {layer} |")
    curves = {k: r["curve"] for k, r in results.items() if r["curve"]}
    if curves:
        lines += ["", "Test letter error after each epoch:", "",
                  "| epoch | " + " | ".join(LABELS[k] for k in curves) + " |",
                  "| --- |" + " --- |" * len(curves)]
        for e in range(max(len(c) for c in curves.values())):
            lines.append(f"| {e + 1} | " + " | ".join(f"{c[e]:.4f}" if e < len(c) else "" for c in curves.values())
                         + " |")
    write_keeping_findings(args.out, "\n".join(lines) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
