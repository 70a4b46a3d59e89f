"""`structopt train sequence|segmentation|boxes|bitext` on files made here, then `structopt predict` on
the test files gives the metric train printed; flags of one kind are refused for another."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_own_data import _bitext, _box_images, _segmentation_folders, _sentences, _write_boxes_csv, _write_conll

from structopt.cli import main


def _round_trip(tmp_path: Path, capsys, train_args: list[str], predict_input: str) -> tuple[dict, dict]:
    out = tmp_path / "run"
    assert main(["train", *train_args, "--passes", "4", "--out", str(out), "--no-progress"]) == 0
    closing = capsys.readouterr().out.strip().splitlines()[-1]
    assert f"{out}/model.npz" in closing
    trained = json.loads((out / "trace.json").read_text())
    metrics = tmp_path / "metrics.json"
    assert main(["predict", str(out / "model.npz"), predict_input, "--out", str(tmp_path / "pred"),
                 "--json", str(metrics)]) == 0
    return trained, json.loads(metrics.read_text())


def _same_metrics(trained: dict, predicted: dict, names: list[str]) -> None:
    for name in names:
        assert predicted[name] == pytest.approx(trained[name], abs=1e-12), name


def test_sequence_round_trip(tmp_path, capsys):
    rng = np.random.default_rng(0)
    train = _write_conll(tmp_path / "train.txt", _sentences(rng, 40))  # token POS chunk
    test = _write_conll(tmp_path / "test.txt", _sentences(rng, 12))
    trained, predicted = _round_trip(tmp_path, capsys, ["sequence", "--train", str(train), "--test", str(test),
                                                        "--feature-columns", "2"], str(test))
    _same_metrics(trained, predicted, ["test_token_accuracy", "test_chunk_f1"])
    assert trained["test_token_accuracy"] > 0.8
    lines = [line.split() for line in (tmp_path / "pred").read_text().splitlines() if line]
    assert all(len(fields) == 4 for fields in lines)  # the input's three columns and the predicted label
    # an input without the label column is labelled too (no metric)
    unlabelled = _write_conll(tmp_path / "raw.txt", _sentences(rng, 3), order=(0, 1))
    assert main(["predict", str(tmp_path / "run" / "model.npz"), str(unlabelled), "--out",
                 str(tmp_path / "raw.out")]) == 0
    assert all(len(line.split()) == 3 for line in (tmp_path / "raw.out").read_text().splitlines() if line)


def test_segmentation_round_trip(tmp_path, capsys):
    images, masks = _segmentation_folders(tmp_path, 6, 0)
    test_images, test_masks = _segmentation_folders(tmp_path, 3, 1, "_test")
    gold = tmp_path / "gold"  # predict reads images/ and masks/ as training read them (0/1 and 0/255 masks)
    gold.mkdir()
    test_images.rename(gold / "images")
    test_masks.rename(gold / "masks")
    test_images, test_masks = gold / "images", gold / "masks"
    trained, predicted = _round_trip(tmp_path, capsys, [
        "segmentation", "--images", str(images), "--masks", str(masks), "--test-images", str(test_images),
        "--test-masks", str(test_masks)], str(gold))
    assert sorted(p.name for p in (tmp_path / "pred").iterdir()) == sorted(p.name for p in test_images.iterdir())
    _same_metrics(trained, predicted, ["test_pixel_accuracy", "test_foreground_iou"])
    assert predicted["test_pixel_accuracy"] > 0.8


@pytest.mark.slow
def test_boxes_round_trip(tmp_path, capsys):
    images, rows = _box_images(tmp_path, 12, 0)
    csv = _write_boxes_csv(tmp_path / "boxes.csv", rows)
    trained, _ = _round_trip(tmp_path, capsys, ["boxes", "--images", str(images), "--boxes", str(csv),
                                                "--test-fraction", "0.25"], str(images))
    assert trained["test_detection_rate"] >= 0.0
    # INPUT is the folder train read: the 3 images it held out, a CSV row of cells and pixels each
    lines = (tmp_path / "pred").read_text().splitlines()
    assert lines[0].startswith("name,") and len(lines) == 4
    assert {line.split(",")[0] for line in lines[1:]} < {Path(row[0]).stem for row in rows}
    other = tmp_path / "copy"  # the same images elsewhere: other input, scored whole (no gold: boxes only)
    other.mkdir()
    for image in images.iterdir():
        (other / image.name).symlink_to(image)
    assert main(["predict", str(tmp_path / "run" / "model.npz"), str(other), "--out", str(tmp_path / "all.csv")]) == 0
    lines = (tmp_path / "all.csv").read_text().splitlines()
    assert sorted(line.split(",")[0] for line in lines[1:]) == sorted(Path(row[0]).stem for row in rows)


def test_bitext_round_trip(tmp_path, capsys):
    source, target, gold = _bitext(tmp_path, 40, 0)
    test = _bitext(tmp_path, 12, 1, "test")
    trained, predicted = _round_trip(tmp_path, capsys, [
        "bitext", "--source", str(source), "--target", str(target), "--gold", str(gold),
        "--test-source", str(test[0]), "--test-target", str(test[1]), "--test-gold", str(test[2])],
        ",".join(map(str, test)))
    _same_metrics(trained, predicted, ["test_aer"])
    assert len((tmp_path / "pred").read_text().splitlines()) > 0


def test_flags_of_another_kind_are_refused(tmp_path, capsys):
    assert main(["train", "sequence", "--images", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "--images applies to" in capsys.readouterr().err
    assert main(["train", "ocr", "--source", "a.txt", "--out", str(tmp_path / "o")]) == 2
    assert main(["train", "bitext", "--data", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert main(["train", "sequence", "--out", str(tmp_path / "o")]) == 2
    assert "--train" in capsys.readouterr().err


def test_sequence_predict_scores_a_gold_label_the_model_never_saw(tmp_path, capsys):
    """A gold label absent from training does not block predict: it is scored as an error, with one warning."""
    rng = np.random.default_rng(3)
    train = _write_conll(tmp_path / "train.txt", _sentences(rng, 30))
    out = tmp_path / "run"
    assert main(["train", "sequence", "--train", str(train), "--feature-columns", "2", "--passes", "2",
                 "--out", str(out), "--no-progress"]) == 0
    sentences = _sentences(rng, 6)
    sentences[0][1] = (sentences[0][1][0], sentences[0][1][1], "B-FOO")  # a chunk type training never had
    test = _write_conll(tmp_path / "test.txt", sentences)
    capsys.readouterr()
    metrics = tmp_path / "m.json"
    assert main(["predict", str(out / "model.npz"), str(test), "--out", str(tmp_path / "pred"),
                 "--json", str(metrics)]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(test) in err[0] and "B-FOO" in err[0] and "--unseen-labels" not in err[0]
    rows = [line.split() for line in (tmp_path / "pred").read_text().splitlines() if line]
    gold, predicted = [row[2] for row in rows], [row[3] for row in rows]
    assert "B-FOO" in gold and "B-FOO" not in predicted
    expected = sum(g == p for g, p in zip(gold, predicted)) / len(gold)
    assert json.loads(metrics.read_text())["test_token_accuracy"] == pytest.approx(expected, abs=1e-12)


def test_predict_bitext_names_the_one_missing_file(tmp_path, capsys):
    source, target, gold = _bitext(tmp_path, 12, 0)
    out = tmp_path / "run"
    assert main(["train", "bitext", "--source", str(source), "--target", str(target), "--gold", str(gold),
                 "--passes", "1", "--out", str(out), "--no-progress"]) == 0
    capsys.readouterr()
    missing = tmp_path / "nosuch.tgt"
    assert main(["predict", str(out / "model.npz"), f"{source},{missing}", "--out", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"input {missing} does not exist" in err and f"{source}," not in err
    # a folder where a file belongs is named as such, not as missing
    assert main(["predict", str(out / "model.npz"), f"{source},{tmp_path}", "--out", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"input {tmp_path} is not what this task reads" in err


def test_sequence_predict_refuses_a_file_whose_columns_differ_from_training(tmp_path, capsys):
    """Trained on 'token POS chunk' (POS as features): a 'token chunk' file was read as 'token POS' without
    labels (the chunks became POS features) and a five-column file took its last column as the labels, both
    without a word. Now each is refused naming the file, the line and the expected and found counts."""
    rng = np.random.default_rng(4)
    train = _write_conll(tmp_path / "train.txt", _sentences(rng, 30))
    out = tmp_path / "run"
    assert main(["train", "sequence", "--train", str(train), "--feature-columns", "2", "--passes", "1", "--out",
                 str(out), "--no-progress"]) == 0
    model = str(out / "model.npz")
    sentences = _sentences(rng, 3)
    cases = {"token_chunk.txt": ((0, 2), "found 2 whose column 2 holds the model's labels"),
             "five.txt": ((0, 1, 1, 2, 2), "found 5"), "token.txt": ((0,), "found 1")}
    for name, (order, found) in cases.items():
        path = _write_conll(tmp_path / name, sentences, order=order)
        capsys.readouterr()
        assert main(["predict", model, str(path), "--out", str(tmp_path / "pred")]) == 2, name
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"{path}, line 1: expected 3 (with the labels) or 2 (without) " \
                                              "columns, as the model's training file had 3" in err, err
        assert found in err, err
    assert not (tmp_path / "pred").exists()
    # 'token POS' (no labels) and the training layout are read as before
    for order in ((0, 1), (0, 1, 2)):
        path = _write_conll(tmp_path / "ok.txt", sentences, order=order)
        assert main(["predict", model, str(path), "--out", str(tmp_path / "pred")]) == 0


def _split_predict(tmp_path: Path, capsys, model: Path, given: str | None, *flags: str) -> dict:
    metrics = tmp_path / "split.json"
    args = ["predict", str(model), *([given] if given else []), "--out", str(tmp_path / "split_pred"), "--json",
            str(metrics), *flags]
    assert main(args) == 0
    capsys.readouterr()
    return json.loads(metrics.read_text())


def _train_split(tmp_path: Path, capsys, args: list[str]) -> tuple[dict, Path]:
    out = tmp_path / "run"
    assert main(["train", *args, "--passes", "3", "--out", str(out), "--no-progress"]) == 0
    capsys.readouterr()
    return json.loads((out / "trace.json").read_text()), out / "model.npz"


@pytest.mark.parametrize("separate_test", [False, True])
def test_sequence_predict_scores_the_split_train_held_out(tmp_path, capsys, separate_test):
    """Without INPUT (or with the training file) predict scores the sentences train held out, by the recorded
    seed and fraction, or the test file: train's numbers exactly."""
    rng = np.random.default_rng(5)
    train = _write_conll(tmp_path / "train.txt", _sentences(rng, 40))
    args = ["sequence", "--train", str(train), "--feature-columns", "2", "--n-train", "20"]
    if separate_test:
        args += ["--test", str(_write_conll(tmp_path / "test.txt", _sentences(rng, 9)))]
    else:
        args += ["--test-fraction", "0.25", "--seed", "3"]
    trained, model = _train_split(tmp_path, capsys, args)
    for given in (None, str(train)):
        got = _split_predict(tmp_path, capsys, model, given)
        assert got["split"] == "test" and got["n"] == (9 if separate_test else 10)
        _same_metrics(trained, got, ["test_token_accuracy", "test_chunk_f1"])
    got = _split_predict(tmp_path, capsys, model, None, "--split", "train")
    assert got["n"] == 20 and "train_token_accuracy" in got
    assert _split_predict(tmp_path, capsys, model, None, "--split", "all")["n"] == (49 if separate_test else 40)


