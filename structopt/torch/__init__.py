"""Structured layers and losses for PyTorch over any structopt structure's oracles.

θ is given as the structure's own potentials NamedTuple with tensors in place of arrays (e.g.
``so.ChainPotentials(unary, pairwise)``), for one example or a list of examples (one structure for all, or
a list of them); the answers are tensors of θ's dtype and device. The oracles run on the CPU in float64
numpy (the tensors are moved for them and back): every structure the library validates works unchanged,
a user's subclass included. :class:`ChainCRF` is the batched linear-chain CRF layer on padded (B, T, S)
unaries, on the chain kernels.

``import structopt`` never imports this package (nor torch); install the extra with
``pip install -e ".[torch]"``.
"""

from __future__ import annotations

try:
    import torch  # noqa: F401
except ImportError as error:  # pragma: no cover - exercised only without torch
    raise ImportError('structopt.torch needs PyTorch: pip install -e ".[torch]" (or pip install torch)') from error

from structopt.torch.chain_crf import ChainCRF
from structopt.torch.decoding import Decoded, TopK, argmax, log_partition, marginals, topk
from structopt.torch.layers import StructuredLayer, StructuredLoss
from structopt.torch.losses import default_loss, structured_loss
from structopt.torch.model import TorchInput, TorchModel
from structopt.torch.networks import get_network, network_names, register_network
from structopt.torch.relaxed import perturbed, sparsemap

__all__ = [
    "ChainCRF",
    "Decoded",
    "StructuredLayer",
    "StructuredLoss",
    "TopK",
    "TorchInput",
    "TorchModel",
    "argmax",
    "default_loss",
    "get_network",
    "log_partition",
    "marginals",
    "network_names",
    "perturbed",
    "register_network",
    "sparsemap",
    "structured_loss",
    "topk",
]
