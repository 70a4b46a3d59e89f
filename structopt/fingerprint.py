"""Stable digests of problems and solver options (checkpoints refuse to resume into another problem).

A digest depends only on values — arrays by dtype, shape and bytes, objects by their type and
public attributes — never on memory addresses, so it is the same in every process.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

import numpy as np
import scipy.sparse as sp

_MAX_DEPTH = 8


def _feed(h: Any, obj: Any, depth: int = 0) -> None:
    if depth > _MAX_DEPTH:
        h.update(b"<deep>")
        return
    if obj is None or isinstance(obj, (bool, int, float, complex, str, bytes, np.generic)):
        h.update(f"{type(obj).__name__}:{obj!r};".encode())
    elif isinstance(obj, np.ndarray):
        arr = np.ascontiguousarray(obj)
        h.update(f"nd{arr.dtype.str}{arr.shape};".encode())
        if arr.dtype == object:
            for item in arr.ravel():
                _feed(h, item, depth + 1)
        else:
            h.update(arr.tobytes())
    elif sp.issparse(obj):
        csr = sp.csr_matrix(obj)
        h.update(f"csr{csr.shape};".encode())
        for part in (csr.indptr, csr.indices, csr.data):
            _feed(h, part, depth + 1)
    elif isinstance(obj, dict):
        h.update(b"{")
        for key in sorted(obj, key=repr):
            _feed(h, key, depth + 1)
            _feed(h, obj[key], depth + 1)
        h.update(b"}")
    elif isinstance(obj, (list, tuple)):
        h.update(f"{type(obj).__name__}[{len(obj)}".encode())
        for item in obj:
            _feed(h, item, depth + 1)
        h.update(b"]")
    elif isinstance(obj, os.PathLike):
        h.update(os.fspath(obj).encode())
    elif isinstance(obj, np.random.Generator):
        h.update(b"<Generator>")  # its state travels in the checkpoint itself
    elif callable(obj) and not hasattr(obj, "__dict__"):
        h.update(getattr(obj, "__qualname__", type(obj).__name__).encode())
    else:
        h.update(f"{type(obj).__module__}.{type(obj).__qualname__}(".encode())
        public = {k: v for k, v in getattr(obj, "__dict__", {}).items() if not k.startswith("_")}
        _feed(h, public, depth + 1)
        h.update(b")")


def digest(*objects: Any) -> str:
    """Hex digest of ``objects`` (arrays by content, objects by type and public attributes)."""
    h = hashlib.blake2b(digest_size=16)
    for obj in objects:
        _feed(h, obj)
    return h.hexdigest()


def problem_fingerprint(problem: Any) -> dict[str, str]:
    """Per-component digests of an :class:`~structopt.problem.SSVMProblem`.

    Components: ``inputs``, ``outputs``, ``loss``, ``lam``, ``model`` (its type, parameters and
    weight layout). Comparing two fingerprints names what differs.
    """
    model = problem.model
    return {"inputs": digest(problem.X), "outputs": digest(problem.Y), "loss": digest(problem.loss),
            "lam": digest(float(problem.lam)), "model": digest(model, model.blocks, model.nonnegative_blocks)}
