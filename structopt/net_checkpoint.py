"""Network training that never loses its state: one epoch loop that checkpoints, resumes and honours Ctrl-C.

Every task's network loop (:func:`structopt.cli_net.train_network`, OCR's CNN, the NER BiLSTM, the horses CNN)
runs its epochs through :class:`TrainingRun`: the task says how an epoch's batches are drawn (``plan``), what one
batch does (``step``) and what an epoch records (``end``); the run does the rest. At the end of every epoch,
and on Ctrl-C at the end of the current batch, it writes a checkpoint holding

- the module's ``state_dict`` (arrays, buffers too) and the optimiser's (Adam's moments as arrays, its step
  counts and scalars), the learning-rate schedule's, when there is one;
- the random states: numpy Generators (their bit generators' states), torch Generators (their byte states as
  arrays) and, when the task draws from it (dropout), torch's global generator;
- the epochs done, their records (losses, metrics), the task's own ``extra`` state (e.g. the best epoch's
  weights), and inside an epoch its batch plan, the batches done and the epoch's running sums;
- a fingerprint of the run (:func:`run_fingerprint`: task, network, loss, options, training data, seed), so
  that a checkpoint is resumed only by the run that wrote it.

The file is the linear solvers' checkpoint (:func:`structopt.solvers.save_checkpoint`: a sealed
:mod:`structopt.archive`, written atomically, nothing unpickled) under the solver name ``"network"``; reading one
back checks its seal, its kind, the fingerprint, and every array against the live module and optimiser, and
refuses anything else on one line naming the file. A resumed run repeats, batch for batch, what the uninterrupted
run would have done: its weights end bit for bit the same (with one torch thread).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from structopt.errors import InvalidInputError
from structopt.fingerprint import digest
from structopt.progress import QUIET, Progress

#: the solver name network checkpoints are written under (a linear solver's checkpoint is refused, and back)
SOLVER = "network"
#: the checkpoint's file name inside ``--out`` (``structopt train TASK --net NAME``)
CHECKPOINT_FILE = "checkpoint.npz"
#: fingerprint components shown with their values when they differ (the others are digests)
_SHOWN = ("task", "net", "loss", "epochs", "n_train", "seed")

Plan = dict[str, Any]


@dataclass(frozen=True)
class NetCheckpoint:
    """Where a network run keeps its state, and whether it starts from it.

    Attributes
    ----------
    path : str or PathLike
        The checkpoint file (written at every epoch's end and on Ctrl-C).
    fingerprint : dict of str to str
        What identifies the run (:func:`run_fingerprint`); a checkpoint with another one is refused.
    resume : bool
        Start from the checkpoint at ``path`` (it must exist) instead of from scratch.
    """

    path: str | os.PathLike
    fingerprint: dict[str, str] = field(default_factory=dict)
    resume: bool = False


def run_fingerprint(*, data: Any = None, options: Any = None, **shown: Any) -> dict[str, str]:
    """The fingerprint of a network run: ``shown`` values (task, net, loss, epochs, n_train, seed) as text, and
    digests (:func:`structopt.fingerprint.digest`) of the training ``data`` and the other ``options``."""
    out = {name: str(value) for name, value in shown.items()}
    if data is not None:
        out["data"] = digest(data)
    if options is not None:
        out["options"] = digest(options)
    return out


# --------------------------------------------------------------------------- arrays <-> tensors
def state_arrays(module: Any) -> dict[str, np.ndarray]:
    """The module's ``state_dict`` (parameters and buffers) as numpy copies."""
    return {name: value.detach().cpu().numpy().copy() for name, value in module.state_dict().items()}


def check_state_arrays(module: Any, arrays: Any, where: str) -> None:
    """Refuse ``arrays`` (name -> array, e.g. read from a file; ``where`` names the source) unless they hold
    exactly the module's ``state_dict`` names, each with the module's shape and dtype."""
    own = module.state_dict()
    if not isinstance(arrays, dict) or set(arrays) != set(own):
        names = sorted(arrays) if isinstance(arrays, dict) else type(arrays).__name__
        raise InvalidInputError(f"{where}: its weights do not match the network (names {names}, expected "
                                f"{sorted(own)})")
    for name, value in own.items():
        array = arrays[name]
        expected = value.detach().cpu().numpy()
        if not isinstance(array, np.ndarray) or array.shape != expected.shape or array.dtype != expected.dtype:
            got = (array.dtype, array.shape) if isinstance(array, np.ndarray) else type(array).__name__
            raise InvalidInputError(f"{where}: weight {name} is {got}, the network's is "
                                    f"{(expected.dtype, expected.shape)}")


def load_state_arrays(module: Any, arrays: Any, where: str) -> None:
    """Load ``arrays`` into ``module`` once :func:`check_state_arrays` accepts them."""
    import torch

    check_state_arrays(module, arrays, where)
    module.load_state_dict({name: torch.from_numpy(np.array(arrays[name])) for name in module.state_dict()})


def _to_arrays(value: Any) -> Any:
    """A torch state (optimiser, scheduler) with its tensors as numpy arrays."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy().copy()
    if isinstance(value, dict):
        return {key: _to_arrays(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_arrays(item) for item in value)
    return value


def _to_tensors(value: Any) -> Any:
    import torch

    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.array(value))
    if isinstance(value, dict):
        return {key: _to_tensors(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_tensors(item) for item in value)
    return value


def _check_like(saved: Any, own: Any, what: str) -> None:
    """Refuse ``saved`` (read from a file) unless it has ``own``'s structure: the same keys, list lengths and
    kinds of values (a number for a number, None for None)."""
    def kind(value: Any) -> str:
        if isinstance(value, bool) or value is None or isinstance(value, str):
            return type(value).__name__
        if isinstance(value, (int, float)):
            return "number"
        if isinstance(value, (list, tuple)):
            return "sequence"
        return type(value).__name__

    if kind(saved) != kind(own):
        raise ValueError(f"{what}: {kind(saved)} where {kind(own)} belongs")
    if isinstance(own, dict):
        if set(saved) != set(own):
            raise ValueError(f"{what}: keys {sorted(map(str, saved))}, expected {sorted(map(str, own))}")
        for key in own:
            _check_like(saved[key], own[key], f"{what} {key}")
    elif isinstance(own, (list, tuple)):
        if len(saved) != len(own):
            raise ValueError(f"{what}: {len(saved)} values, expected {len(own)}")
        for a, b in zip(saved, own):
            _check_like(a, b, what)


def _flat_parameters(module: Any) -> np.ndarray:
    """The module's parameters in ``named_parameters()`` order, one float64 vector (a TorchModel's ``w``)."""
    parts = [p.detach().cpu().reshape(-1).double().numpy() for _, p in module.named_parameters()]
    return np.concatenate(parts) if parts else np.zeros(0)


# --------------------------------------------------------------------------- the loop
class TrainingRun:
    """The epochs of one network training run, checkpointed (see the module docstring).

    Parameters
    ----------
    module : torch.nn.Module
        Trained in place.
    optimiser : torch.optim.Optimizer
    epochs : int
        Epochs of the whole run (a resumed run continues up to it).
    n_examples : int
        Training examples: a plan's batches index them.
    scheduler : torch learning-rate scheduler, optional
        Its state is checkpointed (the task steps it).
    rngs : sequence of numpy Generators
        The task's numpy random streams (their states are checkpointed and restored in place).
    generators : sequence of torch.Generator
        The task's torch random streams.
    torch_global : bool
        Checkpoint torch's global generator too (dropout draws from it).
    checkpoint : NetCheckpoint, optional
        Where to write (None: no checkpoints, Ctrl-C simply stops).
    progress : Progress
        A bar over each epoch's batches.

    Attributes
    ----------
    epoch : int
        Epochs done.
    records : list of dict
        What each epoch's ``end`` returned.
    extra : dict
        The task's own state between epochs (numpy arrays, numbers, lists, dicts), checkpointed.
    resumed : bool
        The run started from a checkpoint.
    """

    def __init__(self, module: Any, optimiser: Any, epochs: int, n_examples: int, *, scheduler: Any = None,
                 rngs: tuple[np.random.Generator, ...] = (), generators: tuple[Any, ...] = (),
                 torch_global: bool = False, checkpoint: NetCheckpoint | None = None, progress: Progress = QUIET):
        self.module, self.optimiser, self.scheduler = module, optimiser, scheduler
        self.epochs, self.n = int(epochs), int(n_examples)
        self.rngs, self.generators, self.torch_global = tuple(rngs), tuple(generators), bool(torch_global)
        self.checkpoint, self.progress = checkpoint, progress
        self.epoch, self.records, self.extra = 0, [], {}
        self.stopped = False  # the task ended the run early (e.g. patience): nothing left to do
        self.resumed = False
        self._plan: Plan | None = None  # the current epoch's, once drawn
        self._batch = 0  # batches of the current epoch done
        self._acc: dict[str, Any] = {}  # the current epoch's running sums
        self._fingerprint = None if checkpoint is None else {
            **checkpoint.fingerprint, "network": digest({k: v.shape for k, v in state_arrays(module).items()})}

    @property
    def finished(self) -> bool:
        """Whether every epoch is done (or the task stopped the run)."""
        return self.stopped or self.epoch >= self.epochs

    def stop(self) -> None:
        """End the run after the current epoch (called by ``end``)."""
        self.stopped = True

    # ------------------------------------------------------------------ the best epoch (model selection)
    def keep_best(self, score: float, epoch: int) -> bool:
        """Keep the module's weights as the best epoch's when ``score`` (higher is better, e.g. a development
        metric) beats every earlier one; whether it did. Kept in :attr:`extra` (``best``, ``best_epoch``,
        ``best_state``), so a resumed run keeps choosing among the same epochs."""
        if score > self.extra.get("best", -np.inf):
            self.extra.update(best=float(score), best_epoch=int(epoch), best_state=state_arrays(self.module))
            return True
        return False

    def load_best(self) -> int:
        """Load the best epoch's weights into the module (when :meth:`keep_best` kept any); the epoch whose weights
        the module now holds (the last one otherwise)."""
        if "best_state" not in self.extra:
            return self.epoch
        load_state_arrays(self.module, self.extra["best_state"], "the best epoch's weights")
        return int(self.extra["best_epoch"])

    def _check_best(self, path: Any) -> None:
        extra = self.extra
        if "best_state" in extra or "best" in extra:
            if not (isinstance(extra.get("best"), float) and type(extra.get("best_epoch")) is int
                    and 1 <= extra["best_epoch"] <= self.epoch):
                raise InvalidInputError(f"checkpoint {path} is malformed (its best epoch's record)")
            check_state_arrays(self.module, extra.get("best_state"), f"checkpoint {path}")

    # ------------------------------------------------------------------ checkpoint I/O
    def _state(self) -> dict[str, Any]:
        import torch

        plan = None
        if self._plan is not None:
            batches = self._plan["batches"]
            plan = {**{k: v for k, v in self._plan.items() if k != "batches"},
                    "batches": np.concatenate(batches).astype(np.int64),
                    "batch_sizes": np.array([len(b) for b in batches], dtype=np.int64)}
        return {"epoch": self.epoch, "epochs": self.epochs, "stopped": self.stopped, "extra": self.extra,
                "plan": plan, "batch": self._batch, "acc": self._acc,
                "module": state_arrays(self.module), "optimiser": _to_arrays(self.optimiser.state_dict()),
                "scheduler": None if self.scheduler is None else _to_arrays(self.scheduler.state_dict()),
                "rngs": list(self.rngs), "generators": [g.get_state().numpy().copy() for g in self.generators],
                "torch_global": torch.random.get_rng_state().numpy().copy() if self.torch_global else None}

    def save(self) -> int:
        """Write the checkpoint now (atomically); its size in bytes (0 without a checkpoint)."""
        if self.checkpoint is None:
            return 0
        from structopt.solvers import save_checkpoint

        return save_checkpoint(self.checkpoint.path, {"solver": SOLVER, "fingerprint": self._fingerprint,
                                                      "state": self._state(), "trace": self.records,
                                                      "w": _flat_parameters(self.module)})

    def restore(self) -> bool:
        """Load the checkpoint when the run resumes (``checkpoint.resume``); whether it did.

        Raises
        ------
        InvalidInputError
            On one line naming the file: it is missing, tampered with, truncated, written by a linear solver
            or by another run (the differing fingerprint components are named), or its arrays do not fit.
        """
        if self.checkpoint is None or not self.checkpoint.resume:
            return False
        from structopt.errors import DataNotFoundError
        from structopt.solvers import load_checkpoint

        path = self.checkpoint.path
        try:
            saved = load_checkpoint(path, SOLVER)
        except DataNotFoundError:
            raise InvalidInputError(f"--resume: no checkpoint at {path} (nothing to resume; run without --resume "
                                    "to start)") from None
        self._check_fingerprint(path, saved.get("fingerprint"))
        try:
            self._load(saved)
            consistent = np.array_equal(_flat_parameters(self.module), saved["w"])
        except InvalidInputError:
            raise
        except (KeyError, TypeError, ValueError, IndexError, AttributeError, RuntimeError) as error:
            raise InvalidInputError(f"checkpoint {path} is malformed ({type(error).__name__}: {error})") from None
        if not consistent:
            raise InvalidInputError(f"checkpoint {path} is malformed (its weights and its state_dict disagree)")
        self._check_best(path)
        self.resumed = True
        return True

    def _check_fingerprint(self, path: Any, saved: Any) -> None:
        mine = self._fingerprint or {}
        saved = saved if isinstance(saved, dict) else {}
        differ = sorted(key for key in set(saved) | set(mine) if saved.get(key) != mine.get(key))
        if differ:
            parts = [f"{key} {saved.get(key)!s} (this run: {mine.get(key)!s})" if key in _SHOWN else key
                     for key in differ]
            raise InvalidInputError(f"checkpoint {path} belongs to another run: its {', '.join(parts)} "
                                    f"{'differ' if len(differ) > 1 else 'differs'} from this one's (--resume "
                                    "needs the same task, network, loss, epochs, options, training data and seed)")

    def _load(self, saved: dict[str, Any]) -> None:
        import torch

        path, state = self.checkpoint.path, saved["state"]
        epoch, batch = state["epoch"], state["batch"]
        if type(epoch) is not int or not 0 <= epoch <= self.epochs or state["epochs"] != self.epochs:
            raise ValueError(f"epoch {epoch!r} of {state['epochs']!r}")
        records, acc, extra = saved["trace"], state["acc"], state["extra"]
        if len(records) != epoch or not all(isinstance(r, dict) for r in records):
            raise ValueError(f"{len(records)} epoch records for {epoch} epochs")
        if not isinstance(acc, dict) or not isinstance(extra, dict):
            raise TypeError("the epoch's sums or the task's state are not dicts")
        plan = state["plan"]
        if plan is not None:
            order, sizes = plan.pop("batches"), plan.pop("batch_sizes")
            if (order.dtype != np.int64 or sizes.dtype != np.int64 or sizes.ndim != 1 or (sizes < 1).any()
                    or sizes.sum() != order.size or (order.size and not 0 <= order.min() <= order.max() < self.n)):
                raise ValueError("its batch plan does not index the training examples")
            for name, value in plan.items():
                if not isinstance(value, np.ndarray) or len(value) != self.n:
                    raise ValueError(f"its batch plan's {name} is not one value per training example")
            plan["batches"] = np.split(order, np.cumsum(sizes)[:-1])
            if type(batch) is not int or not 0 <= batch <= len(sizes):
                raise ValueError(f"batch {batch!r} of {len(sizes)}")
        rngs, generators = state["rngs"], state["generators"]
        if len(rngs) != len(self.rngs) or len(generators) != len(self.generators):
            raise ValueError("its random streams are not this run's")
        load_state_arrays(self.module, state["module"], f"checkpoint {path}")
        self._load_optimiser(state["optimiser"])
        if (state["scheduler"] is None) != (self.scheduler is None):
            raise ValueError("a learning-rate schedule in one run and not in the other")
        if self.scheduler is not None:  # its load updates the scheduler's attributes: only its own, alike
            _check_like(state["scheduler"], _to_arrays(self.scheduler.state_dict()), "the learning-rate schedule")
            self.scheduler.load_state_dict(state["scheduler"])
        for mine, theirs in zip(self.rngs, rngs):
            mine.bit_generator.state = theirs.bit_generator.state
        for mine, theirs in zip(self.generators, generators):
            mine.set_state(torch.from_numpy(np.array(theirs, dtype=np.uint8)))
        if (state["torch_global"] is None) == self.torch_global:
            raise ValueError("torch's global random state in one run and not in the other")
        if self.torch_global:
            torch.random.set_rng_state(torch.from_numpy(np.array(state["torch_global"], dtype=np.uint8)))
        self.epoch, self.records, self.extra = epoch, list(records), extra
        self.stopped, self._plan, self._batch, self._acc = bool(state["stopped"]), plan, int(batch), acc

    def _load_optimiser(self, saved: Any) -> None:
        groups = self.optimiser.param_groups
        if (not isinstance(saved, dict) or len(saved["param_groups"]) != len(groups)
                or any(g["params"] != list(range(sum(len(h["params"]) for h in groups[:i]),
                                                 sum(len(h["params"]) for h in groups[:i + 1])))
                       for i, g in enumerate(saved["param_groups"]))):
            raise ValueError("the optimiser's parameter groups are not this network's")
        own = self.optimiser.state_dict()["param_groups"]
        _check_like([{k: v for k, v in g.items() if k != "params"} for g in saved["param_groups"]],
                    [{k: v for k, v in g.items() if k != "params"} for g in own], "the optimiser's settings")
        params = [p for g in groups for p in g["params"]]
        for index, moments in saved["state"].items():
            if type(index) is not int or not 0 <= index < len(params) or not isinstance(moments, dict):
                raise ValueError(f"optimiser state {index!r}")
            for name, value in moments.items():
                if isinstance(value, np.ndarray) and value.ndim and value.shape != tuple(params[index].shape):
                    raise ValueError(f"optimiser state {index} {name} has shape {value.shape}, the parameter "
                                     f"{tuple(params[index].shape)}")
        self.optimiser.load_state_dict(_to_tensors(saved))

    # ------------------------------------------------------------------ the epochs
    def run(self, plan: Callable[[int], Plan], step: Callable[[np.ndarray, Plan, dict[str, Any]], None],
            end: Callable[[int, dict[str, Any]], dict[str, Any]],
            after: Callable[[int, dict[str, Any]], None] | None = None, label: str = "") -> None:
        """Run the epochs left, checkpointing each.

        Parameters
        ----------
        plan : callable
            ``plan(epoch) -> {"batches": [index arrays], ...}``: the epoch's batches (and any per-example
            draws, arrays of one value per training example), drawn from the run's random streams.
        step : callable
            ``step(batch, plan, sums)``: train on one batch, adding what the epoch reports to ``sums``.
        end : callable
            ``end(epoch, sums) -> record``: the epoch's record (JSON numbers; may update :attr:`extra`, may
            call :meth:`stop`).
        after : callable, optional
            ``after(epoch, record)`` once the epoch is checkpointed (e.g. a stage line, an evaluation).
        label : str
            Shown after "epoch i/n" on the bar.

        Raises
        ------
        KeyboardInterrupt
            Ctrl-C: it is honoured at the end of the current batch, after the checkpoint is written. (SIGINT is
            held back during a batch by :func:`structopt.interrupt.interruptible`, in the main thread with
            Python's default handler; elsewhere a KeyboardInterrupt raised inside a batch leaves the checkpoint
            of the last whole state on disk, and one raised between batches is checkpointed as usual.)
        """
        from structopt.interrupt import interruptible

        safe = True  # whether the state is whole (between batches): only then is it written
        try:
            with interruptible() as interrupt:
                while not self.finished:
                    if self._plan is None:
                        safe = False  # the draws advance the random streams before the plan is kept
                        self._plan, self._batch, self._acc = plan(self.epoch + 1), 0, {}
                        safe = True
                    batches = self._plan["batches"]
                    left = range(self._batch, len(batches))
                    for k in self.progress.items(left, len(left), f"epoch {self.epoch + 1}/{self.epochs}{label}",
                                                 "batches"):
                        safe = False
                        step(batches[k], self._plan, self._acc)
                        self._batch, safe = k + 1, True
                        if interrupt.requested:
                            raise KeyboardInterrupt
                    safe = False
                    record = end(self.epoch + 1, self._acc)
                    self.records.append(record)
                    self.epoch, self._plan, self._batch, self._acc = self.epoch + 1, None, 0, {}
                    safe = True
                    self.save()
                    if after is not None:
                        after(self.epoch, record)
                    if interrupt.requested:
                        raise KeyboardInterrupt
        except KeyboardInterrupt:
            if safe:
                self.save()
            raise


def length_batches(lengths: np.ndarray, batch_size: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Shuffled batches of examples of similar lengths (a random order, sorted by length within chunks of 50
    batches, the batches shuffled): little padding in a padded batch, a fresh mix every epoch."""
    order = rng.permutation(len(lengths))
    chunk = 50 * batch_size
    out: list[np.ndarray] = []
    for a in range(0, len(order), chunk):
        part = order[a:a + chunk]
        part = part[np.argsort(lengths[part], kind="stable")]
        out.extend(part[b:b + batch_size] for b in range(0, len(part), batch_size))
    return [out[i] for i in rng.permutation(len(out))]


__all__ = ["CHECKPOINT_FILE", "SOLVER", "NetCheckpoint", "TrainingRun", "check_state_arrays", "length_batches",
           "load_state_arrays", "run_fingerprint", "state_arrays"]
