"""Helpers the real tasks share: the cross-validation argument check and the cache writer."""

from __future__ import annotations

import numpy as np
import pytest

from structopt.errors import InvalidInputError
from structopt.tasks._data import check_cross_validation, read_cache, write_cache


@pytest.mark.parametrize("n, n_folds", [(5, 1), (2, 3), (0, 2)])
def test_cross_validation_that_cannot_run_is_refused_naming_the_unit(n, n_folds):
    with pytest.raises(InvalidInputError, match=f"n_folds={n_folds} and {n} images"):
        check_cross_validation(n, n_folds, "images")


@pytest.mark.parametrize("lams", [[], [0.1, 0.0], [np.nan], [-1.0], [np.inf]])
def test_bad_candidate_lams_are_refused(lams):
    with pytest.raises(InvalidInputError, match="candidate λ values"):
        check_cross_validation(9, 3, "pairs", lams)


def test_good_arguments_return_the_lams_as_floats():
    assert check_cross_validation(9, 3, "pairs", [1, np.float32(0.5)]) == [1.0, 0.5]
    assert check_cross_validation(3, 3, "images") == []


def test_cache_round_trip_and_an_unwritable_cache_only_warns(tmp_path):
    arrays = {"a": np.arange(4.0)}
    write_cache(tmp_path / "c.npz", {"kind": "test"}, arrays)
    np.testing.assert_array_equal(read_cache(tmp_path / "c.npz")["a"], arrays["a"])
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.warns(UserWarning, match="fitted again next time"):
        write_cache(blocker / "sub" / "c.npz", {"kind": "test"}, arrays, "stage cache",
                    "the stages will be fitted again next time")
