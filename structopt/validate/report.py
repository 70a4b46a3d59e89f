"""One report type for every check: rows with an ``ok`` verdict, lookup, failures and a text table.

:class:`CheckReport` (one structure instance, a row per oracle), :class:`SuiteReport` (the built-in
suite, a row per structure and oracle) and :class:`ModelCheckReport` (a row per model check) are
:class:`Report` subclasses that only say how a row is keyed and drawn.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np


def mark(flag: bool | None) -> str:
    """A comparison's cell: ``-`` (not compared), ``yes`` or ``NO``."""
    return "-" if flag is None else ("yes" if flag else "NO")


def format_rows(lines: Sequence[Sequence[str]]) -> list[str]:
    """Columns padded to their widest cell, two spaces apart; the last column (a detail) is not padded."""
    n = len(lines[0]) - 1
    widths = [max(len(line[j]) for line in lines) for j in range(n)]
    return ["  ".join(v.ljust(w) for v, w in zip(line[:n], widths)) + "  " + line[n] for line in lines]


class Report:
    """Rows and what is asked of them; subclasses define :meth:`key` and :meth:`table`."""

    rows: Any  # a list of rows, each with an ``ok`` attribute

    @staticmethod
    def key(row: Any) -> tuple[str, ...]:
        """The names that identify a row (the arguments of :meth:`row`)."""
        raise NotImplementedError

    @property
    def ok(self) -> bool:
        """True when no row failed (skipped comparisons count as passed)."""
        return all(row.ok for row in self.rows)

    def row(self, *key: str) -> Any:
        """The row named by ``key`` (KeyError when absent)."""
        for r in self.rows:
            if self.key(r) == key:
                return r
        raise KeyError(key[0] if len(key) == 1 else key)

    def failures(self) -> list[Any]:
        """Rows where a comparison failed."""
        return [r for r in self.rows if not r.ok]

    def table(self) -> str:
        """A plain-text table of the rows."""
        raise NotImplementedError

    def __str__(self) -> str:
        return self.table()


class _Agreement:
    """A row that compares an oracle with enumeration and with the LP description."""

    agrees_enumeration: bool | None
    agrees_lp: bool | None

    @property
    def ok(self) -> bool:
        """No comparison failed (skipped comparisons count as passed)."""
        return self.agrees_enumeration is not False and self.agrees_lp is not False


# --------------------------------------------------------------------------- one structure instance
@dataclass
class CheckRow(_Agreement):
    """Outcome of one oracle.

    Attributes
    ----------
    oracle : str
        Oracle name (``argmax``, ``topk``, ``marginals``, ...).
    agrees_enumeration : bool or None
        Whether the oracle agrees with brute force over all outputs (None: not checked).
    agrees_lp : bool or None
        Whether it agrees with the polytope's linear description (None: not checked).
    seconds : float
        Wall time of the oracle call itself (references excluded).
    detail : str
        Worst deviation found, or why the oracle was skipped.
    """

    oracle: str
    agrees_enumeration: bool | None
    agrees_lp: bool | None
    seconds: float
    detail: str = ""


@dataclass
class CheckReport(Report):
    """Rows of :func:`~structopt.validate.check_structure`, one per oracle."""

    structure: str
    n_outputs: int
    rows: list[CheckRow] = field(default_factory=list)

    @staticmethod
    def key(row: CheckRow) -> tuple[str, ...]:
        return (row.oracle,)

    def table(self) -> str:
        """A plain-text table of the rows."""
        header = ("oracle", "enumeration", "LP", "seconds", "detail")
        body = [(r.oracle, mark(r.agrees_enumeration), mark(r.agrees_lp), f"{r.seconds:.2e}", r.detail)
                for r in self.rows]
        title = f"{self.structure}: {self.n_outputs} outputs, {'OK' if self.ok else 'FAILED'}"
        return "\n".join([title, *format_rows([header, *body])])


# --------------------------------------------------------------------------- the built-in suite
@dataclass
class SuiteRow(_Agreement):
    """One oracle of one structure, aggregated over random instances.

    Attributes
    ----------
    structure, oracle : str
    n_instances : int
        Instances checked.
    agrees_enumeration, agrees_lp : bool or None
        False if any instance disagreed, None if no instance was compared, else True.
    total_seconds, median_seconds : float
        Wall time of the oracle calls (the median is robust to a first call that compiles).
    detail : str
        The first failure (with its instance), the reason for skipping, or a summary.
    """

    structure: str
    oracle: str
    n_instances: int
    agrees_enumeration: bool | None
    agrees_lp: bool | None
    total_seconds: float
    median_seconds: float
    detail: str = ""


