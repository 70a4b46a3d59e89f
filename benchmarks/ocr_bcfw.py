"""The BCFW paper's Figure 1(a-c) on OCR, plus per-pass wall time and the solver overhead ratio.

For each lambda in {0.01, 0.001, 1/n}: BCFW, BCFW-wavg, batch FW, SSG and SSG-wavg on the BCFW
paper's split (train on folds 1-9, 6,251 words; test on fold 0) and setup (its released demo:
pixels plus bias, start/end and transition weights, 4,082 in all; Hamming loss normalised by
length): primal suboptimality (primal minus the best dual seen for that lambda by any run,
including a long reference BCFW run; batch FW as the lower envelope of its primal values, as in the paper)
against effective passes, several seeds for the stochastic methods (min-max band), and the test
letter error along the way.

The overhead ratio is measured in one run: for a few passes, the time of a BCFW pass divided by the
time of the same oracle calls alone (the same examples, in the same order, at the pass's starting
weights), both compiled. Two baselines are reported: the full oracle (scoring ``A_i w``, loss
augmentation, Viterbi) and Viterbi alone on precomputed loss-augmented potentials.

Measured on 2026-11-25 (``--lams --overhead-passes 10``, other work paused): a BCFW pass 62 ms
against 43 ms for its oracle calls, 1.45x (1.32-1.54x over the 10 passes; 1.94x before the
transition blocks were kept sparse). Per pass: loop and prefetches 3.0 ms, direction and block gap
2.3 ms, line-search norm 2.8 ms, adjoint update 6.7 ms, state update 4.3 ms (averaging 2.8 ms of
it). The generic Python path takes 0.95 s per pass.

Usage: python benchmarks/ocr_bcfw.py [--passes 50] [--seeds 3] [--out benchmarks/results/ocr_bcfw]
       python benchmarks/ocr_bcfw.py --lams --overhead-passes 10    # the overhead ratio only
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from pathlib import Path

import numpy as np
from numba import njit

import structopt as so
from structopt.solvers._blocks import BlockState, FusedBlockUpdater
from structopt.solvers.bcfw import bcfw, frank_wolfe, ssg
from structopt.structures._chain_kernels import viterbi
from structopt.tasks.ocr import letter_error, load_ocr, paper_model_and_loss, split

METHODS = {
    "BCFW": lambda p, passes, seed, cb: bcfw(p, max_passes=passes, averaging="none", random_state=seed, callback=cb),
    "BCFW-wavg": lambda p, passes, seed, cb: bcfw(p, max_passes=passes, averaging="weighted", random_state=seed,
                                                   callback=cb),
    "FW": lambda p, passes, seed, cb: frank_wolfe(p, max_passes=passes, callback=cb),
    "SSG": lambda p, passes, seed, cb: ssg(p, max_passes=passes, averaging="none", random_state=seed, callback=cb),
    "SSG-wavg": lambda p, passes, seed, cb: ssg(p, max_passes=passes, averaging="weighted", random_state=seed,
                                                 callback=cb),
}
STOCHASTIC = {"BCFW", "BCFW-wavg", "SSG", "SSG-wavg"}


@njit
def _viterbi_only(order, unary, tok, pairwise):
    total = 0.0
    for i in order:
        _, value = viterbi(unary[tok[i]:tok[i + 1]], pairwise)
        total += value
    return total


def _timed_pass(problem: so.SSVMProblem, state: BlockState, order: np.ndarray, averaging: bool = True,
                stages: int = 5) -> float:
    updater = FusedBlockUpdater(problem, state, problem.fused())
    t0 = time.process_time()
    updater.run(order, True, averaging, stages)
    return time.process_time() - t0


STAGES = {1: "loop_and_prefetch", 2: "direction_and_block_gap", 3: "line_search_norm", 4: "adjoint_update",
          5: "state_update"}


def overhead(problem: so.SSVMProblem, n_passes: int, seed: int) -> dict:
    """Per-pass CPU times of BCFW and of its parts, all measured in this process on the same orders.

    CPU time of this (single-threaded) process, not wall time, so that other work on the machine
    does not skew the ratios.

    ``bcfw_pass``: the solver's fused pass (line search, weighted averaging); ``oracle_calls``: the
    same oracle calls at the pass's starting weights and nothing else; ``viterbi_calls``: Viterbi
    alone on precomputed loss-augmented potentials. The breakdown runs the same pass cut after
    each stage of a step (``bcfw_steps(stages=k)``, from the same starting state): the loop with
    its prefetches, the direction and block gap, the line-search norm, the adjoint update of ``w``,
    then the update of ``m`` and of the averaging accumulator (``averaging`` is the part of the
    last that a pass without averaging saves; it follows the same iterates).
    """
    fast = problem.fused()
    if fast is None:
        raise RuntimeError("the OCR problem has no fused kernels")
    fast.warm_up("oracle_steps", "adjoint_sum")
    rng = np.random.default_rng(seed)
    state = BlockState.initial(problem)
    state.fused_index = fast.block_index(state.m)  # kept up to date by the passes
    warm = rng.integers(0, problem.n, size=10)
    for stages in STAGES:
        for avg in (True, False):
            scratch = copy.deepcopy(state)
            FusedBlockUpdater(problem, scratch, fast).run(warm, True, avg, stages)  # load kernels
    rows = []
    for _ in range(n_passes):
        order = rng.permutation(problem.n)
        w_start = state.w.copy()
        unary, tok = [], [0]
        for i in range(problem.n):
            theta = problem.theta(i, w_start)
            c, _ = problem.loss_terms(i)
            unary.append(theta.unary + c.unary)
            tok.append(tok[-1] + theta.unary.shape[0])
        unary = np.concatenate(unary)
        pairwise = np.ascontiguousarray(theta.pairwise).reshape(1, 26, 26)
        tok = np.array(tok)
        _viterbi_only(order[:5], unary, tok, pairwise)
        row = {}
        for stages in list(STAGES)[:-1]:
            scratch = copy.deepcopy(state)
            scratch.fused_index = copy.deepcopy(state.fused_index)  # checkpoints drop it; the pass keeps it
            row[f"stages_{stages}"] = _timed_pass(problem, scratch, order, True, stages)
        scratch = copy.deepcopy(state)
        scratch.fused_index = copy.deepcopy(state.fused_index)
        row["no_averaging"] = _timed_pass(problem, scratch, order, False)
        row["bcfw_pass"] = _timed_pass(problem, state, order)  # advances the state
        t1 = time.process_time()
        fast.oracle_only(order, w_start)
        row["oracle_calls"] = time.process_time() - t1
        t2 = time.process_time()
        _viterbi_only(order, unary, tok, pairwise)
        row["viterbi_calls"] = time.process_time() - t2
        rows.append(row)
    total = {key: sum(r[key] for r in rows) / n_passes for key in rows[0]}
    cumulative = [total["oracle_calls"]] + [total[f"stages_{k}"] for k in list(STAGES)[:-1]] + [total["bcfw_pass"]]
    breakdown = {name: cumulative[k] - cumulative[k - 1] for k, name in STAGES.items()}
    breakdown["of_which_averaging"] = total["bcfw_pass"] - total["no_averaging"]
    return {"passes": rows, "seconds_per_pass": total["bcfw_pass"], "oracle_seconds_per_pass": total["oracle_calls"],
            "breakdown_seconds_per_pass": breakdown, "ratio_vs_oracle": total["bcfw_pass"] / total["oracle_calls"],
            "ratio_vs_oracle_per_pass": [r["bcfw_pass"] / r["oracle_calls"] for r in rows],
            "ratio_vs_viterbi": total["bcfw_pass"] / total["viterbi_calls"]}


def python_path_pass(problem: so.SSVMProblem) -> float:
    """Seconds for one BCFW pass through the generic Python interfaces (for comparison)."""
    start = time.perf_counter()
    bcfw(problem, max_passes=1, fused=False, random_state=0, eval_every=2)
    return time.perf_counter() - start


def run(passes: int, seeds: int, lams: list[str], out: Path, overhead_passes: int, reference_passes: int) -> dict:
    train, test = split(load_ocr(), "bcfw")
    model, loss = paper_model_and_loss()
    results: dict = {"n_train": len(train["X"]), "n_test": len(test["X"]), "passes": passes, "lambdas": {}}
    base = so.SSVMProblem(model, train["X"], train["y"], loss, 0.01)
    results["overhead"] = overhead(base, overhead_passes, seed=0)
    results["python_path_seconds_per_pass"] = python_path_pass(base)
    ratios = results["overhead"]
    parts = ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in ratios["breakdown_seconds_per_pass"].items())
    print(f"BCFW pass {ratios['seconds_per_pass']:.3f}s (oracle calls {ratios['oracle_seconds_per_pass']:.3f}s; "
          f"{parts})"
          f" | overhead vs oracle calls {ratios['ratio_vs_oracle']:.2f}x (per pass "
          f"{min(ratios['ratio_vs_oracle_per_pass']):.2f}-{max(ratios['ratio_vs_oracle_per_pass']):.2f})"
          f" | vs Viterbi alone {ratios['ratio_vs_viterbi']:.2f}x"
          f" | generic Python path {results['python_path_seconds_per_pass']:.2f}s/pass")

    def test_error(w: np.ndarray) -> dict:
        return {"test_error": letter_error(test["y"], base.predict(test["X"], w))}

    for lam_name in lams:
        lam = 1.0 / len(train["X"]) if lam_name == "1/n" else float(lam_name)
        problem = so.SSVMProblem(model, train["X"], train["y"], loss, lam)
        runs: dict = {}
        for method, solve in METHODS.items():
            runs[method] = []
            for seed in range(seeds if method in STOCHASTIC else 1):
                started = time.perf_counter()
                result = solve(problem, passes, seed, test_error)
                runs[method].append({"seed": seed, "seconds": time.perf_counter() - started, "trace": result.trace})
        # the optimum's lower bound: the best dual of every run and of a long reference BCFW run
        reference = bcfw(problem, max_passes=reference_passes, random_state=0,
                         eval_every=max(1, reference_passes // 10))
        duals = [r["dual"] for method_runs in runs.values() for run_ in method_runs
                 for r in run_["trace"] if "dual" in r]
        best_dual = max([reference.trace[-1]["dual"], *duals])
        summary = {}
        for method, method_runs in runs.items():
            at = {}
            for p_mark in (10, 50):
                errors = [next((r["test_error"] for r in run_["trace"] if r["passes"] >= p_mark), None)
                          for run_ in method_runs]
                at[p_mark] = float(np.mean(errors)) if None not in errors else None
            final = [run_["trace"][-1]["primal"] - best_dual for run_ in method_runs]
            summary[method] = {"final_suboptimality_mean": float(np.mean(final)),
                               "test_error_at_10": at[10], "test_error_at_50": at[50],
                               "seconds_per_run_mean": float(np.mean([r["seconds"] for r in method_runs]))}
            print(f"lam={lam_name:>6} {method:>9}: primal-best dual {np.mean(final):.3e} | test error @10 "
                  f"{at[10]} @50 {at[50]} | {summary[method]['seconds_per_run_mean']:.1f}s/run")
        results["lambdas"][lam_name] = {"lam": lam, "best_dual": best_dual, "reference_passes": reference_passes,
                                        "reference_gap": reference.trace[-1]["gap"], "summary": summary, "runs": runs}
    out.mkdir(parents=True, exist_ok=True)
    (out / "ocr_bcfw.json").write_text(json.dumps(results, indent=1))
    if lams:
        plot(results, out / "ocr_bcfw.png")
    return results


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lams = list(results["lambdas"])
    fig, axes = plt.subplots(1, len(lams), figsize=(5 * len(lams), 4), squeeze=False)
    for ax, lam_name in zip(axes[0], lams, strict=True):
        entry = results["lambdas"][lam_name]
        for method, method_runs in entry["runs"].items():
            passes = np.array([r["passes"] for r in method_runs[0]["trace"]])
            curves = np.array([[max(r["primal"] - entry["best_dual"], 1e-10) for r in run_["trace"]]
                               for run_ in method_runs])
            if method not in STOCHASTIC:  # batch methods: lower envelope of the primal, as in the paper
                curves = np.minimum.accumulate(curves, axis=1)
            line, = ax.loglog(passes, np.median(curves, axis=0), label=method)
            if len(method_runs) > 1:
                ax.fill_between(passes, curves.min(axis=0), curves.max(axis=0), color=line.get_color(), alpha=0.2)
        ax.set_title(f"OCR, λ = {lam_name}")
        ax.set_xlabel("effective passes")
        ax.set_ylabel("primal suboptimality")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passes", type=int, default=50)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--lams", nargs="*", default=["0.01", "0.001", "1/n"],
                        help="none (--lams with no value): the overhead measurement only")
    parser.add_argument("--overhead-passes", type=int, default=5)
    parser.add_argument("--reference-passes", type=int, default=300,
                        help="passes of the BCFW run whose dual bounds the optimum")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/ocr_bcfw"))
    args = parser.parse_args()
    run(args.passes, args.seeds, args.lams, args.out, args.overhead_passes, args.reference_passes)


if __name__ == "__main__":
    main()
