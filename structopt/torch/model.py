"""A non-linear score map from a ``torch.nn.Module``: :class:`TorchModel`.

The potentials of one example ``x`` are ``module(x)``, the structure's potentials NamedTuple of tensors
(e.g. ``ChainPotentials(unary (T, S), pairwise (S, S))``), with the θ convention of :mod:`structopt.torch`.
The weights ``w`` are the module's parameters flattened, float64, in the order of
``module.named_parameters()``; the Jacobian products of the non-linear model contract
(:class:`~structopt.models.nonlinear.NonlinearModel`) come from ``torch.func``: ``functional_call`` at the
parameters ``w`` and ``jvp`` / ``vjp`` over them, one call per example over the whole example (no loop over
its tokens). So ``prox_linear`` and ``sgd_nonconvex`` train a network as they train the numpy MLP, and the
module is the live ``model.module`` for training with any torch optimiser (then ``model.get_weights()``).

Where a module uses an operation without forward-mode AD (``nn.LSTM``'s CPU kernel), the Jacobian-vector
product is taken as a vector-Jacobian product of the (linear) vector-Jacobian map, which needs only reverse
mode; the switch is made once per model, on the first refusal.

The module is evaluated as it is (CPU, the model's dtype); it must be a deterministic function of its
parameters and input for the Jacobian products to be those of one map: keep it in ``eval()`` mode (dropout,
batch statistics), which :class:`TorchModel` sets at construction.
"""

from __future__ import annotations

import json
import numbers
from typing import Any

import numpy as np
import torch
from torch import nn

from structopt.codecs import register_codec
from structopt.errors import InvalidInputError, NotSupportedError, example_error, refuse_nonfinite
from structopt.hooks import has_hook
from structopt.models.nonlinear import NonlinearModel
from structopt.potentials import Potentials
from structopt.structures.base import Structure, check_flag
from structopt.torch.networks import get_network

DTYPES = {torch.float32: "float32", torch.float64: "float64"}


class TorchInput:
    """One checked input of a :class:`TorchModel`: the caller's value and its tensors.

    Attributes
    ----------
    value : Any
        What the caller gave (arrays are digested by checkpoints' fingerprints through it).
    index : int or None
        The example's position, named by errors of the network's output.
    """

    def __init__(self, value: Any, tensors: Any, index: int | None):
        self.value = value
        self.index = index
        self._tensors = tensors

    @property
    def tensors(self) -> Any:
        """The input as the module takes it (tensors; tuples and dicts of them for structured inputs)."""
        return self._tensors

    def __repr__(self) -> str:
        return f"TorchInput(index={self.index})"


class TorchTangent:
    """The network's forward pass at one point: the input, the parameters there and the potentials."""

    __slots__ = ("params", "theta", "x")

    def __init__(self, x: TorchInput, params: dict[str, torch.Tensor], theta: Potentials):
        self.x = x
        self.params = params
        self.theta = theta


def _convert(value: Any, dtype: torch.dtype, where: str, index: int | None) -> Any:
    """``value`` as tensors: float arrays in ``dtype``, integer arrays as int64, bool kept; tuples and
    dicts member by member."""
    if isinstance(value, TorchInput):
        return value.tensors
    if isinstance(value, tuple):
        return tuple(_convert(v, dtype, f"{where}[{k}]", index) for k, v in enumerate(value))
    if isinstance(value, dict):
        return {k: _convert(v, dtype, f"{where}[{k!r}]", index) for k, v in value.items()}
    if hasattr(value, "tocsr") or hasattr(value, "indptr"):
        raise example_error(index, f"{where} is a sparse matrix; a TorchModel takes dense arrays or tensors "
                                   "(x.toarray(), or a module that takes index arrays)")
    if isinstance(value, torch.Tensor):
        tensor = value.detach().cpu()
    else:
        try:
            array = np.asarray(value)
        except (TypeError, ValueError) as error:
            raise example_error(index, f"{where} must be a numeric array, got {type(value).__name__} "
                                       f"({error})") from None
        if array.dtype.kind not in "biuf":
            raise example_error(index, f"{where} must be numeric, got dtype {array.dtype}")
        tensor = torch.from_numpy(np.ascontiguousarray(array))
    if tensor.is_floating_point():
        tensor = tensor.to(dtype)
        if not bool(torch.isfinite(tensor).all()):
            raise example_error(index, f"{where} contains NaN or infinite values")
        return tensor
    if tensor.dtype == torch.bool:
        return tensor
    if tensor.is_complex():
        raise example_error(index, f"{where} must be real, got {tensor.dtype}")
    return tensor.to(torch.int64)


