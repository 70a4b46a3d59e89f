"""The real datasets the tests read, beside the repository in ``../shared/data`` (never committed)."""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"


def needs_data(corpus: str) -> pytest.MarkDecorator:
    """Skip, saying why, when ``../shared/data/<corpus>`` is absent (e.g. a clone elsewhere)."""
    return pytest.mark.skipif(not (SHARED_DATA / corpus).is_dir(), reason=f"{corpus} data not in {SHARED_DATA}")
