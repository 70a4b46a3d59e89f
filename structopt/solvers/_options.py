"""Solver options as data: the common :class:`RunOptions` and each method's own frozen dataclass.

An option is declared once, as a dataclass field ``name: Annotated[type, check] = default`` (the checks
are :mod:`structopt.options`'), and documented once, in its class's Parameters section. From these
declarations :func:`structopt.solvers.base.solver` makes a solver's public signature, its docstring's
options and the checks of every call (:func:`declared_options`, :func:`public_signature`,
:func:`compose_docstring`).
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

import numpy as np

from structopt.options import (
    array_option,
    boolean,
    callable_option,
    non_negative,
    optional,
    path_option,
    positive,
    random_state_option,
)
from structopt.parallel import executor_option, n_workers_option

Check = Callable[[str, Any], None]


class Options:
    """Base of a method's own options (a frozen dataclass of ``Annotated[type, check]`` fields)."""

    def trajectory(self) -> dict[str, Any]:
        """The values that decide the iterates, fingerprinted in checkpoints (default: every field, as given)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


@dataclass(frozen=True)
class RunOptions(Options):
    """The options every solver takes, with one meaning everywhere: run control (budget, stopping, reporting,
    start, seed, checkpoints, executor). None of them enters a checkpoint's fingerprint: they do not decide
    where a resumed run's iterates go (the start point and seed act through the saved state).

    Parameters
    ----------
    max_passes : float
        Budget in effective passes. A run stops at the first evaluation where ``passes >= max_passes``;
        step-based methods take exactly ``ceil(max_passes * n)`` steps, epoch-based methods shorten
        their last epoch, so a run overshoots only by its smallest unit of work (e.g. one full-gradient
        snapshot).
    tol : float
        Stop once the duality gap is at most ``tol`` (methods with a certificate; ``tol > 0`` is refused
        by the others).
    time_limit : float, optional
        Seconds of optimisation (evaluations excluded).
    eval_every : float
        Evaluate (primal, and dual/gap where available) every this many passes.
    random_state : int, Generator or None
        None, a non-negative int seed, or a ``numpy.random.Generator``.
    w0 : ndarray, optional
        Starting weights (methods that start from a weight vector).
    progress : bool
        Show a tqdm progress bar.
    callback : callable, optional
        ``callback(w) -> dict`` merged into each trace record.
    checkpoint : path, optional
        Save the full state to this file every ``checkpoint_every`` passes and when the run stops.
    checkpoint_every : float
        Passes between checkpoints.
    resume : path, optional
        Continue from a checkpoint, which must come from the same problem, solver and trajectory options
        (a fingerprint is checked).
    executor : str, Client, Executor or None
        Where the batch passes run (:mod:`structopt.parallel`): None (serial), ``"processes"``,
        ``"dask"``, a scheduler address or a ``distributed.Client``. The ``@solver`` declaration opens
        it for the run and hands the solver an :class:`~structopt.parallel.Executor`; results match
        the serial run up to the order of floating-point additions.
    n_workers : int, optional
        Workers of the executor it opens.
    """

    max_passes: Annotated[float, positive] = 50
    tol: Annotated[float, non_negative] = 0.0
    time_limit: Annotated[float | None, optional(positive)] = None
    eval_every: Annotated[float, positive] = 1
    random_state: Annotated[int | np.random.Generator | None, random_state_option] = None
    w0: Annotated[np.ndarray | None, array_option] = None
    progress: Annotated[bool, boolean] = False
    callback: Annotated[Callable[[np.ndarray], dict | None] | None, callable_option] = None
    checkpoint: Annotated[str | os.PathLike | None, path_option] = None
    checkpoint_every: Annotated[float, positive] = 1
    resume: Annotated[str | os.PathLike | None, path_option] = None
    executor: Annotated[Any, executor_option] = None
    n_workers: Annotated[int | None, n_workers_option] = None


@dataclass(frozen=True)
class Option:
    """One option of a solver, as declared: its name, default, check, type and whether it is a common one.

    ``description`` is the check's one-line docstring (what values it accepts).
    """

    name: str
    default: Any
    check: Check
    common: bool
    type: Any = Any

    @property
    def description(self) -> str:
        return " ".join((self.check.__doc__ or "").split())


def declared_options(owner: str, cls: type, common: bool = False) -> dict[str, Option]:
    """The fields of an options dataclass as :class:`Option` s, in declaration order.

    Raises ``TypeError`` (at import) for a field without a check or a default, or missing from the class's
    Parameters section.
    """
    if not (dataclasses.is_dataclass(cls) and isinstance(cls, type)):
        raise TypeError(f"{owner}: options must be a dataclass, got {cls!r}")
    hints = typing.get_type_hints(cls, include_extras=True)
    options: dict[str, Option] = {}
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        checks = [m for m in getattr(hint, "__metadata__", ()) if callable(m)]
        if not checks:
            raise TypeError(f"{owner}: option {f.name} declares no check (annotate it Annotated[type, check])")
        if f.default is dataclasses.MISSING:
            raise TypeError(f"{owner}: option {f.name} has no default")
        options[f.name] = Option(f.name, f.default, checks[0], common, typing.get_args(hint)[0])
    listed = _docstring_options(cls.__doc__ or "")
    missing = [key for key in options if key not in listed]
    if missing:
        raise TypeError(f"{owner}: the docstring's Parameters section does not list {', '.join(missing)}")
    return options


def check_values(owner: str, options: dict[str, Option], values: dict[str, Any]) -> None:
    """Every value checked by its option's declared check; the message names ``"{owner}: {option}"``."""
    for key, option in options.items():
        option.check(f"{owner}: {key}", values[key])


