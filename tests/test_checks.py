"""perm_circuits.checks: the argument checks every package shares, on exact inputs and messages."""

from __future__ import annotations

import pytest

from perm_circuits.checks import check_fraction, check_int, check_number, check_positive_int, check_seed, check_str


def test_check_int_returns_the_value_within_bounds():
    assert check_int("n", 3, 1) == 3
    assert check_int("n", 0, 0, 5) == 0
    assert check_int("n", -7) == -7
    assert check_positive_int("n", 1) == 1
    assert check_seed(-1) == -1
    assert check_seed(2**64 - 1) == 2**64 - 1 and check_seed(-(2**63)) == -(2**63)  # torch's whole range


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda: check_int("n", 0, 1), ValueError, "n must be >= 1, got 0"),
        (lambda: check_int("n", 5, 0, 5), ValueError, r"n must be in \[0, 4\], got 5"),
        (lambda: check_int("n", 5, high=5), ValueError, "n must be < 5, got 5"),
        (lambda: check_int("n", True, 0), TypeError, "n must be an int, got bool True"),
        (lambda: check_int("n", 2.0, 0), TypeError, "n must be an int, got float 2.0"),
        (lambda: check_positive_int("steps", 0), ValueError, "steps must be >= 1, got 0"),
        (lambda: check_seed("0"), TypeError, "seed must be an int, got str '0'"),
        (lambda: check_seed(2**64), ValueError, r"seed must be in \[-2\*\*63, 2\*\*64\) \(a torch generator seed\), got 18446744073709551616"),
        (lambda: check_seed(-(2**63) - 1, "test_seed"), ValueError, r"test_seed must be in \[-2\*\*63, 2\*\*64\)"),
        (lambda: check_fraction(0.0), ValueError, r"threshold must be a number in \(0, 1\], got 0.0"),
        (lambda: check_fraction(True, "share"), TypeError, r"share must be a number, got bool True"),
        (lambda: check_number("lr", True), TypeError, "lr must be a finite number, got bool True"),
        (lambda: check_number("lr", "0.1", 0), TypeError, "lr must be a finite number >= 0, got str '0.1'"),
        (lambda: check_number("lr", 0.0, 0, strict=True), ValueError, "lr must be a finite number > 0, got 0.0"),
        (lambda: check_number("tau", -0.5, 0, finite=False), ValueError, "tau must be a number >= 0, got -0.5"),
        (lambda: check_number("x", float("inf")), ValueError, "x must be a finite number, got inf"),
        (lambda: check_number("x", float("nan"), 0, finite=False), ValueError, "x must be a number >= 0, got nan"),
        (lambda: check_str("title", 3), TypeError, "title must be a str, got int 3"),
    ],
)
def test_checks_name_the_bad_value(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_check_fraction_accepts_the_closed_end():
    assert check_fraction(1) == 1.0 and isinstance(check_fraction(1), float)
    assert check_fraction(0.5) == 0.5
    assert check_str("title", "x") == "x"


def test_check_number_returns_a_float_within_bounds():
    assert check_number("x", 3) == 3.0 and isinstance(check_number("x", 3), float)
    assert check_number("x", 0, 0) == 0.0
    assert check_number("x", -2.5) == -2.5
    assert check_number("x", float("inf"), 0, strict=True, finite=False) == float("inf")
    nan = check_number("x", float("nan"), finite=False)
    assert nan != nan
