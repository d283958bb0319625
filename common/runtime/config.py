"""Plumbing for drivers to turn opaque claim parameters into typed data.

Each driver owns its own schema (`apiVersion: cpu.topodra.io/v1alpha1, kind: CpuConfig`, ...);
this module gives every driver the same reading primitives so that an error always names the
claim, the config entry and the field, e.g.
`claim ns/name: config FromClaim #1, field 'interfaceName': must match ^[a-z]...$`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from topodra.common.runtime.driver import ClaimRef, OpaqueConfig, PrepareError

UNKNOWN_NAMED = 5  # unknown fields an error names; the rest are counted


class ConfigError(PrepareError):  # type: ignore[misc, unused-ignore]  # Any when mypy cannot follow the editable install
    """A malformed opaque config; a per-claim prepare error."""


def _short(name: str, limit: int = 40) -> str:
    return name if len(name) <= limit else name[:limit] + "..."


def describe_claim(claim: ClaimRef) -> str:
    return f"claim {claim.namespace}/{claim.name}"


class Params:
    """Reads one JSON object field by field; `finish()` rejects fields nobody asked for.

    Typos in parameters must fail loudly rather than be silently ignored.
    """

    def __init__(self, claim: ClaimRef, data: Any, where: str, path: str = "") -> None:
        self._claim = claim
        self._where = where
        self._path = path
        if not isinstance(data, Mapping):
            raise self._error(None, f"must be a JSON object, got {_json_type(data)}")
        self._data: Mapping[str, Any] = data
        self._seen: set[str] = set()

    def _field(self, name: str | None) -> str:
        if name is None:
            return self._path or "parameters"
        return f"{self._path}.{name}" if self._path else name

    def _error(self, name: str | None, message: str) -> ConfigError:
        return ConfigError(
            f"{describe_claim(self._claim)}: {self._where}, field '{self._field(name)}': {message}"
        )

    def error(self, name: str | None, message: str) -> ConfigError:
        """For driver-specific checks (e.g. cross-field rules) with the same wording."""
        return self._error(name, message)

    def has(self, name: str) -> bool:
        return name in self._data

    def _get(self, name: str, required: bool) -> Any:
        self._seen.add(name)
        if name not in self._data or self._data[name] is None:
            if required:
                raise self._error(name, "is required")
            return None
        return self._data[name]

    def string(
        self,
        name: str,
        default: str | None = None,
        *,
        required: bool = False,
        pattern: str | None = None,
        choices: Sequence[str] | None = None,
        max_len: int | None = None,
    ) -> str | None:
        value = self._get(name, required)
        if value is None:
            return default
        if not isinstance(value, str):
            raise self._error(name, f"must be a string, got {_json_type(value)}")
        if max_len is not None and len(value) > max_len:
            raise self._error(name, f"must be at most {max_len} characters")
        if choices is not None and value not in choices:
            raise self._error(name, f"must be one of {', '.join(repr(c) for c in choices)}, got {value!r}")
        if pattern is not None and not re.fullmatch(pattern, value):
            raise self._error(name, f"must match {pattern}, got {value!r}")
        return value

    def integer(
        self,
        name: str,
        default: int | None = None,
        *,
        required: bool = False,
        minimum: int | None = None,
        maximum: int | None = None,
    ) -> int | None:
        value = self._get(name, required)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._error(name, f"must be an integer, got {_json_type(value)}")
        if minimum is not None and value < minimum:
            raise self._error(name, f"must be >= {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise self._error(name, f"must be <= {maximum}, got {value}")
        return value

    def boolean(self, name: str, default: bool | None = None, *, required: bool = False) -> bool | None:
        value = self._get(name, required)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self._error(name, f"must be true or false, got {_json_type(value)}")
        return value

    def strings(
        self, name: str, *, required: bool = False, pattern: str | None = None, max_items: int | None = None
    ) -> tuple[str, ...]:
        value = self._get(name, required)
        if value is None:
            return ()
        if not isinstance(value, list):
            raise self._error(name, f"must be a list of strings, got {_json_type(value)}")
        if max_items is not None and len(value) > max_items:
            raise self._error(name, f"must have at most {max_items} entries")
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise self._error(f"{name}[{i}]", f"must be a string, got {_json_type(item)}")
            if pattern is not None and not re.fullmatch(pattern, item):
                raise self._error(f"{name}[{i}]", f"must match {pattern}, got {item!r}")
        return tuple(value)

    def object(self, name: str, *, required: bool = False) -> Params | None:
        value = self._get(name, required)
        if value is None:
            return None
        return Params(self._claim, value, self._where, self._field(name))

    def finish(self) -> None:
        unknown = sorted(set(self._data) - self._seen)
        if unknown:
            also = [_short(k) for k in unknown[1:UNKNOWN_NAMED]]
            if len(unknown) > UNKNOWN_NAMED:
                also.append(f"{len(unknown) - UNKNOWN_NAMED} more")
            raise self._error(
                _short(unknown[0]), "unknown field" + (f" (also: {', '.join(also)})" if also else "")
            )


def read_typed(
    claim: ClaimRef, config: OpaqueConfig, index: int, api_versions: Sequence[str], kind: str
) -> Params:
    """Start reading one opaque config whose `apiVersion`/`kind` must be ours.

    The returned reader has already consumed `apiVersion` and `kind`; call `finish()` at the end.
    """
    where = f"config {config.source or 'unknown source'} #{index}"
    p = Params(claim, config.parameters, where)
    version = p.string("apiVersion", required=True)
    if version not in api_versions:
        raise p.error("apiVersion", f"must be one of {', '.join(api_versions)}, got {version!r}")
    got_kind = p.string("kind", required=True)
    if got_kind != kind:
        raise p.error("kind", f"must be {kind!r}, got {got_kind!r}")
    return p


def applies_to(config: OpaqueConfig, request: str) -> bool:
    """Whether a config entry covers a result's request (`req` covers `req/sub`)."""
    if not config.requests:
        return True
    main = request.split("/", 1)[0]
    return any(r in (request, main) for r in config.requests)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__
