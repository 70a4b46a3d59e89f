"""The registries: the one Registry type (order, decorator, clash, lookup error, autoload); the structure
registry's built-ins in check order; user structures join by decorator and are checked by
check_builtin_structures and `structopt check` with no list to edit; every registry of built-ins is a Registry."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import numpy as np
import pytest

import structopt
import structopt.structures
from structopt import validate
from structopt.cli import main
from structopt.errors import InvalidInputError
from structopt.registry import Registry
from structopt.structures import MultiClass, Structure, registry
from structopt.structures.registry import register_structure, registered_structures, structure_class
from structopt.validate import BUILTIN_STRUCTURES, BUILTIN_VARIANTS, check_builtin_structures, random_instance


@pytest.fixture
def scratch_registry(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", registry._REGISTRY.copy())


def _check_order_modules() -> list[str]:
    """The structure modules in the order the package imports them: those its ``from structopt.structures
    import a, b, ...`` line names, then the others by name (the rule of structopt/structures/__init__.py)."""
    init = Path(structopt.structures.__file__)
    first = [alias.name for node in ast.parse(init.read_text()).body if isinstance(node, ast.ImportFrom)
             and node.module == "structopt.structures" for alias in node.names]
    rest = sorted(path.stem for place in structopt.structures.__path__ for path in Path(place).glob("*.py")
                  if not path.stem.startswith("_"))
    return [f"structopt.structures.{name}" for name in dict.fromkeys([*first, *rest])]


def test_builtins_in_check_order_each_with_examples():
    names = list(registered_structures())
    order = _check_order_modules()
    assert [order.index(cls.__module__) for cls in registered_structures().values()] == \
        sorted(order.index(cls.__module__) for cls in registered_structures().values())
    assert names[:3] == ["chain", "multiclass", "matching"]  # the seeds of `structopt check` draw in this order
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


def test_registry_keeps_order_refuses_clashes_and_lists_valid_names():
    things: Registry[object] = Registry("thing", normalize=str.lower)

    @things.register("b", aliases=("bee",))
    def second():
        return 2

    @things.register()
    def first():
        return 1

    assert things.names() == ["b", "bee", "first"] and things["B"] is second and things.unique() == [second, first]
    assert "FIRST" in things and "nope" not in things and things.get("nope") is None and len(things) == 3
    with pytest.raises(InvalidInputError, match="unknown thing 'nope'; valid names: b, bee, first"):
        things["nope"]

    def other():
        return 3

    with pytest.raises(InvalidInputError, match="thing name 'b' is already registered to second"):
        things.add("b", other)
    things.register("b")(second)  # the same definition again (a module reloaded) is no clash
    copy = things.copy()
    copy.add("c", other)
    assert "c" not in things and copy["c"] is other


def test_registry_autoloads_once_before_the_first_read():
    calls = []
    things: Registry[int] = Registry("thing", load=lambda: calls.append(things.add("loaded", 1)),
                                     unknown="no {kind} {name!r}; choose from {names}", sort_names=True)
    things.add("z", 0)  # registering does not load
    assert calls == []
    assert things.names() == ["z", "loaded"] and calls == [1]
    things.names()
    assert calls == [1]
    with pytest.raises(InvalidInputError, match="no thing 'a'; choose from loaded, z"):
        things["a"]


def test_every_registry_of_builtins_is_a_registry():
    """structures, solvers, kernel families, state types, hooks, oracle checks and tasks: one type, each
    listing what its declarations registered."""
    from structopt import archive, fused, hooks
    from structopt.cli_registry import TASKS
    from structopt.cli_tasks import BUILTIN_TASKS
    from structopt.solvers import SOLVERS, get_solver
    from structopt.validate.oracles import ORACLE_CHECKS

    for table in (registry._REGISTRY, SOLVERS, fused.FAMILIES, archive._STATE_TYPES, hooks.HOOKS, ORACLE_CHECKS,
                  TASKS, BUILTIN_TASKS):
        assert isinstance(table, Registry) and len(table) > 0, table
    for name, function in SOLVERS.items():  # each solver under its declared name, its function's name, its aliases
        assert name in (function.solver_name, function.__name__, *function.aliases), name
        assert get_solver(name) is function
    assert {f.solver_name for f in SOLVERS.unique()} >= {"bcfw", "frank_wolfe", "sgd"}
    assert SOLVERS["fw"] is SOLVERS["frank_wolfe"] and SOLVERS["casimir"] is SOLVERS["casimir_svrg"]
    with pytest.raises(InvalidInputError, match="unknown solver 'nosuch'; choose from bcfw, casimir"):
        get_solver("nosuch")
    assert next(iter(ORACLE_CHECKS)) == "lp_relaxation"  # later rows compare with the LP
    assert all(spec.name == name for name, spec in TASKS.items())
    assert all(isinstance(archive._STATE_TYPES[name], type) for name in archive._STATE_TYPES)


def test_public_names_are_derived_from_the_declarations():
    """``structopt.__all__`` lists every registered built-in structure with its potentials type and every model
    structopt.models exports (no hand mirror), and each resolves."""
    from structopt.models import Model

    listed = set(structopt.__all__)
    for cls in registered_structures().values():
        assert {cls.__name__, cls.Potentials.__name__} <= listed, cls
        assert getattr(structopt, cls.__name__) is cls
    models = [name for name in structopt.models.__all__ if inspect.isclass(getattr(structopt.models, name))
              and issubclass(getattr(structopt.models, name), Model)]
    assert set(models) <= listed and len(models) >= 10
    assert set(structopt.structures.BUILTIN_NAMES) <= set(structopt.structures.__all__)
