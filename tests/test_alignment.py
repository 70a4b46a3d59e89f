"""Hansards word alignment: loader, features, targets, AER, baseline (fast); training (slow)."""

from __future__ import annotations

import numpy as np
import pytest
from _shared_data import SHARED_DATA, needs_data

from structopt.structures.matching import BipartiteMatching
from structopt.tasks.alignment import (
    FEATURE_NAMES,
    SentencePair,
    aer,
    competitive_linking,
    dice_baseline,
    gold_matching,
    links,
    load_alignment,
    load_hansards,
    resolve_data_dir,
)

DATA = SHARED_DATA / "hansards"
pytestmark = needs_data("hansards")


@pytest.fixture(scope="module")
def pairs():
    return load_hansards(DATA)


@pytest.fixture(scope="module")
def task():
    return load_alignment(DATA, n_heldout=200, random_state=0)


def test_loader_counts_match_the_files(pairs):
    assert len(pairs) == 37 + 447
    assert sum(p.part == "trial" for p in pairs) == 37
    n_sure = {(part, f[0], f[1], f[2]) for part in ("trial", "test")
              for f in (line.split() for line in (DATA / f"{part}.en-fr.naacl").read_text().splitlines())
              if f[3] == "S"}
    assert sum(len(p.sure) for p in pairs) == len(n_sure)
    for p in pairs:
        assert p.sure <= p.possible
        assert all(0 <= j < len(p.en) and 0 <= k < len(p.fr) for j, k in p.possible)
    assert pairs[37].en[:2] == ["2", "."]


def test_missing_data_gives_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.delenv("STRUCTOPT_DATA", raising=False)
    with pytest.raises(FileNotFoundError, match=r"hansards.*STRUCTOPT_DATA"):
        resolve_data_dir(tmp_path / "nowhere")
    monkeypatch.setenv("STRUCTOPT_DATA", str(DATA.parent))
    assert resolve_data_dir() == DATA.resolve()


def test_aer_formula():
    p = SentencePair(["a", "b", "c"], ["x", "y", "z"], sure={(0, 0), (1, 1)}, possible={(0, 0), (1, 1), (2, 2)},
                     part="test", number=1)
    assert aer([{(0, 0), (1, 1)}], [p]) == 0.0
    assert aer([{(0, 0), (1, 1), (2, 2)}], [p]) == 0.0  # possible links cost nothing
    assert aer([set()], [p]) == 1.0
    # A = {(0,0), (2,1)}: |A∩S| = 1, |A∩P| = 1, |A| = 2, |S| = 2
    assert aer([{(0, 0), (2, 1)}], [p]) == pytest.approx(1 - 2 / 4)
    # corpus-level: counts are summed before the ratio
    assert aer([{(0, 0)}, {(1, 1), (2, 2)}], [p, p]) == pytest.approx(1 - (2 + 3) / (3 + 4))


def test_gold_targets_are_maximum_one_to_one_subsets_of_sure_links(pairs, task):
    s = BipartiteMatching(allow_unmatched=True)
    for p in pairs[:120]:
        d = task.featurizer.dice(p)
        y = gold_matching(p, d)
        like = np.zeros(p.shape)
        s.validate_output(y, like)
        assert links(y) <= p.sure
        # maximum cardinality: equals a max matching on the sure-link graph with unit weights
        unit = np.full(p.shape, -1.0)
        for j, k in p.sure:
            unit[j, k] = 1.0
        assert len(links(y)) == len(links(s.argmax(unit)))
    assert aer([links(y) for y in task.Y_train], task.train_pairs) < 0.05


def test_features(task):
    assert task.n_features == len(FEATURE_NAMES)
    assert len(task.X_train) == 284 and len(task.X_test) == 200
    train_ids = {(p.part, p.number) for p in task.train_pairs}
    assert not train_ids & {(p.part, p.number) for p in task.test_pairs}
    for x, p in zip(task.X_train[:50], task.train_pairs[:50]):
        assert x.shape == (*p.shape, task.n_features) and np.all(np.isfinite(x))
        assert x.min() >= -1e-12 and x.max() <= 1.0 + 1e-12
        dice = x[..., FEATURE_NAMES.index("dice")]
        assert np.all(dice <= 1.0)
        exact = x[..., FEATURE_NAMES.index("exact_match")]
        for j, k in zip(*np.nonzero(exact)):
            assert p.en[j].lower() == p.fr[k].lower()
            assert x[j, k, FEATURE_NAMES.index("edit_ratio")] == 1.0
    # Dice from its definition on one word pair
    f = task.featurizer
    p = task.train_pairs[0]
    e, w = p.en[0].lower(), p.fr[0].lower()
    both = sum(e in {t.lower() for t in q.en} and w in {t.lower() for t in q.fr} for q in f.pairs)
    ce = sum(e in {t.lower() for t in q.en} for q in f.pairs)
    cf = sum(w in {t.lower() for t in q.fr} for q in f.pairs)
    assert f.dice(p)[0, 0] == pytest.approx(2 * both / (ce + cf))


def test_competitive_linking_and_baseline(task):
    d = np.array([[0.9, 0.8, 0.0], [0.85, 0.1, 0.0]])
    np.testing.assert_array_equal(competitive_linking(d, 0.05), [0, 1])
    np.testing.assert_array_equal(competitive_linking(d, 0.5), [0, -1])
    base = dice_baseline(task)
    assert 0.0 < base["test_aer"] < 1.0 and 0.0 <= base["threshold"] <= 0.95


@pytest.mark.slow
def test_learned_alignment_beats_dice_baseline(task):
    from structopt.losses import MatchingHamming
    from structopt.models.matching import MatchingModel
    from structopt.problem import SSVMProblem
    from structopt.solvers.bcfw import bcfw

    model = MatchingModel(task.n_features, allow_unmatched=True)
    problem = SSVMProblem(model, task.X_train, task.Y_train, MatchingHamming(1, 3), lam=1e-2)
    result = bcfw(problem, max_passes=10, eval_every=5, random_state=0)
    assert all(r["gap"] >= -1e-9 for r in result.trace)
    learned = task.evaluate(problem.predict(task.X_test, result.w))
    assert learned < dice_baseline(task)["test_aer"] - 0.05
