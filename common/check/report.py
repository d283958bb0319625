"""The whole check of one node: every driver's devices, and every pair of drivers.

`build_report(topo, devices)` is pure: the discovered machine and the node's slices in, a
`Report` out. `to_json` is the machine-readable form (`topodra check -o json`); the CLI renders
tables from the same objects. The exit status is part of the report so that every caller (the
command, the DaemonSet's watch loop, tests) agrees on it: 1 when any published value is wrong or
malformed, else 0 (missing attributes are warnings).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from topodra.common.check.align import LEVELS, PairResult, Placed, align_all
from topodra.common.check.attrs import Value, own_meaning
from topodra.common.check.devices import NodeDevices, SliceDevice
from topodra.common.check.identity import Identity, identifier_note, identify
from topodra.common.check.truth import Truth, truth_of
from topodra.common.check.verdicts import (
    ERROR,
    SHORT,
    WARNING,
    AttributeCheck,
    Finding,
    check_device,
    speaks_topodra,
)
from topodra.common.topology.model import Topology

EXIT_OK = 0
EXIT_WRONG = 1


@dataclass(frozen=True, slots=True)
class DeviceReport:
    device: SliceDevice
    identity: Identity
    truth: Truth
    checks: tuple[AttributeCheck, ...]
    findings: tuple[Finding, ...]  # the checks' findings and the device's own
    own: tuple[tuple[str, str, Value], ...]  # (name, meaning, value) of driver-domain locality names

    @property
    def worst(self) -> str:
        severities = {f.severity for f in self.findings}
        return next((s for s in (ERROR, WARNING) if s in severities), "")


@dataclass(frozen=True, slots=True)
class DriverReport:
    driver: str
    devices: tuple[DeviceReport, ...]
    speaks_topodra: bool

    def count(self, severity: str) -> int:
        return sum(1 for d in self.devices for f in d.findings if f.severity == severity)

    def verdicts(self) -> dict[str, Counter[str]]:
        """attribute short name -> verdict -> devices."""
        out: dict[str, Counter[str]] = {}
        for d in self.devices:
            for c in d.checks:
                out.setdefault(SHORT[c.name], Counter())[c.verdict] += 1
        return out


@dataclass(frozen=True, slots=True)
class Report:
    node: str
    machine: dict[str, int]
    drivers: tuple[DriverReport, ...]
    pairs: tuple[PairResult, ...]
    notes: tuple[str, ...]

    @property
    def errors(self) -> int:
        return sum(d.count(ERROR) for d in self.drivers)

    @property
    def warnings(self) -> int:
        return sum(d.count(WARNING) for d in self.drivers)

    @property
    def exit_code(self) -> int:
        return EXIT_WRONG if self.errors else EXIT_OK

    def findings(self) -> list[tuple[str, str, Finding]]:
        """(driver, device, finding), errors first."""
        rank = {ERROR: 0, WARNING: 1}
        out = [
            (d.driver, dev.device.name, f) for d in self.drivers for dev in d.devices for f in dev.findings
        ]
        return sorted(out, key=lambda x: (rank.get(x[2].severity, 2), x[0], x[1], x[2].attribute))


def build_report(topo: Topology, nodes: NodeDevices) -> Report:
    drivers = []
    placed: dict[str, list[Placed]] = {}
    for driver, devices in nodes.drivers.items():
        topodra = speaks_topodra(devices)
        reports = []
        for dev in devices:
            ident = identify(topo, dev)
            truth = truth_of(topo, ident)
            checks, extra = check_device(topo, dev, ident, truth, topodra)
            findings = tuple(f for c in checks for f in c.findings) + extra
            own = tuple(
                (name, meaning, value)
                for name, value in sorted(dev.attributes.items())
                if (meaning := own_meaning(name)) is not None
            )
            reports.append(DeviceReport(dev, ident, truth, checks, findings, own))
            bad = frozenset(f.attribute for f in findings if f.code in ("wrong", "malformed"))
            placed.setdefault(driver, []).append(Placed(dev, truth, bad))
        drivers.append(DriverReport(driver, tuple(reports), topodra))
    return Report(nodes.node, machine_summary(topo), tuple(drivers), align_all(placed), nodes.notes)


def machine_summary(topo: Topology) -> dict[str, int]:
    return {
        "sockets": len(topo.packages),
        "numaNodes": len(topo.numa_nodes),
        "cpus": len(topo.usable_cpus()),
        "pcieRoots": len(topo.pcie_roots),
        "pciFunctions": len(topo.pci_devices),
        "pcieSwitches": len({p.pcie_switch for p in topo.pci_devices if p.pcie_switch}),
    }


# --- JSON ------------------------------------------------------------------------------------


def to_json(report: Report) -> dict[str, Any]:
    return {
        "node": report.node,
        "machine": report.machine,
        "summary": {
            "drivers": len(report.drivers),
            "devices": sum(len(d.devices) for d in report.drivers),
            "errors": report.errors,
            "warnings": report.warnings,
        },
        "drivers": [_driver_json(d) for d in report.drivers],
        "findings": [{"driver": drv, "device": dev, **_finding_json(f)} for drv, dev, f in report.findings()],
        "alignment": [_pair_json(p) for p in report.pairs],
        "notes": list(report.notes),
        "exitCode": report.exit_code,
    }


def _driver_json(d: DriverReport) -> dict[str, Any]:
    return {
        "driver": d.driver,
        "speaksTopodra": d.speaks_topodra,
        "errors": d.count(ERROR),
        "warnings": d.count(WARNING),
        "attributes": {name: dict(sorted(c.items())) for name, c in d.verdicts().items()},
        "devices": [_device_json(x) for x in d.devices],
    }


def _device_json(d: DeviceReport) -> dict[str, Any]:
    return {
        "name": d.device.name,
        "pool": d.device.pool,
        "matchedBy": identifier_note(d.identity),
        "machine": d.truth.where,
        "attributes": {
            SHORT[c.name]: {
                "published": c.published.to_json() if c.published is not None else None,
                "machine": c.machine,
                "verdict": c.verdict,
            }
            for c in d.checks
        },
        "own": {name: {"means": meaning, **value.to_json()} for name, meaning, value in d.own},
        "findings": [_finding_json(f) for f in d.findings],
    }


def _finding_json(f: Finding) -> dict[str, str]:
    return {"severity": f.severity, "code": f.code, "attribute": f.attribute, "message": f.message}


def _pair_json(p: PairResult) -> dict[str, Any]:
    return {
        "drivers": [p.a, p.b],
        "levels": {
            lv.level: {
                "verdict": lv.verdict,
                "via": lv.via,
                "machine": lv.machine,
                "reason": lv.reason,
                "add": [{"driver": d, "attribute": a} for d, a in lv.add],
                "keys": [
                    {
                        "key": k.key,
                        "standard": k.standard,
                        "devices": [k.a_devices, k.b_devices],
                        "pairs": k.pairs,
                        "soundPairs": k.sound_pairs,
                    }
                    for k in lv.keys
                ],
            }
            for lv in p.levels
        },
    }


LEVEL_NAMES = tuple(level for level, _ in LEVELS)
