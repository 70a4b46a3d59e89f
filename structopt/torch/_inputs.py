"""Checking and converting the arguments of :mod:`structopt.torch`: potentials of tensors in, numpy out and back.

Every check runs before any oracle: a wrong type, dtype, shape, a NaN, a list whose length differs from
the structures' or the outputs' list, or an invalid output is one :class:`InvalidInputError` naming the
argument (and the example of a list).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from structopt.contract import has_hook
from structopt.errors import InvalidInputError, NotSupportedError
from structopt.potentials import Potentials
from structopt.structures.base import Structure, supports

FLOAT_DTYPES = (torch.float32, torch.float64)


@dataclass(frozen=True)
class Example:
    """One checked example: its structure, the caller's tensors, their numpy copy (float64, θ's layout)."""

    structure: Structure
    theta: Potentials          # the caller's potentials of tensors
    array: Potentials          # the same potentials as float64 numpy arrays
    index: int | None          # position in the caller's list, None for a single example

    @property
    def fields(self) -> tuple[torch.Tensor, ...]:
        return tuple(self.theta)

    @property
    def dtype(self) -> torch.dtype:
        return self.theta[0].dtype

    @property
    def device(self) -> torch.device:
        return self.theta[0].device


def is_potentials(value: Any) -> bool:
    """Whether ``value`` is one example's potentials (a NamedTuple), as opposed to a list of them."""
    return isinstance(value, tuple) and hasattr(value, "_fields")


def _where(index: int | None) -> str:
    return "" if index is None else f"[{index}]"


def to_numpy(theta: Potentials) -> Potentials:
    """Potentials of tensors as float64 numpy arrays on the CPU (no gradient)."""
    return type(theta)(*(field.detach().to("cpu", torch.float64).numpy() for field in theta))


def to_tensors(arrays: Potentials, dtype: torch.dtype, device: torch.device) -> Potentials:
    """Potentials of numpy arrays as tensors of ``dtype`` on ``device`` (fresh copies)."""
    return type(arrays)(*(torch.as_tensor(np.array(a, dtype=np.float64), dtype=dtype, device=device) for a in arrays))


def _check_one(structure: Any, theta: Any, index: int | None) -> Example:
    where = _where(index)
    if not isinstance(structure, Structure):
        raise InvalidInputError(f"structure{where} must be a structopt Structure, got {type(structure).__name__}")
    if not is_potentials(theta):
        raise InvalidInputError(f"theta{where} must be the structure's potentials NamedTuple with tensors as fields "
                                f"(e.g. {_potentials_name(structure)}(...)), got {type(theta).__name__}")
    expected = getattr(structure, "Potentials", None) if has_hook(structure, "Potentials") else None
    if isinstance(expected, type) and not isinstance(theta, expected):
        raise InvalidInputError(f"theta{where} must be {expected.__name__} for {structure.name}, "
                                f"got {type(theta).__name__}")
    for name, field in zip(theta._fields, theta):
        if not isinstance(field, torch.Tensor):
            raise InvalidInputError(f"theta{where}.{name} must be a torch tensor, got {type(field).__name__}")
        if field.dtype not in FLOAT_DTYPES:
            raise InvalidInputError(f"theta{where}.{name} must be float32 or float64, got {field.dtype}")
    dtypes = {field.dtype for field in theta}
    devices = {field.device for field in theta}
    if len(dtypes) > 1 or len(devices) > 1:
        raise InvalidInputError(f"theta{where}: every field must share one dtype and device, got "
                                f"{sorted(map(str, dtypes))} on {sorted(map(str, devices))}")
    array = to_numpy(theta)
    for name, field in zip(theta._fields, array):
        if field.size and not np.isfinite(field).all():
            bad = tuple(int(i) for i in np.argwhere(~np.isfinite(field))[0])
            raise InvalidInputError(f"theta{where}.{name} contains a non-finite value ({field[bad]}) at {bad}; "
                                    "NaN and infinite potentials are refused")
    try:
        structure.expand(array)  # the structure's own shape checks
    except (InvalidInputError, ValueError, IndexError) as error:
        raise InvalidInputError(f"theta{where} does not fit {structure.name}: {error}") from None
    return Example(structure, theta, array, index)


def _potentials_name(structure: Any) -> str:
    kind = getattr(structure, "Potentials", None)
    return kind.__name__ if isinstance(kind, type) else "Potentials"


def examples(structure: Any, theta: Any) -> tuple[list[Example], bool]:
    """Checked examples of ``theta`` (one potentials NamedTuple, or a list of them) and whether it was a list.

    ``structure`` is one structure for every example or a list with one per example.
    """
    if is_potentials(theta):
        if isinstance(structure, (list, tuple)):
            raise InvalidInputError("structure is a list but theta is a single example's potentials; pass a list "
                                    "of potentials with one entry per structure")
        return [_check_one(structure, theta, None)], False
    if not isinstance(theta, (list, tuple)):
        raise InvalidInputError(f"theta must be a potentials NamedTuple of tensors or a list of them, "
                                f"got {type(theta).__name__}")
    if not theta:
        raise InvalidInputError("theta is an empty list: pass at least one example")
    if isinstance(structure, (list, tuple)):
        if len(structure) != len(theta):
            raise InvalidInputError(f"structure has {len(structure)} entries but theta has {len(theta)} examples")
        structures: Sequence[Any] = structure
    else:
        structures = [structure] * len(theta)
    return [_check_one(s, t, i) for i, (s, t) in enumerate(zip(structures, theta))], True


def outputs(batch: list[Example], y: Any, is_list: bool) -> list[Any]:
    """The gold outputs ``y`` checked against each example (``structure.validate_output``), one per example.

    For a list of examples, ``y`` is a list (or a tensor / array whose rows are the examples' outputs).
    """
    if is_list:
        if isinstance(y, torch.Tensor) and y.dim():
            y = list(y.unbind(0))  # one row per example
        elif isinstance(y, np.ndarray) and y.ndim:
            y = list(y)
        if isinstance(y, (str, bytes)) or not isinstance(y, (list, tuple)):
            raise InvalidInputError(f"y must be a list with one output per example (theta is a list of "
                                    f"{len(batch)}), got {type(y).__name__}")
        if len(y) != len(batch):
            raise InvalidInputError(f"y has {len(y)} outputs but theta has {len(batch)} examples")
        values = list(y)
    else:
        values = [y]
    checked = []
    for ex, value in zip(batch, values):
        if isinstance(value, torch.Tensor):
            value = value.detach().cpu().numpy()
        try:
            checked.append(ex.structure.validate_output(value, ex.array, ex.index))
        except (InvalidInputError, ValueError, TypeError) as error:
            raise InvalidInputError(f"y{_where(ex.index)} is not a valid output of {ex.structure.name}: "
                                    f"{error}") from None
    return checked


def require(batch: list[Example], oracle: str, why: str) -> None:
    """Refuse, before any work, a structure that lacks ``oracle`` (``"marginals"`` or ``"topk"``)."""
    for ex in batch:
        if not supports(ex.structure, oracle):
            where = "" if ex.index is None else f" (example {ex.index})"
            raise NotSupportedError(f"{why} needs the {oracle} oracle, which {type(ex.structure).__name__}{where} "
                                    "does not have")


def positive(value: Any, name: str, owner: str) -> float:
    """``value`` as a finite float > 0, or an error naming ``owner``'s option ``name``."""
    import numbers

    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real) or not (
            np.isfinite(value) and value > 0):
        raise InvalidInputError(f"{owner} needs {name} to be a finite number > 0, got {value!r}")
    return float(value)
