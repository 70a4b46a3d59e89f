"""Barrier Frank-Wolfe marginal inference: the paper's synthetic study (reduced) and the UAI instances.

Usage::

    python benchmarks/marginals.py [--part synthetic|uai|all] [--out benchmarks/results/marginals]
                                   [--time-limit 60] [--trials 3] [--data PATH]

Synthetic (Krishnan et al. 2015, §5, reduced in size): 10-node complete graphs with couplings
θ_ij ~ U[−θ, θ] on (θ, −θ; −θ, θ) and fields θ_i ~ U[−1, 1], for θ in {0.5, 1, 2, 4, 8}, and 5×5 grids
with couplings ~ U[−c, c] for c in {1, 2, 4}; ``--trials`` models each. Methods: Barrier FW over 𝓜_δ
and 𝕃_δ, with ρ optimised (10 updates) or uniform, TRBP, BP and mean field. Exact log Z and
marginals by variable elimination. Metrics: |log Z error| (for Barrier FW the certified bound
"primal + gap", as the paper's ζ_logZ, and the primal TRW) and ζ_μ = mean_i |μ_i(1) − μ*_i(1)|.

UAI: every ``*.uai`` in the data directory (default ``../shared/data/uai``), references from the
``.PR`` (log10 Z) and ``.MAR`` files; Barrier FW over 𝓜 with ρ optimisation under ``--time-limit``
seconds, next to TRBP, BP and mean field. Marginal error: mean over variables of the L1 distance.

Writes ``synthetic.json``, ``synthetic.png``, ``uai.json``, ``uai.png`` and ``convergence.png`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np

from structopt.marginals import (
    PairwiseMRF,
    barrier_fw,
    bp,
    exact_inference,
    mean_field,
    read_mar,
    read_pr,
    read_uai,
    trbp,
)

BFW_VARIANTS = {
    "M_delta (rho opt)": dict(polytope="marginal", rho="optimize"),
    "M_delta (uniform rho)": dict(polytope="marginal", rho="uniform"),
    "L_delta (rho opt)": dict(polytope="local", rho="optimize"),
    "L_delta (uniform rho)": dict(polytope="local", rho="uniform"),
}


def clique(n: int, theta: float, rng: np.random.Generator) -> PairwiseMRF:
    edges = [(i, j) for i in range(n) for j in range(i + 1, n)]
    unary = [np.array([-t, t]) for t in rng.uniform(-1, 1, n)]
    pairwise = [np.array([[t, -t], [-t, t]]) for t in rng.uniform(-theta, theta, len(edges))]
    return PairwiseMRF.from_potentials(unary, edges, pairwise)


def grid(side: int, coupling: float, rng: np.random.Generator) -> PairwiseMRF:
    idx = np.arange(side * side).reshape(side, side)
    edges = [(int(idx[a, b]), int(idx[a, b + 1])) for a in range(side) for b in range(side - 1)]
    edges += [(int(idx[a, b]), int(idx[a + 1, b])) for a in range(side - 1) for b in range(side)]
    unary = [np.array([-t, t]) for t in rng.uniform(-1, 1, side * side)]
    pairwise = [np.array([[t, -t], [-t, t]]) for t in rng.uniform(-coupling, coupling, len(edges))]
    return PairwiseMRF.from_potentials(unary, edges, pairwise)


def errors(result, log_z: float, marginals: list[np.ndarray]) -> dict:
    row = {"log_z_error": abs(result.log_z - log_z),
           "zeta_mu": float(np.mean([abs(a[-1] - b[-1]) for a, b in zip(result.marginals, marginals)])),
           "marginal_l1": float(np.mean([np.abs(a - b).sum() for a, b in zip(result.marginals, marginals)])),
           "seconds": result.seconds, "converged": bool(result.converged)}
    if result.upper_bound is not None:
        row["bound_error"] = result.upper_bound - log_z
    if result.trace and "solver" in result.trace[0]:
        row["map_calls"] = len(result.trace)
    return row


def run_synthetic(trials: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    families = {"clique10": (lambda t: clique(10, t, rng), [0.5, 1.0, 2.0, 4.0, 8.0]),
                "grid5x5": (lambda c: grid(5, c, rng), [1.0, 2.0, 4.0])}
    out: dict = {}
    for family, (make, strengths) in families.items():
        out[family] = {}
        for strength in strengths:
            rows: dict[str, list[dict]] = {}
            for _ in range(trials):
                mrf = make(strength)
                exact = exact_inference(mrf, method="elimination")
                results = {name: barrier_fw(mrf, **kw) for name, kw in BFW_VARIANTS.items()}
                results["TRBP"] = trbp(mrf)
                results["BP"] = bp(mrf)
                results["MF"] = mean_field(mrf)
                for name, result in results.items():
                    rows.setdefault(name, []).append(errors(result, exact.log_z, exact.marginals))
            out[family][str(strength)] = {
                name: {key: float(np.mean([r[key] for r in rs if key in r])) for key in rs[0]}
                for name, rs in rows.items()}
            print(family, strength, {n: round(v["zeta_mu"], 3) for n, v in out[family][str(strength)].items()},
                  flush=True)
    return out


def convergence(seed: int) -> dict:
    """ζ_logZ (bound − log Z) against MAP calls on one 5×5 mixed grid (couplings U[−4, 4]), per variant."""
    mrf = grid(5, 4.0, np.random.default_rng(seed + 100))
    log_z = exact_inference(mrf, method="elimination").log_z
    curves = {}
    for name, kw in BFW_VARIANTS.items():
        result = barrier_fw(mrf, **kw)
        curves[name] = [t["upper_bound"] - log_z for t in result.trace]
    return curves


def run_uai(data: Path, time_limit: float) -> dict:
    out = {}
    for path in sorted(data.glob("*.uai")):
        mrf = read_uai(path)
        log_z, marginals = read_pr(f"{path}.PR"), read_mar(f"{path}.MAR")
        rows = {"n_nodes": mrf.n_nodes, "n_edges": mrf.n_edges, "log_z": log_z}
        bfw = barrier_fw(mrf, time_limit=time_limit)
        rows["BFW M_delta (rho opt)"] = errors(bfw, log_z, marginals)
        rows["BFW M_delta (rho opt)"]["rho_updates"] = max(t["rho_iter"] for t in bfw.trace)
        rows["BFW M_delta (rho opt)"]["solvers"] = sorted({t["solver"] for t in bfw.trace})
        rows["TRBP"] = errors(trbp(mrf), log_z, marginals)
        rows["BP"] = errors(bp(mrf), log_z, marginals)
        rows["MF"] = errors(mean_field(mrf), log_z, marginals)
        out[path.stem] = rows
        print(path.stem, {k: (round(v["log_z_error"], 3), round(v["marginal_l1"], 4), round(v["seconds"], 1))
                          for k, v in rows.items() if isinstance(v, dict)}, flush=True)
    return out


def plot_synthetic(result: dict, curves: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    for col, family in enumerate(result):
        strengths = [float(s) for s in result[family]]
        names = list(next(iter(result[family].values())))
        for name in names:
            style = "o-" if name.startswith(("M_", "L_")) else "s--"
            key = "bound_error" if name.startswith(("M_", "L_")) else "log_z_error"
            axes[0, col].semilogy(strengths, [max(result[family][str(s)][name][key], 1e-6) for s in strengths],
                                  style, label=name)
            axes[1, col].plot(strengths, [result[family][str(s)][name]["zeta_mu"] for s in strengths], style,
                              label=name)
        axes[0, col].set_title(f"{family}: |log Z error| (BFW: bound − log Z)")
        axes[1, col].set_title(f"{family}: ζ_μ")
        axes[1, col].set_xlabel("coupling strength θ")
        axes[0, col].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "synthetic.png", dpi=110)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, curve in curves.items():
        ax.semilogy(np.arange(1, len(curve) + 1), np.maximum(curve, 1e-6), label=name)
    ax.set_xlabel("MAP (LP) calls")
    ax.set_ylabel("bound − log Z")
    ax.set_title("5×5 mixed grid, couplings U[−4, 4]")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "convergence.png", dpi=110)
    plt.close(fig)


def plot_uai(result: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(result)
    methods = [k for k in result[names[0]] if isinstance(result[names[0]][k], dict)]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    width = 0.8 / len(methods)
    for k, method in enumerate(methods):
        pos = np.arange(len(names)) + k * width
        axes[0].bar(pos, [result[n][method]["log_z_error"] for n in names], width, label=method)
        axes[1].bar(pos, [result[n][method]["marginal_l1"] for n in names], width, label=method)
    for ax, title in zip(axes, ["|log Z error|", "mean L1 marginal error"]):
        ax.set_xticks(np.arange(len(names)) + 0.4 - width / 2)
        ax.set_xticklabels(names, rotation=30, fontsize=7)
        ax.set_title(title)
    axes[0].set_yscale("log")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "uai.png", dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", choices=["synthetic", "uai", "all"], default="all")
    parser.add_argument("--out", default="benchmarks/results/marginals")
    parser.add_argument("--time-limit", type=float, default=60.0, help="Barrier FW seconds per UAI instance")
    parser.add_argument("--trials", type=int, default=3, help="synthetic models per coupling strength")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", default="../shared/data/uai")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"python": platform.python_version(), "machine": platform.machine(), "time": time.ctime()}
    if args.part in ("synthetic", "all"):
        synthetic = run_synthetic(args.trials, args.seed)
        curves = convergence(args.seed)
        (out / "synthetic.json").write_text(json.dumps({"meta": meta, "trials": args.trials, "results": synthetic,
                                                        "convergence": curves}, indent=1))
        plot_synthetic(synthetic, curves, out)
    if args.part in ("uai", "all"):
        uai = run_uai(Path(args.data), args.time_limit)
        (out / "uai.json").write_text(json.dumps({"meta": meta, "time_limit": args.time_limit, "results": uai},
                                                 indent=1))
        plot_uai(uai, out)
        methods = [k for k in next(iter(uai.values())) if isinstance(next(iter(uai.values()))[k], dict)]
        print(f"{'instance':18s}" + "".join(f"{m[:22]:>24s}" for m in methods))
        for name, rows in uai.items():
            print(f"{name:18s}" + "".join(f"{rows[m]['log_z_error']:11.3f} /{rows[m]['marginal_l1']:8.4f}   "
                                          for m in methods))
        print(f"{'mean':18s}" + "".join(
            f"{np.mean([r[m]['log_z_error'] for r in uai.values()]):11.3f} /"
            f"{np.mean([r[m]['marginal_l1'] for r in uai.values()]):8.4f}   " for m in methods))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
