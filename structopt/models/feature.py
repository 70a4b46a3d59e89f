"""The generic joint feature map for structures whose statistics are one flat vector."""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from structopt.codecs import build_structure, describe_structure, register_codec
from structopt.errors import InvalidInputError, NotSupportedError, check_count, example_error
from structopt.models.base import Model, feature_matrix
from structopt.structures.base import Potentials, Structure

FeatureInput = np.ndarray | sp.csr_matrix

#: the rule a structure must follow to serve FeatureModel, in one line (error messages and check_model)
FLAT_RULE = ("FeatureModel computes one potential per feature row, a flat vector in the statistics' flatten order; "
             "the structure's expand must accept that flat vector (its one field raveled)")


class FeatureModel(Model):
    """``theta = x @ w``: one feature row per statistic; or, with ``n_labels``, per-label weights.

    Works with every structure whose potentials type has a single field (``LPStructure``'s
    ``VectorPotentials``, ``MultiClass``, a ``DPStructure``, ...). The input of an example is an
    (n_stats, F) dense array or scipy.sparse CSR matrix whose row j holds the features of statistic j,
    so the score of an output is ``<w, x^T stats(y)>``: one weight vector shared by every statistic.

    **The layout rule.** Row j of ``x`` is statistic j in ``flatten`` order (row-major over the one
    field). The model computes the flat vector ``x @ w`` and hands the structure its potentials in the
    structure's own layout: the shape ``structure.expand`` gives to the flat vector of that size (so a
    structure whose one field is a matrix, such as a dependency tree's (n + 1, n + 1) arcs, gets a
    matrix, and its statistics come back through the adjoint raveled). A structure serves this model
    when its ``expand`` accepts the flat vector; ``check_model`` states the rule when it does not.

    **Per-label weights** (``n_labels=L``, e.g. multi-label classification with an ``LPStructure``
    over L labels): the weights are an (L, F) block ``W``, one weight vector per statistic (label),
    and ``theta_l = <x_l, W[l]>``. An input is then either one feature vector shared by every label
    (an (F,) vector or a (1, F) row, dense or CSR: a document's features) or (L, F) rows, one per
    label. Every example has exactly L statistics. This is the model a hand-built block design gives
    (``FeatureModel(structure, n_features=L * F)`` on the block-diagonal inputs
    ``kron(eye(L), x)``), with the same weight layout (``W.ravel()``), without building the
    L-times-wider inputs.

    Parameters
    ----------
    structure : Structure
        Declares ``Potentials``, a NamedTuple type with one field.
    n_features : int
        F, the number of columns of every input.
    n_labels : int, optional
        L: per-label weights for a structure with L statistics (checked here against the structure).

    Examples
    --------
    >>> import cvxpy as cp
    >>> z = cp.Variable(5, boolean=True)
    >>> model = FeatureModel(LPStructure(z, [cp.sum(z) == 2]), n_features=3)   # x: (5, 3)
    >>> tagger = FeatureModel(LPStructure(z, [cp.sum(z) <= 3]), n_features=3, n_labels=5)   # x: (3,)
    >>> tagger.unpack(tagger.zeros())["weights"].shape                          # one row per label
    (5, 3)
    """

    @classmethod
    def example(cls, rng: np.random.Generator) -> tuple[FeatureModel, list[np.ndarray]]:
        """An LP structure of 6 binary variables (a budget and an exclusion) with 3 features per variable (see
        :meth:`Model.example`)."""
        import cvxpy as cp

        from structopt.structures.lp import LPStructure

        z = cp.Variable(6, boolean=True)
        return cls(LPStructure(z, [cp.sum(z) <= 3, z[0] + z[1] <= 1]), n_features=3), \
            [rng.normal(size=(6, 3)) for _ in range(3)]

    def __init__(self, structure: Structure, n_features: int, *, n_labels: int | None = None):
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
        self.n_labels = None if n_labels is None else check_count(n_labels, "n_labels", "FeatureModel")
        self._shapes: dict[int, tuple[int, ...]] = {}  # n_stats -> the shape expand gives the flat potentials
        if self.n_labels is not None:
            try:  # the structure must have instances with n_labels statistics
                structure.expand(potentials_type(np.zeros(self.n_labels)))
            except InvalidInputError as exc:
                raise InvalidInputError(f"FeatureModel: n_labels={self.n_labels} does not fit {structure!r}: "
                                        f"{exc}") from None

    def __repr__(self) -> str:
        labels = "" if self.n_labels is None else f", n_labels={self.n_labels}"
        return f"FeatureModel({self.structure!r}, n_features={self.n_features}{labels})"

    @property
    def blocks(self) -> list[tuple[str, tuple[int, ...]]]:
        if self.n_labels is not None:
            return [("weights", (self.n_labels, self.n_features))]
        return [("weights", (self.n_features,))]

    def validate_input(self, x: FeatureInput, index: int | None = None) -> FeatureInput:
        if self.n_labels is None:
            x = feature_matrix(x, self.n_features, index, "FeatureModel input", "n_stats")
            self._layout(x.shape[0], index)
            return x
        if not sp.issparse(x) and np.ndim(x) == 1:
            x = np.reshape(x, (1, -1))  # one vector shared by every label
        x = feature_matrix(x, self.n_features, index, "FeatureModel input", f"1 or {self.n_labels}")
        if x.shape[0] not in (1, self.n_labels):
            raise example_error(index, f"a per-label FeatureModel input has one feature row (shared by every label) "
                                       f"or n_labels={self.n_labels} rows, got {x.shape[0]}")
        return x

    def _layout(self, n_stats: int, index: int | None = None) -> tuple[int, ...]:
        # the shape of the structure's potentials with n_stats statistics (the layout rule), once per size
        shape = self._shapes.get(n_stats)
        if shape is None:
            try:  # the structure checks that it has instances with this many statistics
                template = self.structure.expand(self._potentials(np.zeros(n_stats)))
            except InvalidInputError as exc:
                raise example_error(index, f"{n_stats} feature rows do not fit {self.structure!r}: {exc} "
                                           f"({FLAT_RULE})") from None
            shape = np.shape(template[0])
            if int(np.prod(shape)) != n_stats:
                raise example_error(index, f"{self.structure!r} expands {n_stats} flat potentials to shape {shape}: "
                                           f"{FLAT_RULE}")
            self._shapes[n_stats] = shape
        return shape

    def _weights(self, w: np.ndarray) -> np.ndarray:
        return self.unpack(w)["weights"]

    def potentials(self, x: FeatureInput, w: np.ndarray) -> Potentials:
        W = self._weights(w)
        if self.n_labels is None:
            flat = np.asarray(x @ W, dtype=float).ravel()
            shape = self._shapes.get(flat.size) or self._layout(flat.size)
            return self._potentials(flat if len(shape) == 1 else flat.reshape(shape))
        if x.shape[0] == 1:  # theta_l = <x, W[l]>
            return self._potentials(np.asarray(x @ W.T, dtype=float).ravel())
        rows = x.multiply(W).sum(axis=1) if sp.issparse(x) else np.einsum("lf,lf->l", x, W)
        return self._potentials(np.asarray(rows, dtype=float).ravel())

    def _mu(self, x: FeatureInput, mu: Potentials) -> np.ndarray:
        values = np.asarray(mu[0], dtype=float)
        n = x.shape[0] if self.n_labels is None else self.n_labels
        if self.n_labels is None and values.ndim > 1 and values.size == n:  # statistics in the structure's layout
            values = values.ravel()
        if values.shape != (n,):
            raise InvalidInputError(f"statistics of shape {values.shape} do not match {n} "
                                    f"{'feature rows' if self.n_labels is None else 'labels'}")
        return values

    def _features(self, x: FeatureInput, values: np.ndarray) -> np.ndarray:
        # A_x^T mu in the shape of the weights block
        if self.n_labels is None:
            return np.asarray(x.T @ values).ravel()
        if x.shape[0] == 1:
            row = x.toarray().ravel() if sp.issparse(x) else x.ravel()
            return np.outer(values, row)
        return np.asarray(x.multiply(values[:, None]).toarray() if sp.issparse(x) else values[:, None] * x)

    def add_features(self, x: FeatureInput, mu: Potentials, out: np.ndarray, scale: float = 1.0) -> None:
        out += scale * self._features(x, self._mu(x, mu)).ravel()

    def features_sqnorm(self, x: FeatureInput, mu: Potentials) -> float:
        g = self._features(x, self._mu(x, mu))
        return float(np.sum(g * g))

    def joint_feature(self, x: FeatureInput, y: Any) -> np.ndarray:
        return self.features(x, self.structure.stats(y, self.potentials(x, self.zeros())))



# ----- saving (structopt.saved_model): any structure that has a codec (describe_structure refuses the others)
register_codec("FeatureModel", FeatureModel,
               lambda model: {"structure": describe_structure(model.structure), "n_features": model.n_features,
                              "n_labels": model.n_labels},
               ("structure", "n_features", "n_labels"),
               build=lambda args: FeatureModel(build_structure(args["structure"]), args["n_features"],
                                               n_labels=args["n_labels"]))
