"""Weizmann horses with a CNN on the grid task's binary grid: trained through min-cut (structured hinge) against
the same CNN trained per pixel (logistic loss) and decoded with and without the grid.

Usage::

    OPENBLAS_NUM_THREADS=1 python benchmarks/horses_net.py [--data DIR] [--n-train N] [--epochs 40]
        [--threads 2] [--objectives hinge pixel] [--out benchmarks/horses_net_results.md]

# needs: shared data

Every network starts from the same seeded initial weights (``tasks/horses_net.py: build``) and sees the same
minibatches and flips (``train``'s seed). The per-pixel network has no trained pairwise term: its grid decoding
uses the contrast-sensitive Potts weight chosen (``choose_pairwise``) on the training images. Scores are the
grid task's (``segmentation_scores``: pixel accuracy and foreground IoU pooled over the 109 test images' grid
pixels). The linear grid and the superpixel CRF are quoted from their results files.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench import use_checkout, write_keeping_findings  # noqa: E402

#: other models' test scores on the same split, from their results files
QUOTED = [
    ("linear 4-connected pixel grid, 41 hand-made pixel features + contrast Potts, BCFW "
     "(`benchmarks/horses_superpixels_results.md`, issue 24)", 0.862, 0.565, "grid pixels"),
    ("superpixel CRF, boosted patch features, BCFW + exact MAP (`benchmarks/horses_superpixels_results.md`)",
     0.9418, 0.7756, "full-resolution pixels"),
]


def run(data: dict, objective: str, args: argparse.Namespace) -> list[dict]:
    from structopt.tasks import horses_net as hn

    X, Y = data["train"]["X"][: args.n_train], data["train"]["y"][: args.n_train]
    Xt, Yt = data["test"]["X"], data["test"]["y"]
    net = hn.build(size=data["info"]["size"], seed=args.seed)
    cpu = time.process_time()
    log = hn.train(net, X, Y, objective=objective, epochs=args.epochs, seed=args.seed, progress=True)
    cpu = time.process_time() - cpu
    common = {"objective": objective, "n_train": len(X), "epochs": log.epochs, "train_seconds": log.seconds,
              "train_cpu_seconds": cpu, "oracle_seconds": log.oracle_seconds, "oracle_share": log.oracle_share,
              "final_loss": log.losses[-1], "potts_weights": [float(v) for v in net.potts_weights()]}
    rows = []
    start = time.perf_counter()
    grid = hn.evaluate(net, Xt, Yt)
    grid_seconds = time.perf_counter() - start
    start = time.perf_counter()
    pixel = hn.evaluate(net, Xt, Yt, grid=False)
    pixel_seconds = time.perf_counter() - start
    if objective == "pixel":
        weight, train_scores = hn.choose_pairwise(net, X, Y)
        start = time.perf_counter()
        chosen = hn.evaluate(net, Xt, Yt, weights=(weight, 0.0))
        grid_seconds = time.perf_counter() - start
        rows.append({**common, "decoding": f"grid (min-cut), contrast Potts weight {weight:g} chosen on the training "
                     f"images (their IoU {train_scores['foreground_iou']:.3f})",
                     "predict_seconds": grid_seconds, **chosen})
    else:
        rows.append({**common, "decoding": "grid (min-cut), learned Potts weights", "predict_seconds": grid_seconds,
                     **grid})
    rows.append({**common, "decoding": "per pixel (score > 0), no grid", "predict_seconds": pixel_seconds, **pixel})
    return rows


def markdown(rows: list[dict], args: argparse.Namespace, load: str) -> str:
    names = {"hinge": "structured hinge through min-cut (Hamming)", "pixel": "per-pixel logistic loss"}
    lines = [
        "# Weizmann horses: a CNN on the binary grid, trained through min-cut — results", "",
        f"`python benchmarks/horses_net.py --epochs {args.epochs} --threads {args.threads}"
        f"{'' if args.n_train is None else f' --n-train {args.n_train}'}` "
        f"({platform.machine()}, Python {platform.python_version()}, torch {_torch_version()}, "
        f"{args.threads} torch thread(s); {load}).", "",
        "Grid and split: the grid task's (longer side 48 pixels; images sorted by name, every third one tests: "
        f"{rows[0]['n_train']} training, 109 test images). Input: the grey image at twice the grid's resolution "
        "(the horses are grey, one channel) with its row/column coordinates; the CNN's first two layers work "
        "there and a stride-2 convolution pools onto the grid; a 3-level encoder-decoder (16/32/64 channels, "
        "GroupNorm, dilated convolutions at the coarsest level) gives one foreground score per grid pixel. "
        "Pairwise: contrast-sensitive Potts, two learned non-negative weights (contrast, constant). "
        f"Adam, learning rate 3e-3 cosine-decayed, weight decay 1e-4, minibatches of 8 images, random "
        f"horizontal flips, {rows[0]['epochs']} epochs, the same seeded initial weights for every row.", "",
        "| training | decoding | test pixel accuracy | test foreground IoU | mean per-image IoU | train time (s) | "
        "oracle share | test decoding (s) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        share = f"{100 * row['oracle_share']:.1f}%" if row["objective"] != "pixel" else "—"
        lines.append(f"| {names[row['objective']]} | {row['decoding']} | {row['pixel_accuracy']:.4f} | "
                     f"**{row['foreground_iou']:.4f}** | {row['mean_image_iou']:.4f} | {row['train_seconds']:.0f} | "
                     f"{share} | {row['predict_seconds']:.2f} |")
    for name, acc, iou, where in QUOTED:
        lines.append(f"| {name} | scored on {where} | {acc:.4f} | {iou:.4f} | | | | |")
    lines += ["", "Learned Potts weights (contrast, constant) and final training loss: " + "; ".join(
        f"{row['objective']}: ({row['potts_weights'][0]:.3f}, {row['potts_weights'][1]:.3f}), "
        f"{row['final_loss']:.4f}" for row in rows[::2]) + ".",
        "Oracle share: the seconds inside `structopt.torch.structured_loss` (one loss-augmented min cut per "
        "image, the θ → numpy round trip and the statistics) over the training seconds.", ""]
    return "\n".join(lines)


def _torch_version() -> str:
    import torch

    return torch.__version__


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=None)
    parser.add_argument("--n-train", type=int, default=None)
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--objectives", nargs="+", default=["hinge", "pixel"], choices=["hinge", "pixel"])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "horses_net_results.md")
    args = parser.parse_args()
    use_checkout(ROOT)
    import torch

    torch.set_num_threads(args.threads)
    from structopt.tasks import horses_net as hn

    load = f"load average {os.getloadavg()[0]:.1f} at the start"
    data = hn.load(args.data, progress=True)
    rows = []
    for objective in args.objectives:
        rows += run(data, objective, args)
        print(json.dumps(rows[-2:], indent=1), file=sys.stderr)
    load += f", {os.getloadavg()[0]:.1f} at the end (1-minute averages; 2 cores shared with other work)"
    write_keeping_findings(args.out, markdown(rows, args, load))
    args.out.with_suffix(".json").write_text(json.dumps({"rows": rows, "load": load}, indent=1))
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
