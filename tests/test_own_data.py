"""Training on own data files (structopt.tasks.own_data): the four kinds end to end on small files
written here, the errors (each names the file, and the line for text files), the argparse wiring,
and the generic column reader against the CoNLL-2000 reader on the real corpus."""

from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest
from _shared_data import SHARED_DATA, needs_data

from structopt.errors import DataNotFoundError, InvalidInputError, StructoptError
from structopt.solvers.bcfw import bcfw
from structopt.tasks.own_data import (
    OWN_TASKS,
    BoxesOptions,
    ParallelOptions,
    SegmentationOptions,
    SequenceOptions,
    add_flat_arguments,
    featurize_columns,
    load_localization,
    load_segmentation,
    load_sequence,
    read_columns,
    read_csv_boxes,
    read_voc_boxes,
)


def _train(built, passes: float = 4) -> dict[str, float]:
    problem, evaluate, description, _ = built
    assert description
    result = bcfw(problem, max_passes=passes, random_state=0)
    assert result.trace[-1]["gap"] < result.trace[0]["gap"]  # it learned something
    return evaluate(result.w)


def _save_png(path: Path, array: np.ndarray) -> None:
    from PIL import Image

    Image.fromarray(array).save(path)


# ------------------------------------------------------------------ sequence labeling
_LEXICON = {"DT": ["the", "a", "every"], "NN": ["cat", "dog", "house", "idea"], "VBZ": ["sees", "likes", "runs"],
            "IN": ["in", "on"], ".": ["."]}
_CHUNK = {"DT": "B-NP", "NN": "I-NP", "VBZ": "B-VP", "IN": "B-PP", ".": "O"}


def _sentences(rng: np.random.Generator, n: int) -> list[list[tuple[str, str, str]]]:
    out = []
    for _ in range(n):
        pattern = ["DT", "NN", "VBZ", "DT", "NN"] + (["IN", "DT", "NN"] if rng.random() < 0.5 else []) + ["."]
        out.append([(str(rng.choice(_LEXICON[p])), p, _CHUNK[p]) for p in pattern])
    return out


def _write_conll(path: Path, sentences, order=(0, 1, 2), docstart: bool = False) -> Path:
    lines = ["-DOCSTART- -X- O", ""] if docstart else []
    for sentence in sentences:
        lines += [" ".join(token[k] for k in order) for token in sentence] + [""]
    path.write_text("\n".join(lines))
    return path


@pytest.fixture
def conll_files(tmp_path):
    rng = np.random.default_rng(0)
    # label first, then POS, then the token: the columns are the user's choice
    train = _write_conll(tmp_path / "train.txt", _sentences(rng, 40), order=(2, 1, 0), docstart=True)
    test = _write_conll(tmp_path / "test.txt", _sentences(rng, 15), order=(2, 1, 0))
    return train, test


def test_sequence_trains_and_evaluates(conll_files):
    train, test = conll_files
    options = SequenceOptions(train=str(train), test=str(test), token_column=3, label_column=1,
                              feature_columns=(2,), n_features=2**12)
    scores = _train(OWN_TASKS["sequence"].build(options))
    assert set(scores) == {"test_token_accuracy", "test_chunk_f1"}
    assert scores["test_token_accuracy"] > 0.95 and scores["test_chunk_f1"] > 0.9


def test_sequence_preprocessing_featurises_new_files_alike(conll_files):
    train, test = conll_files
    built = OWN_TASKS["sequence"].build(SequenceOptions(train=str(train), test=str(test), token_column=3,
                                                        label_column=1, feature_columns=(2,), n_features=2**10))
    p = built.preprocessing
    assert p["tags"] == ["O", "B-NP", "B-PP", "B-VP", "I-NP"]
    again = read_columns(test, p["token_column"], p["label_column"], p["feature_columns"])
    (X,) = featurize_columns([again], p["n_features"], p["window"], p["affix_lengths"])
    reference = load_sequence(SequenceOptions(train=str(train), test=str(test), token_column=3, label_column=1,
                                              feature_columns=(2,), n_features=2**10))["test"]["X"]
    assert all((a != b).nnz == 0 for a, b in zip(X, reference, strict=True))
    # input to label, without the label column: the same features
    unlabelled = test.parent / "unlabelled.txt"
    unlabelled.write_text("\n".join(" ".join(line.split()[1:]) for line in test.read_text().splitlines()))
    bare = read_columns(unlabelled, p["token_column"] - 1, None, [c - 1 for c in p["feature_columns"]])
    assert bare.corpus.tags == []
    (X,) = featurize_columns([bare], p["n_features"], p["window"], p["affix_lengths"])
    assert all((a != b).nnz == 0 for a, b in zip(X, reference, strict=True))


