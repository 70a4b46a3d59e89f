"""SparseMAP's active set against a generic QP solver on the same projection (issue 34).

For a chain (T=30, S=9) and a 20x20 bipartite matching, on random potentials: ``structopt.sparsemap``
(the active-set method over the structure's argmax) and cvxpy/Clarabel solving min 1/2 ||mu - theta||^2 over
the structure's ``polytope()`` (``Structure.project_qp``), both in one run. Reported per call: CPU time,
SparseMAP's iterations, active-set size and Frank-Wolfe gap, the QP answer's gap measured with the same
oracle, the distance between the two answers, the share of SparseMAP's time spent in its oracle calls, and a
warm start from the answer at nearby potentials (a training step's situation).

Run: ``OPENBLAS_NUM_THREADS=1 python benchmarks/sparsemap.py [--instances 5] [--out benchmarks/sparsemap_results.md]``
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench import use_checkout, write_keeping_findings  # noqa: E402

use_checkout(ROOT)

from structopt.potentials import flatten, unflatten  # noqa: E402
from structopt.sparsemap import sparsemap, sparsemap_vjp  # noqa: E402
from structopt.structures import BipartiteMatching, Chain, ChainPotentials, MatchingPotentials  # noqa: E402


def cpu(fn, repeat: int = 1):
    """(result of the last call, CPU seconds per call)."""
    start = time.process_time()
    for _ in range(repeat):
        out = fn()
    return out, (time.process_time() - start) / repeat


def chain_instance(rng: np.random.Generator, scale: float) -> tuple[Chain, ChainPotentials]:
    T, S = 30, 9
    chain = Chain(S)
    return chain, ChainPotentials(rng.normal(scale=scale, size=(T, S)), rng.normal(scale=scale, size=(T - 1, S, S)))


def matching_instance(rng: np.random.Generator, scale: float) -> tuple[BipartiteMatching, MatchingPotentials]:
    n = 20
    matching = BipartiteMatching()
    return matching, matching.expand(MatchingPotentials(rng.normal(scale=scale, size=(n, n)), np.zeros(0),
                                                        np.zeros(0)))


def oracle_gap(structure, theta, mu_flat: np.ndarray) -> float:
    """max_y <theta - mu, mu(y) - mu> by the structure's argmax: the same certificate SparseMAP reports."""
    direction = flatten(theta) - mu_flat
    best = flatten(structure.stats(structure.argmax(unflatten(direction, theta)), theta))
    return float(direction @ (best - mu_flat))


def oracle_seconds(structure, theta, n_calls: int) -> float:
    """CPU seconds of n_calls argmax + stats calls at random directions (SparseMAP's oracle cost alone)."""
    rng = np.random.default_rng(0)
    directions = [unflatten(rng.normal(size=flatten(theta).size), theta) for _ in range(n_calls)]
    start = time.process_time()
    for d in directions:
        flatten(structure.stats(structure.argmax(d), theta))
    return time.process_time() - start


def run_family(name: str, make, n_instances: int, scale: float, repeat: int) -> list[dict]:
    rng = np.random.default_rng(0)
    structure, theta = make(np.random.default_rng(99), scale)
    structure.project_qp(theta)  # cvxpy's first call imports and sets up its solvers: not timed
    sparsemap(structure, theta)
    rows = []
    for i in range(n_instances):
        structure, theta = make(rng, scale)
        print(f"{name}: instance {i + 1}/{n_instances}", file=sys.stderr)
        result, t_sm = cpu(lambda s=structure, t=theta: sparsemap(s, t, tol=1e-9), repeat)
        oracle_calls = result.iterations + 2  # the first argmax, one per added vertex, the certifying one
        t_oracle = oracle_seconds(structure, theta, oracle_calls * repeat) / repeat
        mu_qp, t_qp = cpu(lambda s=structure, t=theta: flatten(s.project_qp(t)))
        g = rng.normal(size=flatten(theta).size)
        _, t_vjp = cpu(lambda r=result, g=g: sparsemap_vjp(r, g), repeat)
        moved = unflatten(flatten(theta) + rng.normal(scale=0.01 * scale, size=flatten(theta).size), theta)
        cold = sparsemap(structure, moved, tol=1e-9)
        warm, t_warm = cpu(lambda s=structure, t=moved, r=result: sparsemap(s, t, tol=1e-9, warm_start=r), repeat)
        _, t_cold = cpu(lambda s=structure, t=moved: sparsemap(s, t, tol=1e-9), repeat)
        rows.append({
            "t_sm": t_sm, "t_qp": t_qp, "iters": result.iterations, "k": len(result.weights), "gap": result.gap,
            "face": 0 if result.face is None else len(result.face), "t_vjp": t_vjp,
            "converged": result.converged, "qp_gap": oracle_gap(structure, theta, mu_qp),
            "diff": float(np.max(np.abs(flatten(result.stats) - mu_qp))), "oracle_share": t_oracle / t_sm,
            "warm_iters": warm.iterations, "cold_iters": cold.iterations, "t_warm": t_warm, "t_cold": t_cold,
            "warm_diff": float(np.max(np.abs(flatten(warm.stats) - flatten(cold.stats)))),
        })
    return rows


