"""Training on a user's own data files: the four kinds and their registry :data:`OWN_TASKS`.

=================  ===========================================================  =======================
name               files                                                        features, as the task
=================  ===========================================================  =======================
``sequence``       CoNLL-column files; token, label and feature columns chosen  ``conll``
``segmentation``   a folder of images and a folder of masks (matched by stem)   ``horses``
``boxes``          a folder of images + a CSV of boxes or Pascal VOC XML files  ``localization``
``bitext``         parallel source/target text + NAACL gold alignments          ``alignment``
=================  ===========================================================  =======================

Each kind declares its options once (:mod:`structopt.tasks.own_common`) and builds what the
built-in tasks of ``structopt train`` build: ``(problem, evaluate, description, preprocessing)``
(:class:`~structopt.tasks.own_common.BuiltTask`; ``preprocessing`` is what a saved model needs to
featurise new inputs, in the layout of the matching built-in task's). Without test files, a seeded
random ``test_fraction`` of the examples is held out. Wiring into a command line is one loop::

    for name, own in OWN_TASKS.items():
        sub = subparsers.add_parser(name, help=own.summary)
        own.add_arguments(sub)   # the kind's options; --lam, --n-train, --seed are the command's own
        sub.set_defaults(build=own.build)

or, on one flat parser (``structopt train TASK`` with a positional task), :func:`add_flat_arguments`
declares every kind's options once and returns which kinds read each flag, the shape of the
command's ``TASK_OPTIONS`` (a flag given to a kind that does not read it is then refused).

In Python::

    from structopt.solvers.bcfw import bcfw
    from structopt.tasks.own_data import OWN_TASKS, SequenceOptions

    built = OWN_TASKS["sequence"].build(SequenceOptions(train="train.txt", test="test.txt", feature_columns=(2,)))
    result = bcfw(built.problem, max_passes=10)
    print(built.description, built.evaluate(result.w))  # {"test_token_accuracy": ..., "test_chunk_f1": ...}

Every error names the file (and the line, for text files): see each kind's module.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from structopt.tasks.own_alignment import ParallelOptions, build_parallel, load_parallel, read_bitext
from structopt.tasks.own_common import BuiltTask, CommonOptions, OwnTask
from structopt.tasks.own_localization import (
    BoxesOptions,
    build_localization,
    load_localization,
    read_csv_boxes,
    read_voc_boxes,
)
from structopt.tasks.own_segmentation import (
    SegmentationOptions,
    build_segmentation,
    load_segmentation,
    paired_files,
    read_mask,
)
from structopt.tasks.own_sequence import SequenceOptions, build_sequence, featurize_columns, load_sequence, read_columns

#: the own-data kinds by command-line name
OWN_TASKS: dict[str, OwnTask] = {
    "sequence": OwnTask("sequence", "sequence labeling from CoNLL-column files (conll features)", SequenceOptions,
                        build_sequence),
    "segmentation": OwnTask("segmentation", "binary segmentation from folders of images and masks (horses "
                            "features)", SegmentationOptions, build_segmentation),
    "boxes": OwnTask("boxes", "one-box localization from images + a CSV of boxes or VOC XML (localization "
                     "features)", BoxesOptions, build_localization),
    "bitext": OwnTask("bitext", "word alignment from parallel text + NAACL gold (alignment features)",
                      ParallelOptions, build_parallel),
}



def add_flat_arguments(parser: argparse.ArgumentParser) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Declare the options of every kind on one parser, each flag once, all with default None.

    ``--lam``, ``--n-train`` and ``--seed`` are left to the parser (every task has them). An
    option left unset stays None, which :meth:`OwnTask.build` reads as the field's default.

    Returns
    -------
    dict
        flag → (argparse destination, names of the kinds that read it).
    """
    declared: dict[str, tuple[str, tuple[str, ...]]] = {}
    actions: dict[str, argparse.Action] = {}
    for name, own in OWN_TASKS.items():
        for f in dataclasses.fields(own.options):
            meta = f.metadata
            if meta["common"]:
                continue
            flag = meta["flag"]
            if flag in declared:  # shared by several kinds (--images, --test-fraction): one declaration
                dest, kinds = declared[flag]
                if dest != f.name:
                    raise TypeError(f"{flag} has two destinations, {dest} and {f.name}")
                declared[flag] = (dest, (*kinds, name))
                actions[flag].help = f"{', '.join(declared[flag][1])}: {meta['help']}"
                continue
            kwargs: dict[str, Any] = {"dest": f.name, "help": f"{name}: {meta['help']}", "default": None}
            if meta["action"]:
                kwargs["action"] = meta["action"]
            else:
                kwargs.update({key: meta[key] for key in ("type", "choices", "metavar") if meta[key] is not None})
            actions[flag] = parser.add_argument(flag, **kwargs)
            declared[flag] = (f.name, (name,))
    return declared


__all__ = [
    "OWN_TASKS",
    "BoxesOptions",
    "BuiltTask",
    "CommonOptions",
    "OwnTask",
    "ParallelOptions",
    "SegmentationOptions",
    "SequenceOptions",
    "add_flat_arguments",
    "featurize_columns",
    "load_localization",
    "load_parallel",
    "load_segmentation",
    "load_sequence",
    "paired_files",
    "read_bitext",
    "read_columns",
    "read_csv_boxes",
    "read_mask",
    "read_voc_boxes",
]
