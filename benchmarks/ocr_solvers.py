"""Dual extragradient (Euclidean and entropic) beside BCFW and batch FW on OCR, and on word alignment.

OCR: ``load_ocr()`` + ``split(data, "bcfw")`` (6,251 training words; ``--words`` takes a prefix),
ChainModel(128, 26), Hamming loss, lambda = ``--lam`` (``1/n`` accepted). Word alignment: the
Hansards matching problem of ``benchmarks/alignment.py`` (asymmetric Hamming 1/3), with held-out
AER. Reports the duality gap F(w) - D(z), primal, and held-out metrics against passes and against
optimisation time (evaluations excluded), as a PNG and a JSON.

Usage: ``python benchmarks/ocr_solvers.py --words 500 --passes 10 --out benchmarks/results/ocr_solvers/ocr_solvers``
(``--no-alignment`` to skip the matching section, ``--skip eg_euclidean`` to drop a solver).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from structopt.losses import Hamming, MatchingHamming
from structopt.models.chain import ChainModel
from structopt.problem import SSVMProblem
from structopt.solvers.bcfw import bcfw, frank_wolfe
from structopt.solvers.extragradient import dual_extragradient
from structopt.tasks.ocr import load_ocr, split


def _runs(problem, passes: int, skip: set[str], eg_passes: int | None = None, entropic_passes: int | None = None):
    every = max(1, passes // 10)
    eg = eg_passes or passes
    ent = entropic_passes or eg
    runs = {
        "bcfw": lambda: bcfw(problem, max_passes=passes, eval_every=every, random_state=0),
        "batch_fw": lambda: frank_wolfe(problem, max_passes=passes),
        "eg_euclidean": lambda: dual_extragradient(problem, geometry="euclidean", max_passes=eg,
                                                   eval_every=max(1, eg // 10)),
        "eg_entropic": lambda: dual_extragradient(problem, geometry="entropic", max_passes=ent,
                                                  eval_every=max(1, ent // 10)),
    }
    return {k: v for k, v in runs.items() if k not in skip}


def _run_all(problem, runs, metric=None) -> dict:
    results = {}
    for name, run in runs.items():
        t0 = time.perf_counter()
        try:
            res = run()
        except Exception as err:  # e.g. no entropic prox on matchings: report, keep going
            print(f"{name:14s} not run: {err}")
            continue
        entry = {"trace": res.trace, "wall": time.perf_counter() - t0,
                 "info": {k: v for k, v in res.info.items() if isinstance(v, (int, float, str, bool))}}
        if metric is not None:
            entry["metric"] = metric(res.w)
        results[name] = entry
        last = res.trace[-1]
        print(f"{name:14s} passes {last['passes']:6.1f}  time {last['time']:8.2f}s  primal {last['primal']:.5f}  "
              f"gap {last.get('gap', float('nan')):.3e}" + (f"  metric {entry['metric']:.4f}" if metric else ""))
        print("               trace (passes, time, primal, gap): "
              + ", ".join(f"({e['passes']:.0f}, {e['time']:.1f}, {e['primal']:.3f}, {e.get('gap', np.nan):.3g})"
                          for e in res.trace))
    return results


def _plot(results: dict, title: str, path: Path) -> None:
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for name, r in results.items():
        tr = [e for e in r["trace"] if "gap" in e and e["gap"] > 0]
        axes[0].loglog([e["passes"] for e in tr], [e["gap"] for e in tr], "o-", label=name)
        axes[1].loglog([max(e["time"], 1e-3) for e in tr], [e["gap"] for e in tr], "o-", label=name)
        axes[2].semilogx([e["passes"] for e in r["trace"]], [e["primal"] for e in r["trace"]], "o-", label=name)
    axes[0].set_xlabel("passes (extragradient: iterations, 2 prox calls per example)")
    axes[1].set_xlabel("optimisation time (s)")
    axes[2].set_xlabel("passes")
    axes[2].set_ylabel("primal F(w)")
    for ax in axes[:2]:
        ax.set_ylabel("duality gap F(w) - D(z)")
    for ax in axes:
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--words", type=int, default=6251)
    parser.add_argument("--passes", type=int, default=20)
    parser.add_argument("--eg-passes", type=int, default=None, help="extragradient iterations (default --passes)")
    parser.add_argument("--entropic-passes", type=int, default=None,
                        help="entropic extragradient iterations (default --eg-passes; they are ~15x cheaper)")
    parser.add_argument("--lam", default="0.01", help="a number or '1/n'")
    parser.add_argument("--skip", default="", help="comma-separated solver names to skip")
    parser.add_argument("--no-alignment", action="store_true")
    parser.add_argument("--align-passes", type=int, default=20)
    parser.add_argument("--out", default="ocr_solvers")
    args = parser.parse_args(argv)
    skip = {s for s in args.skip.split(",") if s}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    train, _ = split(load_ocr(), "bcfw")
    X, Y = train["X"][:args.words], train["y"][:args.words]
    lam = 1.0 / len(X) if args.lam == "1/n" else float(args.lam)
    problem = SSVMProblem(ChainModel(128, 26), X, Y, Hamming(), lam)
    f0 = problem.primal(problem.model.zeros())
    print(f"OCR: {len(X)} words, lambda={lam:.3g}, F(0)={f0:.4f}")
    report = {"meta": {"words": len(X), "passes": args.passes, "eg_passes": args.eg_passes,
                      "entropic_passes": args.entropic_passes, "lam": lam, "F0": f0}}
    report["ocr"] = _run_all(problem, _runs(problem, args.passes, skip, args.eg_passes, args.entropic_passes))
    _plot(report["ocr"], f"OCR, {len(X)} words, lambda={lam:.3g}", out.with_name(out.name + "_ocr.png"))
    if not args.no_alignment:
        from structopt.models.matching import MatchingModel
        from structopt.tasks.alignment import load_alignment

        task = load_alignment(n_heldout=200, random_state=0)
        model = MatchingModel(task.n_features, allow_unmatched=True)
        ap = SSVMProblem(model, task.X_train, task.Y_train, MatchingHamming(1.0, 3.0), lam=0.01)
        print(f"alignment: {ap.n} training pairs, lambda=0.01, F(0)={ap.primal(model.zeros()):.4f}")
        runs = _runs(ap, args.align_passes, skip | {"eg_entropic"})  # no tractable entropic prox on matchings
        report["alignment"] = _run_all(ap, runs, metric=lambda w: task.evaluate(ap.predict(task.X_test, w)))
        _plot(report["alignment"], "Hansards word alignment, lambda=0.01", out.with_name(out.name + "_alignment.png"))
    out.with_suffix(".json").write_text(json.dumps(report, indent=1, default=float))


if __name__ == "__main__":
    main()
