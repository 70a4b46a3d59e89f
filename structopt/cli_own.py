"""The command line's own-data tasks: ``structopt train sequence|segmentation|boxes|bitext`` and ``predict``.

Each wraps a kind of :data:`structopt.tasks.own_data.OWN_TASKS` (the readers, features and options)
as a :class:`~structopt.cli_tasks.TaskSpec`. A kind's preprocessing has the layout of the built-in
task whose features it uses, so ``predict`` reads new inputs as that task does (segmentation as
``horses``, boxes as ``localization``); sequence and bitext read their own files.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from structopt.cli_tasks import HorsesTask, Inputs, LocalizationTask, Task, TaskSpec, split_index
from structopt.errors import InvalidInputError


class OwnDataTask(TaskSpec):
    """An own-data kind as a task: ``structopt train NAME`` builds it from the kind's flags."""

    def __init__(self, name: str):
        from structopt.tasks.own_data import OWN_TASKS

        self.own = OWN_TASKS[name]
        self.name, self.summary = name, self.own.summary

    def __call__(self, args: argparse.Namespace) -> Task:
        return self.own.build(args)

    def file_split(self, saved: Any, record: dict[str, Any], split: str) -> Inputs:
        """The ``split`` train used, for a kind read from one file (and an optional test file): the seeded
        held-out fraction of the training file, or the test file, or the first ``n_train`` training examples."""
        whole = self.read_inputs(saved, Path(record["data"]))
        n_train = int(record["n_train"])
        if not record.get("test"):
            return whole.subset(split_index(*_holdout(record, len(whole.X)), n_train, split))
        test = self.read_inputs(saved, Path(record["test"]))
        if split == "test":
            return test
        if split == "train":
            return whole.subset(range(min(n_train, len(whole.X))))
        return self.join_files(whole, test)

    @staticmethod
    def join_files(whole: Inputs, test: Inputs) -> Inputs:
        """The training file's inputs followed by the test file's (``--split all``)."""
        return whole.join(test)


class OwnSegmentationTask(OwnDataTask):
    """Segmentation of your images and masks; featurises and writes like ``horses`` (the same
    preprocessing), and reads gold masks as training read them (matched by stem, the saved threshold)."""

    preprocessing_types = HorsesTask.preprocessing_types
    input_help = ("segmentation: a folder of images, or a folder with images/ and masks/ (the gold, matched by file "
                  "stem and read as training read them)")
    output_help = HorsesTask.output_help.replace("horses:", "segmentation:").replace("255 = horse",
                                                                                      "255 = foreground")
    default_output, output_is_folder = "masks", True
    write, scores = HorsesTask.write, HorsesTask.scores
    _is_superpixel = staticmethod(HorsesTask._is_superpixel)  # what the borrowed write/scores ask

    def read_inputs(self, saved: Any, path: Path) -> Inputs:
        from structopt.tasks.own_common import image_files
        from structopt.tasks.own_segmentation import paired_files

        if (path / "images").is_dir() and (path / "masks").is_dir():
            pairs = [(image, mask) for _, image, mask in paired_files(path / "images", path / "masks")]
        else:
            pairs = [(image, None) for _, image in sorted(image_files(path).items())]
        return self._read_pairs(saved, pairs)

    def split_inputs(self, saved: Any, record: dict[str, Any], split: str) -> Inputs:
        from structopt.tasks.own_segmentation import paired_files

        pairs = [(image, mask) for _, image, mask in paired_files(record["data"], record["masks"])]
        if record.get("test"):  # separate test folders: the training images come first, as train ordered them
            test = [(image, mask) for _, image, mask in paired_files(record["test"], record["test_masks"])]
            train_index, test_index = np.arange(len(pairs)), np.arange(len(pairs), len(pairs) + len(test))
            pairs += test
        else:
            train_index, test_index = _holdout(record, len(pairs))
        return self._read_pairs(saved, [pairs[i] for i in split_index(train_index, test_index,
                                                                       int(record["n_train"]), split)])

    def _read_pairs(self, saved: Any, pairs: list[tuple[Path, Path | None]]) -> Inputs:
        """Images with their gold masks (None: no gold), featurised with the model's preprocessing."""
        from structopt.tasks.horses import image_input
        from structopt.tasks.own_segmentation import gold_on_grid

        threshold = saved.preprocessing.get("mask_threshold")
        X, shapes, gold = [], [], []
        for image, mask in pairs:
            x, shape = image_input(image, saved.preprocessing)
            X.append(x)
            shapes.append(shape)
            if mask is not None:
                gold.append(gold_on_grid(mask, threshold, x.pixels.shape[:2], shape))
        files = [image for image, _ in pairs]
        return Inputs(X, gold if gold else None, {"files": files, "shapes": shapes})


