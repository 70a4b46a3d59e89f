"""Linear grid model: per-pixel unary weights and Potts-style pairwise terms on per-edge features."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from structopt.codecs import exact_type, register_codec
from structopt.errors import InvalidInputError, check_count, example_error
from structopt.models.base import Model, model_structure
from structopt.structures.base import check_flag
from structopt.structures.grid import BinaryGrid, GridPotentials


class GridInput(NamedTuple):
    """Features of one H x W image.

    Attributes
    ----------
    pixels : ndarray, shape (H, W, F)
        Per-pixel features.
    horizontal : ndarray, shape (H, W-1, E)
        Non-negative features of the edge (r, c)-(r, c+1) (e.g. 1 and a contrast term).
    vertical : ndarray, shape (H-1, W, E)
        Non-negative features of the edge (r, c)-(r+1, c).
    """

    pixels: np.ndarray
    horizontal: np.ndarray
    vertical: np.ndarray


class GridModel(Model):
    """``theta_p(s) = <x_p, W_unary[:, s]>`` and ``theta_pq(a, b) = [a == b] <f_pq, w_pairwise>``.

    Parameters
    ----------
    n_features : int
        Pixel feature dimension F.
    n_edge_features : int
        Edge feature dimension E of the inputs.
    pairwise : bool, default True
        False gives the unary-only model on the same inputs: pixels are labelled independently,
        edge features are validated but unused, and there is no ``pairwise`` block.
    structure : BinaryGrid, optional
        The structure to run on (a subclass, or one configured with another min-cut backend);
        default ``BinaryGrid()``.

    Notes
    -----
    An edge rewards agreement by ``<f_pq, w_pairwise>``, so it is supermodular (min-cut
    solvable) whenever that is >= 0. Edge features must be non-negative and the ``pairwise``
    block is declared in :attr:`nonnegative_blocks`: solvers keep it >= 0, which keeps every
    edge of every example supermodular. Were it ever negative on some edge, the grid's oracles
    raise :class:`~structopt.errors.NotSupportedError` naming the edge, rather than approximate.
    """

    nonnegative_blocks = ("pairwise",)

    @classmethod
    def example(cls, rng: np.random.Generator) -> tuple[GridModel, list[GridInput]]:
        """Three 3 x 3 grids with 3 node and 2 edge features (see :meth:`Model.example`)."""
        return cls(3, 2), [GridInput(rng.normal(size=(2, 3, 3)), rng.random((2, 2, 2)), rng.random((1, 3, 2)))
                           for _ in range(3)]

    def __init__(self, n_features: int, n_edge_features: int, pairwise: bool = True, *,
                 structure: BinaryGrid | None = None):
        self.n_features = check_count(n_features, "n_features", "GridModel")
        self.n_edge_features = check_count(n_edge_features, "n_edge_features", "GridModel", 0)
        self.pairwise = check_flag(pairwise, "pairwise", "GridModel") and self.n_edge_features > 0
        self.structure = model_structure("GridModel", BinaryGrid, structure, BinaryGrid)
        if not self.pairwise:
            self.nonnegative_blocks = ()

    def __repr__(self) -> str:
        return (f"GridModel(n_features={self.n_features}, n_edge_features={self.n_edge_features}, "
                f"pairwise={self.pairwise})")

    @property
    def blocks(self) -> list[tuple[str, tuple[int, ...]]]:
        blocks = [("unary", (self.n_features, 2))]
        if self.pairwise:
            blocks.append(("pairwise", (self.n_edge_features,)))
        return blocks

    def validate_input(self, x: GridInput, index: int | None = None) -> GridInput:
        if not isinstance(x, tuple) or len(x) != 3:
            raise example_error(index, "grid input must be a GridInput(pixels, horizontal, vertical)")
        pixels = np.ascontiguousarray(x[0], dtype=np.float64)
        F, E = self.n_features, self.n_edge_features
        if pixels.ndim != 3 or pixels.shape[2] != F or pixels.shape[0] < 1 or pixels.shape[1] < 1:
            raise example_error(index, f"grid pixel features must have shape (H>=1, W>=1, {F}), got {pixels.shape}")
        H, W = pixels.shape[:2]
        fields = [pixels]
        for label, arr, shape in (("horizontal", x[1], (H, W - 1, E)), ("vertical", x[2], (H - 1, W, E))):
            arr = np.ascontiguousarray(arr, dtype=np.float64)
            if arr.shape != shape:
                raise example_error(index, f"grid {label} edge features must have shape {shape}, got {arr.shape}")
            if arr.size and (not np.all(np.isfinite(arr)) or arr.min() < 0):
                raise example_error(index, f"grid {label} edge features must be finite and >= 0 (non-negative "
                                           "pairwise weights then keep every edge supermodular)")
            fields.append(arr)
        if not np.all(np.isfinite(pixels)):
            raise example_error(index, "grid pixel features contain NaN or infinite values")
        return GridInput(*fields)

    def potentials(self, x: GridInput, w: np.ndarray) -> GridPotentials:
        blocks = self.unpack(w)
        H, W, F = x.pixels.shape
        unary = (x.pixels.reshape(H * W, F) @ blocks["unary"]).reshape(H, W, 2)
        if not self.pairwise:
            return GridPotentials(unary, np.zeros((2, 2)), np.zeros((2, 2)))
        eye = np.eye(2)
        wp = blocks["pairwise"]
        return GridPotentials(unary, (x.horizontal @ wp)[..., None, None] * eye,
                              (x.vertical @ wp)[..., None, None] * eye)

    def reduce_stats(self, mu: GridPotentials) -> GridPotentials:
        """Unary-only models have shared zero edge tables: edge statistics are summed to (2, 2)."""
        if self.pairwise:
            return mu

        def total(t: np.ndarray) -> np.ndarray:
            t = np.asarray(t, dtype=float)
            return t.reshape(-1, 2, 2).sum(axis=0) if t.ndim == 4 else t
        return GridPotentials(mu.unary, total(mu.horizontal), total(mu.vertical))

    def _blocks_of(self, x: GridInput, mu: GridPotentials) -> tuple[np.ndarray, np.ndarray | None]:
        # (A_x^T mu) as its unary (F, 2) and pairwise (E,) blocks
        H, W, F = x.pixels.shape
        node = np.asarray(mu.unary, dtype=float)
        if node.shape != (H, W, 2):
            raise InvalidInputError(f"statistics of shape {node.shape} do not match an input of size ({H}, {W})")
        unary = x.pixels.reshape(H * W, F).T @ node.reshape(H * W, 2)
        if not self.pairwise:
            return unary, None
        pairwise = np.zeros(self.n_edge_features)
        for feats, table in ((x.horizontal, mu.horizontal), (x.vertical, mu.vertical)):
            table = np.asarray(table, dtype=float)
            agree = table[..., 0, 0] + table[..., 1, 1]
            if table.ndim == 2:  # one table shared by every edge
                pairwise += agree * feats.reshape(-1, self.n_edge_features).sum(axis=0)
            else:
                pairwise += agree.ravel() @ feats.reshape(-1, self.n_edge_features)
        return unary, pairwise

    def add_features(self, x: GridInput, mu: GridPotentials, out: np.ndarray, scale: float = 1.0) -> None:
        blocks = self.unpack(out)
        unary, pairwise = self._blocks_of(x, mu)
        blocks["unary"] += scale * unary
        if pairwise is not None:
            blocks["pairwise"] += scale * pairwise

    def features_sqnorm(self, x: GridInput, mu: GridPotentials) -> float:
        """``||A_x^T mu||^2`` from the (F, 2) and (E,) blocks alone."""
        unary, pairwise = self._blocks_of(x, mu)
        value = float(np.sum(unary * unary))
        return value + (float(pairwise @ pairwise) if pairwise is not None else 0.0)



# ----- saving (structopt.saved_model): the codecs of GridModel and of its structure
def _describe_grid_model(model: GridModel) -> dict:
    exact_type(model.structure, BinaryGrid, "a GridModel whose structure is")
    return {"n_features": model.n_features, "n_edge_features": model.n_edge_features, "pairwise": model.pairwise}


register_codec("GridModel", GridModel, _describe_grid_model, ("n_features", "n_edge_features", "pairwise"))
register_codec("BinaryGrid", BinaryGrid, lambda s: {"backend": s.backend}, ("backend",), kind="structure")
