"""Every loader checks what it reads and names the file (and line, field or object) at fault.

Each defect is a small file written to ``tmp_path`` here; each loader also reads a small valid
file. The real corpora are exercised by the loaders' own test modules (they must still load).
"""

from __future__ import annotations

import gzip
import math
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from structopt.errors import DataNotFoundError, InvalidInputError, NotSupportedError
from structopt.marginals.uai import read_mar, read_pr, read_uai, write_mar
from structopt.tasks import localization as loc
from structopt.tasks._data import read_image
from structopt.tasks.alignment import load_hansards
from structopt.tasks.conll import read_conll
from structopt.tasks.horses import load_horses
from structopt.tasks.ocr import load_ocr


def _raises(error: type[Exception], call, *texts: str) -> str:
    """Run ``call``; it must raise ``error`` with a one-line message containing every text; return the message."""
    with pytest.raises(error) as info:
        call()
    message = str(info.value)
    assert "\n" not in message, message
    for text in texts:
        assert str(text) in message, f"{text!r} not in {message!r}"
    return message


# --------------------------------------------------------------------------- CoNLL
CONLL = "Confidence NN B-NP\nin IN B-PP\n\nthe DT B-NP\npound NN I-NP\n"


def test_conll_reads_a_valid_file_and_its_gzip(tmp_path):
    (tmp_path / "a.txt").write_text(CONLL)
    (tmp_path / "a.txt.gz").write_bytes(gzip.compress(CONLL.encode()))
    for name in ("a.txt", "a.txt.gz"):
        corpus = read_conll(tmp_path / name)
        assert corpus.words == ["Confidence", "in", "the", "pound"] and corpus.lengths.tolist() == [2, 2]
        assert corpus.pos == ["NN", "IN", "DT", "NN"] and corpus.tags[-1] == "I-NP"


@pytest.mark.parametrize("content, line, text", [
    (b"Confidence NN B-NP\nin IN B-PP\n\nthe B-NP\n", 4, "2 columns"),          # a missing column
    (b"Confidence NN B-NP\nin IN B-PP extra\n", 2, "4 columns"),               # an extra column
    (b"\n\nConfidence NN x B-NP\nin IN x B-PP\n", 3, "found 4"),                # the first token line is wrong
    (b"Confidence B-NP\nthe\n", 2, "1 columns"),                                # a word without a tag
    (b"Confidence NN B-NP\ncaf\xe9 NN I-NP\n", 2, "not valid utf-8"),             # latin-1 bytes
])
def test_conll_bad_lines_name_file_and_line(tmp_path, content, line, text):
    path = tmp_path / "bad.txt"
    path.write_bytes(content)
    _raises(InvalidInputError, lambda: read_conll(path), str(path), f"line {line}", text)


def test_conll_unreadable_or_missing_files(tmp_path):
    (tmp_path / "bad.txt.gz").write_bytes(b"not gzip at all")
    _raises(InvalidInputError, lambda: read_conll(tmp_path / "bad.txt.gz"), str(tmp_path / "bad.txt.gz"), "cannot read")
    (tmp_path / "cut.txt.gz").write_bytes(gzip.compress(CONLL.encode())[:-12])
    _raises(InvalidInputError, lambda: read_conll(tmp_path / "cut.txt.gz"), str(tmp_path / "cut.txt.gz"))
    (tmp_path / "empty.txt").write_text("\n\n")
    _raises(InvalidInputError, lambda: read_conll(tmp_path / "empty.txt"), str(tmp_path / "empty.txt"), "no tokens")
    _raises(DataNotFoundError, lambda: read_conll(tmp_path / "none.txt"), str(tmp_path / "none.txt"))


# --------------------------------------------------------------------------- Hansards alignment
def _hansards(root: Path, **override: str | bytes) -> Path:
    files = {"en": "the house\nit is\n", "fr": "la chambre\nc' est\n", "naacl": "1 1 1 S\n1 2 2 P\n2 1 1\n2 2 2 S\n"}
    for part in ("trial", "test"):
        for ext, text in files.items():
            value = override.get(f"{part}_{ext}", text)
            path = root / f"{part}.en-fr.{ext}"
            path.write_bytes(value if isinstance(value, bytes) else value.encode())
    return root


