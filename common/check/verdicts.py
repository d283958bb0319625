"""Per device and attribute: published, missing, malformed or wrong, and how much that matters.

Severities follow what a claim would suffer:
- error: a published value that is wrong or malformed (a type the scheduler never matches with
  the standard's, an address in the wrong format, -1, a value the machine contradicts). Claims
  that align on it silently land wrong or never allocate: `topodra check` exits 1.
- warning: a standard attribute the machine knows a value for but the driver does not publish
  (the scheduler skips such devices under `matchAttribute`), or a list where the standard
  defines one value (it works only where DRAListTypeAttributes is on, and by set intersection).
- info: what cannot be verified (a device the check could not find on the machine).

pciBusID, pcieRoot and numaNode are expected from every driver; topodra's own
`topology.topodra.io/pcieSwitch`, `pcieLeafSwitch` and `socket` only from a driver that speaks that vocabulary
(publishes any `topology.topodra.io` attribute). Attributes under a driver's own domain that
name NUMA or a PCI address are checked too (an SR-IOV driver's -1 is as misleading there).
"""

from __future__ import annotations

from dataclasses import dataclass

from topodra.common.check.attrs import (
    NUMA_NODE,
    PCI_BUS_ID,
    PCIE_LEAF_SWITCH,
    PCIE_ROOT,
    PCIE_SWITCH,
    SOCKET,
    TOPO,
    Value,
    domain_of,
    own_meaning,
)
from topodra.common.check.devices import SliceDevice
from topodra.common.check.identity import Identity, address_claims
from topodra.common.check.truth import Truth
from topodra.common.pciattrs import UPSTREAM_BDF
from topodra.common.publisher.names import PCIE_ROOT as ROOT_FORMAT
from topodra.common.topology.model import Topology