def test_bitext_predict_scores_the_pairs_train_held_out(tmp_path, capsys):
    files = _bitext(tmp_path, 40, 0)
    trained, model = _train_split(tmp_path, capsys, ["bitext", "--source", str(files[0]), "--target", str(files[1]),
                                                     "--gold", str(files[2]), "--test-fraction", "0.3"])
    for given in (None, ",".join(map(str, files))):
        got = _split_predict(tmp_path, capsys, model, given)
        assert got["split"] == "test" and got["n"] == 12
        _same_metrics(trained, got, ["test_aer"])
    whole = _split_predict(tmp_path, capsys, model, ",".join(map(str, files[:2])))  # no gold: other input, whole
    assert whole["split"] == "whole" and whole["n"] == 40


def test_segmentation_predict_scores_the_images_train_held_out(tmp_path, capsys):
    images, masks = _segmentation_folders(tmp_path, 8, 2)
    trained, model = _train_split(tmp_path, capsys, ["segmentation", "--images", str(images), "--masks", str(masks),
                                                     "--test-fraction", "0.25"])
    for given in (None, str(images)):
        got = _split_predict(tmp_path, capsys, model, given)
        assert got["split"] == "test" and got["n"] == 2
        _same_metrics(trained, got, ["test_pixel_accuracy", "test_foreground_iou"])
    assert len(list((tmp_path / "split_pred").iterdir())) == 2


@pytest.mark.slow
def test_boxes_predict_scores_the_images_train_held_out(tmp_path, capsys):
    images, rows = _box_images(tmp_path, 12, 0)
    csv = _write_boxes_csv(tmp_path / "boxes.csv", rows)
    trained, model = _train_split(tmp_path, capsys, ["boxes", "--images", str(images), "--boxes", str(csv),
                                                     "--test-fraction", "0.25"])
    for given in (None, str(images)):
        got = _split_predict(tmp_path, capsys, model, given)
        assert got["split"] == "test" and got["n"] == 3
        _same_metrics(trained, got, ["test_detection_rate", "test_mean_iou"])
