"""The NIC driver's opaque claim parameters: `nic.topodra.io/v1alpha1` `NicConfig`.

    apiVersion: nic.topodra.io/v1alpha1
    kind: NicConfig
    interfaceName: net1        # name inside the pod; default: keep the host's name
    ips: ["192.0.2.5/24"]      # optional, hook mode only: addresses to configure in the pod
    linkUp: true               # hook mode: bring the link up in the pod (default true)

Class configs come first, claim configs after; a later entry overrides the fields it sets, per
request (`requests: [..]`, empty = all of this driver's requests).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass

from topodra.common.runtime.config import ConfigError, Params, applies_to, describe_claim, read_typed
from topodra.common.runtime.driver import ClaimRef, OpaqueConfig

API_VERSIONS = ("nic.topodra.io/v1alpha1",)
KIND = "NicConfig"
IFNAMSIZ = 16  # kernel limit including the terminating NUL
MAX_IPS = 16  # NetworkDeviceData.ips limit
# An address with its prefix length, in the characters an address has and nothing else: the
# value ends up as an argument of a root shell on the host (the netdev hook). `ipaddress` alone
# accepts IPv6 scope ids of any characters ("fe80::1%* 10.9.9.9/24"). 64 characters hold the
# longest spelling (an IPv4-mapped IPv6 address with zeros written out) and a prefix.
_ADDRESS = re.compile(r"[0-9A-Fa-f.:]{2,60}/[0-9]{1,3}")
_QUOTE = 64  # characters of a bad value quoted back in an error


@dataclass(frozen=True, slots=True)
class NicConfig:
    interface_name: str | None = None
    ips: tuple[str, ...] = ()
    link_up: bool = True


def ifname_problem(name: str) -> str | None:
    """Why the kernel (dev_valid_name) or our hook would refuse `name` as an interface name.

    The kernel allows up to IFNAMSIZ-1 bytes and forbids '/', ':' and whitespace and the names
    '.' and '..'; it treats '%' as a pattern (`eth%d` becomes `eth0`), and refuses `all` and
    `default` (the per-protocol sysctl folders of those names). We also refuse control
    characters and non-ASCII (shell and log safety), `lo` (every namespace already has one) and
    `bonding_masters` (a sysfs file under /sys/class/net once bonding is loaded).
    """
    if not name:
        return "must not be empty"
    if len(name.encode()) > IFNAMSIZ - 1:
        return f"must be at most {IFNAMSIZ - 1} bytes (Linux IFNAMSIZ), got {len(name.encode())}"
    if name in (".", ".."):
        return "must not be '.' or '..'"
    if "/" in name or ":" in name:
        return "must not contain '/' or ':'"
    if "%" in name:
        return "must not contain '%' (the kernel would take it as a name pattern)"
    if any(c.isspace() for c in name):
        return "must not contain whitespace"
    if not name.isascii() or not name.isprintable():
        return "must be printable ASCII"
    if name == "lo":
        return "must not be 'lo' (every network namespace has its own loopback)"
    if name in ("all", "default", "bonding_masters"):
        return f"must not be {name!r} (a name the kernel reserves under /proc/sys/net or /sys/class/net)"
    return None


def _ips(p: Params) -> tuple[str, ...] | None:
    if not p.has("ips"):
        return None
    values = p.strings("ips", max_items=MAX_IPS)
    seen = set()
    out = []
    for i, text in enumerate(values):
        if "/" not in text:
            raise p.error(
                f"ips[{i}]", f"must be an address with prefix length like 192.0.2.5/24, got {_quote(text)}"
            )
        if not _ADDRESS.fullmatch(text):
            raise p.error(
                f"ips[{i}]",
                "must be an IPv4 or IPv6 address with prefix length, only hex digits, '.', ':' and "
                f"one '/' (no scope id), got {_quote(text)}",
            )
        try:
            iface = ipaddress.ip_interface(text)
        except ValueError:
            raise p.error(f"ips[{i}]", f"is not an IP address with prefix length: {_quote(text)}") from None
        canonical = str(iface)
        if canonical in seen:
            raise p.error(f"ips[{i}]", f"{text!r} is listed twice")
        seen.add(canonical)
        out.append(canonical)
    return tuple(out)


def _quote(text: str) -> str:
    return repr(text) if len(text) <= _QUOTE else f"{text[:_QUOTE]!r}... ({len(text)} characters)"


def parse_one(
    claim: ClaimRef, config: OpaqueConfig, index: int
) -> tuple[str | None, tuple[str, ...] | None, bool | None]:
    p = read_typed(claim, config, index, API_VERSIONS, KIND)
    name = p.string("interfaceName")
    if name is not None and (why := ifname_problem(name)) is not None:
        raise p.error("interfaceName", why)
    ips = _ips(p)
    up = p.boolean("linkUp")
    p.finish()
    return name, ips, up


def for_request(claim: ClaimRef, configs: Sequence[OpaqueConfig], request: str) -> NicConfig:
    """The merged config for one request of the claim (later entries win field by field)."""
    name: str | None = None
    ips: tuple[str, ...] = ()
    up = True
    for i, cfg in enumerate(configs):
        if not applies_to(cfg, request):
            continue
        n, addrs, link_up = parse_one(claim, cfg, i)
        if n is not None:
            name = n
        if addrs is not None:
            ips = addrs
        if link_up is not None:
            up = link_up
    return NicConfig(name, ips, up)


def validate_all(claim: ClaimRef, configs: Sequence[OpaqueConfig]) -> None:
    """Parse every entry so a typo fails prepare even when no request uses that entry."""
    for i, cfg in enumerate(configs):
        parse_one(claim, cfg, i)


def duplicate_names_error(claim: ClaimRef, names: Sequence[tuple[str, str]]) -> ConfigError | None:
    """Two devices of one claim cannot both be `net1` in the pod. `names` = (device, name)."""
    seen: dict[str, str] = {}
    for device, name in names:
        if name in seen:
            return ConfigError(
                f"{describe_claim(claim)}: devices {seen[name]!r} and {device!r} would both be named "
                f"{name!r} in the pod; give each request its own interfaceName"
            )
        seen[name] = device
    return None
