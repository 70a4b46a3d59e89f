"""Pass cost of SVRG and Casimir-SVRG against BCFW, generic path vs fused smoothed passes (issue 25, item 2).

Per task, in one process and one run (so the ratios are side by side on the same machine state):

* ``bcfw`` (its fused pass, the default), ``svrg`` and ``casimir_svrg`` with their default options,
  the two SVRG-type solvers once on the generic path (``fused=False``, the code path all runs took
  before the fused smoothed passes existed) and once fused (``fused=True``);
* seconds per pass, from the solvers' own optimisation clock (``trace[-1]["time"]``, evaluations
  excluded) between the first record after the first epoch (so start-up, the SGD start pass and
  compilation are not counted) and the last. A *pass* is what the solvers count in ``passes``:
  ``oracle_calls / n`` with the paper's counting (2 per SVRG step, so an SVRG epoch -- a snapshot
  pass plus n steps -- is 2 passes); seconds per epoch are reported too;
* the overhead ratio: solver time per pass divided by the time of its oracle calls alone at fixed
  weights (BCFW: one loss-augmented Viterbi per pass; SVRG-type: one smoothed oracle per pass, i.e.
  a snapshot call plus a step call per epoch), both with the fused kernels.

Usage::

    python benchmarks/smooth_passes.py --ocr-words 6251 --ner-sentences 3000 --epochs 4 \\
        --out benchmarks/smooth_passes_results.md

Tasks: OCR (``structopt.tasks.ocr``, embedded data, lambda = 1/n) and CoNLL-2002 Spanish NER
(``/work/shared/data/conll2002``, 2^16 hashed features, lambda = 0.01/n, a prefix of
``--ner-sentences`` training sentences: the full 8,323 on the generic path take minutes per pass on
a shared machine).
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import numpy as np

from structopt.losses import Hamming
from structopt.models.chain import ChainModel
from structopt.problem import SSVMProblem
from structopt.solvers import bcfw, casimir_svrg, svrg


def ocr_problem(words: int) -> SSVMProblem:
    from structopt.tasks.ocr import load_ocr, split
    train, _ = split(load_ocr(), "bcfw")
    X, Y = train["X"][:words], train["y"][:words]
    return SSVMProblem(ChainModel(128, 26), X, Y, Hamming(), 1.0 / len(X))


def ner_problem(sentences: int, data: Path | None) -> SSVMProblem:
    from structopt.tasks.conll import load_conll2002
    d = load_conll2002(None if data is None else data / "conll2002", language="esp")
    X, Y = d["train"]["X"][:sentences], d["train"]["y"][:sentences]
    return SSVMProblem(d["model"], X, Y, Hamming(), 0.01 / len(X))


def per_pass(trace: list[dict], skip: float) -> tuple[float, float]:
    """``(seconds per pass, passes measured)`` between the first record at ``passes >= skip`` and the last."""
    first = next(r for r in trace if r["passes"] >= skip)
    last = trace[-1]
    passes = last["passes"] - first["passes"]
    return (last["time"] - first["time"]) / passes, passes


def oracle_seconds(problem: SSVMProblem, w: np.ndarray, smooth: bool, repeats: int = 3) -> float:
    """Seconds of one pass of oracle calls alone at ``w`` (fused kernels; best of ``repeats``)."""
    view = problem.fused()
    order = np.arange(problem.n, dtype=np.int64)
    call = (lambda: view.smooth_oracle_only(order, w, 1.0, "topk", 5)) if smooth else \
        (lambda: view.oracle_only(order, w))
    call()  # load / compile
    best = np.inf
    for _ in range(repeats):
        t = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - t)
    return best


def measure(problem: SSVMProblem, epochs: int) -> list[dict]:
    rows = []
    b = bcfw(problem, max_passes=1 + epochs, random_state=0)
    sec, passes = per_pass(b.trace, 1)
    oracle = oracle_seconds(problem, b.w, smooth=False)
    rows.append({"solver": "bcfw", "path": "fused", "sec_pass": sec, "passes": passes, "sec_epoch": sec,
                 "overhead": sec / oracle})
    smooth_oracle = oracle_seconds(problem, b.w, smooth=True)
    for name, solve in (("svrg", svrg), ("casimir_svrg", casimir_svrg)):
        for fused in (False, True):
            # the SGD start pass (1 pass), then epochs of 2 passes; the first epoch also compiles
            r = solve(problem, max_passes=3 + 2 * epochs, random_state=0, fused=fused)
            sec, passes = per_pass(r.trace, 3)
            rows.append({"solver": name, "path": "fused" if fused else "generic", "sec_pass": sec, "passes": passes,
                         "sec_epoch": 2 * sec, "overhead": sec / smooth_oracle})
    for row in rows:
        row["vs_bcfw"] = row["sec_pass"] / rows[0]["sec_pass"]
    return rows


def table(title: str, rows: list[dict]) -> str:
    lines = [f"### {title}", "",
             "| solver | path | s / pass | passes timed | s / epoch | pass ÷ BCFW pass "
             "| overhead (÷ its oracle calls alone) |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['solver']} | {r['path']} | {r['sec_pass']:.4f} | {r['passes']:.0f} | {r['sec_epoch']:.4f} "
                     f"| {r['vs_bcfw']:.2f} | {r['overhead']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ocr-words", type=int, default=6251)
    parser.add_argument("--ner-sentences", type=int, default=3000)
    parser.add_argument("--epochs", type=int, default=4, help="SVRG epochs (BCFW passes) timed per run")
    parser.add_argument("--data", type=Path, default=None, help="data directory (default: structopt's lookup)")
    parser.add_argument("--tasks", nargs="+", default=["ocr", "ner"], choices=["ocr", "ner"])
    parser.add_argument("--out", type=Path, default=None, help="write the tables (markdown) here")
    args = parser.parse_args(argv)
    parts = [f"Machine: {platform.processor() or platform.machine()}, Python {platform.python_version()}; "
             f"{args.epochs} epochs timed per run, default solver options (top-K smoothing, K = 5).", ""]
    for task in args.tasks:
        t = time.perf_counter()
        problem = ocr_problem(args.ocr_words) if task == "ocr" else ner_problem(args.ner_sentences, args.data)
        title = (f"OCR, {problem.n} words, lambda = 1/n" if task == "ocr"
                 else f"CoNLL-2002 Spanish NER, first {problem.n} training sentences, d = {problem.n_params}, "
                      f"lambda = 0.01/n")
        print(f"{title}: loaded in {time.perf_counter() - t:.1f}s", flush=True)
        text = table(title, measure(problem, args.epochs))
        print(text, flush=True)
        parts.append(text)
    if args.out is not None:
        args.out.write_text("\n".join(parts))


if __name__ == "__main__":
    main()
