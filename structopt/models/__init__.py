"""Linear joint feature maps, each paired with one structure."""

from structopt.models.base import Model
from structopt.models.chain import ChainModel
from structopt.models.multiclass import MultiClassModel

__all__ = ["ChainModel", "Model", "MultiClassModel"]

from structopt.models.grid import GridInput, GridModel
from structopt.models.matching import MatchingModel

__all__ += ["MatchingModel"]
__all__ += ["GridInput", "GridModel"]