def test_sequence_reader_sentences_and_columns(conll_files):
    train, _ = conll_files
    read = read_columns(train, token_column=-1, label_column=1, feature_columns=(2,))
    assert read.corpus.n_sentences == 40  # the -DOCSTART- line is no token and no sentence
    assert read.corpus.words[0] in _LEXICON["DT"] and read.corpus.pos[0] == "DT" and read.corpus.tags[0] == "B-NP"
    assert read.lines[0] == 3  # line numbers of tokens, 1-based, after the marker and a blank line


def test_sequence_holdout_is_seeded(conll_files):
    train, _ = conll_files
    a = load_sequence(SequenceOptions(train=str(train), token_column=3, label_column=1, seed=1, n_features=256))
    b = load_sequence(SequenceOptions(train=str(train), token_column=3, label_column=1, seed=1, n_features=256))
    c = load_sequence(SequenceOptions(train=str(train), token_column=3, label_column=1, seed=2, n_features=256))
    assert len(a["test"]["y"]) == 10 and len(a["train"]["y"]) == 30
    assert all(np.array_equal(x, y) for x, y in zip(a["test"]["y"], b["test"]["y"]))
    assert [len(y) for y in a["test"]["y"]] != [len(y) for y in c["test"]["y"]] or not all(
        np.array_equal(x, y) for x, y in zip(a["test"]["y"], c["test"]["y"]))


def test_extra_feature_columns_add_features(tmp_path):
    path = tmp_path / "four.txt"
    path.write_text("Dogs NNS x1 B-NP\nbark VBP x2 B-VP\n\nCats NNS x1 B-NP\n")
    one = featurize_columns([read_columns(path, 1, -1, (2,))], n_features=2**16)[0]
    two = featurize_columns([read_columns(path, 1, -1, (2, 3))], n_features=2**16)[0]
    for a, b in zip(one, two):
        assert (a.multiply(b) != a).nnz == 0  # every feature of the first column is kept
        assert b.nnz > a.nnz and set(np.unique(b.data)) == {1.0}


def test_unseen_test_label_is_refused_or_kept(tmp_path):
    train = tmp_path / "train.txt"
    train.write_text("a B-NP\nb I-NP\n\nc O\n")
    test = tmp_path / "test.txt"
    test.write_text("a B-NP\n\nb B-LST\n")
    with pytest.raises(InvalidInputError, match=re.escape(f"{test}:3: label 'B-LST' does not occur")):
        load_sequence(SequenceOptions(train=str(train), test=str(test), n_features=64))
    data = load_sequence(SequenceOptions(train=str(train), test=str(test), n_features=64, unseen_labels="extend"))
    assert data["labels"] == ["O", "B-NP", "I-NP", "B-LST"] and data["model"].n_states == 4
    np.testing.assert_array_equal(data["test"]["y"][1], [3])


@pytest.mark.parametrize(("text", "kwargs", "message"), [
    ("", {}, "{path}: empty file"),
    ("\n\n-DOCSTART- O\n\n", {}, "{path}: no token lines"),
    ("a DT B-NP\nb NN\n", {}, "{path}:2: expected 3 columns (as line 1), found 2"),
    ("\na DT B-NP\n", {"label_column": 4}, "{path}:2: label column 4 is out of range: the line has 3 columns"),
    ("a DT B-NP\n", {"feature_columns": (-4,)}, "{path}:1: feature column -4 is out of range"),
    ("a DT B-NP\n", {"token_column": 3}, "{path}:1: the label column is column 3, already the token column"),
    (b"a DT O\n\xff\xfe O O\n", {}, "{path}, line 2: bytes"),
])
def test_sequence_errors_name_file_and_line(tmp_path, text, kwargs, message):
    path = tmp_path / "data.txt"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(InvalidInputError, match=re.escape(message.format(path=path))):
        read_columns(path, **kwargs)


def test_sequence_missing_file_is_named(tmp_path):
    with pytest.raises(DataNotFoundError, match=re.escape(f"{tmp_path / 'nope.txt'}: no such file")):
        OWN_TASKS["sequence"].build(SequenceOptions(train=str(tmp_path / "nope.txt")))


