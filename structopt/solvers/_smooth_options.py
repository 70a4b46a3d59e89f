"""Option declarations shared by the smoothed-oracle solvers (``sgd``, ``svrg``, ``casimir_svrg``,
``prox_linear``, ``sgd_nonconvex``): one ``Annotated[type, check]`` per kind of option, so that the
same option is declared (and checked, and listed in the README's table) the same way everywhere.
"""

from __future__ import annotations

from typing import Annotated

from structopt.solvers.base import one_of, optional, positive, positive_int

#: a number > 0, or None for the solver's default (smoothing mu, steps, L, kappa, ...)
OptionalPositive = Annotated[float | None, optional(positive)]
#: the smoothing kind: l2 over the top-K outputs, or entropy (marginals)
Kind = Annotated[str, one_of("topk", "entropy")]
#: K of top-K smoothing
TopK = Annotated[int, positive_int]
#: an on/off option (the step guard, the SGD start)
Flag = Annotated[bool, one_of(True, False)]
#: an SVRG epoch's output: the mean of its iterates or the last one
Iterate = Annotated[str, one_of("average", "last")]

__all__ = ["Flag", "Iterate", "Kind", "OptionalPositive", "TopK"]
