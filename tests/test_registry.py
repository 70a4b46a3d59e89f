"""The structure registry: built-ins in check order, user structures join by decorator and are
checked by check_builtin_structures and `structopt check` with no list to edit."""

from __future__ import annotations

import numpy as np
import pytest

from structopt import validate
from structopt.cli import main
from structopt.errors import InvalidInputError
from structopt.structures import MultiClass, Structure, registry
from structopt.structures.registry import register_structure, registered_structures, structure_class
from structopt.validate import BUILTIN_STRUCTURES, BUILTIN_VARIANTS, check_builtin_structures, random_instance


@pytest.fixture
def scratch_registry(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))


def test_builtins_in_check_order_each_with_examples():
    names = list(registered_structures())
    assert names == ["chain", "multiclass", "matching", "grid", "box", "lp", "tree", "factor_graph", "dependency",
                     "multilabel"]
    assert list(BUILTIN_STRUCTURES) == names and list(BUILTIN_VARIANTS) == names
    rng = np.random.default_rng(0)
    for name, cls in registered_structures().items():
        assert cls.registry_name == name and structure_class(name.upper()) is cls
        for size in cls.example_variants:
            structure, theta = cls.example(rng, integer=False, **size)
            assert isinstance(structure, cls) and structure.expand(theta) is not None


def test_a_user_structure_joins_the_suite_and_the_cli(scratch_registry, capsys):
    @register_structure("my_multiclass")
    class MyMultiClass(MultiClass):
        example_variants = ({"n_classes": 2}, {"n_classes": 3})

    assert "my_multiclass" in validate.BUILTIN_STRUCTURES  # read from the registry when accessed
    structure, _ = random_instance("my_multiclass", 0, n_classes=3)
    assert type(structure) is MyMultiClass
    suite = check_builtin_structures(["my_multiclass"], n_instances=1)
    assert suite.ok and len(suite.checks) == 2
    assert main(["check", "my_multiclass"]) == 0
    assert "my_multiclass" in capsys.readouterr().out


def test_registration_is_refused_without_example_or_twice(scratch_registry):
    class NoExample(Structure):
        pass

    with pytest.raises(InvalidInputError, match="must define the classmethod example"):
        register_structure("no_example")(NoExample)
    with pytest.raises(InvalidInputError, match="needs a Structure subclass"):
        register_structure("not_a_structure")(int)

    class Other(MultiClass):
        pass

    with pytest.raises(InvalidInputError, match="'chain' is already registered to Chain"):
        register_structure("chain")(Other)
    with pytest.raises(InvalidInputError, match="unknown structure 'nosuch'; valid names: chain, multiclass"):
        structure_class("nosuch")
