"""Hansards word alignment with fertility bounds (a factor graph with budget factors) vs the 1-to-1 matching.

Usage::

    python benchmarks/alignment_fertility.py [--passes 30] [--cv-passes 10]
        [--out benchmarks/alignment_fertility_results.md]
    python benchmarks/alignment_fertility.py --only oracles [--lam 0.001]

``--only oracles`` runs part 3 alone (at the given λ, the one part 2's CV chose) and rewrites only its
section of ``--out``.

On the matching task's split (284 training pairs, 200 held-out pairs, seed 0):

1. the max oracle of the fertility graph (every word linked to at most 2 words) two ways, on the
   loss-augmented potentials of every training pair: AD3 on the factor graph (budget factors on rows
   and columns) and the exact b-matching by successive shortest paths (numba), ms per call and how
   often their scores differ; and AD3 with Markov factors (diagonal continuation) on a few pairs;
2. λ chosen by 3-fold cross-validation on the training pairs (AER), then BCFW on all training pairs;
   held-out AER next to the matching model trained with the same λ and passes, the Dice baseline,
   and fertility (1, 1) (a b-matching with unit budgets is a matching: a cross-check) and the
   asymmetric bounds;
3. the three exact b-matching oracles side by side (the numba flow, OR-Tools' min-cost flow on
   integer-scaled costs with its float certificate, AD3): ms per loss-augmented call on every training
   pair at the trained weights and on random pairs from 20x20 to 100x100, how often their values
   differ and how often OR-Tools' answer is not certified (the numba flow then answers), and the wall
   time of the whole BCFW training of the "2/2, fertility costs" row with each oracle.

Writes the markdown tables to ``--out``.
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
    AUTO_ORTOOLS_LINKS,
    FertilityModel,
    _degree_problem,
    _ortools_links,
    bmatching,
    fertility_target,
    link_loss,
    load_fertility_alignment,
    select_lam,
)

ORACLES_HEADING = "## Exact b-matching oracles: numba flow vs OR-Tools min-cost flow vs AD3"


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


def _loss_augmented(model: FertilityModel, X: list, Y: list, w: np.ndarray) -> list:
    """The training loss's loss-augmented potentials of every pair at ``w`` (what BCFW's oracle sees)."""
    loss = link_loss()
    thetas = []
    for x, y in zip(X, Y):
        theta = model.potentials(x, w)
        c, _ = loss.linear_terms(model.structure, y, theta)
        thetas.append(type(theta)(theta.unary + c.unary, theta.factors))
    return thetas


def _random_thetas(rng: np.random.Generator, n: int, count: int) -> list:
    """Random n x n pairs, fertility 2/2 with costs 0.5 per extra link; about 7% of the links gain (the
    link scores are N(0, 3) minus a bias of 2.5), so a word has a few candidates as in Hansards."""
    model = FertilityModel(3, 2, 2, penalty=True)
    w = np.array([1.0, 1.0, 1.0, -2.5, 0.5, 0.5])  # link weights, bias, fertility costs (English, French)
    return [model.potentials(rng.normal(size=(n, n, 3)), w) for _ in range(count)]


def compare_oracles(thetas: list, rounds: int = 3, ad3: bool = True) -> dict:
    """CPU ms per call of the exact b-matching oracles on ``thetas`` (the fastest of ``rounds`` interleaved
    sweeps over all of them), and how their answers compare: values off the numba flow's by more than 1e-9
    (relative), OR-Tools calls whose answer was not certified (the numba flow answered), AD3 calls not
    certified optimal or whose bound is off the flow's value by more than 1e-6 (relative)."""
    calls = {"numba": lambda t: bmatching(t, "numba"), "ortools": lambda t: bmatching(t, "ortools")}
    if ad3:
        calls["ad3"] = lambda t: t.factor_graph.ad3(FactorGraphPotentials(t.unary, t.factors))[0]
    for call in calls.values():
        call(thetas[0])  # compile
    best = dict.fromkeys(calls, np.inf)
    for _ in range(rounds):
        for name, call in calls.items():
            t0 = time.process_time()
            for t in thetas:
                call(t)
            best[name] = min(best[name], time.process_time() - t0)
    ortools_differs = uncertified = ad3_differs = ad3_fractional = links = 0
    longest = 0.0
    for t in thetas:
        fg, flat = t.factor_graph, FactorGraphPotentials(t.unary, t.factors)
        labels = bmatching(t, "numba")
        links += int(labels[: t.key[0] * t.key[1]].sum())
        value = fg.score_labels(flat, labels)
        t0 = time.perf_counter()
        other = bmatching(t, "ortools")
        longest = max(longest, time.perf_counter() - t0)
        ortools_differs += abs(fg.score_labels(flat, other) - value) > 1e-9 * max(1.0, abs(value))
        gain, row_cost, col_cost, _ = _degree_problem(t)
        uncertified += _ortools_links(gain, row_cost, col_cost) is None
        if ad3:
            sol = calls["ad3"](t)
            ad3_fractional += not sol.optimal
            ad3_differs += abs(sol.upper_bound - value) > 1e-6 * max(1.0, abs(value))
    n = len(thetas)
    return {"calls": n, "ms": {k: 1e3 * v / n for k, v in best.items()}, "links": links / n,
            "ortools_longest_ms": 1e3 * longest,
            "ortools_differs": ortools_differs,
            "uncertified": uncertified, "ad3_differs": ad3_differs, "ad3_fractional": ad3_fractional}


