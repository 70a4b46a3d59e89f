"""structopt.options.number_argument: the one argparse parser of bounded numbers, which structopt train's
flags and the own-data kinds' flags both use, so a bad value gets the same message from either."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from structopt import cli
from structopt.options import number_argument
from structopt.tasks import own_common


@pytest.mark.parametrize(("kind", "bounds", "text", "expected"), [
    (int, dict(low=1), "1", 1), (int, dict(low=1), " 7 ", 7), (int, dict(), "-3", -3),
    (int, dict(low=0), "1" * 400, int("1" * 400)),  # no float overflow on a long integer
    (float, dict(low=0), "0", 0.0), (float, dict(low=0, low_open=True), "1e-300", 1e-300),
    (float, dict(low=0, high=1, low_open=True, high_open=True), "0.25", 0.25),
    (float, dict(low=0, high=1), "1", 1.0), (float, dict(high=2, high_open=True), "-5", -5.0),
])
def test_accepted_values(kind, bounds, text, expected):
    value = number_argument(kind, **bounds)(text)
    assert value == expected and type(value) is kind


@pytest.mark.parametrize(("kind", "bounds", "text", "what"), [
    (int, dict(low=1), "0", "an integer >= 1"), (int, dict(low=1), "1.5", "an integer >= 1"),
    (int, dict(low=1), "1e3", "an integer >= 1"), (int, dict(low=0), "two", "an integer >= 0"),
    (float, dict(low=0, low_open=True), "0", "a finite number > 0"),
    (float, dict(low=0, low_open=True), "inf", "a finite number > 0"),
    (float, dict(low=0), "nan", "a finite number >= 0"), (float, dict(low=0), "-1e-9", "a finite number >= 0"),
    (float, dict(low=0, high=1, low_open=True, high_open=True), "1", "a number in (0, 1)"),
    (float, dict(low=0, high=1, low_open=True, high_open=True), "0", "a number in (0, 1)"),
    (float, dict(low=0, high=1), "1.01", "a number in [0, 1]"),
    (float, dict(high=2, high_open=True), "2", "a finite number < 2"),
    (int, dict(low=1, high=3), "4", "an integer in [1, 3]"), (int, dict(low=0, what="a seed"), "-1", "a seed"),
])
def test_refused_values_name_the_interval(kind, bounds, text, what):
    with pytest.raises(argparse.ArgumentTypeError) as error:
        number_argument(kind, **bounds)(text)
    assert str(error.value) == f"must be {what}, got {text!r}"


def test_only_int_or_float():
    with pytest.raises(TypeError, match="int or float"):
        number_argument(complex, 0)


def test_own_data_flags_parse_as_before():
    assert own_common.positive_int("3") == 3 and own_common.non_negative_int("0") == 0
    assert own_common.fraction("0.5") == 0.5 and own_common.non_negative("2.5") == 2.5
    assert own_common.columns("1,-1, 3") == (1, -1, 3) and own_common.columns("") == ()
    for parse, text in ((own_common.positive_int, "0"), (own_common.fraction, "1"), (own_common.non_negative, "nan"),
                        (own_common.non_negative_int, "-1"), (own_common.column, "0"), (own_common.column, "x"),
                        (own_common.columns, "1,0")):
        with pytest.raises(argparse.ArgumentTypeError, match=f"got '{text.split(',')[-1]}'"):
            parse(text)


def _message(parser: argparse.ArgumentParser, argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit):
        parser.parse_args(argv)
    return capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize(("flag", "text"), [("--seed", "-1"), ("--n-train", "0"), ("--lam", "nan")])
def test_train_and_own_data_flags_say_the_same(capsys, flag, text):
    """``structopt train``'s flags and the own-data kinds' common flags refuse a value in the same words."""
    train = _message(cli.build_parser(), ["train", "ocr", flag, text], capsys)
    own = argparse.ArgumentParser(prog="own")
    for item in dataclasses.fields(own_common.CommonOptions):  # the flags every own-data kind declares
        if item.metadata["flag"] == flag:
            own.add_argument(flag, type=item.metadata["type"])
    own_line = _message(own, [flag, text], capsys)
    detail = f"argument {flag}: must be "
    assert train[train.index(detail):].split(" (see")[0] == own_line[own_line.index(detail):]
