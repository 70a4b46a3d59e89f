"""Time per call of every chain oracle at OCR-like and CoNLL-like sizes, and numba compile time.

Usage::

    python benchmarks/chain_oracles.py [--out benchmarks/results/chain_oracles.json] [--repeats 15]
                                       [--sizes ocr,conll,long] [--no-compile]

Each oracle is timed on random potentials (shared transition matrix): calls are grouped into
batches lasting at least ``--min-batch`` seconds and the median over ``--repeats`` batches of the
time per call is reported. Top-K and forward-backward are also reported relative to Viterbi in
the same run (Pillutla et al. expect top-K to cost about K times Viterbi; the target here is at
most 1.5 K at K = 5 and 20 on the ``long`` size, T = 40, S = 26). Compile time is measured in
fresh interpreters whose ``NUMBA_CACHE_DIR`` is an empty temporary directory (cold cache), then
again with that cache warm.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

SIZES = {"ocr": (8, 26), "conll": (25, 23), "long": (40, 26)}
TOPK = (1, 5, 20, 64)


def time_per_call(fn: Callable[[], object], repeats: int, min_batch: float, statistic: str = "median") -> float:
    """Median (or minimum) over ``repeats`` batches of the wall time per call (after a warm-up call).

    The minimum is the steadier estimate on a machine shared with other jobs.
    """
    fn()
    start = time.perf_counter()
    fn()
    once = time.perf_counter() - start
    number = max(1, int(min_batch / max(once, 1e-9)))
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - start) / number)
    return float(np.min(samples) if statistic == "min" else np.median(samples))


def bench_size(T: int, S: int, repeats: int, min_batch: float, project_repeats: int, seed: int,
               statistic: str = "median") -> dict:
    """Seconds per call of each oracle on one random chain of length T over S states."""
    from structopt.structures import Chain, ChainPotentials

    rng = np.random.default_rng(seed)
    chain = Chain(S)
    theta = ChainPotentials(rng.normal(size=(T, S)), rng.normal(size=(S, S)))
    _, mu = chain.marginals(ChainPotentials(rng.normal(size=(T, S)), rng.normal(size=(S, S))))
    step = ChainPotentials(rng.normal(size=(T, S)), rng.normal(size=(S, S)))
    v = chain.expand(ChainPotentials(rng.normal(size=(T, S)), rng.normal(size=(S, S))))
    calls: dict[str, Callable[[], object]] = {"argmax": lambda: chain.argmax(theta)}
    for k in TOPK:
        calls[f"topk_{k}"] = lambda k=k: chain.topk(theta, k)
    calls["marginals"] = lambda: chain.marginals(theta)
    calls["max_marginals"] = lambda: chain.max_marginals(theta)
    calls["prox_entropy"] = lambda: chain.prox_entropy(mu, step, 0.5)
    times = {name: time_per_call(fn, repeats, min_batch, statistic) for name, fn in calls.items()}
    times["project"] = time_per_call(lambda: chain.project(v), project_repeats, 0.0, statistic)
    return {
        "T": T, "S": S,
        "seconds_per_call": times,
        "topk_over_viterbi": {str(k): times[f"topk_{k}"] / times["argmax"] for k in TOPK},
        "topk_over_k_viterbi": {str(k): times[f"topk_{k}"] / (k * times["argmax"]) for k in TOPK},
        "marginals_over_viterbi": times["marginals"] / times["argmax"],
    }


COMPILE_SCRIPT = r"""
import json, time
import numpy as np
t0 = time.perf_counter()
from structopt.structures import Chain, ChainPotentials
t_import = time.perf_counter() - t0
rng = np.random.default_rng(0)
chain = Chain(4)
theta = ChainPotentials(rng.normal(size=(5, 4)), rng.normal(size=(4, 4)))
out = {"import": t_import}
calls = {"viterbi": lambda: chain.argmax(theta), "topk_viterbi": lambda: chain.topk(theta, 3),
         "forward_backward": lambda: chain.marginals(theta), "max_marginals": lambda: chain.max_marginals(theta)}
for name, fn in calls.items():
    t0 = time.perf_counter(); fn(); first = time.perf_counter() - t0
    t0 = time.perf_counter(); fn(); second = time.perf_counter() - t0
    out[name] = first - second
print(json.dumps(out))
"""


def compile_times() -> dict:
    """First-call minus second-call time of each kernel, with a cold and then a warm numba cache."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        result = {}
        for label in ("cold_cache", "warm_cache"):
            proc = subprocess.run([sys.executable, "-c", COMPILE_SCRIPT], env=env, capture_output=True, text=True,
                                  check=True)
            result[label] = json.loads(proc.stdout.strip().splitlines()[-1])
        return result


def format_table(results: dict) -> str:
    sizes = results["sizes"]
    names = list(next(iter(sizes.values()))["seconds_per_call"])
    titles = [f"{k} (T={v['T']},S={v['S']})" for k, v in sizes.items()]
    header = f"{'oracle':<15}" + "".join(f"{t:>24}" for t in titles)
    lines = [f"seconds per call ({results['meta']['statistic']})", header]
    for name in names:
        row = f"{name:<15}"
        for v in sizes.values():
            sec = v["seconds_per_call"][name]
            relative = name.startswith("topk") or name in ("marginals", "max_marginals")
            ratio = f" ({sec / v['seconds_per_call']['argmax']:.1f}x)" if relative else ""
            row += f"{f'{sec:.2e}{ratio}':>24}"
        lines.append(row)
    lines.append("(topk, marginals, max_marginals: time relative to Viterbi (argmax) in parentheses)")
    comp = results["numba_compile"]
    if comp:
        lines.append("")
        lines.append(f"{'numba compile, s':<18}{'cold cache':>12}{'warm cache':>12}")
        for name in comp["cold_cache"]:
            lines.append(f"{name:<18}{comp['cold_cache'][name]:>12.3f}{comp['warm_cache'][name]:>12.3f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "chain_oracles.json"))
    parser.add_argument("--repeats", type=int, default=15, help="timed batches per oracle")
    parser.add_argument("--min-batch", type=float, default=0.01, help="seconds per timed batch")
    parser.add_argument("--project-repeats", type=int, default=3, help="timed calls of the (slow) projection")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sizes", default=",".join(SIZES), help=f"comma-separated subset of {', '.join(SIZES)}")
    parser.add_argument("--no-compile", action="store_true", help="skip the compile-time measurement")
    parser.add_argument("--statistic", choices=("median", "min"), default="median",
                        help="summary of the timed batches (min is steadier on a busy machine)")
    args = parser.parse_args(argv)
    sizes = args.sizes.split(",")
    unknown = sorted(set(sizes) - set(SIZES))
    if unknown:
        parser.error(f"unknown sizes {unknown}; choose from {', '.join(SIZES)}")

    import numba

    results = {
        "meta": {"python": platform.python_version(), "numpy": np.__version__, "numba": numba.__version__,
                 "machine": platform.platform(), "cpus": os.cpu_count(), "load_average": os.getloadavg(),
                 "date": time.strftime("%Y-%m-%d %H:%M:%S"), "repeats": args.repeats,
                 "min_batch": args.min_batch, "statistic": args.statistic,
                 "note": "project is the cvxpy (Clarabel) QP reference"},
        "numba_compile": {} if args.no_compile else compile_times(),
        "sizes": {name: bench_size(*SIZES[name], args.repeats, args.min_batch, args.project_repeats, args.seed,
                                   args.statistic) for name in sizes},
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(format_table(results))
    print(f"\nwrote {out}")
    return results


if __name__ == "__main__":
    main()