def oracle_benchmark(task, lam: float, passes: float, seed: int) -> dict:
    """Part 3: BCFW on the "2/2, fertility costs" row with each exact oracle (wall and CPU seconds, final
    weights compared), then :func:`compare_oracles` on the Hansards training pairs at the trained weights
    and on random pairs from 20x20 to 100x100."""
    training = {}
    for oracle in ("flow", "ortools", "ad3"):
        model = FertilityModel(task.base.n_features, 2, 2, penalty=True, oracle=oracle)
        problem = SSVMProblem(model, task.X_train, task.Y_train, link_loss(), lam)
        bcfw(problem, max_passes=1, random_state=seed)  # compile
        wall, cpu = time.perf_counter(), time.process_time()
        res = bcfw(problem, max_passes=passes, random_state=seed)
        training[oracle] = {"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu, "w": res.w,
                            "gap": res.trace[-1]["gap"]}
        print(f"training with oracle={oracle!r}: {training[oracle]['wall']:.1f} s wall, "
              f"{training[oracle]['cpu']:.1f} s CPU, gap {res.trace[-1]['gap']:.4g}", flush=True)
    w = training["flow"]["w"]
    for r in training.values():
        r["w_diff"] = float(np.abs(r["w"] - w).max())
    model = FertilityModel(task.base.n_features, 2, 2, penalty=True)
    sizes = {"Hansards training pairs": compare_oracles(_loss_augmented(model, task.X_train, task.Y_train, w))}
    shapes = np.array([x.shape[:2] for x in task.X_train])
    sizes["Hansards training pairs"]["shape"] = (f"median {int(np.median(shapes[:, 0]))}x"
                                                 f"{int(np.median(shapes[:, 1]))}, largest "
                                                 f"{int(shapes[:, 0].max())}x{int(shapes[:, 1].max())}")
    rng = np.random.default_rng(seed)
    for n, count in ((20, 30), (35, 20), (50, 10), (70, 8), (100, 5)):
        sizes[f"random {n}x{n}"] = compare_oracles(_random_thetas(rng, n, count))
        sizes[f"random {n}x{n}"]["shape"] = ""
    for name, r in sizes.items():
        print(f"{name}: " + ", ".join(f"{k} {v:.3f} ms" for k, v in r["ms"].items()) +
              f"; OR-Tools not certified {r['uncertified']}, values differ {r['ortools_differs']}", flush=True)
    return {"training": training, "sizes": sizes, "lam": lam, "passes": passes}


