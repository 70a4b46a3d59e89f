"""Word alignment from a user's parallel text and NAACL gold, as the Hansards alignment task.

Files: a source and a target file with one tokenized sentence per line (line ``k`` of one is the
translation of line ``k`` of the other; an empty line is refused) and a gold file in the NAACL
format, ``sentence_id source_position target_position [S|P]`` per line, 1-based, ``S`` (sure, the
default) or ``P`` (possible). Errors name the file and the line: misaligned files (different
numbers of lines), malformed gold lines, sentence ids or positions out of range.

Features are :class:`structopt.tasks.alignment.AlignmentFeaturizer`'s, with Dice co-occurrence
counted over every sentence pair read (train and test: it never looks at the links); the training
targets are the one-to-one subsets of the sure links (:func:`~structopt.tasks.alignment.gold_matching`),
the loss the matching Hamming loss (a missed link costs 3, a wrong one 1, as the Hansards task), the
metric the alignment error rate (AER) on the full gold.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

from structopt.errors import InvalidInputError
from structopt.tasks.alignment import (
    AlignmentFeaturizer,
    SentencePair,
    _links,
    _sentences,
    aer,
    gold_matching,
    links,
)
from structopt.tasks.own_common import (
    BuiltTask,
    CommonOptions,
    both_or_neither,
    data_split,
    existing_file,
    first,
    holdout,
    holdout_rule,
    option,
    resolve_lam,
)


def read_bitext(source: str | os.PathLike, target: str | os.PathLike, gold: str | os.PathLike | None,
                  part: str = "train") -> list[SentencePair]:
    """Sentence pairs of parallel files with their gold links (0-based in the result; none when ``gold``
    is None: an input to align).

    Raises
    ------
    DataNotFoundError
        A file does not exist.
    InvalidInputError
        An empty file or sentence, files with different numbers of lines, a malformed gold line or a
        link out of range (naming the file and line).
    """
    source, target = existing_file(source, "source text"), existing_file(target, "target text")
    gold = None if gold is None else existing_file(gold, "gold alignments")
    src, tgt = _sentences(source), _sentences(target)
    for path, sentences in ((source, src), (target, tgt)):
        if not sentences:
            raise InvalidInputError(f"{path}: empty file")
    if len(src) != len(tgt):
        shorter, n = (source, len(src)) if len(src) < len(tgt) else (target, len(tgt))
        raise InvalidInputError(f"{shorter}:{n}: the file ends here, but {target if shorter == source else source} "
                                f"has {max(len(src), len(tgt))} lines (parallel files need one sentence per line "
                                "each)")
    sure, possible = _links(gold, src, tgt) if gold is not None else ([set() for _ in src], [set() for _ in src])
    return [SentencePair(e, f, sure[i], possible[i], part, i + 1) for i, (e, f) in enumerate(zip(src, tgt))]


@dataclass(kw_only=True)
class ParallelOptions(CommonOptions):
    """Options of the ``bitext`` kind (see the module docstring)."""

    DEFAULT_LAM: ClassVar[float] = 0.01

    source: str | None = option("--source", "source-language text, one tokenized sentence per line (required)",
                                None, metavar="FILE")
    target: str | None = option("--target", "target-language text, line by line parallel to --source (required)",
                                None, metavar="FILE")
    gold: str | None = option("--gold", "NAACL gold alignments: sentence source target [S|P], 1-based (required)",
                              None, metavar="FILE")
    test_source: str | None = option("--test-source", "test source text (default: hold out --test-fraction)",
                                     None, metavar="FILE")
    test_target: str | None = option("--test-target", "test target text", None, metavar="FILE")
    test_gold: str | None = option("--test-gold", "test gold alignments", None, metavar="FILE")


def load_parallel(options: ParallelOptions) -> dict:
    """Read the files and compute features and targets:
    ``{"train": {"X", "y", "pairs"}, "test": {"X", "pairs"}, "model", "featurizer"}``."""
    from structopt.models.matching import MatchingModel

    for name in ("source", "target", "gold"):
        if getattr(options, name) is None:
            raise InvalidInputError(f"bitext: --{name} FILE is required")
    pairs = read_bitext(options.source, options.target, options.gold)
    if both_or_neither(options, ("test_source", "test_target", "test_gold"), "bitext"):
        test = read_bitext(options.test_source, options.test_target, options.test_gold, "test")
        train = pairs
        test_files = (options.test_source, options.test_target, options.test_gold)
        split = {"rule": f"train on {Path(options.source).name}, test on {Path(options.test_source).name}",
                 "test": ",".join(str(Path(f).resolve()) for f in test_files)}
    else:
        tr, te = holdout(len(pairs), options.test_fraction, options.seed, str(options.source))
        train, test = [pairs[i] for i in tr], [pairs[i] for i in te]
        split = {"rule": holdout_rule(options.test_fraction, options.seed, len(pairs), "sentence pairs"),
                 "test_fraction": float(options.test_fraction), "seed": int(options.seed)}
    train = first(train, options.n_train)
    featurizer = AlignmentFeaturizer(train + test)
    return {"train": {"X": [featurizer(p) for p in train], "y": [gold_matching(p, featurizer.dice(p)) for p in train],
                      "pairs": train},
            "test": {"X": [featurizer(p) for p in test], "pairs": test},
            "model": MatchingModel(featurizer.n_features, allow_unmatched=True), "featurizer": featurizer,
            "split": split}


def build_parallel(options: ParallelOptions) -> BuiltTask:
    """The ``bitext`` task: a partial-matching problem; test AER. Preprocessing: the Dice statistics
    (``statistics``: :meth:`~structopt.tasks.alignment.AlignmentFeaturizer.state`, which
    ``AlignmentFeaturizer.from_state`` rebuilds for new sentence pairs)."""
    from structopt.losses import MatchingHamming
    from structopt.problem import SSVMProblem

    data = load_parallel(options)
    X, Y, test = data["train"]["X"], data["train"]["y"], data["test"]
    lam = resolve_lam(options.lam, len(X), options.DEFAULT_LAM)
    problem = SSVMProblem(data["model"], X, Y, MatchingHamming(1.0, 3.0), lam)

    def evaluate(w: np.ndarray) -> dict[str, float]:
        return {"test_aer": aer([links(y) for y in problem.predict(test["X"], w)], test["pairs"])}

    record = data_split([options.source, options.target, options.gold], n_train=problem.n, n_test=len(test["X"]),
                        **data["split"])
    return BuiltTask(problem, evaluate, f"word alignment of {Path(str(options.source)).name}",
                     {"statistics": data["featurizer"].state(), "data_split": record})


__all__ = ["ParallelOptions", "build_parallel", "load_parallel", "read_bitext"]
