"""``structopt train ner``: CoNLL-2002 NER as its own task (the linear chain by default, on Spanish or, with
``--language ned``, Dutch; ``--net bilstm`` in tests/test_conll_net.py), its default lam, and ``--net`` and
``--language`` refused where they do not apply. Short runs on the first sentences of the real files."""

from __future__ import annotations

import json
import re

import pytest
from _shared_data import SHARED_DATA, needs_data

from structopt import cli
from structopt.cli import main
from structopt.tasks.conll import chunk_f1


def _slice(folder, sizes):
    """The first sentences of each CoNLL-2002 Spanish file, in ``folder`` (a short run over the real format)."""
    folder.mkdir()
    for name, n in sizes.items():
        sentences = (SHARED_DATA / "conll2002" / name).read_text(encoding="utf-8").split("\n\n")[:n]
        (folder / name).write_text("\n\n".join(sentences) + "\n", encoding="utf-8")
    return folder


@needs_data("conll2002")
def test_train_ner_linear_then_predict_scores_the_same_entities(tmp_path, capsys):
    data = _slice(tmp_path / "esp", {"esp.train": 80, "esp.testa": 5, "esp.testb": 40})
    out = tmp_path / "run"
    assert main(["train", "ner", "--data", str(data), "--passes", "2", "--n-train", "60", "--out", str(out),
                 "--no-progress"]) == 0
    captured = capsys.readouterr()
    closing = captured.out.strip().splitlines()[-1]
    assert closing.startswith("ner bcfw: 2 passes") and "test entity f1" in closing and "chunk" not in closing
    assert captured.err.splitlines()[1:] == ["split: train on esp.train, test on esp.testb (training on 60, "
                                             "testing on 40)",
                                             "training CoNLL-2002 Spanish NER with bcfw, λ=0.00012, n=60"]
    trace = json.loads((out / "trace.json").read_text())
    assert trace["lam"] == pytest.approx(1.2e-4) and trace["n_train"] == 60
    f1 = trace["test_entity_f1"]
    assert 0.0 < f1 < 1.0

    written = tmp_path / "testb.conll"
    assert main(["predict", str(out / "model.npz"), "--out", str(written), "--json", str(tmp_path / "p.json")]) == 0
    predicted = json.loads((tmp_path / "p.json").read_text())
    assert predicted["n"] == 40 and predicted["test_entity_f1"] == f1
    # the written file's gold and predicted columns give that F1 again
    blocks = [b.splitlines() for b in written.read_text(encoding="utf-8").strip().split("\n\n")]
    assert len(blocks) == 40 and all(len(line.split()) == 4 for b in blocks for line in b)  # word POS gold tag
    gold = [[line.split()[2] for line in b] for b in blocks]
    tags = [[line.split()[3] for line in b] for b in blocks]
    assert chunk_f1(gold, tags)["f1"] == pytest.approx(f1, abs=1e-12)
    # --split selects from the files train recorded: the 60 sentences trained on, or all of both files
    for split, n in (("train", 60), ("all", 120)):
        assert main(["predict", str(out / "model.npz"), "--split", split, "--out", str(tmp_path / f"{split}.conll"),
                     "--json", str(tmp_path / "s.json")]) == 0
        assert json.loads((tmp_path / "s.json").read_text())["n"] == n


@needs_data("conll2002")
def test_train_ner_on_dutch_drops_the_document_markers(tmp_path, capsys):
    data = _slice(tmp_path / "ned", {"ned.train": 50, "ned.testa": 3, "ned.testb": 20})
    assert (data / "ned.train").read_text(encoding="utf-8").startswith("-DOCSTART- -DOCSTART- O\n")
    out = tmp_path / "run"
    assert main(["train", "ner", "--language", "ned", "--data", str(data), "--passes", "1", "--out", str(out),
                 "--no-progress"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("reading CoNLL-2002 Dutch (ned.train, ned.testa, ned.testb)")
    assert err[-1] == "training CoNLL-2002 Dutch NER with bcfw, λ=0.00012, n=50"
    trace = json.loads((out / "trace.json").read_text())
    assert main(["predict", str(out / "model.npz"), "--out", str(tmp_path / "p.conll"), "--json",
                 str(tmp_path / "p.json")]) == 0
    predicted = json.loads((tmp_path / "p.json").read_text())
    assert predicted["n"] == 20 and predicted["test_entity_f1"] == trace["test_entity_f1"]
    assert "DOCSTART" not in (tmp_path / "p.conll").read_text(encoding="utf-8")


@pytest.mark.parametrize("argv, message", [
    (["conll", "--language", "ned"], "--language applies to ner only, not to conll"),
    (["ner", "--net", "bilstm", "--language", "ned"], "--language ned: ner --net bilstm reads CoNLL-2002 Spanish only"),
])
def test_language_is_refused_where_it_does_not_apply(tmp_path, capsys, argv, message):
    if "--net" in argv:
        pytest.importorskip("torch")
    assert main(["train", *argv, "--out", str(tmp_path / "run"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert not (tmp_path / "run").exists()


def test_ner_defaults_and_conll_is_chunking_only():
    args = cli.build_parser().parse_args(["train", "ner"])
    assert cli._lam(args, 40, cli._task_key(args)) == pytest.approx(1.2e-4)
    args = cli.build_parser().parse_args(["train", "ner", "--lam", "0"])
    assert cli._lam(args, 40, cli._task_key(args)) == pytest.approx(1 / 40)
    ner, conll = cli.TASKS["ner"], cli.TASKS["conll"]
    assert ner.nets == ("bilstm",) and conll.nets == ()
    assert ner.metric == "test_entity_f1" and conll.metric == "test_chunk_f1"
    for text in (conll.summary, conll.split_help, conll.input_help):
        assert "2002" not in text and "bilstm" not in text and "esp." not in text


@pytest.mark.parametrize("argv, message", [
    (["conll", "--net", "bilstm"], r"--net: task conll has no networks \(tasks with networks: (.*)\)$"),
    (["ner", "--net", "cnn"], r"--net 'cnn': task ner declares the networks bilstm$"),
])
def test_net_is_refused_where_the_task_has_no_such_network(tmp_path, capsys, argv, message):
    assert main(["train", *argv, "--out", str(tmp_path / "run"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    found = re.search(message, err)
    assert len(err.splitlines()) == 1 and found, err
    if found.groups():  # the tasks listed are those that declare networks, ner among them, conll not
        listed = found.group(1)
        expected = [f"{name} ({', '.join(spec.nets)})" for name, spec in cli.TASKS.items() if spec.nets]
        assert listed == ", ".join(expected) and "ner (bilstm)" in expected
        assert not any(item.startswith("conll") for item in expected)
    assert not (tmp_path / "run").exists()
