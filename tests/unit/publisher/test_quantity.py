"""Quantities: what any text costs is bounded, and the value is the one the API server stores.

`parse` reads values from slices the server returns and from claims' consumedCapacity; the
exponent of `1e99999999` used to be computed as 10**99999999 (minutes of CPU, hundreds of MB).
The server's own rules, which tests/controlplane/test_quantity_server.py checks against the
real kube-apiserver: the exponent must fit in 64 bits and is truncated to 32; values round up to
a multiple of 1n; values with a binary suffix are capped at 2**63-1.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from fractions import Fraction

import pytest
from topodra.common.publisher.quantity import INT64_MAX, QuantityError, parse

HOSTILE = [
    "1e99999999",
    "1e-99999999",
    "-1e2147483647",
    "0." + "0" * 100000 + "1",
    "1" * 5000,
    "1e" + "9" * 5000,
]


def test_hostile_texts_finish() -> None:
    """In a child, so a regression is a timeout here rather than a hung run: the old parser
    never returned from the first of these (10**99999999)."""
    code = textwrap.dedent(
        """
        import json, sys
        from topodra.common.publisher.quantity import QuantityError, parse
        for text in json.load(sys.stdin):
            try:
                print(str(parse(text))[:40])
            except QuantityError as e:
                print("QuantityError: " + str(e)[-40:])
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], input=json.dumps(HOSTILE), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "QuantityError: '1e99999999' is larger than 10^100"
    assert lines[1] == "1/1000000000"  # rounded up to 1n, as the server stores it
    assert lines[2].startswith("QuantityError:") and lines[2].endswith("larger than 10^100")
    assert lines[3] == "1/1000000000"
    assert lines[4].startswith("QuantityError:") and lines[4].endswith("larger than 10^100")
    assert lines[5].startswith("QuantityError:") and lines[5].endswith("does not fit in 64 bits")


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", Fraction(1)),
        ("500m", Fraction(1, 2)),
        ("1.5Gi", Fraction(1536 * 2**20)),
        ("1e3", Fraction(1000)),
        ("1E+2", Fraction(100)),
        (".5", Fraction(1, 2)),
        ("0.1234567891", Fraction(123456790, 10**9)),  # rounded up to 1n
        ("-1.5n", Fraction(-2, 10**9)),  # away from zero
        ("1e-99999999", Fraction(1, 10**9)),
        ("1e4294967296", Fraction(1)),  # the server keeps the exponent's low 32 bits
        ("1e4294967299", Fraction(1000)),
        ("9Ei", Fraction(INT64_MAX)),  # binary suffixes are capped
        ("0.0000000001Ki", Fraction(103, 10**9)),  # 102.4n, rounded up after the suffix
        ("1." + "0" * 70 + "1", Fraction(10**9 + 1, 10**9)),
        ("0", Fraction(0)),
        ("-0.000", Fraction(0)),
    ],
)
def test_values_are_what_the_server_stores(text: str, value: Fraction) -> None:
    assert parse(text) == value


@pytest.mark.parametrize(
    "text", ["", " 1", "1 ", "1x", "e3", "1e", "1e99999999999999999999", "1e" + "1" * 30, "1" * 101 + "Ki"]
)
def test_refused(text: str) -> None:
    with pytest.raises(QuantityError) as e:
        parse(text)
    assert len(str(e.value)) < 200
