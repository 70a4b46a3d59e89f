"""The three-file rule: a new built-in structure with its model needs its module, its model module and the README,
nothing else.

The test adds a real built-in — ``KSubset`` (choose exactly k of n items; its polytope ``{0 <= mu <= 1, sum mu =
k}`` is integral) in ``structopt/structures/ksubset.py`` and ``KSubsetModel`` in ``structopt/models/ksubset.py`` —
to the installed package without touching it: a fresh interpreter loads ``structopt.structures`` and
``structopt.models`` with a second search location holding the two new files, exactly as if they were in the
source tree. Then, with no other file edited:

- the registries and public names list it (``structopt check``'s structures, ``structopt.__all__``,
  ``structopt.structures``, ``structopt.models``);
- the generic checks pass on it (``structopt check ksubset`` compares every oracle with enumeration,
  ``check_model``, prediction against enumeration, a BCFW run);
- the tests that hold lists of built-ins (the structure registry's order, ``structopt check``'s table, the
  prediction API's cases, the hooks, the auxiliary-column polytopes, the torch-free SparseMAP families) pass
  with the new built-in among the others: they derive their tables from the registries.

A list of built-ins added anywhere else (a hand-written table in a test or a module) makes this test fail.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

STRUCTURE = '''
"""Exactly k of n items: a toy built-in of tests/test_three_file_rule.py."""

from __future__ import annotations

import itertools
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp

from structopt.errors import InvalidInputError, example_error, numeric_array
from structopt.structures.base import Polytope, Structure, random_like, refuse_nonfinite
from structopt.structures.registry import register_structure


class KSubsetPotentials(NamedTuple):
    """A score per item (or the 0/1 indicator of the chosen items), shape (n,)."""

    scores: np.ndarray


@register_structure("ksubset")
class KSubset(Structure):
    """Choose exactly ``k`` of ``n`` items; an output is the int64 0/1 vector of the chosen items."""

    name = "KSubset"
    Potentials = KSubsetPotentials
    states_per_node = 2  # item chosen or not: Hamming losses
    example_variants = ({"n": 3, "k": 1}, {"n": 5, "k": 2})

    @classmethod
    def example(cls, rng, *, integer=True, n=4, k=2):
        return cls(n, k), random_like(KSubsetPotentials(np.zeros(n)), rng, integer=integer)

    def __init__(self, n, k):
        if not 0 < k <= n:
            raise InvalidInputError(f"KSubset needs 0 < k <= n, got n={n}, k={k}")
        self.n, self.k = int(n), int(k)

    def _scores(self, theta):
        scores = numeric_array(theta[0], "KSubset potentials", finite=False)
        if scores.shape != (self.n,):
            raise InvalidInputError(f"KSubset potentials must have shape ({self.n},), got {scores.shape}")
        refuse_nonfinite((("scores", scores),), "KSubset")
        return scores

    def expand(self, theta):
        return KSubsetPotentials(self._scores(theta))

    def validate_output(self, y, like=None, index=None):
        y = np.asarray(y)
        if y.shape != (self.n,) or y.dtype.kind not in "biu" or not np.isin(y, (0, 1)).all() or y.sum() != self.k:
            raise example_error(index, f"a KSubset output is a 0/1 vector of {self.n} items with {self.k} ones, "
                                       f"got {y!r}")
        return y.astype(np.int64)

    def stats(self, y, like=None):
        return KSubsetPotentials(np.asarray(y, dtype=float))

    def outputs(self, theta=None):
        for chosen in itertools.combinations(range(self.n), self.k):
            y = np.zeros(self.n, dtype=np.int64)
            y[list(chosen)] = 1
            yield y

    def polytope(self, theta=None):
        return Polytope(sp.csr_matrix(np.ones((1, self.n))), np.array([float(self.k)]), None, None,
                        KSubsetPotentials(np.zeros(self.n)))

    def argmax(self, theta):
        y = np.zeros(self.n, dtype=np.int64)
        y[np.argsort(-self._scores(theta), kind="stable")[:self.k]] = 1
        return y

    def node_potentials(self, costs, like=None):
        costs = np.asarray(costs, dtype=float).reshape(self.n, 2)
        return KSubsetPotentials(costs[:, 1] - costs[:, 0])

    def node_constant(self, costs):
        return float(np.asarray(costs, dtype=float).reshape(self.n, 2)[:, 0].sum())
'''

MODEL = '''
"""A linear model on KSubset: a toy built-in of tests/test_three_file_rule.py."""

from __future__ import annotations

import numpy as np

from structopt.errors import example_error, numeric_array
from structopt.models.base import Model
from structopt.structures.ksubset import KSubset, KSubsetPotentials


class KSubsetModel(Model):
    """``theta_j = <x_j, w>`` for an (n, F) input: one feature vector per item."""

    @classmethod
    def example(cls, rng):
        return cls(3, n=5, k=2), [rng.normal(size=(5, 3)) for _ in range(4)]

    def __init__(self, n_features, *, n, k):
        self.n_features = int(n_features)
        self.structure = KSubset(n, k)

    @property
    def blocks(self):
        return [("weights", (self.n_features,))]

    def validate_input(self, x, index=None):
        x = numeric_array(x, "KSubset input", index)
        if x.shape != (self.structure.n, self.n_features):
            raise example_error(index, f"a KSubset input has shape ({self.structure.n}, {self.n_features})")
        return x

    def potentials(self, x, w):
        return KSubsetPotentials(x @ self.unpack(w)["weights"])

    def add_features(self, x, mu, out, scale=1.0):
        out += scale * (np.asarray(mu.scores, dtype=float) @ x)
'''

#: runs in a fresh interpreter: the package with the two new modules on its search path, then the checks
SCRIPT = '''
import importlib.util, sys
from pathlib import Path

import structopt

extra, tests = Path(sys.argv[1]), sys.argv[2:]
source = Path(structopt.__file__).parent
for sub in ("structures", "models"):  # the package, with a second place to find its modules
    name = f"structopt.{sub}"
    spec = importlib.util.spec_from_file_location(name, source / sub / "__init__.py",
                                                  submodule_search_locations=[str(source / sub), str(extra / sub)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    setattr(structopt, sub, module)

import numpy as np

from structopt.cli import main
from structopt.structures.registry import registered_structures
from structopt.validate import BUILTIN_STRUCTURES, check_model

KSubset = structopt.KSubset  # a public name of structopt, derived from the registry
KSubsetModel = structopt.KSubsetModel
assert KSubset.__module__ == "structopt.structures.ksubset"
assert "ksubset" in registered_structures() and "ksubset" in BUILTIN_STRUCTURES
assert {"KSubset", "KSubsetPotentials", "KSubsetModel"} <= set(structopt.__all__)
assert "KSubset" in structopt.structures.__all__ and "KSubsetModel" in structopt.models.__all__
assert main(["check", "ksubset"]) == 0  # every oracle against enumeration and the LP

rng = np.random.default_rng(0)
model, X = KSubsetModel.example(rng)
assert check_model(model, X).ok
w = rng.normal(size=model.n_params)
Y = model.predict_batch(X, w)
for x, y in zip(X, Y):
    theta = model.potentials(x, w)
    best = max(model.structure.score(theta, out) for out in model.structure.outputs(theta))
    assert abs(model.structure.score(theta, y) - best) < 1e-9
problem = structopt.SSVMProblem(model, X, Y, structopt.Hamming(), lam=0.1)
result = structopt.solvers.get_solver("bcfw")(problem, max_passes=5, random_state=0)
assert result.trace[-1]["gap"] >= -1e-9

if tests:  # (pytest with no arguments would collect the whole suite)
    import pytest

    sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", *tests]))
'''

#: the tests that hold lists of built-ins (structures, models, oracles, hooks): derived from the registries,
#: they pass with the new built-in and no edit. The first ones are cheap (the default suite runs them), the
#: others run every structure's and every model's full checks (marked slow).
DERIVED_TESTS = [
    "tests/test_registry.py",
    "tests/test_predict_api.py::test_every_exported_model_has_a_case",
    "tests/test_contract_hooks.py::test_builtins_declare_well_formed_hooks",
]
DERIVED_TESTS_SLOW = [
    "tests/test_cli_check.py::test_check_all_structures",
    "tests/test_predict_api.py::test_predict_is_an_enumerated_maximiser_equal_to_the_exact_argmax",
    "tests/test_polytope_aux.py::test_builtin_polytopes_auxiliary_columns_are_consistent",
]


def _run_with_ksubset(tmp_path: Path, tests: list[str]) -> None:
    for sub, text in (("structures", STRUCTURE), ("models", MODEL)):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "ksubset.py").write_text(textwrap.dedent(text))
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path), *tests], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "passed" in done.stdout and "failed" not in done.stdout, done.stdout[-2000:]


def test_a_new_builtin_needs_its_module_its_model_and_nothing_else(tmp_path):
    _run_with_ksubset(tmp_path, DERIVED_TESTS)


@pytest.mark.slow
def test_every_list_holding_test_passes_with_the_new_builtin(tmp_path):
    _run_with_ksubset(tmp_path, DERIVED_TESTS_SLOW)