def test_hansards_reads_valid_files(tmp_path):
    pairs = load_hansards(_hansards(tmp_path))
    assert len(pairs) == 4 and pairs[0].en == ["the", "house"] and pairs[0].fr == ["la", "chambre"]
    assert pairs[0].sure == {(0, 0)} and pairs[0].possible == {(0, 0), (1, 1)}
    assert pairs[1].sure == {(0, 0), (1, 1)}


@pytest.mark.parametrize("part, ext, content, line, text", [
    ("test", "naacl", "1 1 1 S\n1 2 2 X\n", 2, "expected 'sentence english french [S|P]'"),
    ("test", "naacl", "1 1 1 S\n1 1\n", 2, "expected"),
    ("test", "naacl", "1 one 1 S\n", 1, "integers"),
    ("test", "naacl", "1 1 1 S\n1 3 1 S\n", 2, "link (3, 1) out of range"),
    ("test", "naacl", "1 1 0 S\n", 1, "out of range"),
    ("trial", "naacl", "3 1 1 S\n", 1, "sentence 3 out of range"),
    ("test", "fr", "la chambre\n\nc' est\n", 2, "empty sentence"),
    ("trial", "en", b"the house\nit \xff is\n", 2, "not valid utf-8"),
])
def test_hansards_bad_lines_name_file_and_line(tmp_path, part, ext, content, line, text):
    root = _hansards(tmp_path, **{f"{part}_{ext}": content})
    _raises(InvalidInputError, lambda: load_hansards(root), str(root / f"{part}.en-fr.{ext}"), f"line {line}", text)


def test_hansards_sentence_counts_and_missing_files(tmp_path):
    root = _hansards(tmp_path, test_fr="la chambre\n")
    _raises(InvalidInputError, lambda: load_hansards(root), str(root / "test.en-fr.fr"), "has 1", "has 2")
    (root / "trial.en-fr.naacl").unlink()
    _raises(DataNotFoundError, lambda: load_hansards(root), "trial.en-fr.naacl")


# --------------------------------------------------------------------------- OCR
def _ocr_arrays(n_words: int = 3) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    lengths = np.array([2, 3, 1][:n_words])
    pixels = np.packbits(rng.integers(0, 2, (lengths.sum(), 128), dtype=np.uint8), axis=1)
    return {"pixels": pixels, "labels": rng.integers(0, 26, lengths.sum()).astype(np.uint8),
            "lengths": lengths, "folds": np.array([0, 1, 9][:n_words])}


def test_ocr_reads_a_valid_file(tmp_path):
    arrays = _ocr_arrays()
    np.savez(tmp_path / "ok.npz", **arrays)
    data = load_ocr(tmp_path / "ok.npz")
    assert [len(y) for y in data["y"]] == [2, 3, 1] and data["X"][1].shape == (3, 128)
    np.testing.assert_array_equal(data["X"][0], np.unpackbits(arrays["pixels"][:2], axis=1))
    assert data["folds"].tolist() == [0, 1, 9]


@pytest.mark.parametrize("change, text", [
    ({"labels": np.array([0, 1, 2, 26, 4, 5], dtype=np.uint8)}, "labels[3] = 26 is out of range 0..25"),
    ({"folds": np.array([0, 10, 1])}, "folds[1] = 10 is out of range 0..9"),
    ({"folds": np.array([0, 1])}, "'folds'"),
    ({"lengths": np.array([2, 3, 2])}, "lengths sum to 7 but there are 6 letters"),
    ({"lengths": np.array([3, 3, 0])}, "lengths[2] = 0"),
    ({"pixels": np.zeros((6, 8), dtype=np.uint8)}, "'pixels'"),
    ({"pixels": np.zeros((6, 16), dtype=np.float64)}, "'pixels'"),
    ({"pixels": np.zeros((5, 16), dtype=np.uint8)}, "5 rows of 'pixels' but 6 'labels'"),
    ({"labels": np.zeros((6, 1), dtype=np.uint8)}, "'labels' must be 1-D"),
    ({"labels": None}, "missing arrays ['labels']"),
])
def test_ocr_bad_arrays_name_file_and_array(tmp_path, change, text):
    arrays = {**_ocr_arrays(), **change}
    np.savez(tmp_path / "bad.npz", **{k: v for k, v in arrays.items() if v is not None})
    _raises(InvalidInputError, lambda: load_ocr(tmp_path / "bad.npz"), str(tmp_path / "bad.npz"), text)