ERROR, WARNING, INFO = "error", "warning", "info"
STANDARD = (PCI_BUS_ID, PCIE_ROOT, NUMA_NODE)
TOPODRA = (PCIE_SWITCH, PCIE_LEAF_SWITCH, SOCKET)
SHORT = {
    PCI_BUS_ID: "pciBusID",
    PCIE_ROOT: "pcieRoot",
    NUMA_NODE: "numaNode",
    PCIE_SWITCH: "pcieSwitch",
    PCIE_LEAF_SWITCH: "pcieLeafSwitch",
    SOCKET: "socket",
}


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing the report says about one attribute of one device."""

    severity: str  # error | warning | info
    code: str  # missing | malformed | wrong | list-form | unmatched | conflict | unverified
    attribute: str  # qualified name, "" for the device as a whole
    message: str


@dataclass(frozen=True, slots=True)
class AttributeCheck:
    name: str
    published: Value | None
    machine: str  # the machine's value as shown: "pci0000:3a", "unknown", "-" (not applicable)
    verdict: str  # ok | missing | absent | malformed | wrong | list-form | unverified
    findings: tuple[Finding, ...]


def speaks_topodra(devices: tuple[SliceDevice, ...]) -> bool:
    return any(domain_of(n) == TOPO for d in devices for n in d.attributes)


def check_device(
    topo: Topology, dev: SliceDevice, ident: Identity, truth: Truth, topodra: bool
) -> tuple[tuple[AttributeCheck, ...], tuple[Finding, ...]]:
    """The checks of the standard (and, when `topodra`, topodra's) attributes, and the findings
    about the device as a whole (unmatched, conflicting identifiers, own-domain values)."""
    checks = [
        _bus_id(dev, ident, truth),
        _root(dev, truth),
        _numa(topo, dev, truth),
    ]
    if topodra:
        checks += [
            _switch(dev, PCIE_SWITCH, truth.switch, truth),
            _switch(dev, PCIE_LEAF_SWITCH, truth.leaf_switch, truth),
            _socket(dev, truth),
        ]
    extra: list[Finding] = []
    if not ident.matched:
        extra.append(
            Finding(
                INFO,
                "unmatched",
                "",
                f"not matched to the machine: {ident.note}; values checked for form only",
            )
        )
    elif ident.note:
        extra.append(Finding(INFO, "matched", "", ident.note))
    extra += _address_conflicts(dev, ident)
    extra += _own_numa(topo, dev, truth)
    return tuple(checks), tuple(extra)


# --- the standard attributes ----------------------------------------------------------------


def _bus_id(dev: SliceDevice, ident: Identity, t: Truth) -> AttributeCheck:
    name = PCI_BUS_ID
    v = dev.attributes.get(name)
    machine = t.pci_bus_id or ("-" if not t.is_pci else "none (5-hex domain)")
    if v is None:
        if t.is_pci and t.pci_bus_id:
            instead = _own_names(dev, "address")
            why = f"; the driver names it as {instead} instead" if instead else ""
            return _one(name, v, machine, "missing", WARNING, f"missing (machine: {t.pci_bus_id}){why}")
        return AttributeCheck(name, v, machine, "absent", ())
    bad = _malformed(v, "string", scalar_only=True)
    if bad:
        return _one(name, v, machine, "malformed", ERROR, bad)
    text = str(v.value)
    if not UPSTREAM_BDF.match(text):
        return _one(
            name, v, machine, "malformed", ERROR, f"{text!r} is not an extended BDF: {_bdf_problem(text)}"
        )
    if t.is_pci:
        if text == t.pci_bus_id:
            return AttributeCheck(name, v, machine, "ok", ())
        return _one(
            name, v, machine, "wrong", ERROR, f"{text} is not this device (it is {ident.pci}, by {ident.by})"
        )
    if not t.found and ident.by == name:
        sev = INFO if "lacks its PCI entry" in ident.note else ERROR
        return _one(name, v, "?", "wrong" if sev == ERROR else "unverified", sev, ident.note)
    return _one(name, v, machine, "wrong", ERROR, f"{text}: the device is {t.where}, not a PCI function")


def _root(dev: SliceDevice, t: Truth) -> AttributeCheck:
    name = PCIE_ROOT
    v = dev.attributes.get(name)
    if t.is_pci:
        machine = t.pcie_root or "none"
    elif t.local_roots:
        machine = ",".join(t.local_roots)
    else:
        machine = "-"
    if v is None:
        if t.is_pci and t.pcie_root:
            instead = _own_names(dev, "root")
            why = f"; the driver publishes {instead} instead (not comparable)" if instead else ""
            return _one(name, v, machine, "missing", WARNING, f"missing (machine: {t.pcie_root}){why}")
        return AttributeCheck(name, v, machine, "absent", ())
    bad = _malformed(v, "string")
    if bad:
        return _one(name, v, machine, "malformed", ERROR, bad)
    roots = [str(r) for r in v.items]
    wrong_format = [r for r in roots if not ROOT_FORMAT.fullmatch(r)]
    if wrong_format:
        msg = f"{wrong_format[0]!r} is not pci<domain>:<bus> in lowercase hex (e.g. pci0000:00)"
        return _one(name, v, machine, "malformed", ERROR, msg)
    findings: list[Finding] = []
    if v.is_list:
        findings.append(
            Finding(
                WARNING,
                "list-form",
                name,
                "published as a list; the standard defines one string (lists need DRAListTypeAttributes, "
                "and match other devices by intersection)",
            )
        )
    if t.is_pci:
        others = [r for r in roots if r != t.pcie_root]
        if t.pcie_root is None:
            findings.append(
                Finding(ERROR, "wrong", name, f"{v.show()}: the function sits under no PCIe root")
            )
        elif others or t.pcie_root not in roots:
            findings.append(
                Finding(ERROR, "wrong", name, f"{v.show()} but the function is under {t.pcie_root}")
            )
    elif t.found and (t.local_roots or t.numa is not None or t.socket is not None):
        foreign = [r for r in roots if r not in t.local_roots]
        if foreign:
            local = ", ".join(t.local_roots) or "none"
            findings.append(
                Finding(
                    ERROR,
                    "wrong",
                    name,
                    f"{', '.join(foreign)} not local to its CPUs ({t.where}; local: {local})",
                )
            )
    elif t.found:
        findings.append(Finding(ERROR, "wrong", name, f"{v.show()}: {t.where} has no PCIe root"))
    else:
        findings.append(
            Finding(INFO, "unverified", name, f"{v.show()}: well formed; the device was not found")
        )
    return _verdict(name, v, machine, findings)


def _numa(topo: Topology, dev: SliceDevice, t: Truth) -> AttributeCheck:
    name = NUMA_NODE
    v = dev.attributes.get(name)
    if t.numa is not None:
        machine = str(t.numa)
    elif t.found and (t.is_pci or t.local_roots or t.socket is not None):
        machine = "unknown"
    else:
        machine = "-"
    if v is None:
        if t.numa is not None and t.found:
            instead = _own_names(dev, "numa")
            why = f"; the driver publishes NUMA as {instead} instead" if instead else ""
            return _one(name, v, machine, "missing", WARNING, f"missing (machine: {t.numa}){why}")
        return AttributeCheck(name, v, machine, "absent", ())
    bad = _malformed(v, "int")
    if bad:
        return _one(name, v, machine, "malformed", ERROR, bad)
    nodes = [int(n) for n in v.items]
    if any(n < 0 for n in nodes):
        msg = f"{v.show()}: never -1 (it matches every other device that publishes -1); omit it when unknown"
        return _one(name, v, machine, "malformed", ERROR, msg)
    first = nodes[0]  # the standard list form puts the device's own node first
    if t.numa is not None and first != t.numa:
        return _one(name, v, machine, "wrong", ERROR, f"{v.show()} but the machine says {t.numa}")
    # the kernel's node id for the device stands even where discovery skipped that node's folder
    absent = [n for n in nodes if topo.numa_node(n) is None and n != t.numa]
    if absent:
        return _one(
            name, v, machine, "wrong", ERROR, f"{v.show()}: this machine has no NUMA node {absent[0]}"
        )
    if t.numa is not None:
        return AttributeCheck(name, v, machine, "ok", ())
    if not t.found:
        return _one(name, v, "?", "unverified", INFO, f"{v.show()}: the device was not found")
    if t.single_node is not None and first == t.single_node:
        return AttributeCheck(name, v, machine, "ok", ())  # one node: the only possible answer
    if machine == "-":
        return _one(name, v, machine, "wrong", ERROR, f"{v.show()}: {t.where} has no NUMA node")
    return _one(name, v, machine, "wrong", ERROR, f"{v.show()} but {t.numa_unknown_why}")


def _switch(dev: SliceDevice, name: str, switch: str | None, t: Truth) -> AttributeCheck:
    """pcieSwitch or pcieLeafSwitch against `switch`, the machine's bridge for that name."""
    v = dev.attributes.get(name)
    machine = (switch or "none") if t.is_pci else "-"
    if v is None:
        if switch:
            return _one(name, v, machine, "missing", WARNING, f"missing (machine: {switch})")
        return AttributeCheck(name, v, machine, "absent", ())
    bad = _malformed(v, "string", scalar_only=True)
    if bad:
        return _one(name, v, machine, "malformed", ERROR, bad)
    if not t.found:
        return _one(name, v, "?", "unverified", INFO, f"{v.show()}: the device was not found")
    if v.value != switch:
        where = f"behind {switch}" if switch else "behind no PCIe switch"
        return _one(name, v, machine, "wrong", ERROR, f"{v.show()} but the device is {where}")
    return AttributeCheck(name, v, machine, "ok", ())


def _socket(dev: SliceDevice, t: Truth) -> AttributeCheck:
    name = SOCKET
    v = dev.attributes.get(name)
    machine = str(t.socket) if t.socket is not None else ("unknown" if t.found else "-")
    if v is None:
        if t.socket is not None:
            return _one(name, v, machine, "missing", WARNING, f"missing (machine: {t.socket})")
        return AttributeCheck(name, v, machine, "absent", ())
    bad = _malformed(v, "int", scalar_only=True)
    if bad:
        return _one(name, v, machine, "malformed", ERROR, bad)
    if not t.found:
        return _one(name, v, "?", "unverified", INFO, f"{v.show()}: the device was not found")
    if t.socket is None and v.value in t.sockets:
        spans = ", ".join(map(str, t.sockets))
        note = f"{v.show()}: {t.where} spans sockets {spans}; which hold the device's CPUs is not published"
        return _one(name, v, f"one of {spans}", "unverified", INFO, note)
    if v.value != t.socket:
        return _one(name, v, machine, "wrong", ERROR, f"{v.show()} but the machine says {machine}")
    return AttributeCheck(name, v, machine, "ok", ())


# --- the device as a whole --------------------------------------------------------------------


def _address_conflicts(dev: SliceDevice, ident: Identity) -> list[Finding]:
    """Two identifiers of one device that name different functions: one of them lies."""
    if ident.kind != "pci":
        return []
    out = []
    for name, addr in address_claims(dev):
        if addr != ident.pci:
            msg = f"names {addr}, but {ident.by} says the device is {ident.pci}"
            out.append(Finding(ERROR, "conflict", name, msg))
    return out


def _own_numa(topo: Topology, dev: SliceDevice, t: Truth) -> list[Finding]:
    """NUMA under a driver's own domain: -1 and wrong nodes mislead `matchAttribute` there too."""
    out = []
    for name, v in sorted(dev.attributes.items()):
        if own_meaning(name) != "numa" or v.kind not in ("int", "ints"):
            continue
        nodes = [int(n) for n in v.items]
        if any(n < 0 for n in nodes):
            msg = f"{v.show()}: -1 matches every other device that publishes -1 here; omit it when unknown"
            out.append(Finding(ERROR, "malformed", name, msg))
        elif t.numa is not None and nodes[0] != t.numa:
            out.append(Finding(ERROR, "wrong", name, f"{v.show()} but the machine says {t.numa}"))
        elif t.numa is None and t.found and t.single_node is None and t.is_pci:
            out.append(Finding(ERROR, "wrong", name, f"{v.show()} but {t.numa_unknown_why}"))
        elif topo.numa_node(nodes[0]) is None:
            out.append(Finding(ERROR, "wrong", name, f"{v.show()}: this machine has no NUMA node {nodes[0]}"))
    return out


# --- helpers ----------------------------------------------------------------------------------


def _malformed(v: Value, base: str, scalar_only: bool = False) -> str:
    if v.kind == "invalid":
        return f"invalid: {v.problem}"
    if v.base != base:
        return f"{v.kind} {v.show()}: the standard type is {base} (a {v.base} never matches a {base})"
    if scalar_only and v.is_list:
        return f"{v.show()}: a list where the standard defines one {base}"
    return ""


def _bdf_problem(text: str) -> str:
    if text != text.lower():
        return "hex digits must be lowercase"
    if text.count(":") == 1:
        return "the 4-digit domain is missing (0000:...)"
    return "expected DDDD:BB:DD.F"


def _own_names(dev: SliceDevice, meaning: str) -> str:
    names = sorted(n for n in dev.attributes if own_meaning(n) == meaning)
    return ", ".join(names)


def _one(
    name: str, v: Value | None, machine: str, verdict: str, severity: str, message: str
) -> AttributeCheck:
    return AttributeCheck(name, v, machine, verdict, (Finding(severity, verdict, name, message),))


def _verdict(name: str, v: Value, machine: str, findings: list[Finding]) -> AttributeCheck:
    order = ("wrong", "malformed", "unverified", "list-form")
    codes = {f.code for f in findings}
    verdict = next((c for c in order if c in codes), "ok")
    return AttributeCheck(name, v, machine, verdict, tuple(findings))
