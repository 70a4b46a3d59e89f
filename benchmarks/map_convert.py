"""The share of ``map_inference(method="ad3")`` spent converting the MRF on the UAI segmentations.

Per instance, best of ``--repeats`` (wall clock): ``mrf_to_factor_graph`` (convert), the flat arrays the kernels
run on (``fg.flat``, built by the conversion since 32f26f7), the AD3 call on the converted graph
(``fg.map(theta, method="ad3")``) and the whole ``map_inference``; the conversion share is
(convert + flat) ÷ AD3. Prints markdown rows and the load average.

Usage: ``python benchmarks/map_convert.py [--repeats 50] [--checkout ROOT]`` (``ROOT``: another checkout of the
project, e.g. ``git archive <ref> structopt tasks | tar -x -C ROOT``, to measure the code before a change).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from _bench import use_checkout

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "uai"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--checkout", type=Path, default=None, help="import structopt from this checkout")
    args = parser.parse_args()
    if args.checkout is not None:
        use_checkout(args.checkout.resolve())
    from structopt.marginals import read_uai
    from structopt.marginals.map import map_inference, mrf_to_factor_graph

    print("| instance | convert + flat µs | AD3 µs | map_inference µs | conversion ÷ AD3 |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for path in sorted(DATA.glob("Segmentation_*.uai")):
        mrf = read_uai(path)
        map_inference(mrf, method="ad3")  # compiled (numba cache) before timing
        best: dict[str, float] = {}
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            fg, theta = mrf_to_factor_graph(mrf)
            fg.flat  # noqa: B018 (built lazily before 32f26f7: its own line)
            t2 = time.perf_counter()
            fg.map(theta, method="ad3")
            t3 = time.perf_counter()
            map_inference(mrf, method="ad3")
            t4 = time.perf_counter()
            for key, val in (("convert", t2 - t0), ("ad3", t3 - t2), ("total", t4 - t3)):
                best[key] = min(best.get(key, float("inf")), val)
        print(f"| {path.stem} | {1e6 * best['convert']:.0f} | {1e6 * best['ad3']:.0f} | {1e6 * best['total']:.0f} | "
              f"{100 * best['convert'] / best['ad3']:.1f}% |", flush=True)
    print(f"load average {os.getloadavg()[0]:.2f} (1 min)")


if __name__ == "__main__":
    main()