class OwnBoxesTask(OwnDataTask):
    """One box per image from your images and boxes; predicts like ``localization``."""

    preprocessing_types = LocalizationTask.preprocessing_types
    input_help = "boxes: a folder of images"
    output_help = LocalizationTask.output_help.replace("localization:", "boxes:")
    default_output, output_is_folder = LocalizationTask.default_output, LocalizationTask.output_is_folder
    read_inputs, write, scores = LocalizationTask.read_inputs, LocalizationTask.write, LocalizationTask.scores
    _read_items = LocalizationTask._read_items  # what the borrowed read_inputs calls

    def split_inputs(self, saved: Any, record: dict[str, Any], split: str) -> Inputs:
        from structopt.tasks.own_localization import box_items

        items = box_items(record["train"])
        if record.get("test"):  # separate test images: the training images come first, as train ordered them
            test = box_items(record["test"])
            train_index, test_index = np.arange(len(items)), np.arange(len(items), len(items) + len(test))
            items += test
        else:
            train_index, test_index = _holdout(record, len(items))
        chosen = split_index(train_index, test_index, int(record["n_train"]), split)
        return self._read_items(saved, [items[i] for i in chosen], True)


class OwnSequenceTask(OwnDataTask):
    """Sequence labeling of your column files; ``predict`` reads the training layout, the label column
    optional (present when the file has it)."""

    preprocessing_types = (("tags", list), ("n_features", int), ("window", int), ("affix_lengths", list),
                           ("token_column", int), ("label_column", int), ("feature_columns", (list, tuple)))
    input_help = ("sequence: a column file in the training file's layout (token and feature columns), the label "
                  "column optional")
    output_help = "sequence: the input columns and a predicted label column"
    default_output = "predictions.conll"

    def read_inputs(self, saved: Any, path: Path) -> Inputs:
        from structopt.tasks.own_sequence import (
            check_width,
            encode_labels,
            featurize_columns,
            read_columns,
            token_rows,
        )

        p = saved.preprocessing
        token, label, features = int(p["token_column"]), int(p["label_column"]), [int(c) for c in p["feature_columns"]]
        rows = token_rows(path)
        if isinstance(p.get("n_columns"), int) and p["n_columns"] > 0:  # the training file's width, as recorded
            has_gold = check_width(path, int(p["n_columns"]), label, [str(t) for t in p["tags"]])
        else:  # a model saved before the width was recorded
            width = len(rows[0]) if rows else 0
            # the label column is there when the file has a column beyond the token and feature columns
            # (label counted from the end) or reaches the label's column number
            needed = max(abs(c) for c in [token, *features])
            has_gold = width > needed if label < 0 else width >= label
        file = read_columns(path, token, label if has_gold else None, features)
        (X,) = featurize_columns([file], int(p["n_features"]), int(p["window"]), [int(a) for a in p["affix_lengths"]])
        tags = list(p["tags"])
        gold, warnings = None, []
        if has_gold:
            # a gold label the model never saw cannot be predicted: it gets an index past the model's
            # labels (``tags`` grows), so it counts as an error rather than blocking prediction
            gold = encode_labels(file, tags, "extend")
            unseen = tags[len(p["tags"]):]
            if unseen:
                count = sum(int(np.count_nonzero(y >= len(p["tags"]))) for y in gold)
                warnings.append(f"{path}: gold label(s) {', '.join(unseen[:5])}{' ...' if len(unseen) > 5 else ''} "
                                f"never occurred in the model's training file; the model cannot output them, so "
                                f"their {count} token(s) count as errors")
        return Inputs(X, gold, {"rows": rows, "lengths": file.corpus.lengths, "gold_tags": tags}, warnings)

    def split_inputs(self, saved: Any, record: dict[str, Any], split: str) -> Inputs:
        return self.file_split(saved, record, split)

    @staticmethod
    def join_files(whole: Inputs, test: Inputs) -> Inputs:
        joined = whole.join(test)
        joined.extra["gold_tags"] = test.extra["gold_tags"]  # the model's labels, then the test file's unseen ones
        return joined

    def write(self, saved: Any, inputs: Inputs, predictions: list[Any], out: Path) -> None:
        from structopt.tasks.conll import write_tagged

        tags = np.array(saved.preprocessing["tags"], dtype=object)
        flat = [str(tags[t]) for y in predictions for t in np.asarray(y, dtype=np.int64)]
        write_tagged(out, inputs.extra["rows"], inputs.extra["lengths"], flat)

    def scores(self, saved: Any, inputs: Inputs, predictions: list[Any]) -> dict[str, float]:
        from structopt.tasks.conll import chunk_f1, token_accuracy
        from structopt.tasks.own_sequence import is_chunk_tagging

        tags = inputs.extra.get("gold_tags", list(saved.preprocessing["tags"]))  # the model's, then unseen gold
        out = {"test_token_accuracy": token_accuracy(inputs.gold, predictions)}
        if is_chunk_tagging(tags):
            out["test_chunk_f1"] = chunk_f1(inputs.gold, predictions, tags)["f1"]
        return out