class _Batched(nn.Module):
    """``forward`` is the wrapped module's ``forward_batch``, so that ``functional_call`` can run it at given
    parameters (named ``inner.<name>``)."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, xs: list[Any]) -> Any:
        return self.inner.forward_batch(xs)


def _numpy(out: Potentials) -> Potentials:
    # fresh float64 copies: a field may alias the parameters or the caller's direction (a shared block)
    return type(out)(*(np.array(field.detach().to(torch.float64).numpy(), copy=True) for field in out))


class TorchModel(NonlinearModel):
    """Potentials ``module(x)`` of a declared network, as a non-linear model.

    Parameters
    ----------
    structure : Structure
        The output structure; ``module(x)`` returns its potentials NamedTuple of tensors.
    network : str
        A name declared with :func:`~structopt.torch.register_network`.
    network_args : dict, optional
        The constructor's keywords, JSON values (a saved model stores them as JSON).
    dtype : torch.float32 or torch.float64
        The module's parameters and computation (weights stay float64 numpy vectors).
    seed : int
        Seed of the constructor's random initialisation (the module is built in a forked torch RNG, so
        the caller's torch random state is untouched).

    Attributes
    ----------
    module : torch.nn.Module
        The live network (in ``eval()`` mode); ``get_weights()`` / ``set_weights(w)`` read and write its
        parameters.

    Examples
    --------
    >>> import numpy as np, torch
    >>> from structopt.torch import TorchModel
    >>> from structopt.structures.chain import Chain
    >>> model = TorchModel(Chain(3), "chain_mlp", {"n_features": 4, "n_hidden": 5, "n_states": 3},
    ...                    dtype=torch.float64)
    >>> w = model.get_weights()
    >>> theta = model.potentials(np.ones((6, 4)), w)
    >>> theta.unary.shape, theta.pairwise.shape, model.n_params == w.size
    ((6, 3), (3, 3), True)
    """

    def __init__(self, structure: Structure, network: str, network_args: dict[str, Any] | None = None, *,
                 dtype: torch.dtype = torch.float32, seed: int = 0):
        if not isinstance(structure, Structure):
            raise InvalidInputError(f"TorchModel needs a structopt Structure, got {type(structure).__name__}")
        if dtype not in DTYPES:
            raise InvalidInputError(f"TorchModel dtype must be torch.float32 or torch.float64, got {dtype!r}")
        if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, numbers.Integral) or seed < 0:
            raise InvalidInputError(f"TorchModel seed must be an integer >= 0, got {seed!r}")
        args = {} if network_args is None else network_args
        if not isinstance(args, dict) or not all(isinstance(k, str) for k in args):
            raise InvalidInputError(f"TorchModel network_args must be a dict with string keys, got {args!r}")
        try:
            as_json = json.loads(json.dumps(args, allow_nan=False))
        except (TypeError, ValueError) as error:
            raise InvalidInputError(f"TorchModel network_args must hold JSON values only (a saved model stores "
                                    f"them as JSON): {error}") from None
        if as_json != args:
            raise InvalidInputError(f"TorchModel network_args do not survive JSON unchanged (tuples become lists): "
                                    f"{args!r}; pass lists and plain numbers")
        self.structure = structure
        self.network = network
        self.network_args = as_json
        self.dtype = dtype
        self.seed = int(seed)
        self.module = self._build(get_network(network), self.seed)
        self.module.eval()
        params = list(self.module.named_parameters())
        if not params:
            raise InvalidInputError(f"network {network!r} has no parameters to train")
        self._names = [name for name, _ in params]
        self._shapes = [tuple(p.shape) for _, p in params]
        self._sizes = [p.numel() for _, p in params]
        self._field_ndims: tuple[int, ...] | None = None  # of the potentials' fields, from the first output
        self._cache: tuple[float, np.ndarray, dict[str, torch.Tensor]] | None = None
        self._forward_ad = True

    def _build(self, factory: Any, seed: int) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            try:
                module = factory(**self.network_args)
            except TypeError as error:
                raise InvalidInputError(f"network {self.network!r} refused its arguments "
                                        f"{self.network_args!r}: {error}") from None
        if not isinstance(module, nn.Module):
            raise InvalidInputError(f"network {self.network!r} must build a torch.nn.Module, got "
                                    f"{type(module).__name__}")
        for name, p in module.named_parameters():
            if not p.is_floating_point():
                raise InvalidInputError(f"network {self.network!r}: parameter {name} is {p.dtype}, not floating")
        return module.to(device="cpu", dtype=self.dtype)

    def __repr__(self) -> str:
        return (f"TorchModel({self.structure!r}, network={self.network!r}, network_args={self.network_args!r}, "
                f"dtype=torch.{DTYPES[self.dtype]})")

    # ------------------------------------------------------------------ weights
    @property
    def blocks(self) -> list[tuple[str, tuple[int, ...]]]:
        """The module's parameters, ``(name, shape)`` in ``named_parameters()`` order."""
        return list(zip(self._names, self._shapes))

    def get_weights(self) -> np.ndarray:
        """The module's current parameters as one float64 vector (a copy)."""
        params = dict(self.module.named_parameters())
        return torch.cat([params[name].detach().reshape(-1) for name in self._names]).to(torch.float64).numpy()

    def set_weights(self, w: np.ndarray) -> None:
        """Copy the weight vector ``w`` into the module's parameters."""
        w = self.check_weights(w)
        params = dict(self.module.named_parameters())
        with torch.no_grad():
            for name, chunk in zip(self._names, self._split(torch.from_numpy(w))):
                params[name].copy_(chunk)

    def _split(self, flat: torch.Tensor) -> list[torch.Tensor]:
        return [chunk.view(shape) for chunk, shape in zip(flat.split(self._sizes), self._shapes)]

    def _params(self, w: np.ndarray, scale: float) -> dict[str, torch.Tensor]:
        """The parameters at ``scale * w`` as tensors of the model's dtype (the last point is reused: the
        examples of a pass share it; a fresh copy, never a view of ``w``, which solvers update in place)."""
        w = np.asarray(w, dtype=np.float64)
        cache = self._cache
        if cache is not None and cache[0] == scale and np.array_equal(cache[1], w):
            return cache[2]
        if w.shape != (self.n_params,):
            raise InvalidInputError(f"weights w must have shape ({self.n_params},), got {w.shape}")
        flat = torch.from_numpy(w * scale).to(self.dtype)
        params = dict(zip(self._names, self._split(flat)))
        self._cache = (scale, w.copy(), params)
        return params

    def initial_weights(self, random_state: int | np.random.Generator | None = None) -> np.ndarray:
        """The weights of a freshly built module, its constructor's initialisation seeded from ``random_state``."""
        rng = random_state if isinstance(random_state, np.random.Generator) else np.random.default_rng(random_state)
        module = self._build(get_network(self.network), int(rng.integers(2 ** 62)))
        params = dict(module.named_parameters())
        return torch.cat([params[name].detach().reshape(-1) for name in self._names]).to(torch.float64).numpy()

    # ------------------------------------------------------------------ inputs and outputs
    def validate_input(self, x: Any, index: int | None = None) -> TorchInput:
        """``x`` as a :class:`TorchInput` (tensors of the model's dtype), checked by running the module on it
        once: its output must be the structure's potentials (NamedTuple type, tensor fields of the model's
        dtype, finite, shapes the structure accepts), else an error naming the example."""
        value = x.value if isinstance(x, TorchInput) else x
        checked = TorchInput(value, _convert(x, self.dtype, "input", index), index)
        with torch.no_grad():
            out = self._forward(dict(self.module.named_parameters()), checked)
        self._check_output(out, index, full=True)
        return checked

    def _forward(self, params: dict[str, torch.Tensor], x: TorchInput) -> Any:
        try:
            return torch.func.functional_call(self.module, params, (x.tensors,))
        except (RuntimeError, ValueError, TypeError, IndexError) as error:
            raise example_error(x.index, f"network {self.network!r} failed on this input: "
                                         f"{type(error).__name__}: {error}") from None

    def _check_output(self, out: Any, index: int | None, full: bool = False) -> Potentials:
        """The module's output as float64 numpy potentials, or an error naming the example."""
        what = f"network {self.network!r} returned"
        structure = self.structure
        expected = getattr(structure, "Potentials", None) if has_hook(structure, "Potentials") else None
        if not (isinstance(out, tuple) and hasattr(out, "_fields")):
            raise example_error(index, f"{what} a {type(out).__name__}, not the potentials NamedTuple of "
                                       f"{structure.name} ({getattr(expected, '__name__', 'Potentials')})")
        if isinstance(expected, type) and not isinstance(out, expected):
            raise example_error(index, f"{what} {type(out).__name__}, but {structure.name} takes {expected.__name__}")
        for name, field in zip(out._fields, out):
            if not isinstance(field, torch.Tensor):
                raise example_error(index, f"{what} {name} as a {type(field).__name__}, not a tensor")
            if field.dtype != self.dtype:
                raise example_error(index, f"{what} {name} of dtype {field.dtype}; the model computes in "
                                           f"{self.dtype} (TorchModel(dtype=...))")
        theta = _numpy(out)
        refuse_nonfinite(zip(out._fields, theta), f"the potentials {what}", index)
        ndims = tuple(field.ndim for field in theta)
        if self._field_ndims is None:
            self._field_ndims = ndims
        elif ndims != self._field_ndims:
            raise example_error(index, f"{what} fields with {ndims} dimensions, another example's had "
                                       f"{self._field_ndims}; one network gives one layout")
        if full:
            try:
                structure.expand(theta)  # the structure's own shape checks
            except (InvalidInputError, NotSupportedError, ValueError, IndexError) as error:
                raise example_error(index, f"{what} potentials that do not fit {structure.name}: {error}") from None
        return theta

    def _input(self, x: Any) -> TorchInput:
        return x if isinstance(x, TorchInput) else self.validate_input(x)

    def reduce_stats(self, mu: Potentials) -> Potentials:
        """Statistics in the layout of the network's potentials: a field with more axes than the network's
        (a chain's per-position edges against a shared (S, S) block) is summed over its leading axes."""
        if self._field_ndims is None:
            return mu
        fields = []
        for field, ndim in zip(mu, self._field_ndims):
            arr = np.asarray(field)
            fields.append(arr.sum(axis=tuple(range(arr.ndim - ndim))) if arr.ndim > ndim else field)
        return type(mu)(*fields)

    # ------------------------------------------------------------------ prediction of many inputs at once
    def predict_batch(self, X: Any, w: np.ndarray, exact: bool = True) -> list[Any]:
        """:meth:`~structopt.models.Model.predict_batch`; a module with ``forward_batch(xs) -> list of potentials``
        (one per input, in order) computes every input's potentials in one call, each checked as ``forward``'s
        are (the per-example contract, and the solvers, use ``forward``)."""
        if not callable(getattr(self.module, "forward_batch", None)):
            return super().predict_batch(X, w, exact)
        if isinstance(X, (str, bytes)) or not hasattr(X, "__len__") or not hasattr(X, "__getitem__"):
            raise InvalidInputError(f"X must be a sequence of inputs, got {type(X).__name__}")
        exact = check_flag(exact, "exact", "TorchModel.predict")
        w = self.check_weights(w)
        inputs = [_convert(X[i], self.dtype, "input", i) for i in range(len(X))]
        if not inputs:
            return []
        params = {f"inner.{name}": value for name, value in self._params(w, 1.0).items()}
        with torch.no_grad():
            try:
                outs = torch.func.functional_call(_Batched(self.module), params, (inputs,))
            except (RuntimeError, ValueError, TypeError, IndexError) as error:
                raise InvalidInputError(f"network {self.network!r}: forward_batch failed on {len(inputs)} inputs: "
                                        f"{type(error).__name__}: {error}") from None
        if not isinstance(outs, (list, tuple)) or len(outs) != len(inputs) or (
                isinstance(outs, tuple) and hasattr(outs, "_fields")):
            raise InvalidInputError(f"network {self.network!r}: forward_batch must return a list with one potentials "
                                    f"NamedTuple per input ({len(inputs)}), got {type(outs).__name__}"
                                    f"{f' of {len(outs)}' if isinstance(outs, (list, tuple)) else ''}")
        return [self.predict_output(self._check_output(out, i, full=True), exact) for i, out in enumerate(outs)]

    # ------------------------------------------------------------------ the non-linear model contract
    def tangent(self, x: Any, w: np.ndarray, scale: float = 1.0) -> TorchTangent:
        x = self._input(x)
        params = self._params(w, float(scale))
        with torch.no_grad():
            out = self._forward(params, x)
        return TorchTangent(x, params, self._check_output(out, x.index))

    def tangent_potentials(self, t: TorchTangent) -> Potentials:
        return t.theta

    def _function(self, x: TorchInput):
        return lambda params: tuple(torch.func.functional_call(self.module, params, (x.tensors,)))

    def tangent_jvp(self, t: TorchTangent, dw: np.ndarray) -> Potentials:
        dw = np.asarray(dw, dtype=np.float64)
        if dw.shape != (self.n_params,):
            raise InvalidInputError(f"dw must have shape ({self.n_params},), got {dw.shape}")
        direction = dict(zip(self._names, self._split(torch.from_numpy(dw).to(self.dtype))))
        f = self._function(t.x)
        if self._forward_ad:
            try:
                _, out = torch.func.jvp(f, (t.params,), (direction,))
            except (NotImplementedError, RuntimeError) as error:
                if "forward AD" not in str(error) and "forward-mode" not in str(error):
                    raise
                self._forward_ad = False  # this network has an operation without forward-mode AD
        if not self._forward_ad:
            out = self._jvp_by_vjp(f, t.params, direction)
        return _numpy(type(t.theta)(*out))

    @staticmethod
    def _jvp_by_vjp(f: Any, params: dict[str, torch.Tensor], direction: dict[str, torch.Tensor]) -> Any:
        # u -> J^T u is linear, its own vector-Jacobian product at any u is J dw (reverse mode twice)
        primal, pullback = torch.func.vjp(f, params)
        _, pullback_of_pullback = torch.func.vjp(lambda u: pullback(u)[0], tuple(torch.zeros_like(p) for p in primal))
        return pullback_of_pullback(direction)[0]

    def _cotangent(self, t: TorchTangent, mu: Potentials) -> tuple[torch.Tensor, ...]:
        fields = []
        for name, stat, theta in zip(t.theta._fields, mu, t.theta):
            arr = np.asarray(stat, dtype=np.float64)
            if arr.ndim > theta.ndim and arr.shape[arr.ndim - theta.ndim:] == theta.shape:
                arr = arr.sum(axis=tuple(range(arr.ndim - theta.ndim)))
            if arr.shape != theta.shape:
                raise InvalidInputError(f"statistics {name} of shape {arr.shape} do not match the network's potentials "
                                        f"{theta.shape}")
            fields.append(torch.from_numpy(np.ascontiguousarray(arr)).to(self.dtype))
        return tuple(fields)

    def tangent_vjp(self, t: TorchTangent, mu: Potentials, out: np.ndarray, scale: float = 1.0) -> None:
        if len(mu) != len(t.theta):
            raise InvalidInputError(f"statistics with {len(mu)} fields do not match potentials with {len(t.theta)}")
        cotangent = self._cotangent(t, mu)
        _, pullback = torch.func.vjp(self._function(t.x), t.params)
        grads = pullback(cotangent)[0]
        flat = torch.cat([grads[name].reshape(-1) for name in self._names]).to(torch.float64).numpy()
        out += scale * flat