def table(title: str, rows: list[dict]) -> str:
    head = ("| instance | SparseMAP ms | iterations | active set (+ face) | FW gap | vjp ms | QP (Clarabel) ms | "
            "QP ÷ SparseMAP | QP answer's gap | max abs diff | oracle share | warm: iterations (cold) | "
            "warm ms (cold ms) |\n"
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
    lines = [f"| {i} | {r['t_sm'] * 1e3:.2f} | {r['iters']} | {r['k']} (+{r['face']}) | {r['gap']:.1e} | "
             f"{r['t_vjp'] * 1e3:.2f} | {r['t_qp'] * 1e3:.0f} | "
             f"{r['t_qp'] / r['t_sm']:.2f} | {r['qp_gap']:.1e} | {r['diff']:.1e} | {r['oracle_share']:.0%} | "
             f"{r['warm_iters']} ({r['cold_iters']}) | {r['t_warm'] * 1e3:.2f} ({r['t_cold'] * 1e3:.2f}) |"
             for i, r in enumerate(rows)]
    med = {key: float(np.median([r[key] for r in rows])) for key in ("t_sm", "t_qp", "iters", "k", "oracle_share")}
    ratio = float(np.median([r["t_qp"] / r["t_sm"] for r in rows]))
    summary = (f"\nMedian: SparseMAP {med['t_sm'] * 1e3:.2f} ms ({med['iters']:.0f} iterations, {med['k']:.0f} "
               f"active outputs, {med['oracle_share']:.0%} of it in the oracle), QP {med['t_qp'] * 1e3:.0f} ms: "
               f"QP ÷ SparseMAP = {ratio:.2f}. Every SparseMAP call converged: "
               f"{all(r['converged'] for r in rows)}.\n")
    return f"### {title}\n\n" + head + "\n".join(lines) + "\n" + summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=5, help="SparseMAP calls timed per instance")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    sections = [
        table("Chain, T = 30, S = 9 (d = 2,619), potentials N(0, 1)",
              run_family("chain", chain_instance, args.instances, 1.0, args.repeat)),
        table("Bipartite matching 20 × 20 (d = 400), potentials N(0, 0.3²)",
              run_family("matching", matching_instance, args.instances, 0.3, args.repeat)),
    ]
    text = ("# SparseMAP (active set over the argmax) against a generic QP solver\n\n"
            f"`OPENBLAS_NUM_THREADS=1 python benchmarks/sparsemap.py --instances {args.instances} --repeat "
            f"{args.repeat}` ({time.strftime('%Y-%m-%d')}, {platform.machine()}, Python "
            f"{platform.python_version()}, CPU seconds on a shared 2-core machine). SparseMAP: "
            "`structopt.sparsemap.sparsemap(structure, theta, tol=1e-9)`. QP: `Structure.project_qp` (cvxpy, "
            "Clarabel, tolerances 1e-10) over `structure.polytope()`, building the cvxpy problem per call as a "
            "generic caller would (its first call, cvxpy's set-up, is not timed). \"QP answer's gap\" is the "
            "Frank–Wolfe gap of the QP's point measured with "
            "the structure's argmax (SparseMAP's certificate, for comparison); \"oracle share\" is the CPU time "
            "of as many argmax + stats calls as SparseMAP made, over its total time; \"warm\" re-solves at "
            "potentials moved by 1% noise from the previous answer's active set (cold: from scratch).\n\n"
            + "\n".join(sections))
    print(text)
    if args.out is not None:
        write_keeping_findings(args.out, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
