"""``structopt train TASK --net NAME``: a task's network, trained by the task's own loop, saved like a linear model.

A :class:`~structopt.cli_tasks.TaskSpec` that has networks declares their names (``nets = ("cnn",)``, the
choices of ``--net``), a method ``net(self, args) -> NetTask`` building one, and ``load_networks()``, which
imports the module that declares them (:func:`structopt.torch.register_network`) so that ``structopt predict``
can rebuild a saved network. ``train`` runs :attr:`NetTask.fit` with a progress bar, then
:attr:`NetTask.evaluate` at the trained weights, then saves the :class:`~structopt.torch.TorchModel` with the
task's preprocessing to ``OUT/model.npz``; ``predict`` reads it with the task's own inputs, outputs and metric.

:func:`train_network` is the minibatch loop a task's ``fit`` may use: Adam on a structured loss of the
network's potentials (:func:`structopt.torch.structured_loss`: hinge, CRF, smoothed, SparseMAP, ...).

torch is imported inside the functions: this module is imported by the CLI, which must start without it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from structopt.errors import InvalidInputError, check_count
from structopt.progress import QUIET, Progress


@dataclass
class NetTask:
    """A task's network, ready to train (what ``TaskSpec.net(args)`` returns).

    Attributes
    ----------
    model : TorchModel
        The network and its structure; ``fit`` trains ``model.module`` in place.
    fit : callable
        ``fit(progress) -> dict``: trains, reporting through ``progress`` (a :class:`~structopt.progress.Progress`),
        and returns what it did (``epochs``, ``seconds``, ``final_loss``, ...; JSON values).
    evaluate : callable
        ``evaluate(w) -> {metric: value}`` on the task's test examples, the metrics (and names) of the linear
        path, which ``structopt predict`` prints too.
    title : str
        What is trained, for the stage line and the plot title (e.g. "OCR (bcfw split), CNN").
    preprocessing : dict
        What ``predict`` needs to read new inputs (vocabularies, normalisation, the split record).
    n_train : int
        Training examples used.
    """

    model: Any
    fit: Callable[[Progress], dict[str, Any]]
    evaluate: Callable[[np.ndarray], dict[str, float]]
    title: str
    preprocessing: dict[str, Any] = field(default_factory=dict)
    n_train: int = 0


def single_threaded_torch() -> None:
    """One torch thread for this process (the CLI's network paths): a network's per-example passes are too
    small for intra-op threads, which on a busy machine made them 40 times slower (OCR predict: 46 s -> 1.1 s)."""
    import torch

    torch.set_num_threads(1)


def train_network(model: Any, X: Sequence[Any], Y: Sequence[Any], *, epochs: int, kind: str = "hinge",
                  loss: Any = None, lr: float = 1e-3, batch_size: int = 16, weight_decay: float = 0.0, seed: int = 0,
                  progress: Progress = QUIET, **options: Any) -> dict[str, Any]:
    """Train ``model.module`` with Adam on the mean structured loss of minibatches of examples.

    Parameters
    ----------
    model : TorchModel
    X, Y : sequences
        Training inputs (as ``model.validate_input`` takes them; checked once, up front) and gold outputs.
    epochs : int
        Passes over the examples, each in a fresh random order (seeded).
    kind, loss, **options
        The loss of :func:`structopt.torch.structured_loss` (e.g. ``kind="crf"``; ``loss`` the task loss of
        the hinge and smoothed kinds).
    lr, weight_decay : float
        Adam's step and L2 coefficient.
    batch_size : int
        Examples per step (their losses are averaged).
    seed : int
        The order of the examples.
    progress : Progress
        A stage line per epoch (with its mean loss) and a bar over its batches.

    Returns
    -------
    dict
        ``epochs``, ``steps``, ``seconds``, ``final_loss`` (the mean loss of the last epoch), ``losses`` (per epoch),
        ``kind``, ``lr``, ``batch_size``.
    """
    import torch

    from structopt.torch import structured_loss
    from structopt.torch.model import TorchModel

    if not isinstance(model, TorchModel):
        raise InvalidInputError(f"train_network trains a TorchModel, got {type(model).__name__}")
    epochs = check_count(epochs, "epochs", "train_network")
    batch_size = check_count(batch_size, "batch_size", "train_network")
    for name, value in (("lr", lr), ("weight_decay", weight_decay)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value) or value < 0 or (
                name == "lr" and value == 0):
            raise InvalidInputError(f"train_network {name} must be a finite number {'> 0' if name == 'lr' else '>= 0'}"
                                    f", got {value!r}")
    if len(X) != len(Y) or not len(X):
        raise InvalidInputError(f"train_network needs as many outputs as inputs (at least one), got {len(X)} and "
                                f"{len(Y)}")
    inputs = [model.validate_input(x, i) for i, x in enumerate(X)]
    module, structure = model.module, model.structure
    optimiser = torch.optim.Adam(module.parameters(), lr=lr, weight_decay=weight_decay)
    rng = np.random.default_rng(seed)
    n, losses, steps = len(inputs), [], 0
    start = time.perf_counter()
    module.train()
    try:
        for epoch in range(1, epochs + 1):
            order = rng.permutation(n)
            batches = [order[k:k + batch_size] for k in range(0, n, batch_size)]
            total = 0.0
            for batch in progress.items(batches, len(batches), f"epoch {epoch}/{epochs}", "batch"):
                thetas = [module(inputs[i].tensors) for i in batch]
                value = structured_loss(structure, thetas, [Y[i] for i in batch], kind, loss, **options).mean()
                optimiser.zero_grad()
                value.backward()
                optimiser.step()
                total += float(value.detach()) * len(batch)
                steps += 1
            losses.append(total / n)
            progress.stage(f"epoch {epoch}/{epochs}: mean {kind} loss {losses[-1]:.5f} "
                           f"({time.perf_counter() - start:.1f}s)")
    finally:
        module.eval()
    return {"epochs": epochs, "steps": steps, "seconds": time.perf_counter() - start, "final_loss": losses[-1],
            "losses": losses, "kind": kind, "lr": float(lr), "batch_size": batch_size}


__all__ = ["NetTask", "single_threaded_torch", "train_network"]
