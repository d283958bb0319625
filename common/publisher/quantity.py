"""Kubernetes resource quantities as exact numbers.

The API server re-serialises quantities in its canonical form ("1000m" comes back as "1",
"1.5Gi" as "1536Mi"), so comparing stored and desired slices as text would rewrite them
forever. Comparing exact values avoids that without reimplementing the canonical printer.
"""

from __future__ import annotations

import re
from fractions import Fraction

_NUMBER = re.compile(r"([+-]?)(\d+\.?\d*|\.\d+)(.*)")
_EXPONENT = re.compile(r"[eE]([+-]?\d+)")
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}

INT64_MAX = 2**63 - 1
_INT32 = 2**32
# Larger decimal values are refused rather than computed: 10**exponent for the exponents the
# API server accepts (up to 2**31) would take minutes and gigabytes, and no capacity, count or
# consumed amount comes anywhere near 10**100.
MAX_ORDER = 100
_MAX_BINARY_DIGITS = 100  # significant digits before a binary suffix (1.5Gi has 2)
_NANO = 10**9


class QuantityError(ValueError):
    pass


def parse(text: str) -> Fraction:
    """The value of a quantity string as the API server stores it; QuantityError when it would
    reject the text, or when the value is past 10**MAX_ORDER.

    Like the API server: the exponent of `1e3` must fit in 64 bits and is then truncated to
    32 (so 1e4294967296 is 1, as the server makes it); non-zero values round up (away from
    zero) to a multiple of 1n; values with a binary suffix are capped at 2**63-1. Nothing here
    costs more than the text's length: the exponent is applied to the digits, never computed.
    """
    match = _NUMBER.fullmatch(text.strip()) if text == text.strip() else None
    if match is None:
        raise QuantityError(f"{_shown(text)} is not a quantity (expected e.g. '8', '500m', '80Gi', '1e3')")
    sign, number, suffix = match.groups()
    whole, _, fraction = number.partition(".")
    if suffix in _BINARY:
        value = _binary(text, whole, fraction, _BINARY[suffix])
    else:
        if suffix in _DECIMAL:
            exponent = _DECIMAL[suffix]
        elif (exp := _EXPONENT.fullmatch(suffix)) is not None:
            exponent = _exponent(text, exp.group(1))
        else:
            raise QuantityError(f"{_shown(text)} has an unknown suffix {_shown(suffix)}")
        value = _decimal(text, whole + fraction, exponent - len(fraction))
    return -value if sign == "-" else value


def _shown(text: str) -> str:
    return repr(text) if len(text) <= 64 else f"{text[:64]!r}... ({len(text)} characters)"


def _exponent(text: str, digits: str) -> int:
    """The server parses the exponent as an int64 and keeps its low 32 bits (signed)."""
    body = digits.lstrip("+-").lstrip("0")
    if len(body) > 19 or not -(2**63) <= (e := int(digits)) < 2**63:
        raise QuantityError(f"{_shown(text)}: the exponent does not fit in 64 bits")
    return (e + 2**31) % _INT32 - 2**31


def _significant(digits: str, exponent: int) -> tuple[str, int]:
    """digits * 10**exponent as (digits without leading or trailing zeros, exponent)."""
    sig = digits.lstrip("0")
    bare = sig.rstrip("0")
    return bare, exponent + len(sig) - len(bare)


def _decimal(text: str, digits: str, exponent: int) -> Fraction:
    sig, exponent = _significant(digits, exponent)
    if not sig:
        return Fraction(0)
    order = len(sig) + exponent  # 10**(order-1) <= value < 10**order
    if order > MAX_ORDER:
        raise QuantityError(f"{_shown(text)} is larger than 10^{MAX_ORDER}")
    if exponent >= -9:
        return Fraction(int(sig) * 10**exponent) if exponent >= 0 else Fraction(int(sig), 10**-exponent)
    # digits below 1n: the server rounds up to the next 1n (sig ends in a non-zero digit, so
    # whatever is cut is non-zero)
    keep = len(sig) + exponent + 9
    return Fraction((int(sig[:keep]) if keep > 0 else 0) + 1, _NANO)


def _binary(text: str, whole: str, fraction: str, power: int) -> Fraction:
    sig, exponent = _significant(whole + fraction, -len(fraction))
    if len(sig) > _MAX_BINARY_DIGITS:
        raise QuantityError(f"{_shown(text)} has more than {_MAX_BINARY_DIGITS} significant digits")
    if not sig:
        return Fraction(0)
    scaled = Fraction(int(sig)) * Fraction(10) ** exponent * 1024**power
    nanos = -((-scaled.numerator * _NANO) // scaled.denominator)  # rounded up to 1n
    return min(Fraction(nanos, _NANO), Fraction(INT64_MAX))


def is_quantity(text: object) -> bool:
    if not isinstance(text, str):
        return False
    try:
        parse(text)
    except QuantityError:
        return False
    return True
