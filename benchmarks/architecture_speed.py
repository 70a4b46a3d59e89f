"""The OCR BCFW pass and the CoNLL-2000 pass of one checkout, in one run: speed and results, to compare two
checkouts (before and after an architecture change) back to back.

- OCR (the BCFW paper's split and model, lambda = 0.01): ``bcfw(problem, max_passes=P, random_state=0)`` after a
  one-pass warm-up (kernels loaded), CPU seconds per pass, the same passes' oracle calls alone (the fused
  ``oracle_only`` on the same orders), and the final primal and gap (they must agree to the last digit).
- CoNLL-2000 (``structopt train conll --passes 3`` in a child process): its CPU and wall seconds and the lines it
  prints (train primal, gap, test F1).

Run it with the checkout to measure first on ``sys.path`` (``PYTHONPATH=/path/to/checkout``; the numba cache of
another source tree is its own, so give it its own ``NUMBA_CACHE_DIR`` and run once to compile):

    PYTHONPATH=/tmp/before NUMBA_CACHE_DIR=/tmp/numba_before python benchmarks/architecture_speed.py --label before
    python benchmarks/architecture_speed.py --label after

Each run writes ``benchmarks/results/architecture_speed_<label>.json``; ``--compare before after`` prints the
table of ``benchmarks/architecture_speed_results.md``.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"


def ocr(passes: int) -> dict:
    """Seconds per BCFW pass on OCR (CPU), the oracle calls' share, and the final primal and gap."""
    import structopt as so
    from structopt.solvers import bcfw
    from structopt.tasks.ocr import load_ocr, paper_model_and_loss, split

    train, _ = split(load_ocr(), "bcfw")
    model, loss = paper_model_and_loss()
    problem = so.SSVMProblem(model, train["X"], train["y"], loss, 0.01)
    bcfw(problem, max_passes=1, random_state=1)  # loads the kernels
    start = time.process_time()
    result = bcfw(problem, max_passes=passes, random_state=0, eval_every=passes)
    seconds = (time.process_time() - start) / passes
    fast = problem.fused()
    rng = np.random.default_rng(0)
    fast.oracle_only(rng.permutation(problem.n)[:10], result.w)  # loaded
    start = time.process_time()
    for _ in range(passes):
        fast.oracle_only(rng.permutation(problem.n), result.w)
    oracle = (time.process_time() - start) / passes
    last = result.trace[-1]
    return {"seconds_per_pass": seconds, "oracle_seconds_per_pass": oracle, "ratio": seconds / oracle,
            "primal": float(last["primal"]), "gap": float(last["gap"]), "passes": passes}


def conll(passes: int) -> dict:
    """``structopt train conll --passes P`` in a child process: CPU and wall seconds and its printed lines."""
    with tempfile.TemporaryDirectory() as scratch:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "structopt", "train", "conll", "--passes", str(passes),
                               "--out", str(Path(scratch) / "conll.npz"), "--no-progress"],
                              capture_output=True, text=True, check=True)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"cpu_seconds": cpu, "wall_seconds": wall, "passes": passes, "stdout": done.stdout.strip().splitlines()}


def _results(run: dict) -> list[str]:
    """The CoNLL run's printed results (train primal, gap, test scores), without its timings and scratch paths."""
    return [part for line in run["conll"]["stdout"] for part in line.split(" | ")
            if part.startswith(("train primal", "gap", "test"))]


def compare(before: dict, after: dict) -> str:
    rows = ["| measurement | before | after |", "| --- | --- | --- |"]
    for label, key, scale, unit in (("OCR BCFW pass (CPU)", "seconds_per_pass", 1e3, "ms"),
                                    ("its oracle calls alone", "oracle_seconds_per_pass", 1e3, "ms")):
        rows.append(f"| {label} | {before['ocr'][key] * scale:.1f} {unit} | {after['ocr'][key] * scale:.1f} {unit} |")
    rows.append(f"| pass ÷ oracle calls | {before['ocr']['ratio']:.2f}× | {after['ocr']['ratio']:.2f}× |")
    rows.append(f"| OCR primal / gap after {after['ocr']['passes']} passes | {before['ocr']['primal']:.10g} / "
                f"{before['ocr']['gap']:.6g} | {after['ocr']['primal']:.10g} / {after['ocr']['gap']:.6g} |")
    rows.append(f"| CoNLL-2000 `train conll --passes {after['conll']['passes']}`: CPU / wall | "
                f"{before['conll']['cpu_seconds']:.1f} s / {before['conll']['wall_seconds']:.1f} s | "
                f"{after['conll']['cpu_seconds']:.1f} s / {after['conll']['wall_seconds']:.1f} s |")
    optimising = [next((part.split("s optimising")[0].split()[-1] for line in run["conll"]["stdout"]
                        for part in line.split(", ") if "s optimising" in part), "?") for run in (before, after)]
    rows.append(f"| — of which optimising (as `train` prints it) | {optimising[0]} s | {optimising[1]} s |")
    results = [" / ".join(_results(run)) for run in (before, after)]
    rows.append(f"| CoNLL after {after['conll']['passes']} passes: train primal / gap / test | {results[0]} | "
                f"{results[1]} |")
    rows.append(f"| identical results | {'yes' if results[0] == results[1] else 'NO'} | |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--label", default="after")
    parser.add_argument("--ocr-passes", type=int, default=10)
    parser.add_argument("--conll-passes", type=int, default=3)
    parser.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    args = parser.parse_args()
    if args.compare:
        loaded = [json.loads((RESULTS / f"architecture_speed_{label}.json").read_text()) for label in args.compare]
        print(compare(*loaded))
        return
    import structopt

    print(f"measuring {Path(structopt.__file__).parent}", file=sys.stderr)
    found = {"source": str(Path(structopt.__file__).parent), "ocr": ocr(args.ocr_passes),
             "conll": conll(args.conll_passes)}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"architecture_speed_{args.label}.json").write_text(json.dumps(found, indent=1))
    print(json.dumps({k: v for k, v in found.items() if k != "conll"} | {"conll": found["conll"]["stdout"][-4:]},
                     indent=1))


if __name__ == "__main__":
    main()