def test_ocr_unreadable_or_missing_files(tmp_path):
    (tmp_path / "text.npz").write_text("not an archive")
    _raises(InvalidInputError, lambda: load_ocr(tmp_path / "text.npz"), str(tmp_path / "text.npz"), "not an .npz")
    np.save(tmp_path / "one.npy", np.zeros(3))
    _raises(InvalidInputError, lambda: load_ocr(tmp_path / "one.npy"), str(tmp_path / "one.npy"), "not an .npz archive")
    _raises(DataNotFoundError, lambda: load_ocr(tmp_path / "none.npz"), str(tmp_path / "none.npz"))


# --------------------------------------------------------------------------- UAI
UAI = "MARKOV\n2\n2 2\n3\n1 0\n2 0 1\n0\n\n2\n1.0 2.0\n\n4\n1 2\n3 4\n\n1\n5.0\n"


def test_uai_reads_a_valid_file(tmp_path):
    (tmp_path / "ok.uai").write_text(UAI)
    mrf = read_uai(tmp_path / "ok.uai")
    assert mrf.cards.tolist() == [2, 2] and mrf.constant == pytest.approx(math.log(5.0))
    np.testing.assert_allclose(mrf.pairwise(0), np.log([[1, 2], [3, 4]]))
    # a zero entry is a hard constraint, not an error, while the factor keeps a positive entry
    (tmp_path / "zero.uai").write_text(UAI.replace("1 2\n3 4", "0 2\n3 0"))
    assert np.isneginf(read_uai(tmp_path / "zero.uai").pairwise(0)[0, 0])


@pytest.mark.parametrize("old, new, line, text", [
    ("1 2\n3 4", "0 0\n0 0", 13, "factor 1 over [0, 1] is zero everywhere"),
    ("1.0 2.0", "0 0", 10, "factor 0 over [0] is zero everywhere"),
    ("5.0\n", "0\n", 17, "factor 2 over [] is zero everywhere"),
    ("1 2\n3 4", "1 2\n3 nan", 14, "non-finite entry nan (entry 3)"),
    ("1 2\n3 4", "1 2\ninf 4", 14, "non-finite entry inf (entry 2)"),
    ("1 2\n3 4", "1 -2\n3 4", 13, "negative or non-finite entry -2 (entry 1)"),
    ("1 2\n3 4", "1 2\n3 x", 14, "non-numeric entry 'x'"),
    ("4\n1 2", "3\n1 2", 12, "factor 1 over [0, 1] has 3 entries, expected 4 (2 x 2)"),
    ("1 2\n3 4\n", "1 2\n", 16, "file ends early, expected the number of entries of factor 2"),  # short table
    ("5.0\n", "\n", 16, "file ends early, expected 1 entries of factor 2 (0 left)"),
    # header counts that disagree with the body: factors, cardinalities
    ("2\n2 2\n3\n", "2\n2 2\n2\n", 7, "factor 0 over [0] has 0 entries, expected 2"),
    ("2\n2 2\n3\n", "2\n2 2\n4\n", 10, "expected variable 0 of factor 3's scope (an integer), got '1.0'"),
    ("2\n2 2\n", "3\n2 2\n", 6, "factor 0 over [] has 2 entries, expected 1"),
    ("2\n2 2\n", "2\n2 2 2\n", 6, "factor 0 names variable 2, but there are 2 variables"),
    ("2 0 1\n", "2 0 2\n", 6, "factor 1 names variable 2, but there are 2 variables"),
    ("2 0 1\n", "2 1 1\n", 6, "repeats a variable"),
    ("2\n2 2\n", "2\n2 0\n", 3, "cardinality of variable 1 must be >= 1"),
    ("MARKOV", "MARKOF", 1, "header must be MARKOV or BAYES"),
    ("5.0\n", "5.0 7\n", 17, "1 unexpected tokens after the last factor (the header declares 3 factors)"),
])
def test_uai_defects_name_file_line_and_factor(tmp_path, old, new, line, text):
    assert old in UAI
    path = tmp_path / "bad.uai"
    path.write_text(UAI.replace(old, new, 1))
    _raises(InvalidInputError, lambda: read_uai(path), f"{path}, line {line}:", text)


