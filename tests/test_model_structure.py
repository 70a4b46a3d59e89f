"""Models take a structure= (a subclass or a configured instance), validated; the default is unchanged."""

from __future__ import annotations

import numpy as np
import pytest

from structopt.errors import InvalidInputError
from structopt.models.box import BoxModel
from structopt.models.grid import GridModel
from structopt.models.matching import MatchingModel
from structopt.models.multiclass import MultiClassModel
from structopt.structures import BinaryGrid, BipartiteMatching, BoundingBox, Chain, MultiClass


class MyMatching(BipartiteMatching):
    pass


def test_defaults_unchanged():
    assert type(GridModel(2, 1).structure) is BinaryGrid
    assert BoxModel(3).structure.search == "bnb" and BoxModel(3, "exhaustive").structure.search == "exhaustive"
    model = MatchingModel(2)
    assert type(model.structure) is BipartiteMatching and model.allow_unmatched is False
    assert MatchingModel(2, True).structure.allow_unmatched
    assert MultiClassModel(3, 4).structure.n_classes == 4


def test_structure_instances_and_subclasses_are_used():
    grid = BinaryGrid()
    assert GridModel(2, 1, structure=grid).structure is grid
    box = BoundingBox("exhaustive")
    model = BoxModel(3, structure=box)
    assert model.structure is box and repr(model) == "BoxModel(n_features=3, search='exhaustive')"
    matching = MyMatching(allow_unmatched=True)
    assert MatchingModel(2, True, structure=matching).structure is matching
    model = MatchingModel(2, structure=matching)
    assert model.structure is matching and model.allow_unmatched and [b for b, _ in model.blocks] == ["edge",
                                                                                                      "unmatched"]
    model = MultiClassModel(3, structure=MultiClass(5))
    assert model.n_classes == 5 and model.blocks == [("weights", (3, 5))]
    assert np.shape(model.potentials(np.ones(3), model.zeros()).scores) == (5,)


def test_wrong_structure_type_or_size_is_refused():
    with pytest.raises(InvalidInputError, match="GridModel needs structure= to be a BinaryGrid"):
        GridModel(2, 1, structure=Chain(2))
    with pytest.raises(InvalidInputError, match=r"structure\.search is 'bnb'"):
        BoxModel(3, "exhaustive", structure=BoundingBox("bnb"))
    with pytest.raises(InvalidInputError, match="allow_unmatched"):
        MatchingModel(2, True, structure=BipartiteMatching(allow_unmatched=False))
    with pytest.raises(InvalidInputError, match="search"):
        BoxModel(3, None, structure=BoundingBox())
    with pytest.raises(InvalidInputError, match=r"structure\.n_classes is 5"):
        MultiClassModel(3, 4, structure=MultiClass(5))
    with pytest.raises(InvalidInputError, match="needs n_classes"):
        MultiClassModel(3)
    with pytest.raises(InvalidInputError, match="MultiClass instance"):
        MultiClassModel(3, structure=MultiClass)
