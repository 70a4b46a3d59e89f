"""What every solver shares: the Result type, the trace, stopping rules, progress and checkpoints.

Calling convention: ``solver(problem, **options) -> Result(w, trace)``. The trace is a list of
dict records, one per evaluation, with keys ``passes`` (effective passes over the data: oracle
calls / n), ``oracle_calls``, ``time`` (seconds of optimisation, evaluations excluded), ``primal``
(the non-smooth F(w) of :meth:`SSVMProblem.primal`, for every solver), and ``dual``/``gap`` where
the method has them, plus whatever the user's callback returns.
"""

from __future__ import annotations

import os
import pickle
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from structopt.errors import InvalidInputError


@dataclass
class Result:
    """Outcome of a solver run.

    Attributes
    ----------
    w : ndarray
        The returned weights (the averaged iterate when the method averages).
    trace : list of dict
        One record per evaluation (see module docstring).
    info : dict
        Method-specific extras (e.g. the final dual variables' summary, stop reason).
    """

    w: np.ndarray
    trace: list[dict[str, Any]]
    info: dict[str, Any] = field(default_factory=dict)


def save_checkpoint(path: str | os.PathLike, state: dict[str, Any]) -> None:
    """Atomically write a solver state (write to a temporary file, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        pickle.dump(state, fh, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, path)


def load_checkpoint(path: str | os.PathLike, solver: str) -> dict[str, Any]:
    """Read a state written by :func:`save_checkpoint` and check it belongs to ``solver``."""
    with open(path, "rb") as fh:
        state = pickle.load(fh)
    if not isinstance(state, dict) or state.get("solver") != solver:
        raise InvalidInputError(f"checkpoint {path} was not written by {solver}")
    return state


class Monitor:
    """Trace recording, stopping rules, progress bar and periodic checkpoints for one run.

    Parameters
    ----------
    problem : SSVMProblem
    max_passes : float
        Stop after this many effective passes.
    tol : float
        Stop once the duality gap (where the method has one) is at most ``tol``.
    time_limit : float or None
        Stop after this many seconds of optimisation.
    callback : callable(w) -> dict or None, optional
        Called at each evaluation; the dict it returns is merged into the trace record.
    progress : bool
        Show a tqdm progress bar over passes.
    checkpoint : path or None
        Where to save the solver state at every evaluation (and at the end).
    """

    def __init__(self, problem, *, max_passes: float, tol: float = 0.0, time_limit: float | None = None,
                 callback: Callable[[np.ndarray], dict | None] | None = None, progress: bool = False,
                 checkpoint: str | os.PathLike | None = None, label: str = "solver"):
        if max_passes <= 0:
            raise InvalidInputError(f"max_passes must be > 0, got {max_passes}")
        self.problem = problem
        self.max_passes = float(max_passes)
        self.tol = float(tol)
        self.time_limit = time_limit
        self.callback = callback
        self.checkpoint = checkpoint
        self.trace: list[dict[str, Any]] = []
        self.elapsed = 0.0  # optimisation time only
        self._started = time.perf_counter()
        self._bar = tqdm(total=self.max_passes, desc=label, unit="pass", disable=not progress, leave=False)
        self.stop_reason = ""

    def resume(self, trace: list[dict[str, Any]]) -> None:
        """Continue a trace loaded from a checkpoint (time keeps counting from its last record)."""
        self.trace = list(trace)
        if trace:
            self.elapsed = trace[-1]["time"]
            self._bar.update(trace[-1]["passes"])

    def pause(self) -> None:
        """Stop the optimisation clock (call before evaluation work)."""
        self.elapsed += time.perf_counter() - self._started

    def restart(self) -> None:
        """Restart the optimisation clock (call after evaluation work)."""
        self._started = time.perf_counter()

    def time(self) -> float:
        """Optimisation seconds so far (the clock must be running)."""
        return self.elapsed + time.perf_counter() - self._started

    def record(self, w: np.ndarray, *, passes: float, oracle_calls: int, primal: float,
               dual: float | None = None, gap: float | None = None, state: dict | None = None,
               **extra: Any) -> bool:
        """Append a trace record (clock paused by the caller); return True when the run must stop."""
        entry: dict[str, Any] = {"passes": float(passes), "oracle_calls": int(oracle_calls),
                                 "time": float(self.elapsed), "primal": float(primal)}
        if dual is not None:
            entry["dual"] = float(dual)
        if gap is not None:
            entry["gap"] = float(gap)
        entry.update({key: float(value) if isinstance(value, np.floating) else value for key, value in extra.items()})
        if self.callback is not None:
            entry.update(self.callback(w) or {})
        self.trace.append(entry)
        postfix = {"primal": f"{primal:.5g}"}
        if gap is not None:
            postfix["gap"] = f"{gap:.3g}"
        self._bar.set_postfix(postfix, refresh=False)
        self._bar.update(max(0.0, passes - self._bar.n))  # refreshes with this record's postfix
        if self.checkpoint is not None and state is not None:
            save_checkpoint(self.checkpoint, {**state, "trace": self.trace})
        if gap is not None and gap <= self.tol:
            self.stop_reason = f"gap {gap:.3g} <= tol {self.tol:g}"
        elif passes >= self.max_passes - 1e-9:
            self.stop_reason = f"reached max_passes={self.max_passes:g}"
        elif self.time_limit is not None and self.elapsed >= self.time_limit:
            self.stop_reason = f"reached time_limit={self.time_limit:g}s"
        return bool(self.stop_reason)

    def close(self) -> None:
        self._bar.close()


def make_rng(random_state: int | np.random.Generator | None) -> np.random.Generator:
    """A numpy Generator from a seed, a Generator, or None."""
    return random_state if isinstance(random_state, np.random.Generator) else np.random.default_rng(random_state)
