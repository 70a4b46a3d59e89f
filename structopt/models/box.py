"""Linear box model: cell scores are linear in per-cell features (efficient subwindow search)."""

from __future__ import annotations

import numpy as np

from structopt.codecs import exact_type, register_codec
from structopt.errors import InvalidInputError, check_count
from structopt.models.base import Model, cell_features, model_structure
from structopt.structures.box import BoundingBox, BoxPotentials


class BoxModel(Model):
    """``cells = x @ w`` for a cell-feature array ``x`` of shape (H, W, F).

    The joint feature of a box is the sum of the features of the cells inside it (Lampert et al.
    2008), ``Phi(x, box) = sum_{(i, j) in box} x[i, j]``; a bias per cell (an area term) is a
    constant feature the caller adds. Images of any size share one model.

    Parameters
    ----------
    n_features : int
        Cell feature dimension F (exactly F weights).
    search : {"bnb", "exhaustive"}, default "bnb"
        Search of the :class:`BoundingBox` structure; with ``structure``, that structure's search is
        used and another value than the default must agree with it.
    structure : BoundingBox, optional
        The structure to run on (a subclass or a configured instance); default ``BoundingBox(search)``.
    """

    @classmethod
    def example(cls, rng: np.random.Generator) -> tuple[BoxModel, list[np.ndarray]]:
        """Three random 3 x 4 images of 3 features (see :meth:`Model.example`)."""
        return cls(3), [rng.normal(size=(3, 4, 3)) for _ in range(3)]

    def __init__(self, n_features: int, search: str = "bnb", *, structure: BoundingBox | None = None):
        self.n_features = check_count(n_features, "n_features", "BoxModel")
        self.structure = model_structure("BoxModel", BoundingBox, structure, lambda: BoundingBox(search),
                                         **({} if search == "bnb" else {"search": search}))

    def __repr__(self) -> str:
        return f"BoxModel(n_features={self.n_features}, search={self.structure.search!r})"

    @property
    def blocks(self) -> list[tuple[str, tuple[int, ...]]]:
        return [("cell", (self.n_features,))]

    def validate_input(self, x: np.ndarray, index: int | None = None) -> np.ndarray:
        return cell_features(x, self.n_features, index)

    def potentials(self, x: np.ndarray, w: np.ndarray) -> BoxPotentials:
        return BoxPotentials(x @ self.unpack(w)["cell"])

    def _cells(self, x: np.ndarray, mu: BoxPotentials) -> np.ndarray:
        cells = np.asarray(mu.cells if isinstance(mu, BoxPotentials) else mu, dtype=float)
        if cells.shape != x.shape[:2]:
            raise InvalidInputError(f"statistics of shape {cells.shape} do not match an input with {x.shape[:2]} cells")
        return cells

    def add_features(self, x: np.ndarray, mu: BoxPotentials, out: np.ndarray, scale: float = 1.0) -> None:
        cells = self._cells(x, mu)
        H, W, F = x.shape
        out[:F] += scale * (cells.reshape(H * W) @ x.reshape(H * W, F))

    def features_sqnorm(self, x: np.ndarray, mu: BoxPotentials) -> float:
        cells = self._cells(x, mu)
        H, W, F = x.shape
        g = cells.reshape(H * W) @ x.reshape(H * W, F)
        return float(g @ g)



# ----- saving (structopt.saved_model): the codecs of BoxModel and of its structure
def _describe_box_model(model: BoxModel) -> dict:
    exact_type(model.structure, BoundingBox, "a BoxModel whose structure is")
    return {"n_features": model.n_features, "search": model.structure.search}


register_codec("BoxModel", BoxModel, _describe_box_model, ("n_features", "search"))
register_codec("BoundingBox", BoundingBox, lambda s: {"search": s.search}, ("search",), kind="structure")
