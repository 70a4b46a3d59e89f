"""PyTorch layers on structopt's kernels (needs torch)."""

from structopt.torch.chain_crf import ChainCRF

__all__ = ["ChainCRF"]