class OwnBitextTask(OwnDataTask):
    """Word alignment of your parallel text; ``predict`` reads ``SOURCE,TARGET[,GOLD]``."""

    preprocessing_types = (("statistics", dict),)
    input_help = ("bitext: SOURCE,TARGET or SOURCE,TARGET,GOLD — the parallel files (one tokenized sentence per "
                  "line) and optionally the NAACL gold")
    output_help = "bitext: predicted links in the NAACL format, 'sentence source target' per line, 1-based"
    default_output = "predictions.naacl"

    def input_exists(self, path: Path) -> bool:
        return self.missing_input(path) is None

    def missing_input(self, path: Path) -> Path | None:
        return next((Path(part) for part in str(path).split(",") if not Path(part).is_file()), None)

    def is_training_data(self, given: str, record: dict[str, Any]) -> bool:
        parts, trained = given.split(","), str(record["data"]).split(",")
        try:
            return len(parts) == len(trained) and all(Path(a).resolve() == Path(b).resolve()
                                                      for a, b in zip(parts, trained, strict=True))
        except OSError:
            return False

    def split_inputs(self, saved: Any, record: dict[str, Any], split: str) -> Inputs:
        return self.file_split(saved, record, split)

    def read_inputs(self, saved: Any, path: Path) -> Inputs:
        from structopt.tasks.alignment import AlignmentFeaturizer
        from structopt.tasks.own_alignment import read_bitext

        parts = str(path).split(",")
        if len(parts) not in (2, 3):
            raise InvalidInputError(f"bitext input {path}: expected SOURCE,TARGET or SOURCE,TARGET,GOLD")
        pairs = read_bitext(parts[0], parts[1], parts[2] if len(parts) == 3 else None, Path(parts[0]).stem)
        featurizer = AlignmentFeaturizer.from_state(saved.preprocessing["statistics"])
        return Inputs([featurizer(p) for p in pairs], pairs if len(parts) == 3 else None, {"pairs": pairs})

    def write(self, saved: Any, inputs: Inputs, predictions: list[Any], out: Path) -> None:
        from structopt.tasks.alignment import write_naacl

        write_naacl(out, inputs.extra["pairs"], predictions)

    def scores(self, saved: Any, inputs: Inputs, predictions: list[Any]) -> dict[str, float]:
        from structopt.tasks.alignment import aer, links

        return {"test_aer": aer([links(y) for y in predictions], inputs.gold)}


def _holdout(record: dict[str, Any], n: int) -> tuple[np.ndarray, np.ndarray]:
    """Train's held-out split of ``n`` examples, from its recorded fraction and seed (the same rule, so the
    same examples: :func:`~structopt.tasks.own_common.holdout`)."""
    from structopt.tasks.own_common import holdout

    return holdout(n, float(record["test_fraction"]), int(record["seed"]), str(record["data"]))


#: the own-data tasks, by name (joined with the built-in tasks in :data:`structopt.cli_registry.TASKS`)
OWN_SPECS: dict[str, TaskSpec] = {spec.name: spec for spec in (
    OwnSequenceTask("sequence"), OwnSegmentationTask("segmentation"), OwnBoxesTask("boxes"),
    OwnBitextTask("bitext"))}
# one split line for the four kinds (``structopt predict --help``): they split alike
OWN_SPECS["sequence"].split_help = (f"{', '.join(OWN_SPECS)}: the test files given to train, else a seeded random "
                                    "--test-fraction of the training examples (train's --seed), as the model "
                                    "records them")
