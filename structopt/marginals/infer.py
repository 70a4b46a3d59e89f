"""One entry point over every inference method, used by ``structopt infer``."""

from __future__ import annotations

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
        Passed to the method (e.g. ``time_limit``, ``progress``).

    Returns
    -------
    InferenceResult
    """
    if method not in METHODS:
        raise InvalidInputError(f"unknown inference method {method!r}; choose from {', '.join(METHODS)}")
    mrf = model if isinstance(model, PairwiseMRF) else read_uai(model)
    return METHODS[method](mrf, **options)
