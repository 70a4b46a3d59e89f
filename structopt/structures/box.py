"""Bounding boxes over an H x W grid of cells: branch-and-bound search, top-K, exact Gibbs sums.

An output is ``(top, left, bottom, right)``, half-open (rows top..bottom-1, columns
left..right-1, non-empty); its score is the sum of the cells inside, and its statistics are its
(H, W) indicator. There are ``H(H+1)/2 * W(W+1)/2`` boxes: polynomially many, so log Z and the
cell-inclusion probabilities are exact sums (O(H^2 W^2)); the max and top-K use best-first
branch-and-bound (efficient subwindow search) with an exhaustive scan as the alternative.

The loss-augmented oracles with ``1 - IoU`` (``*_iou`` methods, called by
:class:`structopt.losses.BoxLoss`) bound the IoU term over a box set as Blaschko & Lampert (2008).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np

from structopt.errors import InvalidInputError, NotSupportedError, check_count, example_error, numeric_array
from structopt.structures import _box_kernels as kern
from structopt.structures.base import Polytope, Structure, random_like, refuse_nonfinite
from structopt.structures.registry import register_structure

Box = tuple[int, int, int, int]

_NO_GOLD = np.zeros(4, dtype=np.int64)
SEARCHES = ("bnb", "exhaustive")


class BoxPotentials(NamedTuple):
    """Cell scores (or a box's 0/1 indicator, or cell-inclusion probabilities), shape (H, W)."""

    cells: np.ndarray


def iou(a: Sequence[int], b: Sequence[int]) -> float:
    """Intersection over union of two boxes ``(top, left, bottom, right)``, areas in cells."""
    inter = max(0, min(a[2], b[2]) - max(a[0], b[0])) * max(0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union


@register_structure("box")
class BoundingBox(Structure):
    """Axis-aligned boxes on a grid of cells; the grid size is read off each instance's potentials.

    Parameters
    ----------
    search : {"bnb", "exhaustive"}, default "bnb"
        How :meth:`argmax` / :meth:`topk` (and the loss-augmented versions) search: best-first
        branch-and-bound, or a compiled scan of all O(H^2 W^2) boxes. Both are exact. How much
        branch-and-bound saves depends on how peaked the scores are: 1.5-3.5x over the scan on
        the localization tasks' grids of about 18 x 24 cells, tens of times on finer grids; its
        top-K costs little more than its max (``benchmarks/localization.py``).

    Notes
    -----
    Potentials may be a :class:`BoxPotentials` or a plain (H, W) array. The marginal polytope (the
    convex hull of rectangle indicators in the cell space) has no compact linear description, so
    :meth:`polytope` (and the LP relaxation and Euclidean projection built on it) is not supported.
    """

    name = "BoundingBox"
    Potentials = BoxPotentials

    example_variants = ({"height": 1, "width": 1}, {"height": 1, "width": 4}, {"height": 3, "width": 2},
                        {"height": 4, "width": 4})

    @classmethod
    def example(cls, rng: np.random.Generator, *, integer: bool = True, height: int = 3,
                width: int = 3) -> tuple[BoundingBox, BoxPotentials]:
        """Random cell scores on a ``height`` x ``width`` image."""
        H, W = int(height), int(width)
        if H < 1 or W < 1:
            raise InvalidInputError(f"a box grid needs height, width >= 1, got {H} x {W}")
        return cls(), random_like(BoxPotentials(np.zeros((H, W))), rng, integer=integer)

    def __init__(self, search: str = "bnb"):
        if search not in SEARCHES:
            raise InvalidInputError(f"search must be one of {SEARCHES}, got {search!r}")
        self.search = search

    def __repr__(self) -> str:
        return f"BoundingBox(search={self.search!r})"

    # ------------------------------------------------------------------ validation
    def check_potentials(self, theta: Any) -> np.ndarray:
        """The (H, W) float64 cell array of ``theta``, or InvalidInputError."""
        cells = theta.cells if isinstance(theta, BoxPotentials) else theta
        cells = numeric_array(cells, "box potentials", finite=False)
        if cells.ndim != 2 or cells.shape[0] < 1 or cells.shape[1] < 1:
            raise InvalidInputError(f"box potentials must be a non-empty (H, W) array, got shape {cells.shape}")
        refuse_nonfinite((("cells", cells),), "box")
        return cells

    def validate_output(self, y: Any, like: Any = None, index: int | None = None) -> Box:
        """``y`` as a tuple of four ints with ``0 <= top < bottom <= H`` and ``0 <= left < right <= W``."""
        try:
            arr = np.asarray(y)
        except ValueError:
            arr = np.zeros(0)
        if arr.shape != (4,) or not (np.issubdtype(arr.dtype, np.integer)
                                     or (np.issubdtype(arr.dtype, np.floating) and np.all(arr == np.round(arr)))):
            raise example_error(index, f"a box must be four integers (top, left, bottom, right), got {y!r}")
        t, l, b, r = (int(v) for v in arr)
        if not (0 <= t < b and 0 <= l < r):
            raise example_error(index, f"box {(t, l, b, r)} is empty or has negative coordinates "
                                       "(need 0 <= top < bottom, 0 <= left < right; half-open)")
        if like is not None:
            H, W = np.shape(like.cells if isinstance(like, BoxPotentials) else like)
            if b > H or r > W:
                raise example_error(index, f"box {(t, l, b, r)} does not fit the {H} x {W} grid of cells")
        return t, l, b, r

    def _gold(self, y_true: Any, cells: np.ndarray) -> np.ndarray:
        return np.array(self.validate_output(y_true, cells), dtype=np.int64)

    # ------------------------------------------------------------------ required interface
    def expand(self, theta: Any) -> BoxPotentials:
        return BoxPotentials(self.check_potentials(theta))

    def stats(self, y: Any, like: Any) -> BoxPotentials:
        H, W = np.shape(like.cells if isinstance(like, BoxPotentials) else like)
        t, l, b, r = (int(v) for v in y)
        mask = np.zeros((H, W))
        mask[t:b, l:r] = 1.0
        return BoxPotentials(mask)

    def score(self, theta: Any, y: Any) -> float:
        t, l, b, r = (int(v) for v in y)
        return float(self.check_potentials(theta)[t:b, l:r].sum())

    def expected_stats(self, outputs: Any, weights: np.ndarray, like: Any) -> BoxPotentials:
        H, W = np.shape(like.cells if isinstance(like, BoxPotentials) else like)
        boxes = np.asarray(outputs, dtype=np.int64).reshape(-1, 4)
        return BoxPotentials(kern.spread(boxes, np.asarray(weights, dtype=np.float64), H, W))

    def outputs(self, theta: Any) -> Iterator[Box]:
        H, W = self.check_potentials(theta).shape
        for t in range(H):
            for b in range(t + 1, H + 1):
                for l in range(W):
                    for r in range(l + 1, W + 1):
                        yield t, l, b, r

    def n_outputs(self, theta: Any) -> int:
        """Number of boxes of the instance, ``H(H+1)/2 * W(W+1)/2``."""
        H, W = self.check_potentials(theta).shape
        return (H * (H + 1) // 2) * (W * (W + 1) // 2)

    def polytope(self, theta: Any = None) -> Polytope:
        raise NotSupportedError(
            "the box polytope (convex hull of rectangle indicators over the cells) has no compact linear "
            "description in the cell statistics; its LP and projection are not available (enumeration and "
            "exact Gibbs sums are)")

    # ------------------------------------------------------------------ oracles
    def _search(self, cells: np.ndarray, gold: np.ndarray, use_loss: bool, k: int) -> tuple[list[Box], np.ndarray]:
        k = check_count(k, "k", "BoundingBox.topk")
        if self.search == "bnb":
            boxes, values, _ = kern.bnb_topk(cells, gold, use_loss, int(k))
        elif int(k) == 1:
            box, value = kern.exhaustive_argmax(kern.integral(cells), gold, use_loss)
            boxes, values = box[None, :], np.array([value])
        else:
            boxes, values = kern.all_values(kern.integral(cells), gold, use_loss)
            if int(k) < len(values):  # O(m) selection, then sort the k chosen by (value, position)
                chosen = np.argpartition(-values, int(k) - 1)[: int(k)]
                order = chosen[np.lexsort((chosen, -values[chosen]))]
            else:
                order = np.argsort(-values, kind="stable")
            boxes, values = boxes[order], values[order]
        return [tuple(int(v) for v in row) for row in boxes], np.asarray(values, dtype=float)

    def argmax(self, theta: Any) -> Box:
        """Highest-scoring box (branch-and-bound or exhaustive, see ``search``)."""
        return self._search(self.check_potentials(theta), _NO_GOLD, False, 1)[0][0]

    def topk(self, theta: Any, k: int) -> tuple[list[Box], np.ndarray]:
        """The ``k`` best boxes (all of them if fewer), sorted by decreasing score, and their scores."""
        return self._search(self.check_potentials(theta), _NO_GOLD, False, k)

    def marginals(self, theta: Any) -> tuple[float, BoxPotentials]:
        """``(log Z, cell-inclusion probabilities)`` of ``p(box) ∝ exp(score)``, exact in O(H^2 W^2)."""
        log_z, marg, _ = kern.gibbs(self.check_potentials(theta), _NO_GOLD, False, 1.0)
        return float(log_z), BoxPotentials(marg)

    def max_marginals(self, theta: Any) -> np.ndarray:
        """(H, W): the best score of a box containing each cell (O(H^2 W))."""
        return kern.max_marginals(self.check_potentials(theta))

    # ------------------------------------------------------------------ loss-augmented (1 - IoU)
    def topk_iou(self, theta: Any, y_true: Any, k: int) -> tuple[list[Box], np.ndarray]:
        """The ``k`` best boxes of ``1 - IoU(y_true, box) + score(box)``, sorted, and those values."""
        cells = self.check_potentials(theta)
        return self._search(cells, self._gold(y_true, cells), True, k)

    def marginals_iou(self, theta: Any, y_true: Any, temperature: float) -> tuple[float, BoxPotentials, float]:
        """Gibbs sums of ``p(box) ∝ exp((1 - IoU(y_true, box) + score(box)) / temperature)``.

        Returns
        -------
        log_z : float
        marginals : BoxPotentials
            Cell-inclusion probabilities.
        expected_loss : float
            ``E_p[1 - IoU]``.
        """
        if not (np.isfinite(temperature) and temperature > 0):
            raise InvalidInputError(f"temperature must be a positive number, got {temperature}")
        cells = self.check_potentials(theta)
        log_z, marg, loss = kern.gibbs(cells, self._gold(y_true, cells), True, 1.0 / float(temperature))
        return float(log_z), BoxPotentials(marg), float(loss)
