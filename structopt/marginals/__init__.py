"""Marginal inference in pairwise MRFs: UAI files, exact inference, Barrier Frank-Wolfe, TRBP / BP / MF."""

from structopt.marginals.barrier_fw import barrier_fw
from structopt.marginals.baselines import bp, mean_field, trbp
from structopt.marginals.exact import enumerate_inference, exact_inference
from structopt.marginals.map import MAPInferenceInterrupted, MAPResult, map_inference, mrf_to_factor_graph
from structopt.marginals.mrf import InferenceInterrupted, InferenceResult, PairwiseMRF
from structopt.marginals.oracles import LocalPolytopeOracle, MarginalPolytopeOracle, OracleResult
from structopt.marginals.trw import mutual_information, spanning_tree_rho, trw_objective
from structopt.marginals.uai import read_mar, read_pr, read_uai, write_mar

__all__ = ["InferenceInterrupted", "InferenceResult", "LocalPolytopeOracle", "MAPInferenceInterrupted", "MAPResult",
           "MarginalPolytopeOracle", "OracleResult", "PairwiseMRF", "barrier_fw", "bp", "enumerate_inference",
           "exact_inference", "map_inference", "mean_field", "mrf_to_factor_graph", "mutual_information", "read_mar",
           "read_pr", "read_uai", "spanning_tree_rho", "trbp", "trw_objective", "write_mar"]
