"""Marginal inference in pairwise MRFs: UAI files, exact inference, TRBP / BP / mean field."""

from structopt.marginals.baselines import bp, mean_field, trbp
from structopt.marginals.exact import enumerate_inference, exact_inference
from structopt.marginals.mrf import InferenceResult, PairwiseMRF
from structopt.marginals.uai import read_mar, read_pr, read_uai, write_mar

__all__ = ["InferenceResult", "PairwiseMRF", "bp", "enumerate_inference", "exact_inference", "mean_field",
           "read_mar", "read_pr", "read_uai", "trbp", "write_mar"]
