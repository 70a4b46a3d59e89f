"""``structopt check``: one table row per (structure, oracle), exit codes 0 / 1 / 2."""

from __future__ import annotations

import numpy as np
import pytest

from structopt.cli import main
from structopt.errors import NotSupportedError
from structopt.structures import BipartiteMatching
from structopt.structures.base import random_like
from structopt.structures.registry import structure_class
from structopt.validate import BUILTIN_STRUCTURES
from structopt.validate.oracles import ORACLE_CHECKS

ORACLES = list(ORACLE_CHECKS)


def _supported(name: str, oracle: str) -> bool:
    """Whether the registered structure ``name`` answers ``oracle`` on its own example instance (called
    directly, not through the check): the oracles `structopt check` must have compared with enumeration."""
    structure, theta = structure_class(name).example(np.random.default_rng(0))
    point = random_like(structure.expand(theta), np.random.default_rng(1))
    calls = {"lp_relaxation": lambda: structure.lp_relaxation(theta), "argmax": lambda: structure.argmax(theta),
             "topk": lambda: structure.topk(theta, 2), "marginals": lambda: structure.marginals(theta),
             "max_marginals": lambda: structure.max_marginals(theta), "project": lambda: structure.project(point),
             "prox_entropy": lambda: structure.prox_entropy(structure.marginals(theta)[1], point, 0.5)}
    try:
        calls[oracle]()
    except NotSupportedError:
        return False
    return True


def table_rows(text: str) -> dict[tuple[str, str], list[str]]:
    lines = text.strip().splitlines()
    assert lines[0].split()[:5] == ["structure", "oracle", "instances", "enumeration", "LP"]
    return {tuple(line.split()[:2]): line.split() for line in lines[1:-1]}


def test_check_all_structures(capsys):
    assert main(["check"]) == 0
    out = capsys.readouterr().out
    rows = table_rows(out)
    assert set(rows) == {(s, o) for s in BUILTIN_STRUCTURES for o in ORACLES}
    for (structure, oracle), cells in rows.items():
        assert "NO" not in cells[3:5], cells
        if _supported(structure, oracle):
            assert cells[3] == "yes", cells  # every supported oracle was compared with enumeration
    assert rows[("matching", "marginals")][3:5] == ["-", "-"]
    assert rows[("box", "lp_relaxation")][3:5] == ["-", "-"]
    assert out.strip().splitlines()[-1].endswith("all OK")


def test_check_one_structure_with_seed(capsys):
    assert main(["check", "matching", "--seed", "3"]) == 0
    rows = table_rows(capsys.readouterr().out)
    assert set(rows) == {("matching", o) for o in ORACLES}
    assert rows[("matching", "max_marginals")][3:5] == ["yes", "yes"]


def test_check_reports_failure_with_exit_code_1(capsys, monkeypatch):
    original = BipartiteMatching.argmax
    monkeypatch.setattr(BipartiteMatching, "argmax", lambda self, theta: original(self, theta)[::-1].copy())
    assert main(["check", "matching"]) == 1
    out = capsys.readouterr().out
    assert table_rows(out)[("matching", "argmax")][3] == "NO"
    assert "FAILED" in out.strip().splitlines()[-1]


def test_unknown_structure_exit_code_2(capsys):
    assert main(["check", "chain", "nosuch"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "unknown structure 'nosuch'" in captured.err and "chain, multiclass, matching" in captured.err


def test_check_help_lists_command(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0 and "check" in capsys.readouterr().out
