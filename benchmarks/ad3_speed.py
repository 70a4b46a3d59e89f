"""AD3's cost per iteration on dense multi-state factors, its default stopping and MAP conversion: structopt
before and after, and the C++ AD3 2.2.1, side by side in one driver (issue 37).

Usage (the peer's interpreter from ``bash benchmarks/ad3_env.sh``; ``--before-rev`` is the commit whose
structopt is "before", exported with ``git archive`` into a temporary folder)::

    python benchmarks/ad3_speed.py [--peer-python /tmp/ad3-venv/bin/python] [--start-rev 4a9595f]
                                   [--before-rev 10059d6] [--states 2 3 4 5] [--graphs 3] [--iters 2000]
                                   [--repeats 3]

*start* (``--start-rev``, the issue's start) is "before" in every section; ``--before-rev`` (the last
per-iteration change's base) adds a column to the per-iteration table only.

Graphs: ``--nodes`` random points in the unit square joined by their Delaunay triangulation (as
``benchmarks/ad3_graph_calls.py``), unary scores N(0, 1), edge tables a Potts term of strength U(0, 1.5)
plus N(0, 0.3) noise, ``S`` states per variable. The driver draws them once and writes them to a temporary
``.npz`` that every side reads, so all sides solve the same problems.

Sections:

1. **Per iteration**: each side runs exactly ``--iters`` iterations with no stopping test able to end
   the run (structopt: ``tol_gap = tol_lp = -1``; AD3: residual threshold 0), after a warm-up call that
   compiles; CPU seconds ÷ iterations, the median over graphs and repeats. The sides alternate graph set
   by graph set (``--repeats`` rounds), each in a fresh process.
2. **Default stopping**: each side with its own defaults until it stops (structopt before: tol 1e-9,
   100,000 iterations; after: the relative rule; AD3: ``solve()``'s defaults, 1000 iterations, residual
   1e-6): CPU seconds, iterations, and the distance of the reported bound from the LP optimum (HiGHS, to
   ~1e-7) relative to ``1 + |LP|``. structopt's bound is certified (the dual g(λ)); AD3's Python binding
   returns no bound, only ``value``, the objective of its returned (relaxed) posteriors, which may fall on
   either side of LP* (the *AD3 value gap* column).
3. **MAP conversion**: ``map_inference(mrf, method="ad3")`` on the UAI segmentations, split into
   converting the MRF to a factor graph, building its flat arrays, and the AD3 call (best of 7, CPU).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
ROOT = HERE.parents[1]
MARK = "@@result "


# ----------------------------------------------------------------------------- problems
def draw_graphs(path: Path, states: list[int], graphs: int, nodes: int, seed: int) -> None:
    import numpy as np
    from scipy.spatial import Delaunay

    rng = np.random.default_rng(seed)
    arrays = {}
    for S in states:
        for g in range(graphs):
            pts = rng.random((nodes, 2))
            edges = set()
            for simplex in Delaunay(pts).simplices:
                for a in range(3):
                    u, v = sorted((int(simplex[a]), int(simplex[(a + 1) % 3])))
                    edges.add((u, v))
            edges = np.array(sorted(edges), dtype=np.int64)
            tables = rng.uniform(0, 1.5, size=(len(edges), 1, 1)) * np.eye(S) + rng.normal(0, 0.3, (len(edges), S, S))
            arrays[f"S{S}_g{g}_edges"] = edges
            arrays[f"S{S}_g{g}_unary"] = rng.normal(size=(nodes, S))
            arrays[f"S{S}_g{g}_tables"] = tables
    np.savez(path, **arrays)


def load_graphs(path: str, S: int) -> list[tuple]:
    import numpy as np

    data = np.load(path, allow_pickle=False)
    out = []
    g = 0
    while f"S{S}_g{g}_edges" in data:
        out.append((data[f"S{S}_g{g}_edges"], data[f"S{S}_g{g}_unary"], data[f"S{S}_g{g}_tables"]))
        g += 1
    return out


# ----------------------------------------------------------------------------- worker side
def _structopt_graph(edges, unary, tables):
    import numpy as np

    from structopt.structures.factor_graph import FactorGraph, FactorGraphPotentials

    n, S = unary.shape
    fg = FactorGraph([S] * n)
    for u, v in edges.tolist():
        fg.add_table([u, v])
    return fg, FactorGraphPotentials(unary.ravel().copy(), np.ascontiguousarray(tables).ravel())


def _ad3_run(edges, unary, tables, max_iter: int, tol: float) -> tuple[float, float]:
    from ad3 import factor_graph as ad3fg

    n, S = unary.shape
    fg = ad3fg.PFactorGraph()
    variables = []
    for i in range(n):
        v = fg.create_multi_variable(S)
        v.set_log_potentials(unary[i].copy())
        variables.append(v)
    for (u, v), t in zip(edges.tolist(), tables):
        fg.create_factor_dense([variables[u], variables[v]], t.ravel().tolist())
    t0 = time.process_time()
    value, _post, _add, _status = fg.solve(eta=0.1, adapt=True, max_iter=max_iter, tol=tol)
    return time.process_time() - t0, float(value)


def worker(side: str, task: str, data: str, states: list[int], iters: int) -> dict:
    out: dict = {}
    if task == "periter":
        for S in states:
            rows = []
            for edges, unary, tables in load_graphs(data, S):
                if side == "ad3":
                    if not rows:
                        _ad3_run(edges, unary, tables, 10, 0.0)
                    sec, value = _ad3_run(edges, unary, tables, iters, 0.0)
                    rows.append({"us": 1e6 * sec / iters, "value": value})
                    continue
                fg, theta = _structopt_graph(edges, unary, tables)
                if not rows:
                    fg.ad3(theta, max_iter=20, tol_gap=-1.0, tol_lp=-1.0)  # compile / load outside the timing
                t0 = time.process_time()
                sol, _ = fg.ad3(theta, max_iter=iters, tol_gap=-1.0, tol_lp=-1.0)
                sec = time.process_time() - t0
                rows.append({"us": 1e6 * sec / sol.iterations, "value": sol.upper_bound})
            out[str(S)] = rows
    elif task == "defaults":
        for S in states:
            rows = []
            for edges, unary, tables in load_graphs(data, S):
                if side == "ad3":
                    sec, value = _ad3_run(edges, unary, tables, 1000, 1e-6)
                    rows.append({"sec": sec, "iterations": None, "bound": value, "score": None})
                    continue
                fg, theta = _structopt_graph(edges, unary, tables)
                if not rows:
                    fg.ad3(theta, max_iter=20)
                t0 = time.process_time()
                sol, _ = fg.ad3(theta)
                sec = time.process_time() - t0
                row = {"sec": sec, "iterations": sol.iterations, "bound": sol.upper_bound, "score": sol.score,
                       "status": sol.status}
                if side == "after":
                    row["lp"] = fg.lp(theta).upper_bound
                rows.append(row)
            out[str(S)] = rows
    elif task == "convert":
        import glob

        from structopt.marginals import read_uai
        from structopt.marginals.map import map_inference, mrf_to_factor_graph

        for path in sorted(glob.glob(str(Path(data) / "Segmentation_*.uai"))):
            mrf = read_uai(path)
            map_inference(mrf, method="ad3")
            best: dict[str, float] = {}
            for _ in range(7):
                t0 = time.process_time()
                fg, theta = mrf_to_factor_graph(mrf)
                t1 = time.process_time()
                fg.flat  # noqa: B018 (built lazily: its own line)
                t2 = time.process_time()
                fg.map(theta, method="ad3")
                t3 = time.process_time()
                map_inference(mrf, method="ad3")
                t4 = time.process_time()
                for key, val in (("convert", t1 - t0), ("flat", t2 - t1), ("ad3", t3 - t2), ("total", t4 - t3)):
                    best[key] = min(best.get(key, float("inf")), val)
            out[Path(path).stem] = best
    return out


# ----------------------------------------------------------------------------- driver side
def run_side(side: str, python: str, task: str, data: str, states: list[int], iters: int, roots: dict) -> dict:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    if side in roots:
        env["PYTHONPATH"] = str(roots[side])
    elif side == "after":
        env["PYTHONPATH"] = str(ROOT)
    cmd = [python, str(HERE), "--worker", side, "--task", task, "--data", data, "--iters", str(iters),
           "--states", *map(str, states)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=str(HERE.parent))
    for line in done.stdout.splitlines():
        if line.startswith(MARK):
            return json.loads(line[len(MARK):])
    raise SystemExit(f"{side} {task} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")


def export_before(rev: str, dest: Path) -> None:
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "structopt"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker")
    parser.add_argument("--task")
    parser.add_argument("--data")
    parser.add_argument("--peer-python", default="/tmp/ad3-venv/bin/python")
    parser.add_argument("--start-rev", default="4a9595f")
    parser.add_argument("--before-rev", default="10059d6")
    parser.add_argument("--states", type=int, nargs="+", default=[2, 3, 4, 5])
    parser.add_argument("--default-states", type=int, nargs="+", default=[3, 5])
    parser.add_argument("--graphs", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--iters", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--uai", default=str(ROOT.parent / "shared" / "data" / "uai"))
    parser.add_argument("--out", type=Path, default=HERE.with_name("ad3_speed_results.md"))
    args = parser.parse_args()
    if args.worker:
        if args.worker != "ad3":
            import structopt

            inside = Path(structopt.__file__).resolve().parents[1] == ROOT
            if inside != (args.worker == "after"):
                raise SystemExit(f"{args.worker}: imported structopt from {structopt.__file__}")
        print(MARK + json.dumps(worker(args.worker, args.task, args.data, args.states, args.iters)), flush=True)
        return
    sides = ("start", "before", "after", "ad3")
    me = sys.executable
    python = {"start": me, "before": me, "after": me, "ad3": args.peer_python}
    with tempfile.TemporaryDirectory() as tmp:
        roots = {}
        for side, rev in (("start", args.start_rev), ("before", args.before_rev)):
            roots[side] = Path(tmp) / side
            roots[side].mkdir()
            export_before(rev, roots[side])
        data = str(Path(tmp) / "graphs.npz")
        draw_graphs(Path(data), sorted(set(args.states) | set(args.default_states)), args.graphs, args.nodes, 0)
        periter: dict[str, dict[str, list]] = {s: {} for s in sides}
        for r in range(args.repeats):
            for side in sides:
                print(f"per iteration: round {r + 1}, {side}", file=sys.stderr, flush=True)
                res = run_side(side, python[side], "periter", data, args.states, args.iters, roots)
                for S, rows in res.items():
                    periter[side].setdefault(S, []).extend(rows)
        # the other sections: the start ("before" there) against this checkout and the C++
        defaults: dict[str, dict] = {}
        for side in ("start", "after", "ad3"):
            print(f"default stopping: {side}", file=sys.stderr, flush=True)
            defaults[side] = run_side(side, python[side], "defaults", data, args.default_states, args.iters, roots)
        defaults["before"] = defaults.pop("start")
        convert = {}
        for side in ("start", "after"):
            print(f"conversion: {side}", file=sys.stderr, flush=True)
            convert[side] = run_side(side, python[side], "convert", args.uai, args.states, args.iters, roots)
        convert["before"] = convert.pop("start")
    lines = ["# AD3 per iteration on multi-state factors, default stopping, MAP conversion", "",
             f"`python benchmarks/ad3_speed.py --start-rev {args.start_rev} --before-rev {args.before_rev} "
             f"--graphs {args.graphs} --iters "
             f"{args.iters} --repeats {args.repeats}` on {platform.machine()}, Python {platform.python_version()}, "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. CPU time (`time.process_time`), "
             "OPENBLAS_NUM_THREADS=1, a 2-core machine shared with other jobs: the sides alternate, each in a "
             f"fresh process. Graphs: {args.nodes}-node Delaunay graphs, Potts-like tables with noise. *start* is "
             f"structopt at `{args.start_rev}` (the issue's start; *before* in the sections after the first), "
             f"*before* at `{args.before_rev}`, *after* this checkout, *AD3* the C++ AD3 2.2.1 through its Python "
             "binding (`benchmarks/ad3_env.sh`).", "",
             "## Per iteration (µs, median over graphs and rounds)", "",
             f"Each run: exactly {args.iters} iterations, no stopping test can end it.", "",
             "| states | start | before | after | AD3 (C++) | start ÷ after | before ÷ after | AD3 ÷ after |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for S in map(str, args.states):
        med = {s: statistics.median(r["us"] for r in periter[s][S]) for s in sides}
        lines.append(f"| {S} | {med['start']:.1f} | {med['before']:.1f} | {med['after']:.1f} | {med['ad3']:.1f} | "
                     f"{med['start'] / med['after']:.2f}x | {med['before'] / med['after']:.2f}x | "
                     f"{med['ad3'] / med['after']:.2f}x |")
    lines += ["", "## Default stopping (each side's defaults; per graph)", "",
              "bound gap = (reported bound − LP*) / (1 + |LP*|), LP* by HiGHS on the local polytope (~1e-7); "
              "AD3 value gap: the same for AD3's `value` (its posteriors' objective, not a bound); labeling gap = "
              "(bound − labeling's score) / (1 + |bound|).", "",
              "| states | graph | before s (iters, status) | after s (iters, status) | AD3 s | before bound gap | "
              "after bound gap | AD3 value gap | after labeling gap |",
              "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for S in map(str, args.default_states):
        for g, (b, a, c) in enumerate(zip(defaults["before"][S], defaults["after"][S], defaults["ad3"][S])):
            lp = a["lp"]

            def rel(x: float, lp: float = lp) -> str:
                return f"{(x - lp) / (1 + abs(lp)):.1e}"

            lines.append(f"| {S} | {g} | {b['sec']:.3f} ({b['iterations']}, {b['status']}) | {a['sec']:.3f} "
                         f"({a['iterations']}, {a['status']}) | {c['sec']:.3f} | {rel(b['bound'])} | "
                         f"{rel(a['bound'])} | {rel(c['bound'])} | "
                         f"{(a['bound'] - a['score']) / (1 + abs(a['bound'])):.1e} |")
    lines += ["", "## map_inference(method=\"ad3\") on the UAI segmentations (ms, best of 7)", "",
              "| instance | before: convert + flat | before: AD3 | before: total | after: convert + flat | "
              "after: AD3 | after: total | after: conversion ÷ AD3 |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name in convert["after"]:
        b, a = convert["before"][name], convert["after"][name]
        lines.append(f"| {name} | {1e3 * (b['convert'] + b['flat']):.2f} | {1e3 * b['ad3']:.2f} | "
                     f"{1e3 * b['total']:.2f} | {1e3 * (a['convert'] + a['flat']):.2f} | {1e3 * a['ad3']:.2f} | "
                     f"{1e3 * a['total']:.2f} | {100 * (a['convert'] + a['flat']) / a['ad3']:.0f}% |")
    text = "\n".join(lines) + "\n"
    print(text)
    from _bench import write_keeping_findings

    write_keeping_findings(args.out, text)


if __name__ == "__main__":
    main()