def public_signature(function: Callable, options: dict[str, Option], return_annotation: Any) -> inspect.Signature:
    """``(problem, *, option=default, ...)`` with the options' types: what ``help`` and IDEs show.

    The annotations are evaluated (the function's ``problem`` type, each option's type), so that
    ``typing.get_type_hints`` of the public solver works from any module.
    """
    problem_type = typing.get_type_hints(function).get("problem", inspect.Parameter.empty)
    problem = inspect.Parameter("problem", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=problem_type)
    keywords = [inspect.Parameter(key, inspect.Parameter.KEYWORD_ONLY, default=option.default, annotation=option.type)
                for key, option in options.items()]
    return inspect.Signature([problem, *keywords], return_annotation=return_annotation)


# --------------------------------------------------------------------------- docstrings
_HEADER = re.compile(r"^Parameters\n-{3,}\n", re.M)
_NEXT_SECTION = re.compile(r"^\S[^\n]*\n-{3,}$", re.M)


def _docstring_options(doc: str) -> set[str]:
    """Names listed in the Parameters section of a numpy docstring (``a, b : type`` or ``a`` lines)."""
    return {name for names, _ in _split_docstring(doc)[1] for name in names}


def _split_docstring(doc: str) -> tuple[str, list[tuple[list[str], str]], str]:
    """``(text before Parameters, [(names, entry text)], text from the next section on)``."""
    text = inspect.cleandoc(doc)
    header = _HEADER.search(text)
    if header is None:
        return text, [], ""
    rest = text[header.end():]
    following = _NEXT_SECTION.search(rest)
    body, tail = (rest, "") if following is None else (rest[:following.start()], rest[following.start():])
    entries: list[tuple[list[str], list[str]]] = []
    for line in body.splitlines():
        if line and not line[0].isspace():
            entries.append(([part.strip() for part in line.split(" : ")[0].split(",")], [line]))
        elif entries:
            entries[-1][1].append(line)
    return text[:header.start()], [(names, "\n".join(lines).rstrip()) for names, lines in entries], tail


def compose_docstring(owner: str, function: Callable, own: type | None, common: list[str]) -> str:
    """The solver's docstring: the function's text, its Parameters being ``problem``, the method's own
    options (from their class's docstring) and the common ones it takes.

    A common option gets the function's own entry where the method gives it a meaning of its own (e.g.
    what a pass is); the others share one line pointing to :class:`RunOptions`, where they are documented.
    The function's Parameters may list only ``problem`` and common options (an own option is documented
    in its class: ``TypeError`` otherwise).
    """
    head, entries, tail = _split_docstring(function.__doc__ or "")
    listed = [name for names, _ in entries for name in names]
    stray = [name for name in listed if name != "problem" and name not in common]
    if stray:
        raise TypeError(f"{owner}: the function's docstring lists {', '.join(stray)}; it may list only problem and "
                        "common options (a method's own options are documented in its options class)")
    own_entries = [] if own is None else [text for _, text in _split_docstring(own.__doc__ or "")[1]]
    by_name = [(names, text) for names, text in entries if names != ["problem"]]
    first = [text for names, text in by_name if "max_passes" in names]  # the budget first, as in the signature
    notes = [text for names, text in by_name if "max_passes" not in names]
    rest = [name for name in common if name not in listed]
    parts = [*(text for names, text in entries if names == ["problem"]), *first, *own_entries, *notes]
    if rest:
        parts.append(f"{', '.join(rest)}\n    As for every solver (:class:`~structopt.solvers.base.RunOptions`).")
    section = "Parameters\n----------\n" + "\n".join(parts) + "\n"
    return head + section + ("\n" + tail if tail else "")


#: the common options, declared by :class:`RunOptions`
COMMON: dict[str, Option] = declared_options("RunOptions", RunOptions, common=True)

__all__ = ["COMMON", "Option", "Options", "RunOptions", "check_values", "compose_docstring", "declared_options",
           "public_signature"]
