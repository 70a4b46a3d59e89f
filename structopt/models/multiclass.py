"""Linear multiclass model (handy in tests and as a per-token baseline)."""

from __future__ import annotations

import numpy as np

from structopt.codecs import exact_type, register_codec
from structopt.errors import MAX_ABS_FEATURE, InvalidInputError, check_count, example_error, numeric_array
from structopt.models.base import Model, model_structure
from structopt.structures.multiclass import MultiClass, MultiClassPotentials


class MultiClassModel(Model):
    """``theta(s) = <x, W[:, s]>`` for a feature vector ``x`` of length F.

    Parameters
    ----------
    n_features : int
        F.
    n_classes : int, optional
        S (required unless ``structure`` is given, which it must then match).
    structure : MultiClass, optional
        The structure to run on (a subclass or a configured instance); default ``MultiClass(n_classes)``.
    """

    @classmethod
    def example(cls, rng: np.random.Generator) -> tuple[MultiClassModel, list[np.ndarray]]:
        """Four inputs of 3 features, 4 classes (see :meth:`Model.example`)."""
        return cls(3, 4), [rng.normal(size=3) for _ in range(4)]

    def __init__(self, n_features: int, n_classes: int | None = None, *, structure: MultiClass | None = None):
        self.n_features = check_count(n_features, "n_features", "MultiClassModel")
        if n_classes is None and structure is None:
            raise InvalidInputError("MultiClassModel needs n_classes (or a MultiClass structure=)")
        S = None if n_classes is None else check_count(n_classes, "n_classes", "MultiClassModel")
        self.structure = model_structure("MultiClassModel", MultiClass, structure, lambda: MultiClass(S),
                                         **({} if S is None else {"n_classes": S}))
        self.n_classes = self.structure.n_classes

    def __repr__(self) -> str:
        return f"MultiClassModel(n_features={self.n_features}, n_classes={self.n_classes})"

    @property
    def blocks(self) -> list[tuple[str, tuple[int, ...]]]:
        return [("weights", (self.n_features, self.n_classes))]

    def validate_input(self, x: np.ndarray, index: int | None = None) -> np.ndarray:
        x = numeric_array(x, "multiclass input", index)
        if x.shape != (self.n_features,):
            raise example_error(index, f"multiclass input must have shape ({self.n_features},), got {x.shape}")
        if x.size and np.max(np.abs(x)) > MAX_ABS_FEATURE:
            raise example_error(index, f"multiclass input has features beyond {MAX_ABS_FEATURE:g} in magnitude, "
                                       "whose squares overflow: rescale the features")
        return x

    def potentials(self, x: np.ndarray, w: np.ndarray) -> MultiClassPotentials:
        return MultiClassPotentials(x @ self.unpack(numeric_array(w, "weight vector w"))["weights"])

    def add_features(self, x: np.ndarray, mu: MultiClassPotentials, out: np.ndarray, scale: float = 1.0) -> None:
        scores = np.asarray(mu.scores, dtype=float)
        if scores.shape != (self.n_classes,):
            raise InvalidInputError(f"statistics of shape {scores.shape} do not match {self.n_classes} classes")
        self.unpack(out)["weights"] += scale * np.outer(x, scores)



# ----- saving (structopt.saved_model): the codecs of MultiClassModel and of its structure
def _describe_multiclass_model(model: MultiClassModel) -> dict:
    exact_type(model.structure, MultiClass, "a MultiClassModel whose structure is")
    return {"n_features": model.n_features, "n_classes": model.n_classes}


register_codec("MultiClassModel", MultiClassModel, _describe_multiclass_model, ("n_features", "n_classes"))
register_codec("MultiClass", MultiClass, lambda s: {"n_classes": s.n_classes}, ("n_classes",), kind="structure")
