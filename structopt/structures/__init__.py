"""Output structures: finite output sets with their marginal polytopes and oracles.

Importing a structure module registers its structure (:mod:`structopt.structures.registry`). This package
imports every public module, the first ones below in the order ``structopt check`` has always run them (and
drawn its seeded instances in), the others by name, and exports each registered structure class with its
``Potentials`` type: a new built-in structure joins the package, ``import structopt`` and ``structopt check``
by its decorator, with no list to edit.
"""

# isort: off
from structopt.structures.base import Polytope, Structure, add, flatten, inner, scale, unflatten
from structopt.structures.registry import register_structure, registered_structures, structure_class
# registration (check) order of the structures registered before the registry was shared: kept for the seeds
from structopt.structures import chain, multiclass, matching, grid, box, lp, tree, factor_graph  # noqa: F401
from structopt.structures.dp import DPFamily, DPPotentials, DPStructure, Hypergraph, LabelDP
from structopt.structures.latent_chain import LatentChain
from structopt.registry import import_public_modules
# isort: on

import_public_modules(__name__, __path__)


def _registered_names() -> dict[str, type]:
    """Each built-in structure class and its ``Potentials`` NamedTuple, by name, in registration order."""
    names: dict[str, type] = {}
    for cls in registered_structures().values():
        names[cls.__name__] = cls
        potentials = vars(cls).get("Potentials")
        if isinstance(potentials, type):
            names[potentials.__name__] = potentials
    return names


#: the registered built-ins' public names (derived from the registry; ``structopt.__init__`` reads it too)
BUILTIN_NAMES: tuple[str, ...] = tuple(_registered_names())
globals().update(_registered_names())

__all__ = ["DPFamily", "DPPotentials", "DPStructure", "Hypergraph", "LabelDP", "LatentChain", "Polytope", "Structure",
           "add", "flatten", "inner", "register_structure", "registered_structures", "scale", "structure_class",
           "unflatten"]
__all__ += BUILTIN_NAMES  # the registered built-ins' classes and potentials types
