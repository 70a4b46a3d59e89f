"""The CoNLL Casimir benchmark runner: method names, skip/conflict/lock logic, resume after an
interruption, and the report, on a tiny synthetic CoNLL-2002 corpus."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("conll_casimir_bench", ROOT / "benchmarks" / "conll_casimir.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file executes
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """esp.{train,testa,testb}: word/tag columns, a few short sentences with PER and LOC entities."""
    root = tmp_path_factory.mktemp("data")
    (root / "conll2002").mkdir()
    rng = np.random.default_rng(0)
    names, places, words = ["Ana", "Luis", "Marta"], ["Madrid", "Lima"], ["el", "de", "vive", "en", "con", "y"]

    def sentence():
        out = []
        for _ in range(rng.integers(3, 7)):
            r = rng.random()
            if r < 0.2:
                out += [(str(rng.choice(names)), "B-PER"), ("Gil", "I-PER")] if rng.random() < 0.5 else \
                    [(str(rng.choice(names)), "B-PER")]
            elif r < 0.35:
                out.append((str(rng.choice(places)), "B-LOC"))
            else:
                out.append((str(rng.choice(words)), "O"))
        return out

    for name, count in (("train", 24), ("testa", 6), ("testb", 6)):
        text = "\n\n".join("\n".join(f"{w} {t}" for w, t in sentence()) for _ in range(count))
        (root / "conll2002" / f"esp.{name}").write_text(text + "\n")
    return root


def argv(data_dir, out, *extra):
    return ["--data", str(data_dir), "--out", str(out / "res"), "--cache", str(out / "cache"), "--languages", "esp",
            "--n-features", "256", *extra]


def test_method_names(bench):
    m = bench.parse_method("casimir-adapt+last+sgdinit")
    assert (m.base, m.iterate, m.sgd_init, m.name) == ("casimir-adapt", "last", True, "casimir-adapt+last+sgdinit")
    assert bench.parse_method("svrg") == bench.Method("svrg", "average", False)
    m = bench.parse_method("svrg+sgdinit+guard")
    assert (m.iterate, m.sgd_init, m.guard, m.name) == ("average", True, True, "svrg+sgdinit+guard")
    for bad in ("svrgx", "sgd+last", "sgd+guard", "svrg+last+last", "svrg+foo"):
        with pytest.raises(ValueError):
            bench.parse_method(bad)
    names = [m.name for m in bench.expand_methods(["sgd", "svrg", "svrg+last"], ["average", "last"], ["no", "yes"])]
    assert names == ["sgd", "svrg", "svrg+sgdinit", "svrg+last", "svrg+last+sgdinit"]


def test_guard_suffix_in_config_only_when_on(bench, data_dir, tmp_path):
    args = bench.parse_args(argv(data_dir, tmp_path, "--methods", "svrg+last", "svrg+last+guard"))
    plain, guarded = (bench.run_config(spec, args) for spec in bench.plan(args))
    assert "guard" not in plain  # runs recorded before the suffix keep their config hash
    assert guarded["guard"] is True and guarded["method"] == "svrg+last+guard"


def test_runs_skip_conflict_lock_and_report(bench, data_dir, tmp_path, capsys):
    args = argv(data_dir, tmp_path, "--methods", "sgd", "svrg+last", "--passes", "2", "--seeds", "0", "1")
    assert bench.main(args) == 0
    runs = tmp_path / "res" / "conll_casimir"
    files = sorted(p.name for p in runs.glob("*.json"))
    assert files == [f"esp_{m}_c0.01_s{s}.json" for m in ("sgd_none", "svrg+last_topk5") for s in (0, 1)]
    run = json.loads((runs / "esp_svrg+last_topk5_c0.01_s1.json").read_text())
    assert run["config"]["iterate"] == "last" and run["config"]["sgd_init"] is False and run["config"]["seed"] == 1
    assert run["trace"][-1]["passes"] == pytest.approx(2)
    assert {"test_f1", "dev_f1", "wall", "cpu"} <= set(run["trace"][-1])
    assert not list((tmp_path / "cache").glob("*.pkl"))  # finished runs leave no checkpoint
    stamps = {p: p.stat().st_mtime_ns for p in runs.glob("*.json")}
    capsys.readouterr()

    bench.main(args)  # everything done: nothing recomputed
    assert capsys.readouterr().out.count("already done, skipped") == 4
    assert stamps == {p: p.stat().st_mtime_ns for p in runs.glob("*.json")}

    bench.main([*args, "--sgd-gamma0", "0.5"])  # other options: left alone
    assert "CONFLICT" in capsys.readouterr().out
    assert stamps == {p: p.stat().st_mtime_ns for p in runs.glob("*.json")}

    more = argv(data_dir, tmp_path, "--methods", "sgd", "--passes", "3", "--seeds", "0")
    cfg = bench.run_config(bench.plan(bench.parse_args(more))[0], bench.parse_args(more))
    lock = tmp_path / "cache" / f"esp_sgd_none_c0.01_s0-{bench.config_hash(cfg)}.lock"
    with bench.run_lock(lock) as mine:  # another process holds the run: skipped
        assert mine
        bench.main(more)
    assert "running in another process" in capsys.readouterr().out
    bench.main(more)  # a larger budget recomputes the run
    assert json.loads((runs / "esp_sgd_none_c0.01_s0.json").read_text())["max_passes"] == 3

    text = bench.report(tmp_path / "res", at=(1, 2, 100), figures=False)
    assert (tmp_path / "res" / "conll_casimir_report.md").read_text() == text
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in text.splitlines()
            if line.startswith("| sgd") or line.startswith("| svrg")}
    assert set(rows) == {"sgd", "svrg+last"}
    sgd_row, svrg_row = rows["sgd"], rows["svrg+last"]
    assert sgd_row[2] == "2 (0, 1)" and sgd_row[3] == "2, 3"
    assert "±" in sgd_row[5] and sgd_row[6] == "n/a"  # F at 2 passes over 2 seeds; 100 not reached
    assert svrg_row[4] != "n/a" and svrg_row[6] == "n/a"  # SVRG: records every 2 passes, value at 1 = start
    values = [bench.value_at(json.loads(p.read_text())["trace"], 2, "primal") for p in runs.glob("esp_sgd*.json")]
    assert f"{np.mean(values):.4f} ± {np.std(values, ddof=1):.4f}" == sgd_row[5]


def test_interrupted_run_resumes_to_the_same_trace(bench, data_dir, tmp_path, monkeypatch, capsys):
    run_args = ["--methods", "casimir-const", "sgd", "--passes", "6", "--checkpoint-every", "1"]
    bench.main(argv(data_dir, tmp_path / "straight", *run_args))

    original = bench.eval_callback

    def interrupting(problem, data, offset):  # dies at the 4th evaluation of each run
        cb, calls = original(problem, data, offset), [0]

        def wrapped(w):
            calls[0] += 1
            if calls[0] == 4:
                raise KeyboardInterrupt
            return cb(w)
        return wrapped

    monkeypatch.setattr(bench, "eval_callback", interrupting)
    with pytest.raises(KeyboardInterrupt):
        bench.main(argv(data_dir, tmp_path / "cut", *run_args))
    assert len(list((tmp_path / "cut" / "cache").glob("*.pkl"))) == 1
    assert not list((tmp_path / "cut" / "res" / "conll_casimir").glob("*.json"))
    monkeypatch.setattr(bench, "eval_callback", original)
    capsys.readouterr()
    bench.main(argv(data_dir, tmp_path / "cut", *run_args))
    assert "resuming at" in capsys.readouterr().out
    for name in ("esp_casimir-const_topk5_c0.01_s0.json", "esp_sgd_none_c0.01_s0.json"):
        a = json.loads((tmp_path / "straight" / "res" / "conll_casimir" / name).read_text())
        b = json.loads((tmp_path / "cut" / "res" / "conll_casimir" / name).read_text())
        keys = ("passes", "oracle_calls", "primal", "test_f1", "dev_f1")
        assert [[r[k] for k in keys] for r in a["trace"]] == [[r[k] for k in keys] for r in b["trace"]]
        assert b["resumed"] == name.startswith("esp_casimir")
    assert not list((tmp_path / "cut" / "cache").glob("*.pkl"))


@pytest.mark.slow
def test_report_figure(bench, data_dir, tmp_path):
    bench.main(argv(data_dir, tmp_path, "--methods", "sgd", "svrg", "--passes", "2", "--seeds", "0", "1"))
    assert bench.main(argv(data_dir, tmp_path, "--report")) == 0
    assert (tmp_path / "res" / "conll_casimir_esp_c0.01.png").stat().st_size > 10_000
    assert "![esp, c = 0.01](conll_casimir_esp_c0.01.png)" in (tmp_path / "res" / "conll_casimir_report.md").read_text()
