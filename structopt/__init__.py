"""structopt: structured prediction with combinatorial oracles.

Declare an output structure (a chain, a matching, ...) through a model, build an
:class:`SSVMProblem`, and train it with a solver from :mod:`structopt.solvers`.
"""

from structopt import _numba_cache  # noqa: F401  (first: points numba's cache at this source version)
from structopt.errors import InvalidInputError, NotSupportedError, StructoptError
from structopt.losses import BoxLoss, Hamming, Loss, MatchingHamming, WeightedHamming
from structopt.models import (
    BoxModel,
    ChainModel,
    FeatureModel,
    GraphInput,
    GraphModel,
    GridInput,
    GridModel,
    MatchingModel,
    Model,
    MultiClassModel,
    TreeModel,
)
from structopt.problem import OracleResult, SSVMProblem
from structopt.solvers import Result, get_solver
from structopt.structures import (
    BinaryGrid,
    BipartiteMatching,
    BoundingBox,
    BoxPotentials,
    Chain,
    ChainPotentials,
    DPPotentials,
    DPStructure,
    FactorGraph,
    FactorGraphPotentials,
    GridPotentials,
    LPStructure,
    MatchingPotentials,
    MultiClass,
    MultiClassPotentials,
    Structure,
    TreePotentials,
    TreeStructure,
    VectorPotentials,
)

__version__ = "0.1.0"


def __getattr__(name: str):
    # the estimator imports scikit-learn (about a second): load it when it is first asked for
    if name == "StructuredSVM":
        from structopt.estimator import StructuredSVM

        return StructuredSVM
    if name in ("map_inference", "MAPResult"):  # MAP for UAI models lives with marginal inference
        from structopt.marginals import map as map_module

        return getattr(map_module, name)
    raise AttributeError(f"module 'structopt' has no attribute {name!r}")

__all__ = [
    "BinaryGrid",
    "BipartiteMatching",
    "BoundingBox",
    "BoxLoss",
    "BoxModel",
    "BoxPotentials",
    "Chain",
    "ChainModel",
    "ChainPotentials",
    "DPPotentials",
    "DPStructure",
    "FactorGraph",
    "FactorGraphPotentials",
    "FeatureModel",
    "GraphInput",
    "GraphModel",
    "GridInput",
    "GridModel",
    "GridPotentials",
    "Hamming",
    "InvalidInputError",
    "LPStructure",
    "Loss",
    "MAPResult",
    "MatchingHamming",
    "MatchingModel",
    "MatchingPotentials",
    "Model",
    "MultiClass",
    "MultiClassModel",
    "MultiClassPotentials",
    "NotSupportedError",
    "OracleResult",
    "Result",
    "SSVMProblem",
    "StructoptError",
    "Structure",
    "StructuredSVM",
    "TreeModel",
    "TreePotentials",
    "TreeStructure",
    "VectorPotentials",
    "WeightedHamming",
    "__version__",
    "get_solver",
    "map_inference",
]
