"""structopt: structured prediction with combinatorial oracles.

Declare an output structure (a chain, a matching, ...) through a model, build an
:class:`SSVMProblem`, and train it with a solver from :mod:`structopt.solvers`.
"""

from __future__ import annotations

import importlib
from typing import Any

from structopt import _numba_cache  # noqa: F401  (first: points numba's cache at this source version)
from structopt.errors import InvalidInputError, NotSupportedError, StructoptError  # noqa: F401  (in __all__)

__version__ = "0.1.0"

# The public names live in their modules and are imported on first use (PEP 562): ``import structopt``
# then costs numba and the errors only, and a run pays for what it touches (the solvers, the
# structures and scipy.optimize through them, scikit-learn through the estimator, the marginals
# package with its solvers). ``from structopt import X`` and ``structopt.X`` work as before.
#: the core API, name -> module (no built-in structure or model here: those are derived, see _DERIVED)
_LAZY: dict[str, str] = {
    **dict.fromkeys(("BoxLoss", "Hamming", "Loss", "MatchingHamming", "WeightedHamming"), "structopt.losses"),
    **dict.fromkeys(("OracleResult", "SSVMProblem"), "structopt.problem"),
    **dict.fromkeys(("Result", "get_solver"), "structopt.solvers"),
    **dict.fromkeys(("DPPotentials", "DPStructure", "Structure"), "structopt.structures"),
    "LatentChain": "structopt.structures",  # hidden sub-states per label (solvers.latent_ssvm)
    "StructuredSVM": "structopt.estimator",
    **dict.fromkeys(("SavedModel", "load_model", "save_model"), "structopt.saved_model"),  # trained models on disk
    "register_codec": "structopt.codecs",  # how a model type is saved
    **dict.fromkeys(("map_inference", "MAPResult"), "structopt.marginals.map"),  # MAP for UAI models
}
#: the built-ins, derived from their declarations: every registered structure with its potentials type
#: (``structures.BUILTIN_NAMES``) and every exported model (``models.__all__``); reading them imports the package
_DERIVED: dict[str, str] = {"structopt.structures": "BUILTIN_NAMES", "structopt.models": "__all__"}
_EAGER = ("InvalidInputError", "NotSupportedError", "StructoptError", "__version__")


def _derived() -> dict[str, str]:
    """Name -> module of the built-ins (imports the structures and models packages)."""
    found: dict[str, str] = {}
    for module, listing in _DERIVED.items():
        found.update(dict.fromkeys(getattr(importlib.import_module(module), listing), module))
    return found


def _public_names() -> list[str]:
    return sorted({*_EAGER, *_LAZY, *_derived()})


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value  # later lookups are plain attribute reads
        return value
    if name == "__all__":  # computed on first use: it lists the built-ins, which their packages declare
        value = globals()["__all__"] = _public_names()
        return value
    if not name.startswith("__"):  # ``structopt.solvers`` and the like without importing them first
        try:
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as error:
            if error.name != f"{__name__}.{name}":
                raise
    if not name.startswith("_"):  # a built-in structure or model (a probe for a private name imports nothing)
        module = _derived().get(name)
        if module is not None:
            value = globals()[name] = getattr(importlib.import_module(module), name)
            return value
    raise AttributeError(f"module 'structopt' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_public_names()})
