"""``structopt train TASK --net NAME``: a task's network, trained by the task's own loop, saved like a linear model.

A :class:`~structopt.cli_tasks.TaskSpec` that has networks declares their names (``nets = ("cnn",)``, the
choices of ``--net``), a method ``net(self, args) -> NetTask`` building one, and ``load_networks()``, which
imports the module that declares them (:func:`structopt.torch.register_network`) so that ``structopt predict``
can rebuild a saved network; ``net_losses`` declares each network's losses (``--loss``'s choices, the default
first). ``train`` runs :attr:`NetTask.fit` with a progress bar and a checkpoint (``OUT/checkpoint.npz``, or
``--checkpoint FILE``; ``--resume`` continues from it: :mod:`structopt.net_checkpoint`), then
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
from structopt.net_checkpoint import NetCheckpoint, TrainingRun
from structopt.progress import QUIET, Progress


@dataclass
class NetTask:
    """A task's network, ready to train (what ``TaskSpec.net(args)`` returns).

    Attributes
    ----------
    model : TorchModel
        The network and its structure; ``fit`` trains ``model.module`` in place.
    fit : callable
        ``fit(progress, checkpoint=None) -> dict``: trains, reporting through ``progress`` (a
        :class:`~structopt.progress.Progress`), checkpointing to (and, with its ``resume``, resuming from)
        ``checkpoint`` (a :class:`~structopt.net_checkpoint.NetCheckpoint`), and returns what it did (``epochs``,
        ``seconds``, ``final_loss``, ``resumed``, ...; JSON values).
    evaluate : callable
        ``evaluate(w) -> {metric: value}`` on the task's test examples, the metrics (and names) of the linear
        path, which ``structopt predict`` prints too.
    title : str
        What is trained, for the stage line and the plot title (e.g. "OCR (bcfw split), CNN").
    preprocessing : dict
        What ``predict`` needs to read new inputs (vocabularies, normalisation, the split record).
    n_train : int
        Training examples used.
    fingerprint : dict of str to str
        What identifies the run (:meth:`~structopt.cli_tasks.TaskSpec.net_fingerprint`): a checkpoint with
        another fingerprint is refused by ``--resume``.
    """

    model: Any
    fit: Callable[..., dict[str, Any]]
    evaluate: Callable[[np.ndarray], dict[str, float]]
    title: str
    preprocessing: dict[str, Any] = field(default_factory=dict)
    n_train: int = 0
    fingerprint: dict[str, str] = field(default_factory=dict)


def single_threaded_torch() -> None:
    """One torch thread for this process (the CLI's network paths): a network's per-example passes are too
    small for intra-op threads, which on a busy machine made them 40 times slower (OCR predict: 46 s -> 1.1 s)."""
    import torch

    torch.set_num_threads(1)


def train_network(model: Any, X: Sequence[Any], Y: Sequence[Any], *, epochs: int, kind: str = "hinge",
                  loss: Any = None, lr: float = 1e-3, batch_size: int = 16, weight_decay: float = 0.0, seed: int = 0,
                  progress: Progress = QUIET, checkpoint: NetCheckpoint | None = None,
                  **options: Any) -> dict[str, Any]:
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
    checkpoint : NetCheckpoint, optional
        Written at every epoch's end and on Ctrl-C (at the end of the current batch); with its ``resume``, the
        run continues from it (:class:`structopt.net_checkpoint.TrainingRun`).

    Returns
    -------
    dict
        ``epochs``, ``steps``, ``seconds`` (in the batches), ``final_loss`` (the mean loss of the last epoch),
        ``losses`` (per epoch), ``kind``, ``lr``, ``batch_size``, ``resumed``.
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
    n = len(inputs)
    run = TrainingRun(module, optimiser, epochs, n, rngs=(rng,), torch_global=True, checkpoint=checkpoint,
                      progress=progress)
    if run.restore():
        progress.stage(f"resuming from {checkpoint.path}: {run.epoch} of {epochs} epochs done")

    def plan(epoch: int) -> dict[str, Any]:
        order = rng.permutation(n)
        return {"batches": [order[k:k + batch_size] for k in range(0, n, batch_size)]}

    def step(batch: np.ndarray, plan: dict[str, Any], sums: dict[str, Any]) -> None:
        start = time.perf_counter()
        thetas = [module(inputs[i].tensors) for i in batch]
        value = structured_loss(structure, thetas, [Y[i] for i in batch], kind, loss, **options).mean()
        optimiser.zero_grad()
        value.backward()
        optimiser.step()
        for key, add in (("loss", float(value.detach()) * len(batch)), ("steps", 1),
                         ("seconds", time.perf_counter() - start)):
            sums[key] = sums.get(key, 0) + add

    def end(epoch: int, sums: dict[str, Any]) -> dict[str, Any]:
        return {"loss": sums["loss"] / n, "steps": int(sums["steps"]), "seconds": float(sums["seconds"])}

    def after(epoch: int, record: dict[str, Any]) -> None:
        seconds = sum(r["seconds"] for r in run.records)
        progress.stage(f"epoch {epoch}/{epochs}: mean {kind} loss {record['loss']:.5f} ({seconds:.1f}s)")

    module.train()
    try:
        run.run(plan, step, end, after)
    finally:
        module.eval()
    losses = [r["loss"] for r in run.records]
    return {"epochs": epochs, "steps": sum(r["steps"] for r in run.records),
            "seconds": sum(r["seconds"] for r in run.records), "final_loss": losses[-1], "losses": losses,
            "kind": kind, "lr": float(lr), "batch_size": batch_size, "resumed": run.resumed}


__all__ = ["NetTask", "single_threaded_torch", "train_network"]
