"""structopt: structured prediction with combinatorial oracles.

Declare an output structure (a chain, a matching, ...) through a model, build an
:class:`SSVMProblem`, and train it with a solver from :mod:`structopt.solvers`.
"""

from structopt.errors import InvalidInputError, NotSupportedError, StructoptError
from structopt.losses import Hamming, Loss, WeightedHamming
from structopt.models import ChainModel, Model, MultiClassModel
from structopt.problem import OracleResult, SSVMProblem
from structopt.structures import Chain, ChainPotentials, MultiClass, MultiClassPotentials, Structure

__version__ = "0.1.0"

__all__ = [
    "Chain", "ChainModel", "ChainPotentials", "Hamming", "InvalidInputError", "Loss", "Model",
    "MultiClass", "MultiClassModel", "MultiClassPotentials", "NotSupportedError", "OracleResult",
    "SSVMProblem", "StructoptError", "Structure", "WeightedHamming", "__version__",
]
