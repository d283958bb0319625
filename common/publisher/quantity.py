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


class QuantityError(ValueError):
    pass


def parse(text: str) -> Fraction:
    """The exact value of a quantity string; QuantityError when the API server would reject it."""
    match = _NUMBER.fullmatch(text.strip()) if text == text.strip() else None
    if match is None:
        raise QuantityError(f"{text!r} is not a quantity (expected e.g. '8', '500m', '80Gi', '1e3')")
    sign, number, suffix = match.groups()
    value = Fraction(number)
    if suffix in _BINARY:
        value *= 1024 ** _BINARY[suffix]
    elif suffix in _DECIMAL:
        value *= _power_of_ten(_DECIMAL[suffix])
    elif (exp := _EXPONENT.fullmatch(suffix)) is not None:
        value *= _power_of_ten(int(exp.group(1)))
    else:
        raise QuantityError(f"{text!r} has an unknown suffix {suffix!r}")
    return -value if sign == "-" else value


def _power_of_ten(exponent: int) -> Fraction:
    return Fraction(10**exponent) if exponent >= 0 else Fraction(1, 10**-exponent)


def is_quantity(text: object) -> bool:
    if not isinstance(text, str):
        return False
    try:
        parse(text)
    except QuantityError:
        return False
    return True