def oracle_section(bench: dict) -> list[str]:
    """The markdown section of part 3."""
    t = bench["training"]
    lines = [
        ORACLES_HEADING,
        "",
        f"`python benchmarks/alignment_fertility.py --only oracles --lam {bench['lam']:g} --passes "
        f"{bench['passes']:g}` ({platform.machine()}, Python {platform.python_version()}, OR-Tools "
        f"{_ortools_version()}; a 2-core machine shared with other jobs). Fertility 2/2 with learned fertility "
        "costs, loss-augmented potentials (false negative 3). The three are exact on these graphs (budget factors "
        "only: AD3's LP-MAP is integral). CPU ms per call, the fastest of 3 interleaved sweeps over all instances.",
        "",
        "| instances | calls | links per optimum | numba flow | OR-Tools min-cost flow | AD3 | OR-Tools / numba | "
        "OR-Tools value off (> 1e-9) | OR-Tools not certified | AD3 off / not certified |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, r in bench["sizes"].items():
        ms = r["ms"]
        label = f"{name} ({r['shape']})" if r["shape"] else name
        lines.append(f"| {label} | {r['calls']} | {r['links']:.1f} | {ms['numba']:.3f} | "
                     f"{ms['ortools']:.3f} | "
                     f"{ms['ad3']:.2f} | {ms['ortools'] / ms['numba']:.2g}x | {r['ortools_differs']} | "
                     f"{r['uncertified']} | {r['ad3_differs']} / {r['ad3_fractional']} |")
    lines += [
        "",
        f"Whole training, BCFW {bench['passes']:g} passes on the 284 Hansards training pairs, λ = {bench['lam']:g} "
        "(the \"2/2, fertility costs\" row), each oracle in turn after a 1-pass warm-up:",
        "",
        "| oracle | wall s | CPU s | final duality gap | max abs weight difference to the numba flow's |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name, label in (("flow", "numba flow (`oracle=\"flow\"`, `\"auto\"` on Hansards)"),
                        ("ortools", "OR-Tools min-cost flow (`oracle=\"ortools\"`)"),
                        ("ad3", "AD3 (`oracle=\"ad3\"`)")):
        r = t[name]
        lines.append(f"| {label} | {r['wall']:.1f} | {r['cpu']:.1f} | {r['gap']:.4g} | {r['w_diff']:.2g} |")
    sizes = bench["sizes"]
    faster = [name.removeprefix("random ") for name, r in sizes.items() if name.startswith("random") and
              r["ms"]["ortools"] < r["ms"]["numba"]]
    longest = max(r["ortools_longest_ms"] for r in sizes.values())
    lines += [
        "",
        "Every call's value agrees (the oracles are exact; OR-Tools' integer optimum is kept only when its float "
        "value is certified within 1e-12 x (|value| + largest |score|) of the float optimum, and the \"not "
        "certified\" column counts the calls that fell back to the numba flow). The trained weights still differ: "
        "BCFW's path depends on which optimum "
        "an oracle returns at ties, and ties are everywhere at the start (at w = 0 every non-target link gains "
        "exactly the false-positive cost 1); the final gaps are close. OR-Tools is faster than the numba flow on "
        + (f"the random pairs from {faster[0]} on" if faster else "none of the random sizes")
        + f" in this run; `FertilityStructure(oracle=\"auto\")` takes OR-Tools from `AUTO_ORTOOLS_LINKS` = "
        f"{AUTO_ORTOOLS_LINKS} word pairs (50x50, about even in these runs) on and the numba flow below (every "
        "Hansards pair, largest 30x30). "
        f"The longest single OR-Tools call here took {longest:.1f} ms (wall): it holds the GIL and cannot be "
        "stopped, and Python raises a Ctrl-C's KeyboardInterrupt when it returns.",
    ]
    return lines


def _ortools_version() -> str:
    import ortools

    return ortools.__version__


def write_section(path: Path, lines: list[str]) -> None:
    """Replace the section that starts with ``lines[0]`` in ``path`` (up to the next ``## `` heading), or
    append it."""
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    block = "\n".join(lines) + "\n"
    start = text.find(lines[0])
    if start < 0:
        text = text.rstrip("\n") + ("\n\n" if text else "") + block
    else:
        end = text.find("\n## ", start + len(lines[0]))
        text = text[:start] + block + (text[end:] if end >= 0 else "")
    path.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=None)
    parser.add_argument("--passes", type=float, default=30)
    parser.add_argument("--cv-passes", type=float, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="benchmarks/alignment_fertility_results.md")
    parser.add_argument("--only", choices=["oracles"], default=None,
                        help="run part 3 alone and rewrite only its section of --out")
    parser.add_argument("--lam", type=float, default=1e-3, help="λ of --only oracles (part 2's CV choice)")
    args = parser.parse_args(argv)

    t0 = time.perf_counter()
    task = load_fertility_alignment(args.data, n_heldout=200, random_state=args.seed)
    print(f"data: {len(task.X_train)} train / {len(task.X_test)} held-out pairs ({time.perf_counter() - t0:.0f} s)",
          flush=True)
    if args.only == "oracles":
        bench = oracle_benchmark(task, args.lam, args.passes, args.seed)
        write_section(Path(args.out), oracle_section(bench))
        print(f"wrote {args.out}")
        return {"oracles": bench}
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
    bench = oracle_benchmark(task, lam, args.passes, args.seed)
    lines += ["", *oracle_section(bench)]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {out}")
    return {"runs": runs, "timing": timing, "cv": cv, "oracles": bench}


if __name__ == "__main__":
    main()
