"""Output structures: finite output sets with their marginal polytopes and oracles."""

from structopt.structures.base import Polytope, Structure, add, flatten, inner, scale, unflatten
from structopt.structures.box import BoundingBox, BoxPotentials
from structopt.structures.chain import Chain, ChainPotentials
from structopt.structures.factor_graph import FactorGraph, FactorGraphPotentials
from structopt.structures.grid import BinaryGrid, GridPotentials
from structopt.structures.lp import LPStructure, VectorPotentials
from structopt.structures.matching import BipartiteMatching, MatchingPotentials
from structopt.structures.multiclass import MultiClass, MultiClassPotentials
from structopt.structures.tree import TreePotentials, TreeStructure

__all__ = [
    "BinaryGrid", "BipartiteMatching", "BoundingBox", "BoxPotentials", "Chain", "ChainPotentials", "FactorGraph",
    "FactorGraphPotentials", "GridPotentials",
    "LPStructure", "MatchingPotentials", "MultiClass", "MultiClassPotentials", "Polytope", "Structure",
    "TreePotentials", "TreeStructure", "VectorPotentials", "add", "flatten", "inner", "scale", "unflatten",
]
