"""Exact ILP backends of LPStructure on the same programs: time per argmax and agreement.

Usage::

    python benchmarks/lp_structure.py [--out benchmarks/results/lp_structure.json] [--instances 20]

Families (each solved with the three backends on the same random potentials):

- ``k_of_n``: choose exactly k of n (the example's selection task);
- ``windows``: between lo and hi of n with caps on random windows (interval rows, integral LP);
- ``independent_set``: independent sets of a random graph (fractional LP, real branching);
- ``knapsack``: a few random integer knapsack rows;
- ``tiny``: n = 6 with one random row (the size of the tests: per-call overhead).

Reported per (family, backend): median seconds per argmax over the instances, the ratio to the
fastest backend in the same run, and the largest score deficit against the best backend (CP-SAT
rounds the objective at resolution ``max|theta| / 1e9``; HiGHS and SCIP run with zero gaps).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import cvxpy as cp
import numpy as np

from structopt.structures.lp import LPStructure, VectorPotentials

BACKENDS = ("highs", "scip", "cpsat")


def family(name: str, n: int, rng: np.random.Generator):
    """``(z, constraints)`` of one random program of a family."""
    z = cp.Variable(n, boolean=True)
    if name == "k_of_n":
        return z, [cp.sum(z) == n // 3]
    if name == "windows":
        cons = [cp.sum(z) >= n // 4, cp.sum(z) <= n // 2]
        for _ in range(n // 4):
            start = int(rng.integers(0, n - 2))
            cons.append(cp.sum(z[start:start + 3]) <= 1)
        return z, cons
    if name == "independent_set":
        edges = {tuple(sorted(rng.choice(n, 2, replace=False))) for _ in range(2 * n)}
        return z, [z[a] + z[b] <= 1 for a, b in sorted(edges)]
    if name == "knapsack":
        return z, [rng.integers(1, 10, size=n) @ z <= 2 * n for _ in range(3)]
    if name == "tiny":
        return z, [rng.integers(-2, 3, size=n) @ z <= 2, cp.sum(z) >= 1]
    raise ValueError(name)


def run(instances: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    out = {}
    for name, n in (("tiny", 6), ("k_of_n", 50), ("windows", 40), ("independent_set", 30), ("knapsack", 30)):
        z, cons = family(name, n, rng)
        structures = {b: LPStructure(z, cons, solver=b) for b in BACKENDS}
        thetas = [VectorPotentials(rng.normal(size=n)) for _ in range(instances)]
        times = {b: [] for b in BACKENDS}
        scores = {b: [] for b in BACKENDS}
        for theta in thetas:
            for b, s in structures.items():
                s.argmax(theta)  # warm-up of the same program (imports, model building paths)
                start = time.perf_counter()
                y = s.argmax(theta)
                times[b].append(time.perf_counter() - start)
                scores[b].append(float(theta.values @ y))
        best = np.max(np.array([scores[b] for b in BACKENDS]), axis=0)
        medians = {b: float(np.median(times[b])) for b in BACKENDS}
        fastest = min(medians.values())
        out[name] = {b: {"median_seconds": medians[b], "ratio_to_fastest": medians[b] / fastest,
                         "max_score_deficit": float(np.max(best - np.array(scores[b])))} for b in BACKENDS}
        out[name]["n"] = n
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="benchmarks/results/lp_structure.json")
    parser.add_argument("--instances", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    results = {"machine": platform.platform(), "families": run(args.instances, args.seed)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    for name, rows in results["families"].items():
        print(f"{name} (n={rows['n']})")
        for b in BACKENDS:
            r = rows[b]
            print(f"  {b:6s} {r['median_seconds'] * 1e3:8.2f} ms  x{r['ratio_to_fastest']:5.2f}  "
                  f"deficit {r['max_score_deficit']:.1e}")


if __name__ == "__main__":
    main()
