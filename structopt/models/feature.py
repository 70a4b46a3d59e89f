"""The generic joint feature map for structures whose statistics are one flat vector."""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from structopt.errors import InvalidInputError, NotSupportedError, check_count, example_error
from structopt.models.base import Model, feature_matrix
from structopt.structures.base import Potentials, Structure

FeatureInput = np.ndarray | sp.csr_matrix


class FeatureModel(Model):
    """``theta = x @ w``: one feature row per statistic.

    Works with every structure whose potentials type has a single field (``LPStructure``'s
    ``VectorPotentials``, ``MultiClass``, ...). The input of an example is an (n_stats, F) dense
    array or scipy.sparse CSR matrix whose row j holds the features of statistic j, so the score of
    an output is ``<w, x^T stats(y)>``.

    Parameters
    ----------
    structure : Structure
        Declares ``Potentials``, a NamedTuple type with one field.
    n_features : int
        F, the number of columns of every input.

    Examples
    --------
    >>> import cvxpy as cp
    >>> z = cp.Variable(5, boolean=True)
    >>> model = FeatureModel(LPStructure(z, [cp.sum(z) == 2]), n_features=3)   # x: (5, 3)
    """

    def __init__(self, structure: Structure, n_features: int):
        if not isinstance(structure, Structure):  # e.g. the class instead of an instance
            raise InvalidInputError(f"FeatureModel needs a structure instance (e.g. MultiClass(3)), got {structure!r}")
        potentials_type = getattr(structure, "Potentials", None)
        fields = getattr(potentials_type, "_fields", None)
        if fields is None or len(fields) != 1:
            raise NotSupportedError(
                f"FeatureModel needs a structure with flat statistics (a `Potentials` NamedTuple type with one "
                f"field); {getattr(structure, 'name', type(structure).__name__)} declares "
                f"{'no Potentials type' if fields is None else f'fields {fields}'}")
        n_features = check_count(n_features, "n_features", "FeatureModel")
        self.structure = structure
        self.n_features = int(n_features)
        self._potentials = potentials_type

    def __repr__(self) -> str:
        return f"FeatureModel({self.structure!r}, n_features={self.n_features})"

    @property
    def blocks(self) -> list[tuple[str, tuple[int, ...]]]:
        return [("weights", (self.n_features,))]

    def validate_input(self, x: FeatureInput, index: int | None = None) -> FeatureInput:
        x = feature_matrix(x, self.n_features, index, "FeatureModel input", "n_stats")
        try:  # the structure checks that it has instances with this many statistics
            self.structure.expand(self._potentials(np.zeros(x.shape[0])))
        except InvalidInputError as exc:
            raise example_error(index, f"{x.shape[0]} feature rows do not fit {self.structure!r}: {exc}") from None
        return x

    def potentials(self, x: FeatureInput, w: np.ndarray) -> Potentials:
        return self._potentials(np.asarray(x @ self.unpack(w)["weights"], dtype=float).ravel())

    def add_features(self, x: FeatureInput, mu: Potentials, out: np.ndarray, scale: float = 1.0) -> None:
        values = np.asarray(mu[0], dtype=float)
        if values.shape != (x.shape[0],):
            raise InvalidInputError(f"statistics of shape {values.shape} do not match {x.shape[0]} feature rows")
        out += scale * np.asarray(x.T @ values).ravel()

    def features_sqnorm(self, x: FeatureInput, mu: Potentials) -> float:
        g = np.asarray(x.T @ np.asarray(mu[0], dtype=float)).ravel()
        return float(g @ g)

    def joint_feature(self, x: FeatureInput, y: Any) -> np.ndarray:
        return self.features(x, self.structure.stats(y, self.potentials(x, self.zeros())))
