"""The accelerator driver's settings, parsed once from its `--accelerator-*` flags.

The prefix lets `serve all` put every driver's flags on one parser; the dataclass is what the
pure functions take, so tests build it directly.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path

from topodra.drivers import flags

_HEX_ID = r"(?:0x)?([0-9a-f]{4})"
_ID_MATCH = re.compile(rf"{_HEX_ID}:(?:{_HEX_ID}|(\*))\Z")


NODE_CHECKS = ("strict", "exists")


class OptionError(ValueError):
    """A flag value the driver cannot run with; the message names the flag and the value."""


@dataclass(frozen=True, slots=True)
class IdMatch:
    """`vendor:device` from --accelerator-include/--accelerator-exclude; device None is `*`."""

    vendor: int
    device: int | None

    def matches(self, vendor: int | None, device: int | None) -> bool:
        if vendor is None or vendor != self.vendor:
            return False
        return self.device is None or self.device == device

    def __str__(self) -> str:
        return f"{self.vendor:04x}:{'*' if self.device is None else f'{self.device:04x}'}"


def parse_id(text: str) -> IdMatch:
    m = _ID_MATCH.match(text.strip().lower())
    if m is None:
        raise OptionError(
            f"{text.strip()!r} is not vendor:device: two 4-digit hex PCI ids such as 10de:2330 "
            "(device may be '*', as in 1002:*)"
        )
    vendor, device, star = m.groups()
    return IdMatch(int(vendor, 16), None if star else int(device, 16))


def parse_ids(text: str) -> list[IdMatch]:
    """Comma-separated `vendor:device` entries; empty items are ignored."""
    return [parse_id(part) for part in text.split(",") if part.strip()]


def id_list(text: str) -> list[IdMatch]:
    """argparse type: argparse names the flag in front of the message."""
    try:
        return parse_ids(text)
    except OptionError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


@dataclass(frozen=True, slots=True)
class AcceleratorOptions:
    sysfs_root: Path = Path("/")  # the folder holding sys/ (and proc/)
    node_name: str = ""
    include: tuple[IdMatch, ...] = ()  # non-empty: publish only matching functions
    exclude: tuple[IdMatch, ...] = ()  # never publish these
    dev_root: Path = Path("/")  # host device nodes are <dev_root>/dev/...
    taint_unhealthy: bool = False
    list_attributes: bool = False  # numaNode in its list form (DRAListTypeAttributes)
    rescan_interval: float = 5.0  # the inventory's polling interval (common/inventory)
    pci_ids: tuple[str, ...] = ()  # pci.ids files tried for product names; empty: the system's
    node_check: str = "strict"  # strict: host nodes must have sysfs's major:minor; exists: any char dev

    def __post_init__(self) -> None:
        if self.node_check not in NODE_CHECKS:
            raise OptionError(
                f"--accelerator-node-check must be one of {', '.join(NODE_CHECKS)}, got {self.node_check!r}"
            )
        if not self.dev_root.is_absolute():
            raise OptionError(f"--accelerator-dev-root must be an absolute path, got {self.dev_root}")
        if self.rescan_interval < 0:
            raise OptionError(f"--accelerator-rescan-interval must be >= 0, got {self.rescan_interval}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("accelerator driver (accelerator.topodra.io)")
    g.add_argument(
        "--accelerator-include",
        action="extend",
        type=id_list,
        default=[],
        metavar="VENDOR:DEVICE,...",
        help="publish only these PCI ids (hex, device may be '*'; repeatable). An exact "
        "vendor:device also publishes a function the class rules would skip",
    )
    g.add_argument(
        "--accelerator-exclude",
        action="extend",
        type=id_list,
        default=[],
        metavar="VENDOR:DEVICE,...",
        help="never publish these PCI ids (hex, device may be '*'; repeatable; wins over include)",
    )
    g.add_argument(
        "--accelerator-dev-root",
        type=flags.absolute_path,
        default=Path("/"),
        help="folder whose dev/ holds the host's device nodes (default /); the container paths stay /dev/...",
    )
    g.add_argument(
        "--accelerator-node-check",
        choices=NODE_CHECKS,
        default="strict",
        help="strict (default): a host node must be the character device sysfs names (major:minor), "
        "else prepare refuses it; exists: any character device (synthetic machines whose nodes are "
        "stand-ins such as 1:3)",
    )
    g.add_argument(
        "--accelerator-taint-unhealthy",
        action="store_true",
        help="taint unhealthy accelerators accelerator.topodra.io/unhealthy:NoSchedule in the "
        "ResourceSlice (needs DRADeviceTaints on the cluster)",
    )
    g.add_argument(
        "--accelerator-list-attributes",
        action="store_true",
        help="publish numaNode as a list: the node, then the same-socket nodes nearest to it, so "
        "an accelerator whose node holds only its memory still matches its socket's CPUs and NICs "
        "(needs DRAListTypeAttributes)",
    )
    g.add_argument(
        "--accelerator-rescan-interval",
        type=flags.seconds,
        default=5.0,
        metavar="SECONDS",
        help="how often the PCI, DRM, accel and VFIO listings and driver links are compared with "
        "the last scan (default 5); a scan runs only when they changed. Uevents, where they reach "
        "the driver, are served at once",
    )
    g.add_argument(
        "--accelerator-pci-ids",
        action="append",
        default=None,
        metavar="FILE",
        help="pci.ids database for product names (repeatable; default: the system's, "
        "/usr/share/misc/pci.ids or /usr/share/hwdata/pci.ids)",
    )


def from_args(args: argparse.Namespace, sysfs_root: Path, node_name: str) -> AcceleratorOptions:
    """Options from a parsed namespace; flags a caller did not add take their defaults."""

    def ids(name: str) -> tuple[IdMatch, ...]:
        raw = getattr(args, name, None) or ()
        out: list[IdMatch] = []
        for item in raw:
            if isinstance(item, IdMatch):
                out.append(item)
            else:  # a namespace built by hand may carry strings
                out.extend(parse_ids(str(item)))
        return tuple(out)

    paths = getattr(args, "accelerator_pci_ids", None)
    return AcceleratorOptions(
        sysfs_root=Path(sysfs_root),
        node_name=node_name,
        include=ids("accelerator_include"),
        exclude=ids("accelerator_exclude"),
        dev_root=Path(getattr(args, "accelerator_dev_root", None) or "/"),
        taint_unhealthy=bool(getattr(args, "accelerator_taint_unhealthy", False)),
        list_attributes=bool(getattr(args, "accelerator_list_attributes", False)),
        rescan_interval=float(getattr(args, "accelerator_rescan_interval", 5.0)),
        pci_ids=tuple(str(p) for p in paths) if paths else (),
        node_check=str(getattr(args, "accelerator_node_check", "strict")),
    )
