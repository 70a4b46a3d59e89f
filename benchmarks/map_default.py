"""The default MAP method of ``structopt infer --task map`` / ``map_inference``, chosen by measurement.

Per UAI instance (../shared/data/uai): AD3 alone (its defaults), branch-and-bound over AD3 and CP-SAT
(each with ``--limit`` seconds), and ``"auto"`` (AD3, then CP-SAT while a gap remains) with the default
60 s; then the local-polytope LP (``method="lp"``) with the old rounding (argmax per variable, logic
repair) against the new one (best of the per-variable and sequential roundings, each followed by ICM).
Scores are natural-log MRF scores (constant included); "gap" is upper bound - score.

Usage: ``python benchmarks/map_default.py [--limit 20] [--out benchmarks/map_default_results.md]``
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import numpy as np
from _bench import write_keeping_findings

from structopt.marginals import read_uai
from structopt.marginals.map import map_inference, mrf_to_factor_graph
from structopt.structures import _ad3_kernels as K

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "uai"
NAMES = ["Grids_11", "Grids_12", "Grids_13", "Grids_14", "Segmentation_11", "Segmentation_12", "Segmentation_13"]


def old_lp_rounding(mrf) -> tuple[float, float]:
    """The LP value and the score of the per-variable rounding the LP method used before (constant included)."""
    fg, theta = mrf_to_factor_graph(mrf)
    sol = fg.lp(theta)
    fl = fg.flat
    y = np.zeros(fl.n_vars, dtype=np.int64)
    K.round_and_repair(np.clip(sol.marginals.unary, 0, 1), fl.n_vars, fl.voff, np.isfinite(theta.unary), fl.fkind,
                       fl.fparam, fl.fptr, fl.evar, y)
    return sol.upper_bound + mrf.constant, mrf.score(y)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=float, default=20.0, help="seconds for bnb and cpsat")
    parser.add_argument("--out", default=str(Path(__file__).with_name("map_default_results.md")))
    args = parser.parse_args()
    rows, lp_rows = [], []
    for name in NAMES:
        mrf = read_uai(DATA / f"{name}.uai")
        res = {}
        for method, limit in (("ad3", 60.0), ("bnb", args.limit), ("cpsat", args.limit), ("auto", 60.0)):
            t0 = time.perf_counter()
            r = map_inference(mrf, method, time_limit=limit)
            res[method] = (r, time.perf_counter() - t0)
            print(name, method, f"{r.log_score:.4f} {r.upper_bound:.4f} {r.status} {res[method][1]:.2f}s", flush=True)
        cells = [name]
        for method in ("ad3", "bnb", "cpsat", "auto"):
            r, seconds = res[method]
            cells += [f"{r.log_score:.4f}", f"{r.gap:.3g}", "yes" if r.optimal else "no", f"{seconds:.2f}"]
        rows.append("| " + " | ".join(cells) + " |")
        lp_value, old = old_lp_rounding(mrf)
        new = map_inference(mrf, "lp")
        best = res["cpsat"][0].log_score if res["cpsat"][0].optimal else res["auto"][0].log_score
        lp_rows.append(f"| {name} | {lp_value:.4f} | {best:.4f} | {old:.4f} | {new.log_score:.4f} | "
                       f"{(best - old) / abs(best):.3g} | {(best - new.log_score) / abs(best):.3g} |")
    text = (f"# The default MAP method\n\n`python benchmarks/map_default.py --limit {args.limit:g}`; "
            f"{platform.machine()}, Python {platform.python_version()}, a 2-core machine shared with other jobs "
            "(wall clock, one run, conversion included). Scores are natural-log MRF scores; gap = upper bound - "
            "score; \"opt\" = proven optimal.\n\n"
            f"## AD3, branch-and-bound ({args.limit:g} s), CP-SAT ({args.limit:g} s) and auto (60 s)\n\n"
            "| instance | AD3 score | AD3 gap | opt | s | B&B score | B&B gap | opt | s | CP-SAT score | CP-SAT gap | "
            "opt | s | auto score | auto gap | opt | s |\n"
            "| --- |" + " ---: | ---: | --- | ---: |" * 4 + "\n" + "\n".join(rows) + "\n\n"
            "## method=\"lp\": rounding of the LP optimum, before and after\n\n"
            "| instance | LP value (bound) | optimum | old rounding | new rounding | old rel. loss | new rel. loss |\n"
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n" + "\n".join(lp_rows) + "\n")
    write_keeping_findings(Path(args.out), text)
    print(text)


if __name__ == "__main__":
    main()
