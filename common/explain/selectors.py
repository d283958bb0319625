"""DeviceClass and request selectors (CEL) evaluated on one device, in the DRA environment.

Evaluated with Google's CEL runtime for Python (`cel-expr-python`, the C++ implementation behind
cel-go's conformance suite): heterogeneous numeric equality, `in`, `has()`, macros, `matches`
and the strings extension behave as kube-scheduler's cel-go does. The device is what the
scheduler gives an expression: `device.driver`, `device.allowMultipleAllocations` and
`device.attributes[domain][name]` (names without a domain under the driver's), where a domain
the device lacks reads as an empty map, as the scheduler's does.

Not evaluated, and said so: `device.capacity` (its values are Kubernetes quantities), version
attributes (a Kubernetes semver type), and the Kubernetes extension functions the library lacks
(`quantity`, `semver`, `isQuantity`, `url`, `ip`, `cidr`, ...): such an expression's verdict is
None with the reason, never a guess.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from topodra.common.explain.inventory import Device

MAX_EXPRESSION = 10 * 1024  # the API's limit on a selector's expression
_MISSING_KEY = re.compile(r'Key not found in map : "([^"]*)"')


@dataclass(frozen=True, slots=True)
class Verdict:
    matches: bool | None  # None: not evaluated
    reason: str = ""


class _Env:
    def __init__(self) -> None:
        from cel_expr_python import cel
        from cel_expr_python.ext.ext_strings import ExtStrings

        self.cel = cel
        self.env = cel.NewEnv(variables={"device": cel.Type.DYN}, extensions=[ExtStrings()])


@lru_cache(maxsize=1)
def _env() -> _Env:
    return _Env()


@lru_cache(maxsize=256)
def _compile(expression: str) -> tuple[Any, str]:
    """(program, "") or (None, why it cannot be evaluated)."""
    if len(expression) > MAX_EXPRESSION:
        return None, f"longer than {MAX_EXPRESSION} bytes"
    if re.search(r"\bdevice\s*\.\s*capacity\b", expression):
        return None, "reads device.capacity (Kubernetes quantities, not in the CEL library)"
    env = _env()
    try:
        return env.env.compile(expression), ""
    except Exception as err:  # the library reports compile errors as RuntimeError
        text = str(err)
        m = re.search(r"undeclared reference to '([^']+)'", text)
        if m:
            return None, f"uses {m.group(1)}(), a Kubernetes CEL extension the CEL library lacks"
        if "no matching overload" in text or "found no matching overload" in text:
            return None, f"not evaluable with the CEL library: {_first_line(text)}"
        return None, f"does not compile: {_first_line(text)}"


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0][:200] if text.strip() else "?"


def device_view(device: Device) -> tuple[dict[str, Any], set[str]]:
    """The `device` variable, and the qualified names of attributes left out (versions)."""
    attrs: dict[str, dict[str, Any]] = {}
    left_out: set[str] = set()
    for name, value in device.attributes.items():
        domain, _, short = name.rpartition("/")
        if value.kind in ("version", "versions", "invalid"):
            left_out.add(name)
            continue
        attrs.setdefault(domain or device.driver, {})[short] = (
            list(value.items) if value.is_list else value.value
        )
    view = {"driver": device.driver, "allowMultipleAllocations": device.shared, "attributes": attrs}
    return view, left_out


def evaluate(expression: str, device: Device) -> Verdict:
    program, why = _compile(expression)
    if program is None:
        return Verdict(None, why)
    view, left_out = device_view(device)
    attrs: dict[str, dict[str, Any]] = view["attributes"]
    for _ in range(8):  # a domain the device lacks reads as an empty map: add it, evaluate again
        try:
            value = program.eval(data={"device": view})
        except Exception as err:
            return Verdict(None, f"evaluation failed: {_first_line(str(err))}")
        type_name = value.type().name().upper()
        plain = value.plain_value()
        if type_name == "BOOL":
            return Verdict(bool(plain))
        if type_name != "ERROR":
            return Verdict(None, f"returns {type_name.lower()}, not bool")
        message = str(plain)
        missing = _MISSING_KEY.search(message)
        key = missing.group(1) if missing else ""
        if key and "." in key and "/" not in key and key not in attrs:
            attrs[key] = {}
            continue
        if key and any(name.rpartition("/")[2] == key for name in left_out):
            return Verdict(None, f"reads version attribute {key} (a Kubernetes semver type)")
        # the scheduler fails the claim with the same runtime error (a missing attribute is one)
        return Verdict(None, f"runtime error on this device: {message[:200]}")
    return Verdict(None, "runtime error on this device: too many missing domains")


def selectors_of(obj: Mapping[str, Any]) -> list[str]:
    """The CEL expressions of a DeviceClass spec or a request/subrequest (non-CEL ones as '')."""
    out = []
    for s in obj.get("selectors") or []:
        cel_sel = s.get("cel") if isinstance(s, Mapping) else None
        out.append(str(cel_sel.get("expression", "")) if isinstance(cel_sel, Mapping) else "")
    return out