# ------------------------------------------------------------------ segmentation
def _blob_image(rng: np.random.Generator, h: int = 24, w: int = 28) -> tuple[np.ndarray, np.ndarray]:
    top, left = rng.integers(2, h // 2), rng.integers(2, w // 2)
    mask = np.zeros((h, w), dtype=bool)
    mask[top:top + h // 3 + 2, left:left + w // 3 + 2] = True
    image = np.clip(60 + 130 * mask + rng.normal(0, 12, (h, w)), 0, 255).astype(np.uint8)
    return image, mask


def _segmentation_folders(root: Path, n: int, seed: int, suffix: str = "") -> tuple[Path, Path]:
    rng = np.random.default_rng(seed)
    images, masks = root / f"images{suffix}", root / f"masks{suffix}"
    images.mkdir()
    masks.mkdir()
    for i in range(n):
        image, mask = _blob_image(rng)
        _save_png(images / f"img{i:02d}.png", np.stack([image] * 3, axis=-1))  # colour images are read as grey
        # masks as 0/255 and as 0/1, with another suffix than the image: matched by stem
        _save_png(masks / f"img{i:02d}.png", (mask * (255 if i % 2 else 1)).astype(np.uint8))
    return images, masks


def test_segmentation_trains_and_evaluates(tmp_path):
    images, masks = _segmentation_folders(tmp_path, 8, 0)
    test_images, test_masks = _segmentation_folders(tmp_path, 3, 1, "_test")
    options = SegmentationOptions(images=str(images), masks=str(masks), test_images=str(test_images),
                                  test_masks=str(test_masks), size=16)
    scores = _train(OWN_TASKS["segmentation"].build(options), passes=5)
    assert set(scores) == {"test_pixel_accuracy", "test_foreground_iou", "test_mean_image_iou"}
    assert scores["test_pixel_accuracy"] > 0.9 and scores["test_foreground_iou"] > 0.6


def test_segmentation_preprocessing_featurises_new_images_alike(tmp_path):
    from structopt.tasks.horses import image_input
    from structopt.tasks.own_segmentation import image_features

    images, masks = _segmentation_folders(tmp_path, 5, 0)
    options = SegmentationOptions(images=str(images), masks=str(masks), size=12, test_fraction=0.4)
    p = OWN_TASKS["segmentation"].build(options).preprocessing
    data = load_segmentation(options)
    for name, x, y in zip(data["test"]["names"], data["test"]["X"], data["test"]["y"], strict=True):
        # a saved model's preprocessing featurises a new image as the horses task's predict does
        again, shape = image_input(images / f"{name}.png", p)
        assert shape == (24, 28)
        for a, b in zip(again, x, strict=True):
            np.testing.assert_array_equal(a, b)
        _, mask = image_features(images / f"{name}.png", masks / f"{name}.png", p["size"], p["mask_threshold"])
        np.testing.assert_array_equal(mask, y)


def test_segmentation_masks_on_the_grid(tmp_path):
    images, masks = _segmentation_folders(tmp_path, 4, 0)
    data = load_segmentation(SegmentationOptions(images=str(images), masks=str(masks), size=14, test_fraction=0.25))
    assert len(data["train"]["y"]) == 3 and len(data["test"]["y"]) == 1
    y, x = data["train"]["y"][0], data["train"]["X"][0]
    assert y.shape == (12, 14) and x.pixels.shape[:2] == (12, 14) and 0 < y.mean() < 0.6
    np.testing.assert_allclose(x.pixels[..., 0], 1.0 / y.size)


def test_segmentation_errors(tmp_path):
    images, masks = _segmentation_folders(tmp_path, 3, 0)
    seg = OWN_TASKS["segmentation"]
    _save_png(masks / "stray.png", np.zeros((24, 28), dtype=np.uint8))
    with pytest.raises(InvalidInputError, match=re.escape(f"1 mask(s) without an image in {images}: stray.png")):
        seg.build(SegmentationOptions(images=str(images), masks=str(masks)))
    (masks / "stray.png").unlink()
    (masks / "img02.png").unlink()
    with pytest.raises(InvalidInputError, match=re.escape(f"1 image(s) without a mask in {masks}: img02.png")):
        seg.build(SegmentationOptions(images=str(images), masks=str(masks)))
    _save_png(masks / "img02.png", np.zeros((10, 10), dtype=np.uint8))
    with pytest.raises(InvalidInputError, match=re.escape(f"{masks / 'img02.png'}: mask is 10x10 pixels but its "
                                                          f"image {images / 'img02.png'} is 28x24")):
        seg.build(SegmentationOptions(images=str(images), masks=str(masks)))
    _save_png(masks / "img02.png", np.full((24, 28), 7, dtype=np.uint8))
    with pytest.raises(InvalidInputError, match=re.escape(f"{masks / 'img02.png'}: mask values {{7}} are neither")):
        seg.build(SegmentationOptions(images=str(images), masks=str(masks)))
    (images / "extra.png").write_bytes(b"not an image")
    _save_png(masks / "extra.png", np.zeros((24, 28), dtype=np.uint8))
    _save_png(masks / "img02.png", np.zeros((24, 28), dtype=np.uint8))
    with pytest.raises(InvalidInputError, match=re.escape(f"cannot read image {images / 'extra.png'}")):
        seg.build(SegmentationOptions(images=str(images), masks=str(masks), test_fraction=0.3))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InvalidInputError, match=re.escape(f"{empty}: no image files (.png")):
        seg.build(SegmentationOptions(images=str(empty), masks=str(masks)))
    with pytest.raises(DataNotFoundError, match=re.escape(f"{tmp_path / 'none'}: no such directory")):
        seg.build(SegmentationOptions(images=str(tmp_path / "none"), masks=str(masks)))
    with pytest.raises(InvalidInputError, match="--test-images, --test-masks or none"):
        seg.build(SegmentationOptions(images=str(images), masks=str(masks), test_images=str(images)))


def test_segmentation_mask_threshold(tmp_path):
    images, masks = _segmentation_folders(tmp_path, 4, 0)
    _save_png(masks / "img00.png", np.where(np.asarray(_blob_image(np.random.default_rng(0))[1]), 200, 3)
              .astype(np.uint8))
    with pytest.raises(InvalidInputError, match="--mask-threshold"):
        load_segmentation(SegmentationOptions(images=str(images), masks=str(masks), size=8))
    data = load_segmentation(SegmentationOptions(images=str(images), masks=str(masks), size=8, mask_threshold=127))
    assert sum(len(data[s]["y"]) for s in ("train", "test")) == 4


# ------------------------------------------------------------------ localization
def _box_images(root: Path, n: int, seed: int) -> tuple[Path, list[tuple[str, int, int, int, int]]]:
    """Noisy grey images with one bright rectangle each; its box as (name, x_min, y_min, x_max, y_max)."""
    rng = np.random.default_rng(seed)
    images = root / "images"
    images.mkdir()
    rows = []
    for i in range(n):
        h, w = 64, 80
        bw, bh = rng.integers(20, 36), rng.integers(18, 30)
        x0, y0 = rng.integers(0, w - bw), rng.integers(0, h - bh)
        image = rng.normal(70, 20, (h, w))
        image[y0:y0 + bh, x0:x0 + bw] += 110
        rgb = np.stack([image, image * 0.8, image * 0.5], axis=-1)
        name = f"p{i}.png"
        _save_png(images / name, np.clip(rgb, 0, 255).astype(np.uint8))
        rows.append((name, int(x0), int(y0), int(x0 + bw), int(y0 + bh)))
    return images, rows


def _write_boxes_csv(path: Path, rows, header: str = "image,x_min,y_min,x_max,y_max") -> Path:
    path.write_text("\n".join([header] + [",".join(map(str, row)) for row in rows]) + "\n")
    return path


def _voc(name: str, w: int, h: int, boxes) -> str:
    objects = "".join(f"<object><name>thing</name><bndbox><xmin>{x0 + 1}</xmin><ymin>{y0 + 1}</ymin>"
                      f"<xmax>{x1}</xmax><ymax>{y1}</ymax></bndbox></object>" for x0, y0, x1, y1 in boxes)
    return (f"<annotation><filename>{name}</filename><size><width>{w}</width><height>{h}</height>"
            f"<depth>3</depth></size>{objects}</annotation>")


_SMALL_BOXES = {"image_size": 64, "cell_size": 8, "n_words": 8, "n_colours": 4, "context": 3, "colour_context": 3,
                "position_bins": 2}


def test_boxes_trains_and_evaluates(tmp_path):
    images, rows = _box_images(tmp_path, 12, 0)
    csv = _write_boxes_csv(tmp_path / "boxes.csv", rows)
    options = BoxesOptions(images=str(images), boxes=str(csv), test_fraction=0.25, **_SMALL_BOXES)
    scores = _train(OWN_TASKS["boxes"].build(options), passes=5)
    assert set(scores) == {"test_detection_rate", "test_mean_iou", "prior_detection_rate", "prior_mean_iou"}
    assert scores["test_mean_iou"] > scores["prior_mean_iou"] and scores["test_detection_rate"] >= 2 / 3


def test_boxes_preprocessing_featurises_new_images_alike(tmp_path):
    from structopt.tasks.localization import image_cells

    images, rows = _box_images(tmp_path, 8, 3)
    csv = _write_boxes_csv(tmp_path / "boxes.csv", rows)
    options = BoxesOptions(images=str(images), boxes=str(csv), test_fraction=0.25, **_SMALL_BOXES)
    for foreground in (True, False):
        data = load_localization(dataclasses.replace(options, foreground=foreground))
        p = data["info"]["preprocessing"]
        assert p["codebook"].shape == (8, 36) and p["colour_codebook"].shape == (4, 3)
        assert p["foreground"] == foreground and ("foreground_coef" in p) == foreground
        for name, x in zip(data["test"]["names"], data["test"]["X"], strict=True):
            # a saved model's preprocessing featurises a new image as the localization task's predict does
            again, original, _ = image_cells(images / f"{name}.png", p)
            assert original == (64, 80)
            np.testing.assert_allclose(again, x, rtol=1e-12, atol=1e-12)


def test_voc_and_csv_give_the_same_boxes(tmp_path):
    images, rows = _box_images(tmp_path, 3, 1)
    annotations = tmp_path / "xml"
    annotations.mkdir()
    for name, *box in rows:
        (annotations / f"{Path(name).stem}.xml").write_text(_voc(name, 80, 64, [box]))
    from_csv = read_csv_boxes(_write_boxes_csv(tmp_path / "b.csv", rows, header="\ufeffImage, x_min,y_min,x_max,y_max"),
                              images)
    from_voc = read_voc_boxes(annotations, images)
    assert [(n, b) for n, _, b in from_csv] == [(n, b) for n, _, b in from_voc]
    assert from_csv[0][2] == (rows[0][2], rows[0][1], rows[0][4], rows[0][3])  # (top, left, bottom, right)


_CSV_HEADER = "image,x_min,y_min,x_max,y_max\n"


@pytest.mark.parametrize(("text", "message"), [
    ("", "{path}: empty file"),
    ("image,x0,y0,x1,y1\n", "{path}:1: the header must name the columns image,x_min,y_min,x_max,y_max"),
    (_CSV_HEADER + "p0.png,1,2,3\n", "{path}:2: expected 5 fields (as the header), found 4"),
    (_CSV_HEADER + '"p0.png,1,2,20,30\n', "{path}:2: expected 5 fields"),
    (_CSV_HEADER + "\np0.png,1,two,30,30\n", "{path}:3: y_min must be a finite number"),
    (_CSV_HEADER + "p0.png,10,2,10,30\n", "{path}:2: box (x_min 10, y_min 2, x_max 10, y_max 30) has zero or "
                                           "negative width"),
    (_CSV_HEADER + "p0.png,10,2,81,30\n", "{path}:2: box (x_min 10, y_min 2, x_max 81, y_max 30) reaches outside "
                                           "the 80x64 image p0.png"),
    (_CSV_HEADER + "p0.png,-1,2,20,30\n", "{path}:2: box (x_min -1"),
    (_CSV_HEADER + "p0.png,1,2,20,30\np0.png,1,2,20,31\n", "{path}:3: a second box for p0.png (the first is on "
                                                            "line 2)"),
    (_CSV_HEADER + "p0.png,1,2,20,30\np1.png,1,2,20,30\n", "1 image(s) without a box in {images}: p2.png"),
    (_CSV_HEADER, "{path}: a header but no box"),
], ids=["empty", "header", "ragged", "quote", "number", "empty-box", "outside", "negative", "twice", "unlisted",
        "no-rows"])
def test_boxes_csv_errors(tmp_path, text, message):
    images, _ = _box_images(tmp_path, 3, 2)
    path = tmp_path / "b.csv"
    path.write_text(text)
    with pytest.raises(InvalidInputError, match=re.escape(message.format(path=path, images=images))):
        read_csv_boxes(path, images)


def test_boxes_csv_missing_files(tmp_path):
    images, _ = _box_images(tmp_path, 1, 2)
    path = tmp_path / "b.csv"
    path.write_text(_CSV_HEADER + "zz.png,1,2,20,30\n")
    with pytest.raises(DataNotFoundError, match=re.escape(f"{path}:2: image 'zz.png' not found in {images}")):
        read_csv_boxes(path, images)
    with pytest.raises(DataNotFoundError, match=re.escape(f"{tmp_path / 'no.csv'}: no such file")):
        read_csv_boxes(tmp_path / "no.csv", images)


_BOX = (10, 12, 40, 50)


@pytest.mark.parametrize(("text", "message"), [
    ("<annotation><filename>p0.png</filename>\n<size>", "{xml}: bad XML"),
    (_voc("p0.png", 80, 64, [_BOX, _BOX]), "{xml}: 2 objects; the model predicts exactly one box per image"),
    (_voc("p0.png", 80, 64, []), "{xml}: 0 objects"),
    (_voc("p0.png", 80, 64, [(70, 10, 90, 20)]), "{xml}: object 0 extends more than one pixel beyond the 80x64"),
    (_voc("p0.png", 80, 64, [(30, 10, 20, 20)]), "{xml}: object 0 has zero or negative width or height"),
    (_voc("p0.png", 81, 64, [_BOX]), "{image}: image is 80x64 pixels but {xml} describes a 81x64"),
    ("<annotation><size><width>80</width><height>64</height></size></annotation>",
     "{xml}: missing or empty element <annotation/filename>"),
], ids=["malformed", "two-objects", "no-object", "outside", "empty-box", "size", "no-filename"])
def test_boxes_voc_errors(tmp_path, text, message):
    images, _ = _box_images(tmp_path, 1, 3)
    annotations = tmp_path / "xml"
    annotations.mkdir()
    xml = annotations / "p0.xml"
    xml.write_text(text)
    with pytest.raises(InvalidInputError, match=re.escape(message.format(xml=xml, image=images / "p0.png"))):
        read_voc_boxes(annotations, images)


def test_boxes_voc_missing_image(tmp_path):
    images, _ = _box_images(tmp_path, 1, 3)
    annotations = tmp_path / "xml"
    annotations.mkdir()
    xml = annotations / "p0.xml"
    xml.write_text(_voc("p9.png", 80, 64, [_BOX]))
    with pytest.raises(DataNotFoundError, match=re.escape(f"{xml}: its image {images / 'p9.png'} does not exist")):
        read_voc_boxes(annotations, images)
    xml.unlink()
    with pytest.raises(InvalidInputError, match=re.escape(f"{annotations}: no .xml annotation files")):
        read_voc_boxes(annotations, images)


def test_boxes_options_refused(tmp_path):
    images, rows = _box_images(tmp_path, 3, 2)
    csv = _write_boxes_csv(tmp_path / "b.csv", rows)
    boxes = OWN_TASKS["boxes"]
    with pytest.raises(InvalidInputError, match="exactly one of --boxes FILE and --annotations DIR"):
        boxes.build(BoxesOptions(images=str(images), boxes=str(csv), annotations=str(images)))
    with pytest.raises(InvalidInputError, match="n_words and n_colours must be >= 2"):
        boxes.build(BoxesOptions(images=str(images), boxes=str(csv), n_colours=0))
    with pytest.raises(InvalidInputError, match="cell_size must be an even integer"):
        boxes.build(BoxesOptions(images=str(images), boxes=str(csv), cell_size=5))
    with pytest.raises(InvalidInputError, match="too few to hold out"):
        boxes.build(BoxesOptions(images=str(images), boxes=str(csv), test_fraction=0.1, **_SMALL_BOXES))


# ------------------------------------------------------------------ alignment
def _bitext(root: Path, n: int, seed: int, name: str = "train") -> tuple[Path, Path, Path]:
    """Target = source words renamed, with the first two words swapped when the sentence is long."""
    rng = np.random.default_rng(seed)
    vocabulary = [f"w{k}" for k in range(25)]
    src, tgt, gold = [], [], []
    for s in range(1, n + 1):
        words = list(rng.choice(vocabulary, size=rng.integers(3, 8), replace=False))
        order = list(range(len(words)))
        if len(words) > 4:
            order[0], order[1] = 1, 0
        src.append(" ".join(words))
        tgt.append(" ".join("f" + words[k][1:] + "x" for k in order))
        gold += [f"{s} {order[j] + 1} {j + 1} {'S' if j % 3 else 'P'}" for j in range(len(words))]
    paths = tuple(root / f"{name}.{ext}" for ext in ("src", "tgt", "naacl"))
    for path, lines in zip(paths, (src, tgt, gold)):
        path.write_text("\n".join(lines) + "\n")
    return paths


def test_bitext_trains_and_evaluates(tmp_path):
    source, target, gold = _bitext(tmp_path, 40, 0)
    test = _bitext(tmp_path, 12, 1, "test")
    options = ParallelOptions(source=str(source), target=str(target), gold=str(gold), test_source=str(test[0]),
                              test_target=str(test[1]), test_gold=str(test[2]))
    scores = _train(OWN_TASKS["bitext"].build(options), passes=5)
    assert set(scores) == {"test_aer"} and scores["test_aer"] < 0.15


def test_bitext_preprocessing_featurises_new_pairs_alike(tmp_path):
    from structopt.tasks.alignment import AlignmentFeaturizer
    from structopt.tasks.own_data import load_parallel

    source, target, gold = _bitext(tmp_path, 12, 0)
    options = ParallelOptions(source=str(source), target=str(target), gold=str(gold), test_fraction=0.25)
    p = OWN_TASKS["bitext"].build(options).preprocessing
    data = load_parallel(options)
    again = AlignmentFeaturizer.from_state(p["statistics"])
    for pair, x in zip(data["test"]["pairs"], data["test"]["X"], strict=True):
        np.testing.assert_array_equal(again(pair), x)


def _truncate(files):
    source, target, _ = files
    target.write_text("\n".join(target.read_text().splitlines()[:4]) + "\n")
    return f"{target}:4: the file ends here, but {source} has 5 lines"


def _empty_line(files):
    lines = files[1].read_text().splitlines()
    files[1].write_text("\n".join([*lines[:2], "", *lines[3:]]) + "\n")
    return f"{files[1]}, line 3: empty sentence"


def _gold_line(extra: str, message: str):
    def mutate(files):
        gold = files[2]
        n = len(gold.read_text().splitlines()) + 1
        gold.write_text(gold.read_text() + extra)
        return f"{gold}, line {n}: {message}"

    return mutate


def _empty_source(files):
    files[0].write_text("")
    return f"{files[0]}: empty file"


@pytest.mark.parametrize("mutate", [
    _truncate, _empty_line, _empty_source,
    _gold_line("2 1 99 S\n", "link (1, 99) out of range"),
    _gold_line("2 0 1 S\n", "link (0, 1) out of range"),
    _gold_line("6 1 1\n", "sentence 6 out of range 1..5"),
    _gold_line("1 1 1 X\n", "expected 'sentence english french [S|P]'"),
    _gold_line("1 one 1\n", "positions must be integers"),
], ids=["misaligned", "empty-line", "empty-file", "target-position", "source-position", "sentence", "kind",
        "not-integer"])
def test_bitext_errors(tmp_path, mutate):
    files = _bitext(tmp_path, 5, 0)
    message = mutate(files)
    with pytest.raises(InvalidInputError, match=re.escape(message)):
        OWN_TASKS["bitext"].build(ParallelOptions(source=str(files[0]), target=str(files[1]), gold=str(files[2])))


def test_bitext_missing_file(tmp_path):
    source, target, _ = _bitext(tmp_path, 5, 0)
    with pytest.raises(DataNotFoundError, match=re.escape(f"{tmp_path / 'x.naacl'}: no such file")):
        OWN_TASKS["bitext"].build(ParallelOptions(source=str(source), target=str(target),
                                                  gold=str(tmp_path / "x.naacl")))


# ------------------------------------------------------------------ wiring and options
def test_wiring_is_one_loop_and_the_options_parse(conll_files):
    train, test = conll_files
    parser = argparse.ArgumentParser()
    parser.add_argument("--lam", type=float, default=None)  # what structopt train already declares
    parser.add_argument("--n-train", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    sub = parser.add_subparsers(dest="task", required=True)
    for name, own in OWN_TASKS.items():
        own.add_arguments(sub.add_parser(name, help=own.summary))
    args = parser.parse_args(["--n-train", "5", "sequence", "--train", str(train), "--test", str(test),
                              "--token-column", "3", "--label-column", "1", "--feature-columns", "2",
                              "--n-features", "512"])
    options = OWN_TASKS[args.task].parse(args)
    assert options == SequenceOptions(train=str(train), test=str(test), token_column=3, label_column=1,
                                      feature_columns=(2,), n_features=512, n_train=5)
    problem = OWN_TASKS[args.task].build(args).problem
    assert problem.n == 5 and problem.lam == OWN_TASKS["sequence"].default_lam
    with pytest.raises(SystemExit):
        parser.parse_args(["sequence", "--token-column", "0"])
    with pytest.raises(SystemExit):
        parser.parse_args(["boxes", "--test-fraction", "1.5"])


def test_flat_wiring_declares_each_flag_once(tmp_path, conll_files):
    parser = argparse.ArgumentParser()
    parser.add_argument("task", choices=sorted(OWN_TASKS))
    parser.add_argument("--lam", type=float, default=None)
    parser.add_argument("--n-train", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    declared = add_flat_arguments(parser)
    assert declared["--images"] == ("images", ("segmentation", "boxes"))
    assert declared["--boxes"] == ("boxes", ("boxes",)) and declared["--no-foreground"][1] == ("boxes",)
    assert set(declared["--test-fraction"][1]) == set(OWN_TASKS)
    assert set(declared) == {flag for own in OWN_TASKS.values() for flag in own.flags()}
    images, rows = _box_images(tmp_path, 4, 0)
    csv = _write_boxes_csv(tmp_path / "b.csv", rows)
    args = parser.parse_args(["boxes", "--images", str(images), "--boxes", str(csv), "--no-foreground"])
    assert OWN_TASKS["boxes"].parse(args) == BoxesOptions(images=str(images), boxes=str(csv), foreground=False)
    # the refusal the command makes for a flag of another kind (its TASK_OPTIONS rule)
    given = [flag for flag, (dest, kinds) in declared.items() if getattr(args, dest) is not None
             and args.task not in kinds]
    assert given == []
    args = parser.parse_args(["boxes", "--images", str(images), "--masks", str(images)])
    given = [flag for flag, (dest, kinds) in declared.items() if getattr(args, dest) is not None
             and args.task not in kinds]
    assert given == ["--masks"]
    train, test = conll_files
    args = parser.parse_args(["sequence", "--train", str(train), "--test", str(test), "--token-column", "3",
                              "--label-column", "1", "--n-features", "256"])
    problem = OWN_TASKS["sequence"].build(args).problem
    assert problem.n == 40 and problem.lam == 0.01


def test_options_are_declared_once_on_structopt_train():
    from structopt.cli import build_parser
    from structopt.cli_tasks import TASK_OPTIONS

    # argparse refuses a flag declared twice: building the parser is the clash check
    train = next(action for action in build_parser()._subparsers._group_actions[0].choices.values()
                 if action.prog.endswith(" train"))
    flags = {flag for action in train._actions for flag in action.option_strings}
    for own in OWN_TASKS.values():
        for flag, dest in own.flags().items():  # each kind's flag is read by it, refused for the others
            assert TASK_OPTIONS[flag][0] == dest and own.name in TASK_OPTIONS[flag][1], flag
        common = {f.metadata["flag"] for f in dataclasses.fields(own.options) if f.metadata["common"]}
        assert common <= flags  # the command's own --lam, --n-train and --seed are the ones read


def test_every_error_is_a_structopt_error(tmp_path):
    for own in OWN_TASKS.values():
        with pytest.raises(StructoptError):
            own.build(own.options())  # nothing given: refused, naming what is required


# ------------------------------------------------------------------ real data
@needs_data("conll2000")
def test_generic_reader_equals_the_conll_reader_on_conll2000_test():
    from structopt.tasks.conll import featurize, read_conll

    path = SHARED_DATA / "conll2000" / "test.txt"
    reference = read_conll(path)
    mine = read_columns(path, token_column=1, label_column=3, feature_columns=(2,))
    assert mine.corpus.words == reference.words and mine.corpus.pos == reference.pos
    assert mine.corpus.tags == reference.tags
    np.testing.assert_array_equal(mine.corpus.lengths, reference.lengths)
    for a, b in zip(featurize([reference])[0], featurize_columns([mine])[0], strict=True):
        assert (a != b).nnz == 0


@pytest.mark.slow
@needs_data("conll2000")
def test_sequence_task_equals_load_conll2000():
    from structopt.tasks.conll import load_conll2000

    d = SHARED_DATA / "conll2000"
    reference = load_conll2000(d)
    mine = load_sequence(SequenceOptions(train=str(d / "train.txt"), test=str(d / "test.txt"), token_column=1,
                                         label_column=3, feature_columns=(2,), unseen_labels="extend"))
    assert mine["labels"] == reference["tags"]
    for split in ("train", "test"):
        assert len(mine[split]["X"]) == len(reference[split]["X"])
        for a, b in zip(mine[split]["X"], reference[split]["X"], strict=True):
            assert (a != b).nnz == 0
        for a, b in zip(mine[split]["y"], reference[split]["y"], strict=True):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("window", [-1, 101, 1.5, True])
def test_sequence_window_out_of_range_names_the_option(conll_files, window):
    train, _ = conll_files
    with pytest.raises(InvalidInputError, match=r"^--window \(window\) must be an integer in 0\.\.100"):
        load_sequence(SequenceOptions(train=str(train), token_column=3, label_column=1, window=window))


def test_missing_corpus_names_each_place_tried_once(tmp_path, monkeypatch):
    """From the repository root the working directory's and the package's ``../shared/data`` are one place: the
    error names it once."""
    from structopt.tasks._data import find_data_dir

    monkeypatch.delenv("STRUCTOPT_DATA", raising=False)
    monkeypatch.chdir(Path(find_data_dir.__code__.co_filename).resolve().parent.parent)
    with pytest.raises(DataNotFoundError) as raised:
        find_data_dir("no_such_corpus_xyz", None, (), "nowhere")
    tried = str(raised.value).split("(tried: ")[1].split("). ")[0]
    assert tried.count("no_such_corpus_xyz") == 1, tried