def _combine(flags: list[bool | None]) -> bool | None:
    """False if any instance failed, None if none was compared, else True."""
    if any(f is False for f in flags):
        return False
    return True if any(f is True for f in flags) else None


@dataclass
class SuiteReport(Report):
    """Outcome of :func:`~structopt.validate.check_builtin_structures`: one :class:`CheckReport` per
    random instance, aggregated into one :class:`SuiteRow` per (structure, oracle).

    Attributes
    ----------
    checks : list of (structure, instance label, CheckReport)
    seconds : float
        Wall time of the whole suite (references, LPs and QPs included).
    """

    checks: list[tuple[str, str, CheckReport]] = field(default_factory=list)
    seconds: float = 0.0

    @staticmethod
    def key(row: SuiteRow) -> tuple[str, ...]:
        return (row.structure, row.oracle)

    @property
    def ok(self) -> bool:
        """True when no comparison failed on any instance."""
        return all(report.ok for _, _, report in self.checks)

    @property
    def rows(self) -> list[SuiteRow]:
        """One row per (structure, oracle), in the order checked."""
        groups: dict[tuple[str, str], list[tuple[str, CheckRow]]] = {}
        sizes: dict[str, list[int]] = {}
        for name, label, report in self.checks:
            sizes.setdefault(name, []).append(report.n_outputs)
            for row in report.rows:
                groups.setdefault((name, row.oracle), []).append((label, row))
        rows = []
        for (name, oracle), items in groups.items():
            checked = [r for _, r in items]
            times = np.array([r.seconds for r in checked])
            failed = [(label, r) for label, r in items if not r.ok]
            skipped = [r for r in checked if r.agrees_enumeration is None and r.agrees_lp is None]
            if failed:
                label, first = failed[0]
                detail = f"{len(failed)}/{len(items)} failed; first ({label}): {first.detail}"
            elif len(skipped) == len(items):
                detail = skipped[0].detail
            else:
                detail = (f"{len(items) - len(skipped)} compared" + (f", {len(skipped)} skipped" if skipped else "")
                          + f" ({min(sizes[name])}-{max(sizes[name])} outputs each)")
            rows.append(SuiteRow(name, oracle, len(items), _combine([r.agrees_enumeration for r in checked]),
                                 _combine([r.agrees_lp for r in checked]), float(times.sum()),
                                 float(np.median(times)), detail))
        return rows

    def table(self) -> str:
        """A plain-text table: structure, oracle, agreement with enumeration and LP, time."""
        header = ("structure", "oracle", "instances", "enumeration", "LP", "total s", "median s", "detail")
        body = [(r.structure, r.oracle, str(r.n_instances), mark(r.agrees_enumeration), mark(r.agrees_lp),
                 f"{r.total_seconds:.2e}", f"{r.median_seconds:.2e}", r.detail) for r in self.rows]
        n_fail = len(self.failures())
        verdict = "all OK" if self.ok else f"FAILED: {n_fail} row{'s' if n_fail != 1 else ''}"
        structures = list(dict.fromkeys(name for name, _, _ in self.checks))
        summary = (f"{len(self.checks)} instances of {len(structures)} structure"
                   f"{'s' if len(structures) != 1 else ''} checked in {self.seconds:.2f}s: {verdict}")
        return "\n".join([*format_rows([header, *body]), summary])


# --------------------------------------------------------------------------- models
@dataclass
class ModelCheckRow:
    """Outcome of one check of :func:`~structopt.validate.check_model` (worst case over the examples)."""

    check: str
    ok: bool
    detail: str = ""


@dataclass
class ModelCheckReport(Report):
    """Rows of :func:`~structopt.validate.check_model`, one per check."""

    model: str
    n_examples: int
    rows: list[ModelCheckRow] = field(default_factory=list)

    @staticmethod
    def key(row: ModelCheckRow) -> tuple[str, ...]:
        return (row.check,)

    def table(self) -> str:
        """A plain-text table of the rows."""
        title = f"{self.model}: {self.n_examples} examples, {'OK' if self.ok else 'FAILED'}"
        body = format_rows([(r.check, "yes" if r.ok else "NO ", r.detail) for r in self.rows]) if self.rows else []
        return "\n".join([title, *body])
