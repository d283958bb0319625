"""`topodra check` for people: a table per driver, the findings, and the pair alignment table.

`text` groups findings that say the same thing about many devices (300 VFs with the same -1 are
one line with a count and an example); `wide` adds one row per device with the published values
and lists every finding.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from topodra.common.check.align import PairResult
from topodra.common.check.identity import identifier_note
from topodra.common.check.report import DriverReport, Report
from topodra.common.check.verdicts import ERROR, SHORT, WARNING

_MARK = {ERROR: "ERROR", WARNING: "warn", "info": "info"}
_LEVEL_HEAD = {"root": "ROOT", "numa": "NUMA", "switch": "SWITCH", "leaf": "LEAF", "socket": "SOCKET"}
_EXAMPLES = 3


def table(rows: Sequence[Sequence[str]], indent: str = "  ") -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for r in rows:
        out.append(indent + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return "\n".join(out) + "\n"


def render(report: Report, wide: bool = False) -> str:
    m = report.machine
    parts = [
        f"node {report.node}: {m['sockets']} socket(s), {m['numaNodes']} NUMA node(s), {m['cpus']} CPUs, "
        f"{m['pcieRoots']} PCIe roots, {m['pcieSwitches']} PCIe switches, {m['pciFunctions']} PCI functions"
        "\n",
        f"{len(report.drivers)} driver(s), {sum(len(d.devices) for d in report.drivers)} device(s): "
        f"{report.errors} error(s), {report.warnings} warning(s)\n",
    ]
    for note in report.notes:
        parts.append(f"note: {note}\n")
    for d in report.drivers:
        parts.append("\n" + _driver(d, wide))
    if report.pairs:
        parts.append("\n" + _pairs(report.pairs, wide))
    verdict = "published values agree with the machine" if not report.errors else "published values are WRONG"
    parts.append(f"\n{verdict}" + (f" ({report.warnings} gap(s))" if report.warnings else "") + "\n")
    return "".join(parts)


def _driver(d: DriverReport, wide: bool) -> str:
    by: dict[str, int] = defaultdict(int)
    for dev in d.devices:
        by[identifier_note(dev.identity)] += 1
    matched = ", ".join(f"{k} {n}" for k, n in sorted(by.items()))
    out = [f"== {d.driver}: {len(d.devices)} device(s), matched by {matched}\n"]
    verdicts = d.verdicts()
    columns = ["ok", "missing", "wrong", "malformed", "list-form", "unverified", "absent"]
    used = [c for c in columns if any(v.get(c) for v in verdicts.values())]
    rows = [["ATTRIBUTE", *(c.upper() for c in used)]]
    for name, counts in verdicts.items():
        rows.append([name, *(str(counts.get(c, 0) or "-") for c in used)])
    out.append(table(rows))
    if wide:
        out.append(_device_rows(d))
    out.append(_findings(d, wide))
    return "".join(out)


def _device_rows(d: DriverReport) -> str:
    names = [SHORT[c.name] for c in d.devices[0].checks] if d.devices else []
    rows = [["DEVICE", "MATCHED BY", "MACHINE", *(n for n in names)]]
    for dev in d.devices:
        cells = []
        for c in dev.checks:
            shown = c.published.show() if c.published is not None else "-"
            cells.append(shown if c.verdict == "ok" else f"{shown} ({c.verdict}; machine {c.machine})")
        rows.append([dev.device.name, identifier_note(dev.identity), dev.truth.where, *cells])
    return table(rows, indent="    ")


def _findings(d: DriverReport, wide: bool) -> str:
    """Wide: every finding. Text: one line per (severity, attribute, code) with the devices
    counted, so 300 VFs with the same -1 take one line; info other than unmatched is left out."""
    groups: dict[tuple[str, str, str], list[tuple[str, str]]] = defaultdict(list)
    for dev in d.devices:
        for f in dev.findings:
            if not wide and f.severity == "info" and f.code != "unmatched":
                continue
            groups[(f.severity, f.attribute, f.code)].append((dev.device.name, f.message))
    rank = {ERROR: 0, WARNING: 1}
    out = []
    for (sev, attr, code), items in sorted(groups.items(), key=lambda g: (rank.get(g[0][0], 2), g[0][1:])):
        what = SHORT.get(attr, attr) or "device"
        if wide:
            out += [f"  {_MARK[sev]:5} {name} {what}: {message}\n" for name, message in items]
            continue
        names = [n for n, _ in items]
        shown = ", ".join(names[:_EXAMPLES]) + (
            f" +{len(names) - _EXAMPLES} more" if len(names) > _EXAMPLES else ""
        )
        messages = {m for _, m in items}
        message = items[0][1] if len(messages) == 1 else f"e.g. {items[0][0]}: {items[0][1]}"
        out.append(f"  {_MARK[sev]:5} {what} {code} on {len(names)} device(s) [{shown}]: {message}\n")
    return "".join(out)


def _pairs(pairs: Sequence[PairResult], wide: bool) -> str:
    out = ["== alignment: can one claim's matchAttribute put devices of both drivers at one ...\n"]
    rows = [["DRIVERS", *(_LEVEL_HEAD[lv.level] for lv in pairs[0].levels)]]
    reasons: list[str] = []
    wanted: dict[tuple[str, str, str], list[str]] = defaultdict(list)  # (driver, attribute, level) -> others
    for p in pairs:
        cells = []
        for lv in p.levels:
            if lv.verdict == "yes":
                cells.append("yes" if lv.keys[0].key == lv.via else f"yes ({lv.via})")
            elif lv.verdict == "false":
                cells.append("FALSE")
            else:
                cells.append("no")
            if lv.reason and (wide or lv.verdict != "no"):
                reasons.append(f"  {p.a} + {p.b}, {lv.level}: {lv.reason}\n")
            for driver, attribute in lv.add:
                other = p.b if driver == p.a else p.a
                wanted[(driver, attribute, lv.level)].append(other)
        rows.append([f"{p.a} + {p.b}", *cells])
    out.append(table(rows))
    out += reasons
    if wanted:
        out.append("  to align more, a driver would add:\n")
        for (driver, attribute, level), others in sorted(wanted.items()):
            shown = ", ".join(others if wide else others[:4])
            if len(others) > 4 and not wide:
                shown += f" +{len(others) - 4} more"
            out.append(f"    {driver}: {attribute} (to align {level} with {shown})\n")
    return "".join(out)
