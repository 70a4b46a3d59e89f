"""A linear-chain CRF layer for PyTorch on structopt's batched chain kernels.

:class:`ChainCRF` scores a tag sequence ``y`` of an example with emissions ``x`` (T, S) as

    score(y) = start[y_0] + sum_t x[t, y_t] + sum_t transitions[y_t, y_{t+1}] + end[y_{L-1}]

(pytorch-crf's convention) and computes, for a padded batch, the negative log-likelihood, log Z,
the marginals, Viterbi and the k best sequences in one compiled call each
(:mod:`structopt.structures._chain_batch`). The NLL and log Z are a custom autograd function: the
kernel that computes log Z also gives the marginals, which are the gradient (marginals minus the
gold statistics for the NLL), so the backward pass costs no second recursion. Transition
constraints (``allowed``: a label may not follow another; ``allowed_start`` / ``allowed_end``) give
the forbidden scores -inf, as :class:`~structopt.structures.chain.Chain`'s masks do.

The kernels run in float64 on the CPU: float32 tensors are computed in float64 and returned in
float32, tensors on another device are moved to the CPU for the kernel and back.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.autograd.function import once_differentiable

from structopt.errors import InvalidInputError
from structopt.structures import _chain_batch as cb

__all__ = ["ChainCRF"]

_REDUCTIONS = ("none", "sum", "mean", "token_mean")
_FLOATS = (torch.float32, torch.float64)
#: dtype conversions are done by numpy: torch's own copies of tensors this size use its thread pool, which on a
#: busy machine cost several times the kernel (NLL forward + backward, float32 emissions, B = 32, T = 30, S = 45,
#: two torch threads: 8.5 ms CPU a call with torch's conversions, 2.1 ms with numpy's)
_NUMPY = {torch.float32: np.float32, torch.float64: np.float64}


def _to_numpy(tensor: torch.Tensor, dtype=np.float64) -> np.ndarray:
    """A C-contiguous CPU copy (or view) of ``tensor`` in ``dtype``."""
    return np.ascontiguousarray(tensor.detach().cpu().numpy(), dtype=dtype)


def _first_nonfinite(name: str, array: np.ndarray) -> None:
    """Raise an InvalidInputError naming the first NaN / infinite entry of ``array`` (if any)."""
    if not np.isfinite(array).all():
        where = tuple(int(i) for i in np.argwhere(~np.isfinite(array))[0])
        raise InvalidInputError(f"{name}[{', '.join(map(str, where))}] is {array[where]}: {name} must be finite")


def _as_numpy_int(name: str, value, shape: tuple[int, ...]) -> np.ndarray:
    """An integer tensor / array of ``shape`` as int64 numpy, or an InvalidInputError naming ``name``."""
    if isinstance(value, torch.Tensor):
        if value.dtype.is_floating_point or value.dtype.is_complex or value.dtype == torch.bool:
            raise InvalidInputError(f"{name} must be an integer tensor, got {value.dtype}")
        array = value.detach().cpu().numpy()
    else:
        array = np.asarray(value)
        if array.dtype.kind not in "iu":
            raise InvalidInputError(f"{name} must be an integer array, got {array.dtype}")
    if array.shape != shape:
        raise InvalidInputError(f"{name} must have shape {shape}, got {tuple(array.shape)}")
    return np.ascontiguousarray(array, dtype=np.int64)


class _Batch:
    """A checked batch in the kernels' layout: float64 emissions, lengths, tags, device and dtype."""

    def __init__(self, emissions: np.ndarray, lengths: np.ndarray, tags: np.ndarray | None,
                 device: torch.device, dtype: torch.dtype):
        self.emissions, self.lengths, self.tags, self.device, self.dtype = emissions, lengths, tags, device, dtype

    def tensor(self, array: np.ndarray) -> torch.Tensor:
        """``array`` on the emissions' device, in their dtype."""
        return torch.from_numpy(array.astype(_NUMPY[self.dtype], copy=False)).to(self.device)


