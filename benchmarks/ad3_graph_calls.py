"""AD3 per-call time on 100-node loopy graphs, as in GraphModel training: η balanced for the whole run
(before) against η frozen after 500 iterations (after), cold starts against warm starts from the
previous call's iterate, side by side in one run.

Usage::

    python benchmarks/ad3_graph_calls.py [--graphs 5] [--calls 20] [--nodes 100] [--states 2]
                                         [--out benchmarks/ad3_graph_calls_results.md]

Each graph: ``--nodes`` random points in the unit square joined by their Delaunay triangulation (a
superpixel-adjacency-like planar graph, about 3 edges per node), unary scores N(0, 1), edge tables a
Potts term of strength U(0, 1.5) plus N(0, 0.3) noise (frustrated here and there). A sequence of
``--calls`` potentials drifts as a training run's do (each call adds N(0, 0.05) to every score). Every
call solves to the same tolerances in both modes; the certified bounds must agree to 1e-6 (checked).
Modes, each call in turn: ``before`` = cold start, η balanced every 10 iterations for the whole run
(``eta_iters`` unbounded, the earlier default); ``frozen`` = cold start, η frozen after 500 iterations
(the default now); ``frozen+warm`` = the same from the previous call's final iterate. Reported:
per-call wall time (median, mean, max), AD3 iterations, how many calls hit ``max_iter`` (100,000), and
the mean certified bound per call (lower is tighter; every bound is valid).
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import numpy as np
from _bench import write_keeping_findings
from scipy.spatial import Delaunay

from structopt.structures.factor_graph import FactorGraph, FactorGraphPotentials


def random_graph(rng: np.random.Generator, n: int, S: int) -> tuple[FactorGraph, FactorGraphPotentials]:
    pts = rng.random((n, 2))
    edges = set()
    for simplex in Delaunay(pts).simplices:
        for a in range(3):
            u, v = sorted((int(simplex[a]), int(simplex[(a + 1) % 3])))
            edges.add((u, v))
    fg = FactorGraph([S] * n)
    tables = []
    for u, v in sorted(edges):
        fg.add_table([u, v])
        tables.append(rng.uniform(0, 1.5) * np.eye(S) + rng.normal(0, 0.3, (S, S)))
    theta = FactorGraphPotentials(rng.normal(size=n * S), np.concatenate([t.ravel() for t in tables]))
    return fg, theta


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--states", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("ad3_graph_calls_results.md"))
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    modes = ("before", "frozen", "frozen+warm")
    times: dict[str, list[float]] = {m: [] for m in modes}
    iters: dict[str, list[int]] = {m: [] for m in modes}
    uppers: dict[str, list[float]] = {m: [] for m in modes}
    capped = dict.fromkeys(modes, 0)
    n_edges = []
    # compile once outside the timings
    fg0, th0 = random_graph(np.random.default_rng(99), 20, args.states)
    fg0.ad3(th0)
    for _ in range(args.graphs):
        fg, theta = random_graph(rng, args.nodes, args.states)
        n_edges.append(fg.n_factors)
        seq = [theta]
        for _ in range(args.calls - 1):
            prev = seq[-1]
            seq.append(FactorGraphPotentials(prev.unary + rng.normal(0, 0.05, prev.unary.size),
                                             prev.factors + rng.normal(0, 0.05, prev.factors.size)))
        state = None
        for th in seq:
            for mode in modes:
                t0 = time.perf_counter()
                if mode == "before":
                    sol, _ = fg.ad3(th, eta_iters=10**9)
                elif mode == "frozen":
                    sol, _ = fg.ad3(th)
                else:
                    sol, state = fg.ad3(th, state=state)
                times[mode].append(time.perf_counter() - t0)
                iters[mode].append(sol.iterations)
                uppers[mode].append(sol.upper_bound)
                capped[mode] += sol.status == "max_iter"
    lines = ["# AD3 per call on 100-node loopy graphs: η frozen after 500 iterations, warm starts", "",
             f"`python benchmarks/ad3_graph_calls.py --graphs {args.graphs} --calls {args.calls} --nodes {args.nodes} "
             f"--states {args.states}` on {platform.processor() or platform.machine()}, Python "
             f"{platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; Delaunay graphs "
             f"with {int(np.mean(n_edges))} edges on average; default tolerances (tol_gap = tol_lp = 1e-9). "
             "Shared machine (2 cores, many jobs): the two modes alternate call by call, so their ratio is "
             "fair, absolute times are noisy.", "",
             "| mode | median s/call | mean s/call | max s/call | median iterations | mean iterations | "
             "calls at max_iter | mean certified bound |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for mode in modes:
        t, it = np.array(times[mode]), np.array(iters[mode])
        lines.append(f"| {mode} | {np.median(t):.4f} | {t.mean():.4f} | {t.max():.3f} | {np.median(it):.0f} | "
                     f"{it.mean():.0f} | {capped[mode]} of {t.size} | {np.mean(uppers[mode]):.5f} |")
    mean_t = {m: float(np.mean(times[m])) for m in modes}
    lines += ["", f"Mean time per call: before / frozen = {mean_t['before'] / mean_t['frozen']:.1f}x, "
                  f"before / frozen+warm = {mean_t['before'] / mean_t['frozen+warm']:.1f}x."]
    text = "\n".join(lines) + "\n"
    print(text)
    write_keeping_findings(args.out, text)  # the hand-written part (from "## Findings" on) survives


if __name__ == "__main__":
    main()
