"""Reading and writing the UAI inference formats: MARKOV/BAYES models, ``.PR`` and ``.MAR`` files.

Format (UAI 2008-2014 competitions): a header ``MARKOV`` (or ``BAYES``), the number of variables,
their cardinalities, the number of factors, one scope per factor (its size, then variable indices),
then one table per factor (its number of entries, then the entries, the last scope variable
changing fastest). Entries are non-negative factor values, not logs.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from structopt.errors import InvalidInputError, NotSupportedError
from structopt.marginals.mrf import PairwiseMRF


class _Tokens:
    """Whitespace tokens of a file with a cursor and errors that name the file, the line and what was expected."""

    def __init__(self, text: str, path: str) -> None:
        self.text = text
        self.items = text.split()
        self.pos = 0
        self.path = path

    def line(self, index: int) -> int:
        """1-based line of token ``index`` (past the end: the last token's line); computed only for errors."""
        index = min(index, len(self.items) - 1)
        seen = 0
        lines = self.text.splitlines() or [""]
        for number, line in enumerate(lines, 1):
            seen += len(line.split())
            if seen > index:
                return number
        return 1  # no token at all

    def error(self, message: str, index: int | None = None) -> InvalidInputError:
        """An error naming the file and the line of token ``index`` (default: the last token read)."""
        index = self.pos - 1 if index is None else index
        return InvalidInputError(f"{self.path}, line {self.line(max(index, 0))}: {message}")

    def next(self, what: str) -> str:
        if self.pos >= len(self.items):
            raise self.error(f"file ends early, expected {what}", len(self.items))
        token = self.items[self.pos]
        self.pos += 1
        return token

    def int(self, what: str, low: int = 0) -> int:
        token = self.next(what)
        try:
            value = int(token)
        except ValueError:
            raise self.error(f"expected {what} (an integer), got {token!r}") from None
        if value < low:
            raise self.error(f"{what} must be >= {low}, got {value}")
        return value

    def floats(self, count: int, what: str) -> np.ndarray:
        if self.pos + count > len(self.items):
            raise self.error(f"file ends early, expected {count} entries of {what} "
                             f"({len(self.items) - self.pos} left)", len(self.items))
        start = self.pos
        chunk = self.items[start:start + count]
        self.pos += count
        try:
            return np.array(chunk, dtype=np.float64)
        except ValueError:
            bad = next(k for k, t in enumerate(chunk) if not _is_float(t))
            raise self.error(f"{what} has a non-numeric entry {chunk[bad]!r}", start + bad) from None


def _is_float(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def _read_text(path: str | Path) -> str:
    try:
        return Path(path).read_text()
    except FileNotFoundError:
        raise InvalidInputError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise InvalidInputError(f"{path}: cannot read ({error})") from None


def _factor_logs(values: np.ndarray, tokens: _Tokens, start: int, f: int, scope: list[int]) -> np.ndarray:
    """Logs of factor ``f``'s table, refused (naming the entry's line) unless finite, >= 0 and not all zero."""
    low, high = (float(values.min()), float(values.max())) if values.size else (0.0, 0.0)
    if math.isfinite(low + high) and low > 0:  # the common case, in two reductions
        return np.log(values)
    bad = np.flatnonzero(~np.isfinite(values) | (values < 0))
    if bad.size:
        k = int(bad[0])
        raise tokens.error(f"factor {f} over {scope} has a negative or non-finite entry {values[k]:g} "
                           f"(entry {k}); factor values must be finite and >= 0", start + k)
    if not (values > 0).any():
        # every assignment would have probability zero: Z = 0, log Z = -inf, marginals 0/0
        raise tokens.error(f"factor {f} over {scope} is zero everywhere: the model has no assignment of "
                           f"positive probability", start)
    with np.errstate(divide="ignore"):
        return np.log(values)


def read_uai(path: str | Path) -> PairwiseMRF:
    """Read a UAI ``MARKOV`` (or ``BAYES``) model with factors over at most two variables.

    Parameters
    ----------
    path : str or Path
        The ``.uai`` file.

    Returns
    -------
    PairwiseMRF
        Log-potentials are the logs of the factor entries (zero entries become -inf); factors on
        the same scope are multiplied; empty-scope factors go into ``constant``.

    Raises
    ------
    InvalidInputError
        The file is malformed; the message names the file and the line: wrong header, counts
        that do not match the header (cardinalities, scopes, table sizes), variables out of range,
        non-numeric, negative or non-finite entries, a factor whose entries are all zero, factors
        on one scope (or an edge with its nodes' factors) whose product is zero everywhere, trailing tokens.
    NotSupportedError
        A factor has more than two variables.
    """
    path = str(path)
    tokens = _Tokens(_read_text(path), path)
    kind = tokens.next("the header MARKOV or BAYES")
    if kind.upper() not in ("MARKOV", "BAYES"):
        raise tokens.error(f"header must be MARKOV or BAYES, got {kind!r}")
    n = tokens.int("the number of variables", low=1)
    cards = [tokens.int(f"the cardinality of variable {i}", low=1) for i in range(n)]
    n_factors = tokens.int("the number of factors")
    scopes: list[list[int]] = []
    for f in range(n_factors):
        size = tokens.int(f"the scope size of factor {f}")
        scope = [tokens.int(f"variable {k} of factor {f}'s scope") for k in range(size)]
        for v in scope:
            if v >= n:
                raise tokens.error(f"factor {f} names variable {v}, but there are {n} variables (0..{n - 1})")
        if len(set(scope)) != len(scope):
            raise tokens.error(f"factor {f} repeats a variable in its scope {scope}")
        if size > 2:
            raise NotSupportedError(f"{path}, line {tokens.line(tokens.pos - 1)}: factor {f} has {size} variables "
                                    f"{scope}; only pairwise models (factors over at most two variables) are supported")
        scopes.append(scope)
    unary = [np.zeros(c) for c in cards]
    pairs: dict[tuple[int, int], np.ndarray] = {}
    owners: dict[tuple[int, ...], list[int]] = {}  # scope -> its factors, to name them if their product is zero
    constant = 0.0
    has_zero = False
    for f, scope in enumerate(scopes):
        expected = math.prod(cards[v] for v in scope)
        count = tokens.int(f"the number of entries of factor {f}")
        if count != expected:
            sizes = " x ".join(str(cards[v]) for v in scope) or "an empty scope"
            raise tokens.error(f"factor {f} over {scope} has {count} entries, expected {expected} ({sizes})")
        start = tokens.pos
        logs = _factor_logs(tokens.floats(count, f"factor {f}"), tokens, start, f, scope)
        has_zero = has_zero or bool(np.isneginf(logs).any())
        if len(scope) == 0:
            constant += float(logs[0])
        elif len(scope) == 1:
            unary[scope[0]] = unary[scope[0]] + logs
            owners.setdefault((scope[0],), []).append(f)
        else:
            i, j = scope
            table = logs.reshape(cards[i], cards[j])
            if i > j:
                i, j, table = j, i, table.T
            pairs[(i, j)] = pairs[(i, j)] + table if (i, j) in pairs else table
            owners.setdefault((i, j), []).append(f)
    if tokens.pos != len(tokens.items):
        raise tokens.error(f"{len(tokens.items) - tokens.pos} unexpected tokens after the last factor "
                           f"(the header declares {n_factors} factors)", tokens.pos)
    if has_zero:  # without a zero entry no product of factors can vanish
        _check_feasible(path, unary, pairs, owners)
    keys = sorted(pairs)
    return PairwiseMRF.from_potentials(unary, keys, [pairs[k] for k in keys], constant)


def _check_feasible(path: str, unary: list[np.ndarray], pairs: dict[tuple[int, int], np.ndarray],
                    owners: dict[tuple[int, ...], list[int]]) -> None:
    """Refuse products of factors that are zero everywhere on a node, or on an edge with its two nodes.

    Each factor has a positive entry, but factors on one scope (or an edge's table against its
    nodes' tables) can still have disjoint supports: then Z = 0 too. A whole-model check would be a
    constraint satisfaction problem; these local ones cost one pass over the tables.
    """
    for i, u in enumerate(unary):
        if np.isneginf(u).all():
            raise InvalidInputError(f"{path}: the factors {owners[(i,)]} on variable {i} multiply to zero for "
                                    f"every value: the model has no assignment of positive probability")
    for (i, j), table in pairs.items():
        if np.isneginf(unary[i][:, None] + table + unary[j][None, :]).all():
            factors = sorted(owners[(i, j)] + owners.get((i,), []) + owners.get((j,), []))
            raise InvalidInputError(f"{path}: the factors {factors} on variables ({i}, {j}) multiply to zero for "
                                    f"every pair of values: the model has no assignment of positive probability")


def read_pr(path: str | Path) -> float:
    """Read a UAI ``.PR`` file and return the **natural** log of Z (the file holds log10 Z).

    Raises
    ------
    InvalidInputError
        Naming the file and line: a wrong header, a missing, non-numeric or non-finite value,
        trailing tokens.
    """
    path = str(path)
    tokens = _Tokens(_read_text(path), path)
    header = tokens.next("the header PR")
    if header != "PR":
        raise tokens.error(f"header must be PR, got {header!r}")
    value = tokens.floats(1, "log10 Z")[0]
    if not np.isfinite(value):
        raise tokens.error(f"log10 Z must be finite, got {value}")
    if tokens.pos != len(tokens.items):
        raise tokens.error(f"{len(tokens.items) - tokens.pos} unexpected tokens after log10 Z", tokens.pos)
    return float(value * math.log(10.0))


#: how far from 1 a marginal read from a ``.MAR`` file may sum (files print about 6 significant digits)
MAR_SUM_TOLERANCE = 1e-3


def read_mar(path: str | Path) -> list[np.ndarray]:
    """Read a UAI ``.MAR`` file: one array of single-node marginals per variable.

    Raises
    ------
    InvalidInputError
        Naming the file and line: a wrong header, counts that do not match the entries, a
        negative or non-finite entry, a marginal that does not sum to 1 (within
        :data:`MAR_SUM_TOLERANCE`), trailing tokens.
    """
    path = str(path)
    tokens = _Tokens(_read_text(path), path)
    header = tokens.next("the header MAR")
    if header != "MAR":
        raise tokens.error(f"header must be MAR, got {header!r}")
    n = tokens.int("the number of variables", low=1)
    out = []
    for i in range(n):
        card = tokens.int(f"the cardinality of variable {i}", low=1)
        start = tokens.pos
        marginal = tokens.floats(card, f"the marginal of variable {i}")
        bad = np.flatnonzero(~np.isfinite(marginal) | (marginal < 0))
        if bad.size:
            raise tokens.error(f"the marginal of variable {i} has an entry {marginal[bad[0]]:g}; "
                               "marginals are finite and >= 0", start + int(bad[0]))
        if abs(marginal.sum() - 1.0) > MAR_SUM_TOLERANCE:
            raise tokens.error(f"the marginal of variable {i} sums to {marginal.sum():.6g}, not 1", start)
        out.append(marginal)
    if tokens.pos != len(tokens.items):
        raise tokens.error(f"{len(tokens.items) - tokens.pos} unexpected tokens after the {n} declared variables",
                           tokens.pos)
    return out


#: negative marginal entries down to this are rounding noise (written as 0), not errors
_ROUNDING = 1e-9


def write_mar(path: str | Path, marginals: list[np.ndarray]) -> None:
    """Write single-node marginals in the UAI ``.MAR`` layout (one line).

    Raises
    ------
    InvalidInputError
        A marginal is empty or has a NaN, infinite or negative entry (e.g. from a model whose
        partition function is zero); nothing is written. Entries above ``-1e-9`` (rounding noise)
        are written as 0.
    """
    arrays = [np.asarray(m, dtype=np.float64) for m in marginals]
    for i, m in enumerate(arrays):
        if m.ndim != 1 or m.size == 0 or not np.isfinite(m).all() or (m < -_ROUNDING).any():
            raise InvalidInputError(f"cannot write {path}: the marginal of variable {i} is not a non-empty vector "
                                    f"of finite, non-negative numbers ({np.array2string(m, threshold=6)})")
    parts = ["MAR", str(len(arrays))]
    for m in arrays:
        m = np.maximum(m, 0.0)  # rounding noise of iterative methods; read_mar refuses negative entries
        parts.append(str(len(m)))
        parts.extend(f"{float(p):.10g}" for p in m)
    Path(path).write_text(parts[0] + "\n" + " ".join(parts[1:]) + "\n")
