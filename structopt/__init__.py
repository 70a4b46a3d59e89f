"""structopt: structured prediction with combinatorial oracles.

Declare an output structure (a chain, a matching, ...) through a model, build an
:class:`SSVMProblem`, and train it with a solver from :mod:`structopt.solvers`.
"""

from structopt import _numba_cache  # noqa: F401  (first: points numba's cache at this source version)
from structopt.errors import InvalidInputError, NotSupportedError, StructoptError
from structopt.estimator import StructuredSVM
from structopt.losses import BoxLoss, Hamming, Loss, MatchingHamming, WeightedHamming
from structopt.models import BoxModel, ChainModel, FeatureModel, MatchingModel, Model, MultiClassModel, TreeModel
from structopt.problem import OracleResult, SSVMProblem
from structopt.solvers import Result, get_solver
from structopt.structures import (
    BipartiteMatching,
    BoundingBox,
    BoxPotentials,
    Chain,
    ChainPotentials,
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

__all__ = [
    "BipartiteMatching",
    "BoundingBox",
    "BoxLoss",
    "BoxModel",
    "BoxPotentials",
    "Chain",
    "ChainModel",
    "ChainPotentials",
    "FeatureModel",
    "Hamming",
    "InvalidInputError",
    "LPStructure",
    "Loss",
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
]
