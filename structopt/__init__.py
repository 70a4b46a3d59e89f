"""structopt: structured prediction with combinatorial oracles.

Declare an output structure (a chain, a matching, ...) through a model, build an
:class:`SSVMProblem`, and train it with a solver from :mod:`structopt.solvers`.
"""

from __future__ import annotations

import importlib
from typing import Any

from structopt import _numba_cache  # noqa: F401  (first: points numba's cache at this source version)
from structopt.errors import InvalidInputError, NotSupportedError, StructoptError

__version__ = "0.1.0"

# The public names live in their modules and are imported on first use (PEP 562): ``import structopt``
# then costs numba and the errors only, and a run pays for what it touches (the solvers, the
# structures and scipy.optimize through them, scikit-learn through the estimator, the marginals
# package with its solvers). ``from structopt import X`` and ``structopt.X`` work as before.
_LAZY: dict[str, str] = {
    **dict.fromkeys(("BoxLoss", "Hamming", "Loss", "MatchingHamming", "WeightedHamming"), "structopt.losses"),
    **dict.fromkeys(("BoxModel", "ChainModel", "DependencyModel", "FeatureModel", "GraphInput", "GraphModel",
                     "GridInput", "GridModel", "MatchingModel", "Model", "MultiClassModel", "TreeModel"),
                    "structopt.models"),
    **dict.fromkeys(("OracleResult", "SSVMProblem"), "structopt.problem"),
    **dict.fromkeys(("Result", "get_solver"), "structopt.solvers"),
    **dict.fromkeys(("BinaryGrid", "BipartiteMatching", "BoundingBox", "BoxPotentials", "Chain", "ChainPotentials",
                     "DPPotentials", "DPStructure", "DependencyPotentials", "DependencyTree", "FactorGraph",
                     "FactorGraphPotentials", "GridPotentials",
                     "LPStructure", "MatchingPotentials", "MultiClass", "MultiClassPotentials", "Structure",
                     "TreePotentials", "TreeStructure", "VectorPotentials"), "structopt.structures"),
    "LatentChain": "structopt.structures",  # hidden sub-states per label (solvers.latent_ssvm)
    "StructuredSVM": "structopt.estimator",
    **dict.fromkeys(("SavedModel", "load_model", "save_model"), "structopt.saved_model"),  # trained models on disk
    "register_codec": "structopt.codecs",  # how a model type is saved
    **dict.fromkeys(("map_inference", "MAPResult"), "structopt.marginals.map"),  # MAP for UAI models
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value  # later lookups are plain attribute reads
        return value
    if not name.startswith("__"):  # ``structopt.solvers`` and the like without importing them first
        try:
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as error:
            if error.name != f"{__name__}.{name}":
                raise
    raise AttributeError(f"module 'structopt' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


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
    "DependencyModel",
    "DependencyPotentials",
    "DependencyTree",
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
    "LatentChain",
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
    "SavedModel",
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
    "load_model",
    "map_inference",
    "register_codec",
    "save_model",
]
