"""Every attribute structopt looks up by name on a structure or model is a documented hook
(structopt.contract.HOOKS), and the contract check refuses malformed hooks."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import structopt
from structopt.contract import _MODEL_REQUIRED, _STRUCTURE_REQUIRED, HOOKS, check_contract, check_hooks, has_hook
from structopt.errors import InvalidInputError
from structopt.losses import BoxLoss, Hamming
from structopt.models.multiclass import MultiClassModel
from structopt.structures import BoundingBox, MultiClass
from structopt.structures.registry import registered_structures

LOOKUP = re.compile(r"""(?:hasattr|getattr|has_hook)\(\s*([\w.]*(?:structure|model))\s*,\s*["'](\w+)["']""")
NOT_HOOKS = {"structure", "name", *_MODEL_REQUIRED, *_STRUCTURE_REQUIRED}  # required pieces, not optional hooks


def test_every_lookup_by_name_is_a_documented_hook():
    documented = {h.name for h in HOOKS.values()}
    found = {}
    for path in Path(structopt.__file__).parent.rglob("*.py"):
        for match in LOOKUP.finditer(path.read_text()):
            found.setdefault(match.group(2), path.name)
    assert {"edge_potentials", "topk_iou", "node_constant", "states_per_node", "Potentials"} <= set(found)
    undocumented = {name: where for name, where in found.items() if name not in documented | NOT_HOOKS}
    assert not undocumented, f"document these hooks in structopt.contract.HOOKS: {undocumented}"
    for h in HOOKS.values():
        assert f"``{h.name}" in structopt.contract.__doc__, h.name


def test_builtins_declare_well_formed_hooks():
    rng = np.random.default_rng(0)
    for cls in registered_structures().values():
        structure, _ = cls.example(rng)
        check_hooks(structure, "structure")
    check_hooks(MultiClassModel(2, 3), "model")
    assert has_hook(BoundingBox(), "topk_iou") and not has_hook(MultiClass(2), "topk_iou")
    with pytest.raises(KeyError, match="not a documented structure hook"):
        has_hook(MultiClass(2), "undocumented_hook")


class ZeroStates(MultiClass):
    states_per_node = 0


class HalfBox(MultiClass):
    def topk_iou(self, theta, y_true, k):
        raise AssertionError


class NodeOnly(MultiClass):
    node_constant = 3.0  # not callable


def test_contract_refuses_malformed_hooks():
    with pytest.raises(InvalidInputError, match="states_per_node must be an integer >= 1"):
        check_contract(MultiClassModel(2, structure=ZeroStates(3)), Hamming())
    with pytest.raises(InvalidInputError, match="declares the hook topk_iou but not marginals_iou"):
        check_contract(MultiClassModel(2, structure=HalfBox(3)), BoxLoss())
    with pytest.raises(InvalidInputError, match="node_constant must be a method"):
        check_hooks(NodeOnly(3), "structure")
