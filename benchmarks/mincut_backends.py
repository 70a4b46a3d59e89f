"""Min-cut backends for BinaryGrid.argmax side by side, and the cost of the other grid oracles.

Usage::

    OPENBLAS_NUM_THREADS=1 python benchmarks/mincut_backends.py [--data DIR] [--n 40] [--out FILE.json]

Instances:

- ``horses``: loss-augmented potentials ``theta_i + c_i`` of the Weizmann horses task (default
  grid size, contrast-sensitive Potts edges) at the weights of a short BCFW run (2 passes on the
  training images) — exactly what the solvers' max oracle sees;
- ``random-48x64`` and ``random-128x128``: random unaries, Potts edges of random strength.

Per backend: the median time per call over all instances (each timed over repeated calls), and
exactness: the largest score deficit against the best labelling any backend found on the same
instance, and how many instances an integer backend refused because its scaled solution could
not be certified within 1e-9 (it never returns a worse labelling silently). Also timed, with the
package's own Dinic: max-marginals, top-5 and the Euclidean projection of a random point.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np


def per_call(fn: Callable[[], object], min_time: float = 0.05) -> float:
    """Median of 3 batches of the time per call (after one warm-up call)."""
    fn()
    start = time.perf_counter()
    fn()
    number = max(1, int(min_time / max(time.perf_counter() - start, 1e-9)))
    samples = []
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - start) / number)
    return float(np.median(samples))


def horse_instances(data_path: str | None, n: int) -> list:
    from structopt.losses import Hamming
    from structopt.problem import SSVMProblem
    from structopt.solvers.bcfw import bcfw
    from structopt.structures.base import add
    from structopt.tasks.horses import load_horses

    data = load_horses(data_path)
    problem = SSVMProblem(data["model"], data["train"]["X"], data["train"]["y"], Hamming(normalize=True), lam=1e-3)
    w = bcfw(problem, max_passes=2, random_state=0).w
    return [add(problem.theta(i, w), problem.loss_terms(i)[0]) for i in range(min(n, problem.n))]


def random_instances(H: int, W: int, n: int, seed: int) -> list:
    from structopt.structures.grid import GridPotentials

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        strength = rng.uniform(0.0, 1.0, size=(H, W - 1)), rng.uniform(0.0, 1.0, size=(H - 1, W))
        out.append(GridPotentials(np.stack([np.zeros((H, W)), rng.normal(size=(H, W))], axis=-1),
                                  strength[0][..., None, None] * np.eye(2), strength[1][..., None, None] * np.eye(2)))
    return out


def bench(name: str, thetas: list) -> dict:
    from structopt.errors import NotSupportedError
    from structopt.structures._mincut import BACKENDS
    from structopt.structures.grid import BinaryGrid

    shape = np.shape(thetas[0].unary)[:2]
    rows = {}
    scores = {}
    for backend in BACKENDS:
        grid = BinaryGrid(backend)
        times, values, refused = [], [], 0
        for theta in thetas:
            try:
                y = grid.argmax(theta)
            except NotSupportedError:
                refused += 1
                values.append(-np.inf)
                continue
            values.append(grid.score(theta, y))
            times.append(per_call(lambda grid=grid, theta=theta: grid.argmax(theta)))
        scores[backend] = np.array(values)
        rows[backend] = {"ms_per_call": 1e3 * float(np.median(times)) if times else None, "refused": refused}
    best = np.max(np.array(list(scores.values())), axis=0)
    for backend in BACKENDS:
        answered = np.isfinite(scores[backend])
        deficit = best[answered] - scores[backend][answered]
        rows[backend]["max_score_deficit"] = float(deficit.max()) if deficit.size else None
    grid = BinaryGrid("dinic")
    sample = thetas[: min(5, len(thetas))]
    rng = np.random.default_rng(0)
    others = {
        "max_marginals": [per_call(lambda t=t: grid.max_marginals(t), 0.0) for t in sample],
        "topk5": [per_call(lambda t=t: grid.topk(t, 5), 0.0) for t in sample[:2]],
    }
    full = grid.expand(sample[0])
    v = type(full)(*(rng.normal(scale=0.5, size=np.shape(f)) + (f > 0) * 0.5 for f in grid.stats(grid.argmax(full),
                                                                                                 full)))
    others["project"] = [per_call(lambda: grid.project(v), 0.0)]
    return {"instances": name, "n": len(thetas), "shape": list(shape), "argmax": rows,
            "ms_per_call": {k: 1e3 * float(np.median(t)) for k, t in others.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=None, help="horses data directory (default: see structopt.tasks.horses)")
    parser.add_argument("--n", type=int, default=40, help="instances per family")
    parser.add_argument("--out", default="benchmarks/results/mincut_backends.json")
    args = parser.parse_args()
    from structopt.errors import DataNotFoundError

    families = []
    try:
        families.append(("horses", horse_instances(args.data, args.n)))
    except DataNotFoundError as exc:
        print(f"skipping horses: {exc}")
    families.append(("random-48x64", random_instances(48, 64, args.n // 2, 0)))
    families.append(("random-128x128", random_instances(128, 128, max(args.n // 8, 2), 1)))
    results = [bench(name, thetas) for name, thetas in families]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": platform.platform(), "results": results}, indent=1))
    for r in results:
        print(f"\n{r['instances']} ({r['n']} instances, {r['shape'][0]}x{r['shape'][1]} typical)")
        print(f"{'backend':10s} {'ms/call':>9s} {'refused':>8s} {'max deficit':>12s}")
        for backend, row in r["argmax"].items():
            ms = f"{row['ms_per_call']:.3f}" if row["ms_per_call"] is not None else "-"
            deficit = f"{row['max_score_deficit']:.1e}" if row["max_score_deficit"] is not None else "-"
            print(f"{backend:10s} {ms:>9s} {row['refused']:>8d} {deficit:>12s}")
        print("  ".join(f"{k} {v:.2f} ms" for k, v in r["ms_per_call"].items()))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
