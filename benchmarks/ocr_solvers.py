"""Dual extragradient (Euclidean and entropic) beside BCFW and batch FW on OCR.

Duality gap F(w) - D(z) against passes and against wall time (evaluations excluded), as a PNG
and a JSON. Usage: ``python benchmarks/ocr_solvers.py --words 300 --passes 30 --out /tmp/ocr``.
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

from structopt.losses import Hamming
from structopt.models.chain import ChainModel
from structopt.problem import SSVMProblem
from structopt.solvers.bcfw import bcfw, frank_wolfe
from structopt.solvers.extragradient import dual_extragradient


def _load(words: int):
    try:
        from structopt.problems.ocr import load_ocr

        data = load_ocr()
        return data["X"][:words], data["y"][:words]
    except ImportError:  # fallback: read the shared npz directly (see shared/data/README.md)
        d = np.load(Path(__file__).resolve().parents[2] / "shared/data/ocr/letters.npz")
        pixels = np.unpackbits(d["pixels"], axis=1)[:, :128].astype(float)
        ends = np.cumsum(d["lengths"].astype(int))
        starts = ends - d["lengths"].astype(int)
        return ([pixels[a:b] for a, b in zip(starts[:words], ends[:words])],
                [d["labels"][a:b].astype(np.int64) for a, b in zip(starts[:words], ends[:words])])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--words", type=int, default=300)
    parser.add_argument("--passes", type=int, default=30)
    parser.add_argument("--lam", type=float, default=0.01)
    parser.add_argument("--out", default="ocr_solvers")
    args = parser.parse_args(argv)
    X, Y = _load(args.words)
    problem = SSVMProblem(ChainModel(128, 26), X, Y, Hamming(), args.lam)
    runs = {
        "bcfw": lambda: bcfw(problem, max_passes=args.passes, gap_every=max(1, args.passes // 10), random_state=0),
        "batch_fw": lambda: frank_wolfe(problem, max_passes=args.passes),
        "eg_euclidean": lambda: dual_extragradient(problem, geometry="euclidean", max_passes=args.passes,
                                                   gap_every=max(1, args.passes // 10), memory_light=True),
        "eg_entropic": lambda: dual_extragradient(problem, geometry="entropic", max_passes=args.passes,
                                                  gap_every=max(1, args.passes // 10), memory_light=True),
    }
    results = {}
    for name, run in runs.items():
        t0 = time.perf_counter()
        res = run()
        results[name] = {"trace": res.trace, "wall": time.perf_counter() - t0}
        last = res.trace[-1]
        print(f"{name:14s} passes {last['passes']:6.1f}  time {last['time']:7.2f}s  primal {last['primal']:.5f}  "
              f"gap {last.get('gap', float('nan')):.3e}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"words": args.words, "passes": args.passes, "lam": args.lam}
    out.with_suffix(".json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for name, r in results.items():
        tr = [e for e in r["trace"] if "gap" in e and e["gap"] > 0]
        axes[0].loglog([e["passes"] for e in tr], [e["gap"] for e in tr], "o-", label=name)
        axes[1].loglog([max(e["time"], 1e-3) for e in tr], [e["gap"] for e in tr], "o-", label=name)
    axes[0].set_xlabel("passes (extragradient: iterations, 2 prox calls per example)")
    axes[1].set_xlabel("optimisation time (s)")
    for ax in axes:
        ax.set_ylabel("duality gap F(w) - D(z)")
        ax.legend()
    fig.suptitle(f"OCR, {args.words} words, lambda={args.lam}")
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"), dpi=100)


if __name__ == "__main__":
    main()
