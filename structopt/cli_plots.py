"""Figures that ``structopt train`` writes: convergence, test masks, test boxes (matplotlib, no GUI)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

#: at most this many evaluations are drawn with a marker each; longer runs are drawn as lines
MARKER_LIMIT = 40


def _axis_scale(ax, values: np.ndarray) -> None:
    """Log scale when the positive finite values span more than two decades, else linear."""
    finite = values[np.isfinite(values)]
    if finite.size and finite.min() > 0 and finite.max() / finite.min() > 100:
        ax.set_yscale("log")


def _readable_log_ticks(ax, values: np.ndarray) -> None:
    """On a log axis spanning under two decades, label 1-2-5 steps (every step under half a decade) in
    plain numbers, instead of one power of ten or a crowd of ``2×10⁻¹`` minor labels."""
    from matplotlib import ticker

    span = float(np.log10(values.max() / values.min()))
    if span >= 2:
        return
    low, high = float(values.min()), float(values.max())
    decades = range(int(np.floor(np.log10(low))) - 1, int(np.ceil(np.log10(high))) + 1)
    ticks = []
    for subs in ((1, 2, 5), (1, 1.5, 2, 3, 4, 5, 6, 7, 8, 9), tuple(np.arange(1.0, 10.0, 0.25))):
        ticks = [m * 10.0**k for k in decades for m in subs if low <= m * 10.0**k <= high]
        if len(ticks) >= 3:
            break
    ax.yaxis.set_major_locator(ticker.FixedLocator(ticks))
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda value, _: f"{value:.3g}"))
    ax.yaxis.set_minor_formatter(ticker.NullFormatter())


def convergence_figure(trace: list[dict], title: str):
    """The primal objective (and the dual, where the method has one) against effective passes, and
    the duality gap on a log scale below it when every record has one.

    Every evaluation is kept: the best (lowest) primal is marked with a star, a single evaluation
    is drawn as a labelled point, and markers are drawn only for runs of at most
    :data:`MARKER_LIMIT` evaluations so that long runs stay readable. The layout engine makes
    room for the tick labels, so the y labels are never cut.

    Returns
    -------
    matplotlib.figure.Figure
    """
    from matplotlib.figure import Figure  # no pyplot: no GUI backend, no global state

    passes = np.array([r["passes"] for r in trace], dtype=float)
    primal = np.array([r["primal"] for r in trace], dtype=float)
    has_dual = any("dual" in r for r in trace)
    has_gap = bool(trace) and all(r.get("gap") is not None for r in trace)
    style = "o-" if len(trace) <= MARKER_LIMIT else "-"
    fig = Figure(figsize=(6.4, 6.0 if has_gap else 4.2), layout="constrained")
    if has_gap:
        ax, gap_ax = fig.subplots(2, 1, sharex=True, height_ratios=(3, 2))
    else:
        ax, gap_ax = fig.add_subplot(), None
    ax.plot(passes, primal, style, markersize=4, label="primal objective")
    values = primal
    if has_dual:
        dual_passes = np.array([r["passes"] for r in trace if "dual" in r], dtype=float)
        dual = np.array([r["dual"] for r in trace if "dual" in r], dtype=float)
        ax.plot(dual_passes, dual, "s--" if len(dual) <= MARKER_LIMIT else "--", markersize=3, label="dual objective")
        values = np.concatenate([primal, dual])
    finite = np.isfinite(primal)
    if finite.any():
        best = int(np.flatnonzero(finite)[np.argmin(primal[finite])])
        ax.plot([passes[best]], [primal[best]], "*", markersize=13, color="tab:red", zorder=5,
                label=f"best primal {primal[best]:.8g} (pass {passes[best]:g})")
    if len(trace) == 1:
        ax.annotate("a single evaluation", (passes[0], primal[0]), textcoords="offset points", xytext=(8, 8))
    _axis_scale(ax, values)
    if ax.get_yscale() == "linear":
        ax.ticklabel_format(axis="y", useOffset=False)  # whole values, not "+1.23e5" offsets; the layout fits them
    ax.set_ylabel("objective")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    if gap_ax is not None:
        gap = np.array([r["gap"] for r in trace], dtype=float)
        positive = np.isfinite(gap) & (gap > 0)
        if positive.any():
            gap_ax.semilogy(passes[positive], gap[positive], style, markersize=4, color="tab:green",
                            label="duality gap")
            _readable_log_ticks(gap_ax, gap[positive])
        zero = np.isfinite(gap) & (gap <= 0)
        if zero.any():  # a zero gap has no place on a log axis: said, not dropped
            gap_ax.plot([], [], " ", label=f"gap 0 at {int(zero.sum())} evaluation(s) (not drawn on log scale)")
        gap_ax.set_ylabel("duality gap (log)")
        gap_ax.grid(True, which="both", alpha=0.3)
        gap_ax.legend(fontsize=8)
        gap_ax.set_xlabel("effective passes")
    else:
        ax.set_xlabel("effective passes")
    if len(trace) == 1:  # one point: give the x axis a width around it
        ax.set_xlim(passes[0] - 0.5, passes[0] + 0.5)
    return fig


def plot_convergence(trace: list[dict], path: Path, title: str) -> None:
    """Write :func:`convergence_figure` to ``path``."""
    convergence_figure(trace, title).savefig(path, dpi=120)


def plot_masks(X: list, y_true: list, y_pred: list, path: Path, n: int = 4) -> None:
    """A few test images (their intensity feature) with the gold and the predicted masks."""
    from matplotlib.figure import Figure

    n = min(n, len(X))
    fig = Figure(figsize=(7, 2.2 * n), layout="constrained")
    axes = fig.subplots(n, 3, squeeze=False)
    for row, (x, gold, pred) in enumerate(zip(X[:n], y_true[:n], y_pred[:n])):
        for ax, image, title in zip(axes[row], (x.pixels[..., 1], gold, pred), ("image", "gold", "predicted")):
            ax.imshow(image, cmap="gray", interpolation="nearest")
            ax.set_title(title, fontsize=9)
            ax.axis("off")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)


def plot_boxes(path: Path, images: list[np.ndarray], gold: list, predicted: list, cell_size: int,
               title: str) -> None:
    """A grid of grey images with the gold (green) and predicted (red, dashed) boxes in cell units."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    cols = min(4, len(images))
    rows = -(-len(images) // cols)
    fig = Figure(figsize=(3 * cols, 2.6 * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False)
    for ax in axes.ravel():
        ax.axis("off")
    for ax, image, *boxes in zip(axes.ravel(), images, gold, predicted):
        ax.imshow(image, cmap="gray", vmin=0.0, vmax=1.0)
        for (t, l, b, r), color, style in zip(boxes, ("lime", "red"), ("-", "--")):
            ax.add_patch(Rectangle((l * cell_size - 0.5, t * cell_size - 0.5), (r - l) * cell_size,
                                   (b - t) * cell_size, fill=False, edgecolor=color, linestyle=style, linewidth=2))
    fig.suptitle(title + " (green: gold, red dashed: predicted)")
    fig.savefig(path, dpi=100)