def test_uai_zero_products_and_unsupported_factors(tmp_path):
    # each factor has a positive entry, but two unary factors of variable 0 have disjoint supports
    path = tmp_path / "disjoint.uai"
    path.write_text("MARKOV\n1\n2\n2\n1 0\n1 0\n2\n1 0\n2\n0 1\n")
    _raises(InvalidInputError, lambda: read_uai(path), str(path), "factors [0, 1] on variable 0 multiply to zero")
    # an edge that allows only (1, 1) while variable 1 must be 0
    path.write_text("MARKOV\n2\n2 2\n2\n2 0 1\n1 1\n4\n0 0 0 1\n2\n1 0\n")
    _raises(InvalidInputError, lambda: read_uai(path), str(path), "factors [0, 1] on variables (0, 1)")
    path.write_text("MARKOV\n3\n2 2 2\n1\n3 0 1 2\n8\n1 1 1 1 1 1 1 1\n")
    _raises(NotSupportedError, lambda: read_uai(path), f"{path}, line 5", "3 variables")
    _raises(InvalidInputError, lambda: read_uai(tmp_path / "none.uai"), str(tmp_path / "none.uai"))


@pytest.mark.parametrize("name, content, line, text", [
    ("a.PR", "PR\nnan\n", 2, "log10 Z must be finite"),
    ("a.PR", "PR\n-inf\n", 2, "must be finite"),
    ("a.PR", "PR\n1.5 2\n", 2, "unexpected tokens"),
    ("a.PR", "PR\n", 1, "file ends early"),
    ("a.PR", "MAR\n1.5\n", 1, "header must be PR, got 'MAR'"),
    ("a.MAR", "MAR\n2 2 0.5 0.5 2 0.7 0.7\n", 2, "variable 1 sums to 1.4"),
    ("a.MAR", "MAR\n1\n2 -0.5 1.5\n", 3, "entry -0.5"),
    ("a.MAR", "MAR\n1\n2 nan 1\n", 3, "entry nan"),
    ("a.MAR", "MAR\n1 2 0.5 0.5\n2 0.5 0.5\n", 3, "3 unexpected tokens after the 1 declared variables"),
])
def test_pr_and_mar_defects(tmp_path, name, content, line, text):
    path = tmp_path / name
    path.write_text(content)
    reader = read_pr if name.endswith(".PR") else read_mar
    _raises(InvalidInputError, lambda: reader(path), f"{path}, line {line}:", text)


def test_pr_and_mar_read_valid_files_and_nan_marginals_are_not_written(tmp_path):
    (tmp_path / "a.PR").write_text("PR\n-1.0\n")
    assert read_pr(tmp_path / "a.PR") == pytest.approx(-math.log(10.0))
    write_mar(tmp_path / "a.MAR", [np.array([0.25, 0.75]), np.array([1.0, -1e-17, 0.0])])
    assert [m.tolist() for m in read_mar(tmp_path / "a.MAR")] == [[0.25, 0.75], [1.0, 0.0, 0.0]]
    _raises(InvalidInputError, lambda: write_mar(tmp_path / "b.MAR", [np.array([np.nan, np.nan])]),
            str(tmp_path / "b.MAR"), "variable 0")
    assert not (tmp_path / "b.MAR").exists()


