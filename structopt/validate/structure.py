"""Check a structure's oracles against enumeration and against its LP description.

:func:`check_structure` runs every check of :data:`~structopt.validate.oracles.ORACLE_CHECKS` on one
small instance: each compares an oracle with brute force over :meth:`Structure.enumerate` and with
the linear description of the marginal polytope (:meth:`Structure.polytope`, solved by
:meth:`Structure.lp_relaxation`). It only uses the :class:`~structopt.structures.base.Structure`
interface, so it serves built-in and user-declared structures alike.
"""

from __future__ import annotations

import numpy as np

from structopt.errors import InvalidInputError, NotSupportedError
from structopt.structures.base import Potentials, Structure
from structopt.validate.oracles import ORACLE_CHECKS, Case, OracleCheck, Reference
from structopt.validate.report import CheckReport, CheckRow


def check_structure(structure: Structure, theta: Potentials, k: int = 5, rtol: float = 1e-7,
                    qp_atol: float = 1e-5, max_outputs: int = 20_000,
                    random_state: int | np.random.Generator | None = 0) -> CheckReport:
    """Compare every oracle of ``structure`` on instance ``theta`` with enumeration and the LP.

    One row per entry of :data:`~structopt.validate.oracles.ORACLE_CHECKS`, each with the oracle's
    own wall time: ``lp_relaxation``, ``argmax``, ``topk``, ``marginals``, ``max_marginals``,
    ``project`` and ``prox_entropy`` (each check's docstring says what it compares with enumeration
    and with the LP description).

    Potentials may be compact (a plain (L, R) matching array, a chain's shared transitions) and,
    where the structure accepts them, -inf (forbidden entries): outputs of score -inf do not count
    (top-K lists the finite ones). When every output has score -inf, each oracle on ``theta``
    (``lp_relaxation``, ``argmax``, ``topk``, ``marginals``, ``max_marginals``) must raise
    :class:`InvalidInputError`; returning anything is a failure.

    Oracles raising :class:`NotSupportedError` are reported as skipped ("not supported"); any
    other exception counts as a failure and is reported in the detail.

    Parameters
    ----------
    structure : Structure
    theta : Potentials
        A small instance (at most ``max_outputs`` outputs).
    k : int
        K for the top-K oracle.
    rtol : float
        Relative tolerance on scores and probabilities (absolute tolerance ``rtol * scale`` with
        ``scale = 1 + max |score|``).
    qp_atol : float
        Absolute tolerance for solutions of the LP/QP solvers (interior-point accuracy).
    random_state : int, Generator or None
        Seed for the random point of ``project`` and the instance of ``prox_entropy``.

    Returns
    -------
    CheckReport
    """
    rng = random_state if isinstance(random_state, np.random.Generator) else np.random.default_rng(random_state)
    case = Case(structure, theta, Reference(structure, theta, max_outputs), k, rtol, qp_atol, rng)
    report = CheckReport(getattr(structure, "name", type(structure).__name__), len(case.ref.outputs))
    report.rows = [_run(check, case) for check in ORACLE_CHECKS.values()]
    return report


def _run(check: OracleCheck, case: Case) -> CheckRow:
    """One row: the check's outcome, a skip (not supported), a required refusal, or a failure."""
    must_refuse = case.ref.infeasible and check.on_theta
    try:
        enum_ok, lp_ok, seconds, detail = check.run(case)
    except NotSupportedError as exc:
        return CheckRow(check.oracle, None, None, 0.0, f"not supported: {exc}")
    except InvalidInputError as exc:
        if must_refuse:
            return CheckRow(check.oracle, True, None, 0.0, f"refused (every output forbidden): {exc}")
        return CheckRow(check.oracle, False, False, 0.0, f"raised {type(exc).__name__}: {exc}")
    except Exception as exc:  # a crash is a failed check, reported with its message
        return CheckRow(check.oracle, False, False, 0.0, f"raised {type(exc).__name__}: {exc}")
    if must_refuse:
        return CheckRow(check.oracle, False, False, seconds, "returned a result although every output has score "
                                                             "-inf (must raise)")
    return CheckRow(check.oracle, enum_ok, lp_ok, seconds, detail)
