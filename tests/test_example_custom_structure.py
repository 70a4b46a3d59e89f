"""examples/custom_structure.py runs and learns: both tasks beat their trivial baselines clearly."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "custom_structure.py"


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("custom_structure", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_k_of_n_selection(example, capsys):
    # choosing 3 of 8 at random gets 1 - 2 * 3 * 5 / 64 = 0.53 of the entries right on average
    assert example.k_of_n_selection() > 0.75
    assert "k-of-n selection: test accuracy" in capsys.readouterr().out


def test_label_tree_multilabel(example, capsys):
    assert example.label_tree_multilabel() > 0.85  # per-label majority votes get 0.64 on this data
    assert "label tree: test label accuracy" in capsys.readouterr().out


def test_bio_tagging(example, capsys):
    # the most frequent tag of this synthetic data covers 0.38 of the test tokens
    assert example.bio_tagging() > 0.85
    out = capsys.readouterr().out
    assert "BIO tagging: test token accuracy" in out
    tags = out.split("tags ")[1]
    assert "'O', 'I-" not in tags and "NP', 'I-VP" not in tags and "VP', 'I-NP" not in tags
