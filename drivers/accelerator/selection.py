"""Which PCI functions the driver publishes: the shared class rules plus the operator's ids.

Pure: a verdict per function from the topology and the options, with the reason, so the driver
can log why a function was skipped (the first question of anyone missing a GPU).

The class rules and the console-adapter table live in topodra.common.topology.classify, so
`topodra inspect` and this driver agree on what an accelerator is; they are re-exported here.

Operator ids: `exclude` always wins. A non-empty `include` narrows the result to matching ids;
an include entry with an exact device id (not `vendor:*`) also accepts a function the class
rules would skip (an FPGA in class 0x0580, a console adapter the operator really wants).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from topodra.common.topology.classify import (
    CONSOLE_ADAPTERS,
    ConsoleAdapter,
    class_rule,
    console_adapter,
    kind_of,
)
from topodra.common.topology.model import PciFunction, Topology
from topodra.drivers.accelerator.options import AcceleratorOptions, IdMatch

__all__ = [
    "CONSOLE_ADAPTERS",
    "ConsoleAdapter",
    "Verdict",
    "class_rule",
    "console_adapter",
    "kind_of",
    "selected",
    "verdict",
    "verdicts",
]


@dataclass(frozen=True, slots=True)
class Verdict:
    function: PciFunction
    selected: bool
    reason: str


def _matching(ids: Sequence[IdMatch], fn: PciFunction) -> list[IdMatch]:
    return [m for m in ids if m.matches(fn.vendor, fn.device)]


def verdict(topo: Topology, fn: PciFunction, options: AcceleratorOptions) -> Verdict:
    excluded = _matching(options.exclude, fn)
    if excluded:
        return Verdict(fn, False, f"excluded by --accelerator-exclude {excluded[0]}")
    included = _matching(options.include, fn)
    if options.include and not included:
        return Verdict(fn, False, "not named by --accelerator-include")
    ok, reason = class_rule(topo, fn)
    if not ok and any(m.device is not None for m in included):
        exact = next(m for m in included if m.device is not None)
        return Verdict(fn, True, f"named by --accelerator-include {exact} ({reason})")
    return Verdict(fn, ok, reason)


def verdicts(topo: Topology, options: AcceleratorOptions) -> list[Verdict]:
    """A verdict for every function that could matter: accelerator classes and every function
    an include entry names (bridges and the rest are not worth a line in a log)."""
    out = []
    for fn in topo.pci_devices:
        interesting = fn.in_accelerator_class or bool(_matching(options.include, fn))
        if interesting and not fn.is_bridge:
            out.append(verdict(topo, fn, options))
    return out


def selected(topo: Topology, options: AcceleratorOptions) -> list[PciFunction]:
    return [v.function for v in verdicts(topo, options) if v.selected]
