"""Linear joint feature maps, each paired with one structure."""

from structopt.models.base import Model
from structopt.models.chain import ChainModel
from structopt.models.multiclass import MultiClassModel

__all__ = ["ChainModel", "Model", "MultiClassModel"]

from structopt.models.matching import MatchingModel

__all__ += ["MatchingModel"]

from structopt.models.feature import FeatureModel  # noqa: E402
from structopt.models.tree import TreeModel  # noqa: E402

__all__ += ["FeatureModel", "TreeModel"]
