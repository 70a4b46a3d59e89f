"""Checkpoints of one solver run: where they are written, when, their fingerprint, and reading one back.

A checkpoint is a sealed :mod:`structopt.archive` (numpy arrays and JSON under a SHA-256; no pickle)
holding the solver's state, its trace, the last reported weights and a fingerprint: digests of the
problem's inputs, outputs, loss, lambda and model and of the method's own options (its trajectory
options; the run options, :class:`~structopt.solvers._options.RunOptions`, are not in it).
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

from structopt.archive import decode, encode, read_archive, write_archive
from structopt.errors import InvalidInputError
from structopt.fingerprint import digest

CHECKPOINT_FORMAT = 4  # 4: the shared run loop checkpoints typed states (one dataclass per solver)


class Checkpoints:
    """The checkpoint I/O of one run: fingerprint, load (``resume``) and save (``checkpoint`` every
    ``every`` passes and when the run stops).

    Parameters
    ----------
    problem : SSVMProblem
    solver_name : str
        Written into checkpoints and checked on resume.
    trajectory : dict
        The method's own options (:meth:`~structopt.solvers._options.Options.trajectory`), fingerprinted
        together with ``solver_name``.
    path, every, resume
        The run options ``checkpoint``, ``checkpoint_every`` and ``resume``.
    """

    def __init__(self, problem, solver_name: str, trajectory: dict[str, Any], path: str | os.PathLike | None = None,
                 every: float = 1.0, resume: str | os.PathLike | None = None):
        self.problem, self.solver_name = problem, solver_name
        self.path, self.every, self.resume_path = path, float(every), resume
        self._trajectory = {"solver": solver_name, **trajectory}
        self._fingerprint: dict[str, str] | None = None
        self.saved_at = -math.inf  # passes of the last save (or of the resumed checkpoint)

    def fingerprint(self) -> dict[str, str]:
        """Digests of the problem and the trajectory options (computed once)."""
        if self._fingerprint is None:
            self._fingerprint = {**self.problem.fingerprint(), "solver options": digest(self._trajectory)}
        return self._fingerprint

    def load(self) -> dict[str, Any] | None:
        """The checkpoint to resume from (``state``, ``trace``, ``w``), checked against this run; None without one."""
        if self.resume_path is None:
            return None
        return load_checkpoint(self.resume_path, self.solver_name, self.fingerprint(), self.problem)

    def due(self, passes: float, stopping: bool) -> bool:
        """Whether a record at ``passes`` is saved: when the run stops, or ``every`` passes after the last save."""
        return self.path is not None and (stopping or passes >= self.saved_at + self.every - 1e-9)

    def save(self, passes: float, state: Any, trace: list[dict[str, Any]], w: np.ndarray) -> int:
        """Write the checkpoint of a record at ``passes``; return its size in bytes."""
        size = save_checkpoint(self.path, {"solver": self.solver_name, "fingerprint": self.fingerprint(),
                                           "state": state, "trace": trace, "w": np.asarray(w)}, self.problem)
        self.saved_at = passes
        return size


def _refs(problem) -> dict[str, Any]:
    """Objects a solver state may point at, stored by name (never by value) in checkpoints."""
    return {"problem": problem}


def save_checkpoint(path: str | os.PathLike, payload: dict[str, Any], problem=None) -> int:
    """Atomically write a checkpoint; return its size in bytes.

    The file is a sealed :mod:`structopt.archive` (numpy arrays and JSON under a SHA-256; no pickle).
    ``payload`` holds ``solver``, ``fingerprint``, ``state``, ``trace`` and ``w`` (the weights the
    last record reported); references to ``problem`` and its model inside the state are stored by
    name. A kill at any moment leaves either the previous checkpoint or the new one.
    """
    data, arrays = encode({key: value for key, value in payload.items() if key not in ("solver", "fingerprint")},
                          _refs(problem))
    meta = {"format": CHECKPOINT_FORMAT, "kind": "structopt checkpoint", "solver": payload["solver"],
            "fingerprint": payload["fingerprint"], "payload": data}
    return write_archive(path, meta, arrays, "checkpoint")


def load_checkpoint(path: str | os.PathLike, solver_name: str, fingerprint: dict[str, str] | None = None,
                    problem=None) -> dict:
    """Read a checkpoint and check that it belongs to ``solver_name`` and to ``fingerprint``.

    The whole file's checksum is verified before anything in it is parsed, and nothing in it is
    unpickled or executed.

    Raises
    ------
    InvalidInputError
        One line naming the file: it is missing, a directory, truncated or corrupted (checksum),
        in the old pickle format, written by another solver or format version, or from a different
        problem or other trajectory options (the message names the components that differ).
    """
    meta, arrays = read_archive(path, "checkpoint")
    if meta.get("kind") != "structopt checkpoint":
        raise InvalidInputError(f"checkpoint {path} is not a structopt checkpoint")
    if meta.get("format") != CHECKPOINT_FORMAT:
        raise InvalidInputError(f"checkpoint {path} has format {meta.get('format')}; this version reads "
                                f"format {CHECKPOINT_FORMAT}")
    if meta.get("solver") != solver_name:
        raise InvalidInputError(f"checkpoint {path} was written by {meta.get('solver')}, not {solver_name}")
    if fingerprint is not None:
        saved = meta.get("fingerprint", {})
        differ = sorted(key for key in set(saved) | set(fingerprint) if saved.get(key) != fingerprint.get(key))
        if differ:
            raise InvalidInputError(
                f"checkpoint {path} belongs to another run: its {', '.join(differ)} "
                f"{'differ' if len(differ) > 1 else 'differs'} from this one's "
                "(resume needs the same data, labels, loss, lam, model and solver options; max_passes, tol, "
                "time_limit and the evaluation/checkpoint intervals may change)")
    try:
        payload = decode(meta["payload"], arrays, _refs(problem))
        if not isinstance(payload, dict) or not isinstance(payload.get("trace"), list) or "state" not in payload:
            raise KeyError("payload")
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as error:
        raise InvalidInputError(f"checkpoint {path} is malformed ({type(error).__name__}: {error})") from None
    return {"solver": meta["solver"], "fingerprint": meta.get("fingerprint"), **payload}




__all__ = ["CHECKPOINT_FORMAT", "Checkpoints", "load_checkpoint", "save_checkpoint"]