class _ChainNLL(torch.autograd.Function):
    """``log Z - score(tags)`` per example (log Z when there are no tags) and its gradient.

    The forward kernel returns the marginals minus the gold statistics; the backward pass scales
    them by the incoming gradient of each example.
    """

    @staticmethod
    def forward(ctx, emissions, transitions, start, end, crf, batch):
        pairwise, first, last = crf._kernel_parameters(transitions, start, end)
        has_tags = batch.tags is not None
        labels = batch.tags if has_tags else np.zeros((1, 1), dtype=np.int64)
        log_z, node, pair, scores, _ = cb.marginals_kernel(batch.emissions, pairwise, True, first, last, batch.lengths,
                                                        labels, has_tags)
        crf._refuse_log_z(log_z, batch.lengths)
        ctx.node, ctx.pair, ctx.lengths = node, pair[:, 0], batch.lengths
        ctx.places = [None if x is None else (x.device, x.dtype) for x in (emissions, transitions, start, end)]
        return batch.tensor(log_z - scores)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        g = _to_numpy(grad)
        node = ctx.node
        needs = ctx.needs_input_grad
        grads = [None] * 6
        if needs[0]:
            grads[0] = node * g[:, None, None]
        if needs[1]:
            grads[1] = np.tensordot(g, ctx.pair, axes=1)
        if needs[2]:
            grads[2] = g @ node[:, 0, :]
        if needs[3]:
            grads[3] = g @ node[np.arange(len(g)), ctx.lengths - 1, :]
        for k, place in enumerate(ctx.places):  # each gradient on its input's device, in its dtype
            if grads[k] is not None:
                grads[k] = torch.from_numpy(grads[k].astype(_NUMPY[place[1]], copy=False)).to(place[0])
        return tuple(grads)