# ----- saving (structopt.saved_model): the network's name, its JSON arguments and its state_dict as arrays
def _describe(model: TorchModel) -> dict[str, Any]:
    from structopt.codecs import describe_structure

    state = {name: value.detach().cpu().numpy().copy() for name, value in model.module.state_dict().items()}
    return {"structure": describe_structure(model.structure), "network": model.network,
            "network_args": model.network_args, "dtype": DTYPES[model.dtype], "seed": model.seed, "state": state}


def _build(args: dict[str, Any]) -> TorchModel:
    from structopt.codecs import build_structure

    dtypes = {text: dtype for dtype, text in DTYPES.items()}
    if args["dtype"] not in dtypes:
        raise InvalidInputError(f"TorchModel dtype must be one of {', '.join(dtypes)}, got {args['dtype']!r}")
    state = args["state"]
    if not isinstance(state, dict) or not all(isinstance(v, np.ndarray) for v in state.values()):
        raise InvalidInputError("the TorchModel state_dict is not a mapping of names to arrays")
    model = TorchModel(build_structure(args["structure"]), args["network"], args["network_args"],
                       dtype=dtypes[args["dtype"]], seed=args["seed"])
    load_state(model, state)
    return model


def load_state(model: TorchModel, state: dict[str, np.ndarray]) -> None:
    """Copy ``state`` (a state_dict of arrays) into ``model.module``, refusing one that does not match its
    names, shapes or dtypes with one line naming the differences."""
    own = model.module.state_dict()
    problems = []
    missing, unknown = sorted(set(own) - set(state)), sorted(set(state) - set(own))
    if missing:
        problems.append(f"missing {', '.join(missing)}")
    if unknown:
        problems.append(f"unexpected {', '.join(unknown)}")
    for name in sorted(set(own) & set(state)):
        want, got = own[name], state[name]
        if tuple(want.shape) != got.shape:
            problems.append(f"{name} has shape {got.shape}, the network's is {tuple(want.shape)}")
        elif (want.is_floating_point() and got.dtype.kind != "f") or (not want.is_floating_point()
                                                                       and got.dtype.kind not in "biu"):
            problems.append(f"{name} has dtype {got.dtype}, the network's is {want.dtype}")
        elif got.dtype.kind == "f" and not np.all(np.isfinite(got)):
            problems.append(f"{name} holds NaN or infinite values")
    if problems:
        raise InvalidInputError(f"the state_dict does not match network {model.network!r} "
                                f"({model.network_args}): {'; '.join(problems)}")
    model.module.load_state_dict({name: torch.from_numpy(np.ascontiguousarray(state[name])).to(own[name].dtype)
                                  for name in own})


def _example(rng: np.random.Generator) -> tuple[TorchModel, list[Any]]:
    from structopt.structures.chain import Chain

    model = TorchModel(Chain(3), "chain_mlp", {"n_features": 4, "n_hidden": 5, "n_states": 3}, seed=1)
    return model, [rng.normal(size=(int(rng.integers(1, 6)), 4)) for _ in range(3)]


register_codec("TorchModel", TorchModel, _describe, ("structure", "network", "network_args", "dtype", "seed", "state"),
               build=_build, example=_example)


__all__ = ["TorchInput", "TorchModel", "TorchTangent", "load_state"]
