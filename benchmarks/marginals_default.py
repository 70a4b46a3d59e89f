"""What ``structopt infer FILE.uai`` (marginals, default method and options) reaches on the shipped UAI files.

Per instance: Barrier Frank-Wolfe with the command's defaults (over the marginal polytope, ρ optimised,
tol 0.5, 2000 MAP calls, 60 s), then two variants on the grids (``--variants``): ``rho="uniform"`` (no
ρ updates: one inner loop) and ``polytope="local"`` (LP oracle). Reported: status, MAP calls, ρ updates
done, log Z, the certified upper bound, the certified Frank-Wolfe gap at the stop, and the exact log Z
(the ``.PR`` file, log10 converted). All logs natural.

Usage: ``python benchmarks/marginals_default.py [--time-limit 60] [--variants] [--out ...]``
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

from _bench import write_keeping_findings

from structopt.marginals import barrier_fw, read_pr, read_uai

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "uai"
NAMES = ["Grids_11", "Grids_12", "Grids_13", "Grids_14", "Segmentation_11", "Segmentation_12", "Segmentation_13"]


def row(name: str, label: str, mrf, exact: float, limit: float, **options) -> str:
    t0 = time.perf_counter()
    r = barrier_fw(mrf, time_limit=limit, **options)
    seconds = time.perf_counter() - t0
    rho_done = max((t["rho_iter"] for t in r.trace), default=0)
    upper = "—" if r.upper_bound is None else f"{r.upper_bound:.4f}"
    slack = "—" if r.upper_bound is None else f"{r.upper_bound - exact:.4f}"
    line = (f"| {name} | {label} | {r.status} | {r.iterations} | {rho_done} | {r.log_z:.4f} | {upper} | "
            f"{r.residual:.3g} | {exact:.4f} | {slack} | {seconds:.1f} |")
    print(line, flush=True)
    return line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--variants", action="store_true")
    parser.add_argument("--out", default=str(Path(__file__).with_name("marginals_default_results.md")))
    args = parser.parse_args()
    rows = []
    for name in NAMES:
        mrf = read_uai(DATA / f"{name}.uai")
        exact = read_pr(DATA / f"{name}.uai.PR")  # natural log
        rows.append(row(name, "default", mrf, exact, args.time_limit))
    if args.variants:
        for name in NAMES[:4]:
            mrf = read_uai(DATA / f"{name}.uai")
            exact = read_pr(DATA / f"{name}.uai.PR")
            rows.append(row(name, "rho=uniform", mrf, exact, args.time_limit, rho="uniform"))
            rows.append(row(name, "polytope=local", mrf, exact, args.time_limit, polytope="local"))
    text = (f"# What the default marginal inference reaches\n\n`python benchmarks/marginals_default.py --time-limit "
            f"{args.time_limit:g}{' --variants' if args.variants else ''}`; {platform.machine()}, Python "
            f"{platform.python_version()}, a 2-core machine shared with other jobs (wall clock, one run "
            "each).\n\n"
            "| instance | options | status | MAP calls | ρ updates | log Z | certified upper bound | "
            "certified FW gap | exact log Z | bound - exact | s |\n| --- | --- | --- |" + " ---: |" * 8 + "\n"
            + "\n".join(rows) + "\n")
    write_keeping_findings(Path(args.out), text)
    print(text)


if __name__ == "__main__":
    main()
