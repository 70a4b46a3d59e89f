"""Output structures: finite output sets with their marginal polytopes and oracles."""

from structopt.structures.base import Polytope, Structure, add, flatten, inner, scale, unflatten
from structopt.structures.chain import Chain, ChainPotentials
from structopt.structures.multiclass import MultiClass, MultiClassPotentials

__all__ = ["Chain", "ChainPotentials", "MultiClass", "MultiClassPotentials", "Polytope", "Structure",
           "add", "flatten", "inner", "scale", "unflatten"]

from structopt.structures.grid import BinaryGrid, GridPotentials
from structopt.structures.matching import BipartiteMatching, MatchingPotentials

__all__ += ["BipartiteMatching", "MatchingPotentials"]
__all__ += ["BinaryGrid", "GridPotentials"]
