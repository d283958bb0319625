"""Strict reading of a JSON object with errors that name the field.

A spec is written by hand, so a typo must fail loudly with the dotted path of the field
(`pci.roots[2].ports[0].device`), never be ignored: an ignored key is a machine that silently
differs from the one its author declared.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NoReturn


class SpecError(ValueError):
    """A spec that does not describe a machine; the message names the field and the rule."""


class Obj:
    """One JSON object being read; `done()` rejects every key that was not asked for."""

    def __init__(self, data: object, path: str) -> None:
        if not isinstance(data, dict):
            fail(path, f"must be an object, not {type_name(data)}")
        self._data: dict[str, object] = data
        self._seen: set[str] = set()
        self.path = path

    def has(self, key: str) -> bool:
        return key in self._data

    def keys(self) -> Iterator[str]:
        return iter(self._data)

    def at(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def raw(self, key: str) -> object:
        self._seen.add(key)
        return self._data.get(key)

    def child(self, key: str) -> Obj | None:
        value = self.raw(key)
        return None if value is None else Obj(value, self.at(key))

    def items(self, key: str) -> list[object]:
        value = self.raw(key)
        if value is None:
            return []
        if not isinstance(value, list):
            fail(self.at(key), f"must be a list, not {type_name(value)}")
        return value

    def text(self, key: str, default: str | None = None) -> str | None:
        value = self.raw(key)
        if value is None:
            return default
        if not isinstance(value, str):
            fail(self.at(key), f"must be a string, not {type_name(value)}")
        return value

    def req_text(self, key: str) -> str:
        value = self.text(key)
        if value is None:
            fail(self.at(key), "is required")
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.raw(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            fail(self.at(key), f"must be true or false, not {type_name(value)}")
        return value

    def number(
        self, key: str, default: int | None = None, *, lo: int | None = None, hi: int | None = None
    ) -> int:
        value = self.opt_number(key, lo=lo, hi=hi)
        if value is None:
            if default is None:
                fail(self.at(key), "is required")
            return default
        return value

    def opt_number(self, key: str, *, lo: int | None = None, hi: int | None = None) -> int | None:
        value = self.raw(key)
        if value is None:
            return None
        return check_int(value, self.at(key), lo=lo, hi=hi)

    def hexid(self, key: str, default: int | None = None, *, bits: int = 16) -> int:
        value = self.raw(key)
        if value is None:
            if default is None:
                fail(self.at(key), "is required")
            return default
        return parse_hex(value, self.at(key), bits=bits)

    def choice(self, key: str, choices: tuple[str, ...], default: str) -> str:
        value = self.text(key, default)
        assert value is not None
        if value not in choices:
            fail(self.at(key), f"must be one of {', '.join(choices)}, not {value!r}")
        return value

    def done(self) -> None:
        unknown = sorted(set(self._data) - self._seen)
        if unknown:
            fail(
                self.path or "spec",
                f"unknown key {unknown[0]!r}"
                + (f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""),
            )


def fail(path: str, message: str) -> NoReturn:
    raise SpecError(f"{path}: {message}")


def type_name(value: object) -> str:
    if value is None:
        return "null"
    return {
        bool: "a boolean",
        int: "a number",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "an object",
    }.get(type(value), type(value).__name__)


def check_int(value: object, path: str, *, lo: int | None = None, hi: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        fail(path, f"must be a whole number, not {type_name(value)}")
    if lo is not None and value < lo:
        fail(path, f"must be at least {lo}, not {value}")
    if hi is not None and value > hi:
        fail(path, f"must be at most {hi}, not {value}")
    return value


def parse_hex(value: object, path: str, *, bits: int) -> int:
    """PCI ids are written as the kernel prints them ("0x10de"); plain numbers are accepted too."""
    if isinstance(value, str):
        text = value.strip().lower()
        try:
            number = int(text, 16)
        except ValueError:
            fail(path, f"must be a hex number like 0x10de, not {value!r}")
    else:
        number = check_int(value, path, lo=0)
    if number < 0 or number >= 1 << bits:
        fail(path, f"must fit in {bits} bits, not {value!r}")
    return number