class ChainCRF(nn.Module):
    """Linear-chain conditional random field over ``num_tags`` labels.

    The model of pytorch-crf's ``CRF`` (``batch_first=True``: emissions (B, T, S), the same transition, start and
    end scores, the same initialisation), with ``forward`` returning the negative log-likelihood, lengths or a
    mask, and decoded tags as a padded tensor with the score of each decoded sequence.

    Parameters
    ----------
    num_tags : int
        Number of labels S.
    boundary : bool
        Learn ``start`` and ``end`` score vectors (S,) for the first and the last label (default True).
    allowed : (S, S) bool array or tensor, optional
        ``allowed[a, b]``: label b may follow label a (e.g. BIO tagging forbids O -> I-X). Forbidden
        transitions score -inf: no sequence using one has probability, Viterbi and top-K never return one,
        and gold tags using one are refused.
    allowed_start, allowed_end : (S,) bool arrays or tensors, optional
        Labels allowed at the first / last position of a sequence.
    dtype, device : optional
        Of the parameters (the kernels compute in float64 on the CPU whatever they are).

    Attributes
    ----------
    transitions : Parameter (S, S)
        ``transitions[a, b]`` scores label a followed by label b.
    start, end : Parameter (S,) or None
    """

    def __init__(self, num_tags: int, *, boundary: bool = True, allowed=None, allowed_start=None, allowed_end=None,
                 dtype: torch.dtype | None = None, device: torch.device | str | None = None):
        super().__init__()
        if isinstance(num_tags, bool) or not isinstance(num_tags, (int, np.integer)) or num_tags < 1:
            raise InvalidInputError(f"ChainCRF needs an integer num_tags >= 1, got {num_tags!r}")
        S = self.num_tags = int(num_tags)
        if dtype is not None and dtype not in _FLOATS:
            raise InvalidInputError(f"ChainCRF's dtype must be torch.float32 or torch.float64, got {dtype}")
        factory = {"dtype": dtype, "device": device}
        self.transitions = nn.Parameter(torch.empty(S, S, **factory))
        self.start = nn.Parameter(torch.empty(S, **factory)) if boundary else None
        self.end = nn.Parameter(torch.empty(S, **factory)) if boundary else None
        self.allowed = self._mask("allowed", allowed, (S, S))
        self.allowed_start = self._mask("allowed_start", allowed_start, (S,))
        self.allowed_end = self._mask("allowed_end", allowed_end, (S,))
        if self.allowed is not None and not self.allowed.any():
            raise InvalidInputError("allowed forbids every transition: only length-1 sequences would exist")
        for name in ("allowed_start", "allowed_end"):
            mask = getattr(self, name)
            if mask is not None and not mask.any():
                raise InvalidInputError(f"{name} forbids every label: no tag sequence would exist")
        self.reset_parameters()

    @staticmethod
    def _mask(name: str, value, shape: tuple[int, ...]) -> np.ndarray | None:
        if value is None:
            return None
        array = value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
        if array.shape != shape or array.dtype != bool:
            raise InvalidInputError(f"{name} must be a boolean array of shape {shape}, got {array.dtype} "
                                    f"{tuple(array.shape)}")
        return None if array.all() else array.copy()

    def reset_parameters(self) -> None:
        """Uniform in [-0.1, 0.1], as pytorch-crf initialises."""
        for p in (self.transitions, self.start, self.end):
            if p is not None:
                nn.init.uniform_(p, -0.1, 0.1)

    def extra_repr(self) -> str:
        masks = "".join(f", {name}=<{int(np.count_nonzero(~m))} forbidden>" for name, m in
                        (("allowed", self.allowed), ("allowed_start", self.allowed_start),
                         ("allowed_end", self.allowed_end)) if m is not None)
        return f"num_tags={self.num_tags}, boundary={self.start is not None}{masks}"

    # ------------------------------------------------------------------ checks and layout
    def _kernel_parameters(self, transitions=None, start=None, end=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(1, 1, S, S) transitions and (S,) start / end scores as float64 numpy, masks applied as -inf
        (the module's parameters, or the tensors given: what the autograd function was called with)."""
        S = self.num_tags
        if transitions is None:
            transitions, start, end = self.transitions, self.start, self.end
        arrays = []
        for name, p, mask in (("transitions", transitions, self.allowed),
                              ("start", start, self.allowed_start), ("end", end, self.allowed_end)):
            if p is None:
                array = np.zeros(S)
            else:
                array = _to_numpy(p)
                _first_nonfinite(name, array)
            if mask is not None:
                array = np.where(mask, array, -np.inf)
            arrays.append(np.ascontiguousarray(array, dtype=np.float64))
        return arrays[0].reshape(1, 1, S, S), arrays[1], arrays[2]

    def _batch(self, emissions, lengths=None, mask=None, tags=None) -> _Batch:
        """Check the inputs (InvalidInputError naming the argument) and lay them out for the kernels."""
        S = self.num_tags
        if not isinstance(emissions, torch.Tensor):
            raise InvalidInputError(f"emissions must be a torch.Tensor, got {type(emissions).__name__}")
        if emissions.dtype not in _FLOATS:
            raise InvalidInputError(f"emissions must be float32 or float64, got {emissions.dtype}")
        if emissions.dim() != 3 or emissions.shape[2] != S or 0 in emissions.shape:
            raise InvalidInputError(f"emissions must have shape (batch, length, {S}) with batch, length >= 1, "
                                    f"got {tuple(emissions.shape)}")
        B, T, _ = emissions.shape
        L = self._lengths(B, T, lengths, mask)
        array = _to_numpy(emissions)
        if not np.isfinite(array).all():  # the padding is never read: only entries within the lengths count
            inside = np.arange(T)[None, :] < L[:, None]
            _first_nonfinite("emissions", np.where(inside[..., None], array, 0.0))
        labels = None
        if tags is not None:
            labels = _as_numpy_int("tags", tags, (B, T))
            inside = np.arange(T)[None, :] < L[:, None]
            bad = inside & ((labels < 0) | (labels >= S))
            if bad.any():
                b, t = (int(i) for i in np.argwhere(bad)[0])
                raise InvalidInputError(f"tags[{b}, {t}] = {labels[b, t]} is outside 0..{S - 1}")
            labels = np.where(inside, labels, 0)
            self._check_feasible(labels, L)
        return _Batch(array, L, labels, emissions.device, emissions.dtype)

    @staticmethod
    def _lengths(B: int, T: int, lengths, mask) -> np.ndarray:
        """Lengths (B,) int64 from ``lengths`` or a prefix ``mask`` (both: they must agree); T when neither."""
        from_mask = None
        if mask is not None:
            if isinstance(mask, torch.Tensor):
                if mask.dtype.is_floating_point or mask.dtype.is_complex:
                    raise InvalidInputError(f"mask must be a boolean or integer 0/1 tensor, got {mask.dtype}")
                m = mask.detach().cpu().numpy()
            else:
                m = np.asarray(mask)
                if m.dtype.kind not in "biu":
                    raise InvalidInputError(f"mask must be a boolean or integer 0/1 array, got {m.dtype}")
            if m.shape != (B, T):
                raise InvalidInputError(f"mask must have shape {(B, T)}, got {tuple(m.shape)}")
            if m.dtype != bool:
                if ((m != 0) & (m != 1)).any():
                    raise InvalidInputError("mask must hold only 0 and 1")
                m = m.astype(bool)
            from_mask = m.sum(axis=1).astype(np.int64)
            prefix = np.arange(T)[None, :] < from_mask[:, None]
            if (from_mask < 1).any() or (m != prefix).any():
                b = int(np.flatnonzero((from_mask < 1) | (m != prefix).any(axis=1))[0])
                raise InvalidInputError(f"mask[{b}] must be on at position 0 and on exactly at a prefix of the "
                                        f"positions (padding at the end), got {m[b].astype(int).tolist()}")
        if lengths is None:
            return from_mask if from_mask is not None else np.full(B, T, dtype=np.int64)
        L = _as_numpy_int("lengths", lengths, (B,))
        bad = (L < 1) | (L > T)
        if bad.any():
            b = int(np.flatnonzero(bad)[0])
            raise InvalidInputError(f"lengths[{b}] = {L[b]} is outside 1..{T} (the emissions' length)")
        if from_mask is not None and (from_mask != L).any():
            b = int(np.flatnonzero(from_mask != L)[0])
            raise InvalidInputError(f"lengths[{b}] = {L[b]} does not match mask[{b}], which is on at {from_mask[b]} "
                                    f"positions")
        return L

    def _check_feasible(self, labels: np.ndarray, L: np.ndarray) -> None:
        """Gold tags that use a forbidden transition, first or last label are refused (their NLL is infinite)."""
        B, T = labels.shape
        if self.allowed_start is not None and not self.allowed_start[labels[:, 0]].all():
            b = int(np.flatnonzero(~self.allowed_start[labels[:, 0]])[0])
            raise InvalidInputError(f"tags[{b}] starts with label {labels[b, 0]}, which allowed_start forbids")
        last = labels[np.arange(B), L - 1]
        if self.allowed_end is not None and not self.allowed_end[last].all():
            b = int(np.flatnonzero(~self.allowed_end[last])[0])
            raise InvalidInputError(f"tags[{b}] ends with label {last[b]}, which allowed_end forbids")
        if self.allowed is not None and T > 1:
            used = np.arange(1, T)[None, :] < L[:, None]
            bad = used & ~self.allowed[labels[:, :-1], labels[:, 1:]]
            if bad.any():
                b, t = (int(i) for i in np.argwhere(bad)[0])
                raise InvalidInputError(f"tags[{b}] uses the forbidden transition {labels[b, t]} -> {labels[b, t + 1]} "
                                        f"at positions {t}, {t + 1} (see allowed)")

    @staticmethod
    def _refuse_log_z(log_z: np.ndarray, L: np.ndarray) -> None:
        if np.isfinite(log_z).all():
            return
        b = int(np.flatnonzero(~np.isfinite(log_z))[0])
        if log_z[b] == -np.inf:
            raise InvalidInputError(f"the transition constraints (allowed, allowed_start, allowed_end) forbid every "
                                    f"tag sequence of length {L[b]} (example {b})")
        raise InvalidInputError(f"the log-partition of example {b} is beyond the float64 range: the emissions and "
                                f"transition scores are too large")

    def _nll(self, emissions, batch: _Batch) -> torch.Tensor:
        return _ChainNLL.apply(emissions, self.transitions, self.start, self.end, self, batch)

    # ------------------------------------------------------------------ public API
    def forward(self, emissions: torch.Tensor, tags: torch.Tensor, lengths=None, mask=None,
                reduction: str = "none") -> torch.Tensor:
        """Negative log-likelihood ``log Z - score(tags)`` of each example.

        Parameters
        ----------
        emissions : (B, T, S) float32 or float64 tensor
            Per-position label scores, padded past each example's length (the padding is never read).
        tags : (B, T) integer tensor
            Gold labels (entries past each length are ignored).
        lengths : (B,) integer tensor, optional
            Lengths in 1..T (default: T for all).
        mask : (B, T) bool tensor, optional
            pytorch-crf's mask (on at the first ``lengths[b]`` positions); may be given with or instead of lengths.
        reduction : {'none', 'sum', 'mean', 'token_mean'}
            Per example (B,), summed, averaged over examples, or summed and divided by the number of tokens.

        Returns
        -------
        Tensor (B,) or scalar, in the emissions' dtype and device, differentiable with respect to the
        emissions and the parameters.
        """
        if reduction not in _REDUCTIONS:
            raise InvalidInputError(f"reduction must be one of {_REDUCTIONS}, got {reduction!r}")
        if tags is None:
            raise InvalidInputError("tags must be given (use log_partition for log Z alone)")
        batch = self._batch(emissions, lengths, mask, tags)
        nll = self._nll(emissions, batch)
        if reduction == "none":
            return nll
        if reduction == "sum":
            return nll.sum()
        if reduction == "mean":
            return nll.mean()
        return nll.sum() / float(batch.lengths.sum())

    def log_partition(self, emissions: torch.Tensor, lengths=None, mask=None) -> torch.Tensor:
        """log Z (B,) of each example, differentiable (its gradient is the marginals)."""
        return self._nll(emissions, self._batch(emissions, lengths, mask))

    @torch.no_grad()
    def marginals(self, emissions: torch.Tensor, lengths=None, mask=None) -> tuple[torch.Tensor, torch.Tensor]:
        """Posterior marginals (not differentiable).

        Returns
        -------
        unary : (B, T, S) tensor
            ``P(y_t = s)``, zero past each length.
        transitions : (B, S, S) tensor
            Expected number of transitions a -> b in each example (summed over positions).
        """
        batch = self._batch(emissions, lengths, mask)
        pairwise, first, last = self._kernel_parameters()
        log_z, node, pair, _, _ = cb.marginals_kernel(batch.emissions, pairwise, True, first, last, batch.lengths,
                                                   np.zeros((1, 1), dtype=np.int64), False)
        self._refuse_log_z(log_z, batch.lengths)
        return batch.tensor(node), batch.tensor(pair[:, 0])

    @torch.no_grad()
    def decode(self, emissions: torch.Tensor, lengths=None, mask=None) -> tuple[torch.Tensor, torch.Tensor]:
        """Viterbi: the best tag sequence of each example and its score.

        Returns
        -------
        tags : (B, T) int64 tensor, -1 past each length
        scores : (B,) tensor, the score of each decoded sequence (log-probability + log Z)
        """
        batch = self._batch(emissions, lengths, mask)
        pairwise, first, last = self._kernel_parameters()
        labels, scores = cb.viterbi_kernel(batch.emissions, pairwise, True, first, last, batch.lengths)
        self._refuse_log_z(np.where(scores == -np.inf, -np.inf, 0.0), batch.lengths)
        return torch.from_numpy(labels).to(batch.device), batch.tensor(scores)

    @torch.no_grad()
    def topk(self, emissions: torch.Tensor, k: int, lengths=None, mask=None) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``k`` best tag sequences of each example (exact top-K Viterbi, ``Chain.topk`` per example).

        Returns
        -------
        tags : (B, k, T) int64 tensor, sorted by decreasing score; -1 past each length and for ranks
            beyond the sequences that exist (fewer than k)
        scores : (B, k) tensor, -inf for those missing ranks
        """
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise InvalidInputError(f"k must be an integer >= 1, got {k!r}")
        batch = self._batch(emissions, lengths, mask)
        pairwise, first, last = self._kernel_parameters()
        labels, scores = cb.topk_kernel(batch.emissions, pairwise, True, first, last, batch.lengths, int(k))
        self._refuse_log_z(np.where(scores[:, 0] == -np.inf, -np.inf, 0.0), batch.lengths)
        return torch.from_numpy(labels).to(batch.device), batch.tensor(scores)
