"""Linear joint feature maps, each paired with one structure."""

from structopt.models.base import Model
from structopt.models.box import BoxModel
from structopt.models.chain import ChainModel
from structopt.models.dependency import DependencyModel
from structopt.models.feature import FeatureModel
from structopt.models.graph import GraphInput, GraphModel, GraphPotentials, GraphStructure
from structopt.models.grid import GridInput, GridModel
from structopt.models.matching import MatchingModel
from structopt.models.multiclass import MultiClassModel
from structopt.models.multilabel import MultiLabelModel
from structopt.models.tree import TreeModel

__all__ = [
    "BoxModel", "ChainModel", "DependencyModel", "FeatureModel", "GraphInput", "GraphModel", "GraphPotentials",
    "GraphStructure", "GridInput", "GridModel", "MatchingModel", "Model", "MultiClassModel",
    "MultiLabelModel",  # per-label weights and label interactions (models/multilabel.py)
    "TreeModel",
]
