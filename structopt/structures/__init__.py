"""Output structures: finite output sets with their marginal polytopes and oracles.

Importing a structure module registers its structure (:mod:`structopt.structures.registry`); the
imports below are in registration order, which is the order ``structopt check`` runs them in.
"""

# isort: off
from structopt.structures.base import Polytope, Structure, add, flatten, inner, scale, unflatten
from structopt.structures.registry import register_structure, registered_structures, structure_class
from structopt.structures.chain import Chain, ChainPotentials
from structopt.structures.multiclass import MultiClass, MultiClassPotentials
from structopt.structures.matching import BipartiteMatching, MatchingPotentials
from structopt.structures.grid import BinaryGrid, GridPotentials
from structopt.structures.box import BoundingBox, BoxPotentials
from structopt.structures.lp import LPStructure, VectorPotentials
from structopt.structures.tree import TreePotentials, TreeStructure
from structopt.structures.factor_graph import FactorGraph, FactorGraphPotentials
from structopt.structures.dp import DPFamily, DPPotentials, DPStructure, Hypergraph, LabelDP
from structopt.structures.latent_chain import LatentChain
from structopt.structures.dependency import DependencyPotentials, DependencyTree
from structopt.structures.multilabel import MultiLabel, MultiLabelPotentials
# isort: on

__all__ = [
    "BinaryGrid", "BipartiteMatching", "BoundingBox", "BoxPotentials", "Chain", "ChainPotentials", "DPFamily",
    "DPPotentials", "DPStructure", "DependencyPotentials", "DependencyTree", "FactorGraph", "FactorGraphPotentials",
    "GridPotentials", "Hypergraph", "LPStructure", "LabelDP",
    "LatentChain",  # hidden sub-states per label (structures/latent_chain.py)
    "MatchingPotentials", "MultiClass", "MultiClassPotentials",
    "MultiLabel", "MultiLabelPotentials",  # binary labels with pairwise interactions (structures/multilabel.py)
    "Polytope", "Structure", "TreePotentials", "TreeStructure", "VectorPotentials", "add",
    "flatten", "inner", "register_structure", "registered_structures", "scale", "structure_class", "unflatten",
]
