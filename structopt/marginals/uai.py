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
    """Whitespace tokens of a file with a cursor and errors that say what was expected."""

    def __init__(self, text: str, path: str) -> None:
        self.items = text.split()
        self.pos = 0
        self.path = path

    def next(self, what: str) -> str:
        if self.pos >= len(self.items):
            raise InvalidInputError(f"{self.path}: file ends early, expected {what}")
        token = self.items[self.pos]
        self.pos += 1
        return token

    def int(self, what: str, low: int = 0) -> int:
        token = self.next(what)
        try:
            value = int(token)
        except ValueError:
            raise InvalidInputError(f"{self.path}: expected {what} (an integer), got {token!r}") from None
        if value < low:
            raise InvalidInputError(f"{self.path}: {what} must be >= {low}, got {value}")
        return value

    def floats(self, count: int, what: str) -> np.ndarray:
        if self.pos + count > len(self.items):
            raise InvalidInputError(f"{self.path}: file ends early, expected {count} entries of {what}")
        chunk = self.items[self.pos:self.pos + count]
        self.pos += count
        try:
            return np.array(chunk, dtype=np.float64)
        except ValueError:
            bad = next(t for t in chunk if not _is_float(t))
            raise InvalidInputError(f"{self.path}: {what} has a non-numeric entry {bad!r}") from None


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
        The file is malformed (wrong header, counts that do not match, negative or non-numeric
        entries, variables out of range, trailing tokens).
    NotSupportedError
        A factor has more than two variables.
    """
    path = str(path)
    tokens = _Tokens(_read_text(path), path)
    kind = tokens.next("the header MARKOV or BAYES")
    if kind.upper() not in ("MARKOV", "BAYES"):
        raise InvalidInputError(f"{path}: header must be MARKOV or BAYES, got {kind!r}")
    n = tokens.int("the number of variables", low=1)
    cards = [tokens.int(f"the cardinality of variable {i}", low=1) for i in range(n)]
    n_factors = tokens.int("the number of factors")
    scopes: list[list[int]] = []
    for f in range(n_factors):
        size = tokens.int(f"the scope size of factor {f}")
        scope = [tokens.int(f"variable {k} of factor {f}'s scope") for k in range(size)]
        for v in scope:
            if v >= n:
                raise InvalidInputError(f"{path}: factor {f} names variable {v}, but there are {n} variables")
        if len(set(scope)) != len(scope):
            raise InvalidInputError(f"{path}: factor {f} repeats a variable in its scope {scope}")
        if size > 2:
            raise NotSupportedError(f"{path}: factor {f} has {size} variables {scope}; only pairwise models "
                                    "(factors over at most two variables) are supported")
        scopes.append(scope)
    unary = [np.zeros(c) for c in cards]
    pairs: dict[tuple[int, int], np.ndarray] = {}
    constant = 0.0
    with np.errstate(divide="ignore"):
        for f, scope in enumerate(scopes):
            expected = math.prod(cards[v] for v in scope)
            count = tokens.int(f"the number of entries of factor {f}")
            if count != expected:
                raise InvalidInputError(f"{path}: factor {f} over {scope} has {count} entries, expected {expected}")
            values = tokens.floats(count, f"factor {f}")
            if not np.isfinite(values).all() or (values < 0).any():
                raise InvalidInputError(f"{path}: factor {f} has a negative or non-finite entry")
            logs = np.log(values)
            if len(scope) == 0:
                constant += float(logs[0])
            elif len(scope) == 1:
                unary[scope[0]] = unary[scope[0]] + logs
            else:
                i, j = scope
                table = logs.reshape(cards[i], cards[j])
                if i > j:
                    i, j, table = j, i, table.T
                pairs[(i, j)] = pairs[(i, j)] + table if (i, j) in pairs else table
    if tokens.pos != len(tokens.items):
        raise InvalidInputError(f"{path}: {len(tokens.items) - tokens.pos} unexpected tokens after the last factor")
    keys = sorted(pairs)
    return PairwiseMRF.from_potentials(unary, keys, [pairs[k] for k in keys], constant)


def read_pr(path: str | Path) -> float:
    """Read a UAI ``.PR`` file and return the **natural** log of Z (the file holds log10 Z)."""
    path = str(path)
    tokens = _Tokens(_read_text(path), path)
    if tokens.next("the header PR") != "PR":
        raise InvalidInputError(f"{path}: header must be PR")
    value = tokens.floats(1, "log10 Z")[0]
    return float(value * math.log(10.0))


def read_mar(path: str | Path) -> list[np.ndarray]:
    """Read a UAI ``.MAR`` file: one array of single-node marginals per variable."""
    path = str(path)
    tokens = _Tokens(_read_text(path), path)
    if tokens.next("the header MAR") != "MAR":
        raise InvalidInputError(f"{path}: header must be MAR")
    n = tokens.int("the number of variables", low=1)
    out = []
    for i in range(n):
        card = tokens.int(f"the cardinality of variable {i}", low=1)
        out.append(tokens.floats(card, f"the marginal of variable {i}"))
    return out


def write_mar(path: str | Path, marginals: list[np.ndarray]) -> None:
    """Write single-node marginals in the UAI ``.MAR`` layout (one line)."""
    parts = ["MAR", str(len(marginals))]
    for m in marginals:
        parts.append(str(len(m)))
        parts.extend(f"{float(p):.10g}" for p in m)
    Path(path).write_text(parts[0] + "\n" + " ".join(parts[1:]) + "\n")