# --------------------------------------------------------------------------- images
def _jpeg(path: Path, array: np.ndarray) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.asarray(array, dtype=np.uint8)).save(path, quality=95)
    return path


def _corrupt(path: Path) -> Path:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])  # truncated in the middle of the scan
    return path


def test_image_decode_failures_name_the_file_without_plugin_advice(tmp_path):
    good = _jpeg(tmp_path / "good.jpg", np.full((6, 5), 200))
    assert read_image(good).shape == (6, 5)
    for path in (_corrupt(_jpeg(tmp_path / "cut.jpg", np.random.default_rng(0).integers(0, 255, (64, 64)))),
                 tmp_path / "text.jpg"):
        if path.name == "text.jpg":
            path.write_text("not an image")
        message = _raises(InvalidInputError, lambda path=path: read_image(path), f"cannot read image {path}: ")
        assert "plugin" not in message.lower() and "install" not in message.lower()
        _raises(InvalidInputError, lambda path=path: loc._read_grey(path), f"cannot read image {path}: ")
    _raises(DataNotFoundError, lambda: read_image(tmp_path / "none.jpg"), str(tmp_path / "none.jpg"))


def _horse_dir(root: Path, n: int = 3, shape: tuple[int, int] = (20, 24)) -> Path:
    rng = np.random.default_rng(1)
    for k in range(n):
        mask = np.zeros(shape)
        mask[4:14, 5 + k:18] = 255
        _jpeg(root / "gray" / f"horse{k:03d}.jpg", rng.integers(0, 255, shape) // 2 + mask // 2)
        _jpeg(root / "figure_ground" / f"horse{k:03d}.jpg", mask)
    return root


def test_horses_read_a_valid_directory(tmp_path):
    data = load_horses(_horse_dir(tmp_path), size=8)
    assert data["train"]["names"] == ["horse000.jpg", "horse001.jpg"] and data["test"]["names"] == ["horse002.jpg"]
    assert data["train"]["y"][0].shape == (7, 8) and data["train"]["y"][0].any()
    items = loc._horse_items(tmp_path)
    assert [(name, box) for name, _, box in items][:2] == [("horse000", (4, 5, 14, 18)), ("horse001", (4, 6, 14, 18))]


def test_horses_missing_companions_sizes_and_corrupt_images(tmp_path):
    root = _horse_dir(tmp_path)
    orphan = _jpeg(root / "gray" / "horse009.jpg", np.zeros((20, 24)))
    for load in (lambda: load_horses(root, size=8), lambda: loc._horse_items(root)):
        _raises(DataNotFoundError, load, "1 image(s) without a file of the same name", str(orphan))
    orphan.unlink()
    lonely = _jpeg(root / "figure_ground" / "horse007.jpg", np.zeros((20, 24)))
    for load in (lambda: load_horses(root, size=8), lambda: loc._horse_items(root)):
        _raises(DataNotFoundError, load, "1 mask(s) without", str(lonely))
    lonely.unlink()
    mask = _jpeg(root / "figure_ground" / "horse001.jpg", np.full((10, 24), 255))
    _raises(InvalidInputError, lambda: load_horses(root, size=8), str(root / "gray" / "horse001.jpg"), str(mask),
            "24x20", "24x10")
    _raises(InvalidInputError, lambda: loc._horse_items(root), str(root / "gray" / "horse001.jpg"), str(mask),
            "24x20", "24x10")
    _jpeg(mask, np.zeros((20, 24)))
    _raises(InvalidInputError, lambda: loc._horse_items(root), str(mask), "no foreground")
    _horse_dir(root)
    cut = _corrupt(root / "gray" / "horse002.jpg")
    _raises(InvalidInputError, lambda: load_horses(root, size=8), f"cannot read image {cut}: ")
    _raises(InvalidInputError, lambda: loc._horse_items(root), f"cannot read image {cut}: ")


# --------------------------------------------------------------------------- VOC XML (raccoon)
def _voc(xml: Path, filename: str, size: tuple[int, int] | None, boxes: list[tuple]) -> Path:
    objects = "".join(
        "<object><name>raccoon</name><bndbox>"
        + "".join(f"<{tag}>{value}</{tag}>" for tag, value in zip(("xmin", "ymin", "xmax", "ymax"), box) if value
                  is not None)
        + "</bndbox></object>" for box in boxes)
    size_xml = f"<size><width>{size[0]}</width><height>{size[1]}</height><depth>3</depth></size>" if size else ""
    xml.parent.mkdir(parents=True, exist_ok=True)
    xml.write_text(f"<annotation><folder>images</folder><filename>{filename}</filename>{size_xml}"
                   f"{objects}</annotation>")
    return xml


def _raccoon_dir(root: Path) -> Path:
    """Three images of 30 x 20 pixels (width x height): one box, one box touching the border, two boxes."""
    for k, boxes in enumerate([[(3, 4, 20, 15)], [(1, 1, 30, 20)], [(2, 2, 9, 9), (10, 10, 25, 18)]], 1):
        _jpeg(root / "images" / f"raccoon-{k}.jpg", np.full((20, 30, 3), 90 * k))
        _voc(root / "annotations" / f"raccoon-{k}.xml", f"raccoon-{k}.jpg", (30, 20), boxes)
    return root


def test_raccoon_reads_valid_annotations(tmp_path):
    root = _raccoon_dir(tmp_path)
    items, dropped = loc._raccoon_items(root)
    assert dropped == 1
    assert [(name, box) for name, _, box in items] == [("raccoon-1", (3, 2, 15, 20)), ("raccoon-2", (0, 0, 20, 30))]
    assert loc._read_grey(items[0][1]).shape == (20, 30)
    assert loc.image_path({"path": str(root), "dataset": "raccoon"}, "raccoon-2") == root / "images" / "raccoon-2.jpg"
    # one pixel beyond the border (0-based xmin, ymax = height + 1) is a convention slip: clipped
    _voc(root / "annotations" / "raccoon-1.xml", "raccoon-1.jpg", (30, 20), [(0, 4, 20, 21)])
    assert loc._raccoon_items(root)[0][0][2] == (3, 0, 20, 20)


@pytest.mark.parametrize("box, text", [
    ((5, 4, 5, 15), "object 0 has zero or negative width or height (xmin 5, ymin 4, xmax 5, ymax 15)"),
    ((5, 9, 12, 3), "object 0 has zero or negative width or height"),
    ((31, 4, 40, 15), "object 0 lies outside the 30x20 image"),
    ((-9, -9, -2, -3), "object 0 lies outside"),
    ((3, 4, 32, 15), "object 0 extends more than one pixel beyond the 30x20 image"),
    ((-3, 4, 10, 15), "extends more than one pixel"),
    ((3, "four", 20, 15), "<object 0/ymin> must be a finite number, got 'four'"),
    ((3, "nan", 20, 15), "<object 0/ymin> must be a finite number"),
    ((3, 4, 20, None), "missing or empty element <object 0/ymax>"),
])
def test_raccoon_bad_boxes_name_file_and_object(tmp_path, box, text):
    root = _raccoon_dir(tmp_path)
    xml = _voc(root / "annotations" / "raccoon-1.xml", "raccoon-1.jpg", (30, 20), [box])
    _raises(InvalidInputError, lambda: loc._raccoon_items(root), str(xml), text)


def test_raccoon_bad_objects_in_dropped_images_are_refused_too(tmp_path):
    root = _raccoon_dir(tmp_path)
    xml = _voc(root / "annotations" / "raccoon-3.xml", "raccoon-3.jpg", (30, 20), [(2, 2, 9, 9), (10, 10, 10, 18)])
    _raises(InvalidInputError, lambda: loc._raccoon_items(root), str(xml), "object 1 has zero")


def test_raccoon_bad_files(tmp_path):
    root = _raccoon_dir(tmp_path)
    xml = root / "annotations" / "raccoon-2.xml"
    # an image of 1 x 1 pixels against an annotation of 650 x 417
    _voc(xml, "raccoon-2.jpg", (650, 417), [(81, 88, 522, 408)])
    _jpeg(root / "images" / "raccoon-2.jpg", np.zeros((1, 1, 3)))
    _raises(InvalidInputError, lambda: loc._raccoon_items(root), str(root / "images" / "raccoon-2.jpg"), str(xml),
            "1x1", "650x417")
    _raccoon_dir(root)
    xml.write_text("<annotation><filename>raccoon-2.jpg</filename>\n<size><width>30</width></annotation>")
    message = _raises(InvalidInputError, lambda: loc._raccoon_items(root), str(xml), "bad XML")
    assert re.search(r"line 2, column \d+", message)
    _raises(InvalidInputError, lambda: loc.image_path({"path": str(root), "dataset": "raccoon"}, "raccoon-2"),
            str(xml), "bad XML")
    _voc(xml, "raccoon-2.jpg", None, [(1, 1, 30, 20)])
    _raises(InvalidInputError, lambda: loc._raccoon_items(root), str(xml), "<annotation/size/width>")
    _voc(xml, "raccoon-2.jpg", (30, 0), [(1, 1, 30, 20)])
    _raises(InvalidInputError, lambda: loc._raccoon_items(root), str(xml), "must be positive integers")
    _voc(xml, "", (30, 20), [(1, 1, 30, 20)])
    _raises(InvalidInputError, lambda: loc._raccoon_items(root), str(xml), "<annotation/filename>")
    xml.write_text("<annotation><filename>raccoon-2.jpg</filename><size><width>30</width><height>20</height></size>"
                   "<object><name>raccoon</name></object></annotation>")
    _raises(InvalidInputError, lambda: loc._raccoon_items(root), str(xml), "missing element <object 0/bndbox>")
    _voc(xml, "raccoon-9.jpg", (30, 20), [(1, 1, 30, 20)])
    _raises(DataNotFoundError, lambda: loc._raccoon_items(root), str(xml), str(root / "images" / "raccoon-9.jpg"))
    xml.unlink()  # raccoon-2.jpg is left without an annotation
    _raises(DataNotFoundError, lambda: loc._raccoon_items(root), "1 image(s)", "no annotation", "raccoon-2.jpg")


# --------------------------------------------------------------------------- byte-order marks
def test_every_text_reader_drops_a_utf8_byte_order_mark(tmp_path):
    """A BOM glued itself to the first token of a file: a one-token sentence before CoNLL's -DOCSTART-, a
    first word ``\ufeffw3`` in a bitext, a label ``\ufeffB-NP``. :func:`read_text_lines` drops it for all."""
    from structopt.tasks._data import read_text_lines
    from structopt.tasks.own_alignment import read_bitext
    from structopt.tasks.own_sequence import read_columns

    bom = b"\xef\xbb\xbf"
    plain = tmp_path / "plain.txt"
    plain.write_text("-DOCSTART- -X- O\n\nw1 DT B-NP\nw2 NN I-NP\n")
    marked = tmp_path / "marked.txt"
    marked.write_bytes(bom + plain.read_bytes())
    zipped = tmp_path / "marked.txt.gz"
    zipped.write_bytes(gzip.compress(marked.read_bytes()))
    for path in (marked, zipped):
        assert read_text_lines(path) == read_text_lines(plain)
        columns = read_columns(path, 1, -1, (2,))
        assert columns.corpus.lengths.tolist() == [2] and columns.corpus.words == ["w1", "w2"]
    source, target, gold = (tmp_path / name for name in ("s.txt", "t.txt", "g.naacl"))
    source.write_bytes(bom + b"w3 w4\n")
    target.write_bytes(bom + b"f3 f4\n")
    gold.write_bytes(bom + b"1 1 1 S\n1 2 2 S\n")
    (pair,) = read_bitext(source, target, gold)
    assert pair.en == ["w3", "w4"] and pair.fr == ["f3", "f4"] and pair.sure == {(0, 0), (1, 1)}
    # a mark later in the file is text, not a header: kept
    inner = tmp_path / "inner.txt"
    inner.write_bytes(b"a\n" + bom + b"b\n")
    assert read_text_lines(inner) == ["a", "\ufeffb"]
