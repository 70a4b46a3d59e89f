"""structopt: structured prediction with combinatorial oracles.

Declare an output structure (a chain, a matching, ...) through a model, build an
:class:`SSVMProblem`, and train it with a solver from :mod:`structopt.solvers`.
"""

from structopt import _numba_cache  # noqa: F401  (first: points numba's cache at this source version)
from structopt.errors import InvalidInputError, NotSupportedError, StructoptError
from structopt.estimator import StructuredSVM
from structopt.losses import Hamming, Loss, MatchingHamming, WeightedHamming
from structopt.models import ChainModel, GridInput, GridModel, MatchingModel, Model, MultiClassModel
from structopt.problem import OracleResult, SSVMProblem
from structopt.solvers import Result, get_solver
from structopt.structures import (
    BinaryGrid,
    BipartiteMatching,
    Chain,
    ChainPotentials,
    GridPotentials,
    MatchingPotentials,
    MultiClass,
    MultiClassPotentials,
    Structure,
)

__version__ = "0.1.0"

__all__ = [
    "BipartiteMatching", "Chain", "ChainModel", "ChainPotentials", "Hamming", "InvalidInputError", "Loss",
    "MatchingHamming", "MatchingModel", "MatchingPotentials", "Model", "MultiClass", "MultiClassModel",
    "MultiClassPotentials", "NotSupportedError", "OracleResult", "Result", "SSVMProblem", "StructoptError",
    "Structure", "StructuredSVM", "WeightedHamming", "__version__", "get_solver",
]
__all__ += ["BinaryGrid", "GridInput", "GridModel", "GridPotentials"]
