"""One entry point over every inference method, used by ``structopt infer``."""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from structopt.errors import InvalidInputError
from structopt.marginals.barrier_fw import barrier_fw
from structopt.marginals.baselines import bp, mean_field, trbp
from structopt.marginals.exact import exact_inference
from structopt.marginals.mrf import InferenceResult, PairwiseMRF
from structopt.marginals.uai import read_uai

METHODS: dict[str, Callable[..., InferenceResult]] = {
    "bfw": barrier_fw, "trbp": trbp, "bp": bp, "mf": mean_field, "exact": exact_inference}


def infer(model: PairwiseMRF | str | Path, method: str = "bfw", **options: Any) -> InferenceResult:
    """Run one inference method on a model or a UAI file.

    Parameters
    ----------
    model : PairwiseMRF, str or Path
        The model, or the path of a UAI MARKOV file.
    method : {"bfw", "trbp", "bp", "mf", "exact"}
        Barrier Frank-Wolfe (over 𝓜 with ρ optimisation unless options say otherwise),
        tree-reweighted BP, loopy BP, naive mean field, or exact inference (small treewidth).
    **options
        Passed to the method (e.g. ``time_limit``, ``max_iter``, ``tol``, ``progress``); the
        method validates them, and an option it does not take is an error naming it.

    Returns
    -------
    InferenceResult

    Raises
    ------
    InvalidInputError
        An unknown method, a model that is neither an MRF nor a path, an option the method does not
        take (all three before the file is read) or an option with a bad value (named, before any work).
    InferenceInterrupted
        On Ctrl-C during an iterative method; its ``result`` holds the iterate reached.
    """
    if not isinstance(method, str) or method not in METHODS:
        raise InvalidInputError(f"infer: unknown method {method!r}; choose from {', '.join(METHODS)}")
    if not isinstance(model, (PairwiseMRF, str, os.PathLike)):
        raise InvalidInputError(f"infer: model must be a PairwiseMRF or the path of a UAI file, "
                                f"got {type(model).__name__}")
    function = METHODS[method]
    accepted = list(inspect.signature(function).parameters)[1:]
    unknown = sorted(set(options) - set(accepted))
    if unknown:  # before reading the file: a typo must not cost a parse
        raise InvalidInputError(f"infer: method {method!r} does not take option(s) {', '.join(unknown)}; it takes "
                                f"{', '.join(accepted) or 'none'}")
    mrf = model if isinstance(model, PairwiseMRF) else read_uai(model)
    return function(mrf, **options)
