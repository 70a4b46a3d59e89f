"""Hansards word alignment with fertility bounds (a factor graph with budget factors) vs the 1-to-1 matching.

Usage::

    python benchmarks/alignment_fertility.py [--passes 30] [--cv-passes 10]
        [--out benchmarks/alignment_fertility_results.md]

On the matching task's split (284 training pairs, 200 held-out pairs, seed 0):

1. the max oracle of the fertility graph (every word linked to at most 2 words) two ways, on the
   loss-augmented potentials of every training pair: AD3 on the factor graph (budget factors on rows
   and columns) and the exact b-matching by successive shortest paths (numba), ms per call and how
   often their scores differ; and AD3 with Markov factors (diagonal continuation) on a few pairs;
2. λ chosen by 3-fold cross-validation on the training pairs (AER), then BCFW on all training pairs;
   held-out AER next to the matching model trained with the same λ and passes, the Dice baseline,
   and fertility (1, 1) (a b-matching with unit budgets is a matching: a cross-check) and the
   asymmetric bounds.

Writes the markdown table to ``--out``.
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import numpy as np

from structopt.losses import MatchingHamming
from structopt.models.matching import MatchingModel
from structopt.problem import SSVMProblem
from structopt.solvers.bcfw import bcfw
from structopt.structures.factor_graph import FactorGraphPotentials
from structopt.tasks.alignment import dice_baseline
from structopt.tasks.alignment_fertility import (
    FertilityModel,
    bmatching,
    fertility_target,
    link_loss,
    load_fertility_alignment,
    select_lam,
)


def oracle_timing(task, w: np.ndarray, markov_pairs: int = 5) -> dict:
    """ms per loss-augmented oracle call: flow vs AD3 on the budget-only graph, AD3 with Markov factors."""
    model = FertilityModel(task.base.n_features)
    loss = link_loss()
    thetas = []
    for x, y in zip(task.X_train, task.Y_train):
        theta = model.potentials(x, w)
        c, _ = loss.linear_terms(model.structure, y, theta)
        thetas.append(type(theta)(theta.unary + c.unary, theta.factors))
    bmatching(thetas[0])  # compile
    t0 = time.process_time()
    flows = [bmatching(t) for t in thetas]
    t_flow = time.process_time() - t0
    t0 = time.process_time()
    sols = [t.factor_graph.ad3(FactorGraphPotentials(t.unary, t.factors))[0] for t in thetas]
    t_ad3 = time.process_time() - t0
    differ = 0
    fractional = 0
    for t, y, sol in zip(thetas, flows, sols):
        fg, flat = t.factor_graph, FactorGraphPotentials(t.unary, t.factors)
        fractional += not sol.optimal
        if abs(fg.score_labels(flat, y) - sol.upper_bound) > 1e-6 * max(1.0, abs(sol.upper_bound)):
            differ += 1
    markov = FertilityModel(task.base.n_features, markov=("diag",), oracle="ad3")
    wm = np.concatenate([w, [0.5]])
    sizes = np.array([x.shape[0] * x.shape[1] for x in task.X_train])
    small = np.argsort(sizes)[len(sizes) // 2: len(sizes) // 2 + markov_pairs]  # median-size pairs
    t0 = time.process_time()
    certified = 0
    for i in small:
        theta = markov.potentials(task.X_train[i], wm)
        sol, _ = theta.factor_graph.ad3(FactorGraphPotentials(theta.unary, theta.factors), time_limit=60)
        certified += bool(sol.optimal)
    t_markov = time.process_time() - t0
    n = len(thetas)
    return {"calls": n, "flow_ms": 1e3 * t_flow / n, "ad3_ms": 1e3 * t_ad3 / n, "ad3_over_flow": t_ad3 / t_flow,
            "value_differs": differ, "ad3_not_certified": fractional, "markov_calls": len(small),
            "markov_ad3_ms": 1e3 * t_markov / len(small), "markov_certified": certified,
            "markov_median_vars": int(np.median(sizes[small]))}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=None)
    parser.add_argument("--passes", type=float, default=30)
    parser.add_argument("--cv-passes", type=float, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="benchmarks/alignment_fertility_results.md")
    args = parser.parse_args(argv)

    t0 = time.perf_counter()
    task = load_fertility_alignment(args.data, n_heldout=200, random_state=args.seed)
    print(f"data: {len(task.X_train)} train / {len(task.X_test)} held-out pairs ({time.perf_counter() - t0:.0f} s)",
          flush=True)
    baseline = dice_baseline(task.base)
    model = FertilityModel(task.base.n_features, penalty=True)
    t0 = time.perf_counter()
    cv = select_lam(task, model, passes=args.cv_passes, seed=args.seed)
    lam = cv["lam"]
    print(f"cv (2/2 with fertility costs): {cv['scores']} -> λ={lam:g} ({time.perf_counter() - t0:.0f} s)",
          flush=True)

    runs = {}
    configs = [("2/2, fertility costs", 2, 2, True, 3.0, ()), ("2/2, fertility costs, fn cost 1", 2, 2, True, 1.0, ()),
               ("2/2, bounds only", 2, 2, False, 3.0, ()), ("1/1 (a matching)", 1, 1, False, 3.0, ()),
               ("2/1, fertility costs", 2, 1, True, 3.0, ()), ("1/2, fertility costs", 1, 2, True, 3.0, ()),
               ("3/3, fertility costs", 3, 3, True, 3.0, ()),
               ("2/2, fertility costs, Markov diag (AD3, relaxed)", 2, 2, True, 3.0, ("diag",)),
               ("2/2, fertility costs, Markov diag+row+col (AD3, relaxed)", 2, 2, True, 3.0, ("diag", "row", "col"))]
    for name, fe, ff, penalty, fn, markov in configs:
        m = FertilityModel(task.base.n_features, fe, ff, markov, penalty=penalty)
        targets = [fertility_target(p.sure, task.base.featurizer.dice(p), fe, ff) for p in task.base.train_pairs]
        problem = SSVMProblem(m, task.X_train, targets, link_loss(1.0, fn), lam)
        t0 = time.process_time()
        res = bcfw(problem, max_passes=args.passes, random_state=args.seed)
        seconds = time.process_time() - t0
        pred = [m.predict(x, res.w) for x in task.X_test]
        n_links = sum(int(y.sum()) for y in pred)
        costs = m.unpack(res.w).get("fertility")
        if markov:
            print(f"  Markov weights {m.unpack(res.w)['markov']}", flush=True)
        runs[name] = {"aer": task.evaluate(pred), "seconds": seconds, "gap": res.trace[-1]["gap"], "links": n_links,
                      "w": res.w, "costs": None if costs is None else [float(v) for v in costs]}
        print(f"{name}: AER {runs[name]['aer']:.4f}, {seconds:.1f} s CPU, gap {res.trace[-1]['gap']:.3g}, "
              f"{n_links} links, fertility costs {runs[name]['costs']}", flush=True)
    matching = MatchingModel(task.base.n_features, allow_unmatched=True)
    problem = SSVMProblem(matching, task.base.X_train, task.base.Y_train, MatchingHamming(1.0, 3.0), lam)
    t0 = time.process_time()
    res = bcfw(problem, max_passes=args.passes, random_state=args.seed)
    seconds = time.process_time() - t0
    pred = problem.predict(task.base.X_test, res.w)
    runs["matching (1-to-1, structopt.tasks.alignment)"] = {
        "aer": task.base.evaluate(pred), "seconds": seconds, "gap": res.trace[-1]["gap"],
        "links": int(sum(int((y >= 0).sum()) for y in pred))}
    print(f"matching: AER {runs['matching (1-to-1, structopt.tasks.alignment)']['aer']:.4f}", flush=True)
    timing = oracle_timing(task, runs["2/2, bounds only"]["w"])
    print(f"oracle: flow {timing['flow_ms']:.3f} ms, AD3 {timing['ad3_ms']:.2f} ms per call; Markov AD3 "
          f"{timing['markov_ad3_ms']:.0f} ms", flush=True)
    gold_links = sum(len(p.sure) for p in task.base.test_pairs)

    lines = [
        "# Hansards alignment with fertility bounds (factor graph) — results",
        "",
        f"`python benchmarks/alignment_fertility.py --passes {args.passes:g} --cv-passes {args.cv_passes:g}` "
        f"({platform.machine()}, Python {platform.python_version()}; a 2-core machine shared with other jobs, "
        "CPU seconds). Split: the matching task's (284 training pairs: 37 trial + 247 test; 200 held-out test "
        f"pairs, seed {args.seed}); {gold_links} sure links in the held-out gold.",
        "",
        f"λ by 3-fold CV on the training pairs ({args.cv_passes:g} BCFW passes each, AER of the held-out fold): "
        + ", ".join(f"{k:g} → {v:.4f}" for k, v in cv["scores"].items()) + f"; chosen **λ = {lam:g}**.",
        "",
        f"## Held-out AER ({args.passes:g} BCFW passes, same λ; target 0.20)",
        "",
        "| model | held-out AER | predicted links | training CPU s | final duality gap | learned fertility costs |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for name, r in runs.items():
        costs = "" if r.get("costs") is None else f"{r['costs'][0]:.3g} (English), {r['costs'][1]:.3g} (French)"
        lines.append(f"| {name} | {r['aer']:.4f} | {r['links']} | {r['seconds']:.1f} | {r['gap']:.3g} | {costs} |")
    lines.append(f"| Dice + competitive linking (threshold {baseline['threshold']:.2f}) | {baseline['test_aer']:.4f} "
                 "| | | | |")
    lines += [
        "",
        "Fertility e/f: at most e French words per English word and f English words per French word (budget",
        "factors on rows and columns). *Fertility costs*: every link beyond a word's first pays a learned,",
        "non-negative weight per side (slack variables inside the budgets). fn cost: the loss's price of a missed",
        "target link (a wrong link costs 1; the matching task uses 3). 1/1 is a matching, so it should land near",
        "the matching model (the targets differ only in how ties among sure links are broken). λ is the one",
        "cross-validated for the first row, used for every row.",
        "",
        "## Max oracle (loss-augmented, every training pair, at the trained 2/2 weights)",
        "",
        "| oracle | ms per call | notes |",
        "| --- | ---: | --- |",
        f"| b-matching, successive shortest paths (numba) | {timing['flow_ms']:.3f} | exact |",
        f"| AD3 on the factor graph (budget factors) | {timing['ad3_ms']:.2f} | "
        f"{timing['ad3_over_flow']:.0f}x the flow; flow value off the AD3 bound by > 1e-6 (relative) on "
        f"{timing['value_differs']} of "
        f"{timing['calls']} calls; not certified on {timing['ad3_not_certified']} |",
        f"| AD3 with diagonal Markov factors ({timing['markov_calls']} median-size pairs, "
        f"~{timing['markov_median_vars']} variables) | {timing['markov_ad3_ms']:.0f} | certified optimal on "
        f"{timing['markov_certified']} of {timing['markov_calls']} (60 s limit per call) |",
        "",
        "The budget-only graph's local polytope is integral (bipartite degree bounds are totally unimodular), so",
        "AD3 and the flow solve the same problem; `FertilityStructure` declares the flow capability (budget",
        "factors only, finite scores) and uses it by default. With Markov factors only AD3 (training, relaxed",
        "oracle) and branch-and-bound (prediction) apply: the rows with Markov factors above trained that way,",
        "at 10-60 times the CPU time of the flow-trained rows. Duality gaps after 30 passes at this small λ are",
        "still large (the objective is a sum over 284 pairs, unnormalised); AER had levelled off in the CV runs.",
    ]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {out}")
    return {"runs": runs, "timing": timing, "cv": cv}


if __name__ == "__main__":
    main()
