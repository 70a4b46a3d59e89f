"""The parsing task (structopt.tasks.parsing, `structopt train/predict parsing`): CoNLL-U reading and its refusals
naming file and line, the split rule, UAS/LAS without punctuation, CoNLL-U writing, and train -> predict on a small
synthetic treebank folder."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import structopt as so
from structopt.cli import main
from structopt.tasks.parsing import attachment_scores, read_conllu, split, write_conllu

SENTENCE = """# sent_id = s1
# text = Bu ev güzel .
1\tBu\tbu\tDET\tDT\t_\t2\tdet\t_\t_
2-3\tevgüzel\t_\t_\t_\t_\t_\t_\t_\t_
2\tev\tev\tNOUN\tNN\t_\t3\tnsubj\t_\t_
3\tgüzel\tgüzel\tADJ\tJJ\t_\t0\troot\t_\t_
3.1\tx\tx\tX\tX\t_\t_\t_\t_\t_
4\t.\t.\tPUNCT\t.\t_\t3\tp\t_\t_
"""


def _write(tmp_path: Path, text: str, name: str = "t.conllu") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_read_skips_multiword_tokens_and_empty_nodes(tmp_path):
    (s,) = read_conllu(_write(tmp_path, SENTENCE))
    assert s.forms == ["Bu", "ev", "güzel", "."] and s.upos[-1] == "PUNCT"
    np.testing.assert_array_equal(s.heads, [2, 3, 0, 3])
    assert s.labels == ["det", "nsubj", "root", "p"] and s.first_line == 3
    assert s.comments == ("# sent_id = s1", "# text = Bu ev güzel .")
    nogold = SENTENCE.replace("\t2\tdet", "\t_\t_").replace("\t3\tnsubj", "\t_\t_").replace("\t0\troot", "\t_\t_") \
        .replace("\t3\tp\t", "\t_\t_\t")
    (s,) = read_conllu(_write(tmp_path, nogold))
    assert s.heads is None and s.labels is None


@pytest.mark.parametrize("change,message", [
    (("\tdet\t_\t_", "\tdet\t_"), "line 3: a CoNLL-U token line has 10"),
    (("1\tBu", "x\tBu"), "line 3: id 'x' is not an integer"),
    (("4\t.", "5\t."), "line 8: word id 5 out of order"),
    (("\t3\tp\t", "\t9\tp\t"), "line 8: head '9' is not a word id in 0..4"),
    (("\t0\troot", "\t1\troot"), "line 3: .*cycle"),
    (("\t3\tp\t", "\t0\tp\t"), "line 3: .*2 words hang from the root"),
    (("2-3\tevgüzel", "2-x\tevgüzel"), "line 4: id '2-x' is not an integer"),
])
def test_malformed_conllu_is_one_error_naming_file_and_line(tmp_path, change, message):
    path = _write(tmp_path, SENTENCE.replace(*change))
    with pytest.raises(so.InvalidInputError, match=f"{path.name}, {message}"):
        read_conllu(path)


def test_empty_inputs_are_refused(tmp_path):
    with pytest.raises(so.InvalidInputError, match="no sentence"):
        read_conllu(_write(tmp_path, "# only a comment\n\n"))
    with pytest.raises(so.InvalidInputError, match="line 1: a sentence without words"):
        read_conllu(_write(tmp_path, "1-2\tab\t_\t_\t_\t_\t_\t_\t_\t_\n\n"))


def test_scores_exclude_punctuation_and_writing_keeps_the_other_columns(tmp_path):
    path = _write(tmp_path, SENTENCE)
    sentences = read_conllu(path)
    labels = ["det", "nsubj", "p", "root"]
    pred = [np.array([[2, 1, 0, 1], [1, 1, 3, 2]])]  # head of "ev" wrong, label of "Bu" wrong, punctuation wrong
    assert attachment_scores(sentences, pred, labels) == {"uas": pytest.approx(2 / 3), "las": pytest.approx(1 / 3)}
    gold = [np.array([[2, 3, 0, 3], [0, 1, 3, 2]])]
    assert attachment_scores(sentences, gold, labels) == {"uas": 1.0, "las": 1.0}
    write_conllu(tmp_path / "out.conllu", sentences, gold, labels)
    assert (tmp_path / "out.conllu").read_text(encoding="utf-8").strip() == SENTENCE.strip()


def test_split_rule():
    train, test = split(list(range(25)))
    assert test == [9, 19] and train == [i for i in range(25) if i % 10 < 8]


def _treebank(rng: np.random.Generator, n_sentences: int) -> str:
    """Sentences whose heads follow their tags (NOUN -> next VERB, VERB -> root or previous VERB)."""
    blocks = []
    for _ in range(n_sentences):
        n = int(rng.integers(2, 7))
        tags = ["VERB"] + [str(t) for t in rng.choice(["NOUN", "VERB"], size=n - 1)]
        verbs = [i + 1 for i, t in enumerate(tags) if t == "VERB"]
        lines = []
        for i, t in enumerate(tags, start=1):
            if i == 1:
                head, label = 0, "root"
            elif t == "VERB":
                head, label = max(v for v in verbs if v < i), "conj"
            else:
                head, label = max(v for v in verbs if v < i), "obj"
            lines.append(f"{i}\tw{t}{i % 3}\t_\t{t}\t{t[0]}\t_\t{head}\t{label}\t_\t_")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


def test_train_then_predict_writes_conllu(tmp_path, capsys):
    rng = np.random.default_rng(0)
    data = tmp_path / "data"
    data.mkdir()
    for name in ("web.conllu", "wiki.conllu"):
        (data / name).write_text(_treebank(rng, 40), encoding="utf-8")
    out = tmp_path / "run"
    assert main(["train", "parsing", "--data", str(data), "--passes", "3", "--out", str(out), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "test uas" in text and "test las" in text
    model = out / "model.npz"
    assert main(["predict", str(model), "--out", str(tmp_path / "test.conllu")]) == 0
    scored = capsys.readouterr().out
    predicted = read_conllu(tmp_path / "test.conllu")
    assert len(predicted) == 8  # sentences 9, 19, 29, 39 of each file
    uas = float(scored.split("test uas ")[1].split()[0])
    assert uas >= 0.9  # the heads follow the tags: learnt
    assert main(["predict", str(model), str(data / "web.conllu"), "--out", str(tmp_path / "web.conllu")]) == 0
    assert len(read_conllu(tmp_path / "web.conllu")) == 40


def test_data_folder_refusals(tmp_path, monkeypatch):
    import sys

    from structopt.errors import DataNotFoundError
    from structopt.tasks.parsing import data_folder

    with pytest.raises(DataNotFoundError, match=r"lacks web\.conllu, wiki\.conllu"):
        data_folder(tmp_path)
    monkeypatch.setitem(sys.modules, "turkish_treebanks", None)  # as if not installed
    with pytest.raises(DataNotFoundError, match=r"pip install turkish-treebanks"):
        data_folder(None)


NON_PROJECTIVE = """1\ta\ta\tNOUN\tNN\t_\t3\tdep\t_\t_
2\tb\tb\tNOUN\tNN\t_\t4\tdep\t_\t_
3\tc\tc\tVERB\tVB\t_\t0\troot\t_\t_
4\td\td\tNOUN\tNN\t_\t3\tdep\t_\t_
"""


def test_projective_gold_refuses_crossing_trees_naming_file_and_line(tmp_path):
    # 1 <- 3 and 2 <- 4 cross: the non-projective outputs read; the projective ones are refused, naming file and line
    from structopt.tasks.parsing import outputs

    path = _write(tmp_path, SENTENCE + "\n\n\n" + NON_PROJECTIVE)  # blank lines in a row: one separator
    sentences = read_conllu(path)
    assert len(sentences) == 2 and sentences[1].first_line == 12
    labels = sorted({label for s in sentences for label in s.labels})
    assert len(outputs(sentences, labels)) == 2
    assert len(outputs(sentences[:1], labels, projective=True)) == 1
    with pytest.raises(so.InvalidInputError, match=f"{path.name}, line 12: the gold tree .* not projective"):
        outputs(sentences, labels, projective=True)
    with pytest.raises(so.InvalidInputError, match=f"{path.name}, line 3: relation 'det' is not one of"):
        outputs(sentences, ["dep", "root"])
