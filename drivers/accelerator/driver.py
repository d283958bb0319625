"""The accelerator driver: publishes PCI accelerators, hands their device nodes to pods.

Prepare has no side effect on the host: it checks that each node under the dev root is the
character device sysfs names (common/cdi/hostnodes.py) and returns CDI edits with those nodes and
`TOPODRA_ACCELERATORS`; the runtime writes the claim's CDI spec. What a claim holds is kept in
the checkpointed `Preparation.state` (with the published device), so a restarted driver knows
it, and an allocated accelerator that vanishes from the host (hot-unplug, a GPU off the bus)
stays published with its last attributes, unhealthy, until its claim is unprepared.

When to scan is the inventory's decision (common/inventory): uevents of the PCI, DRM, accel
and VFIO classes, or a changed listing of those folders or of a PCI function's driver link
(a rebind) polled every `--accelerator-rescan-interval`. Prepare looks at the host itself.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from topodra.common import logs
from topodra.common.cdi import hostnodes
from topodra.common.cdi.edits import ContainerEdits, DeviceNode
from topodra.common.cdi.hostnodes import Node
from topodra.common.device import Device, device_from_api
from topodra.common.inventory import Policy
from topodra.common.runtime import vfio
from topodra.common.runtime.config import ConfigError, describe_claim
from topodra.common.runtime.driver import (
    AllocatedDevice,
    ClaimRef,
    DeviceHealth,
    Health,
    OpaqueConfig,
    Preparation,
    PreparedDevice,
    PrepareError,
    Scan,
)
from topodra.common.topology import discover
from topodra.common.topology.model import Topology
from topodra.drivers.accelerator import health, probe, selection
from topodra.drivers.accelerator.devices import DRIVER, Accelerator, build_accelerators
from topodra.drivers.accelerator.options import AcceleratorOptions

ENV = "TOPODRA_ACCELERATORS"
SUBSYSTEMS = ("pci", "drm", "accel", "vfio")
_LISTINGS = ("sys/class/drm", "sys/class/accel", "sys/class/vfio")
_log = logs.get("topodra.accelerator")


@dataclass(slots=True)
class _Held:
    """An allocated accelerator: its claim and the device as last seen on the host."""

    claim: ClaimRef
    address: str
    device: Device
    driver: str | None


class AcceleratorDriver:
    """Implements the Driver protocol for `accelerator.topodra.io`."""

    name = DRIVER
    holds_in_memory = True  # prepare only reads the host; what it holds is `_held`

    def __init__(
        self, options: AcceleratorOptions, *, discover_fn: Callable[[str], Topology] = discover
    ) -> None:
        self.options = options
        self._discover = discover_fn
        self._lock = threading.RLock()
        self._accelerators: dict[str, Accelerator] | None = None  # as of the last look
        self._held: dict[str, _Held] = {}
        self._aer = health.AerBaselines()
        self._known: set[str] = set()  # addresses published by this process, while present
        self._bound: dict[str, str] = {}  # last kernel driver seen bound, by address
        self._log = _log.bind(driver=DRIVER, node=options.node_name)

    def inventory_policy(self) -> Policy:
        return Policy(
            sysfs_root=str(self.options.sysfs_root),
            subsystems=SUBSYSTEMS,
            listings=_LISTINGS,
            links=((health.BUS, "driver"),),
            interval=self.options.rescan_interval,
            taint_unhealthy=self.options.taint_unhealthy,
        )

    # --- the host view ----------------------------------------------------------------------------
    def _look(self) -> dict[str, Accelerator]:
        """Discover now (caller holds the lock)."""
        root = self.options.sysfs_root
        topo = self._discover(str(root))
        verdicts = [self._sticky(v) for v in selection.verdicts(topo, self.options)]
        self._known = {v.function.address for v in verdicts if v.selected}
        host = probe.probe(root, [x.function for x in verdicts if x.selected], self.options.pci_ids)
        accs = {a.name: a for a in build_accelerators(topo, host, self.options, verdicts)}
        for a in accs.values():
            if a.aer_fatal is not None and a.address not in self._aer.seen:
                self._aer.seen[a.address] = a.aer_fatal
            if a.driver is not None:
                self._bound[a.address] = a.driver
            held = self._held.get(a.name)
            if held is not None:
                held.device, held.driver = a.device, a.driver
        kept = {a.address for a in accs.values()} | {h.address for h in self._held.values()}
        for address in list(self._aer.seen):
            if address not in kept:
                self._aer.forget(address)
        self._bound = {a: drv for a, drv in self._bound.items() if a in kept}
        if self._accelerators is None or set(accs) != set(self._accelerators):
            self._log.info(
                f"discovered {len(accs)} accelerators",
                devices=sorted(accs),
                skipped={x.function.address: x.reason for x in verdicts if not x.selected},
            )
        self._accelerators = accs
        return accs

    def _sticky(self, v: selection.Verdict) -> selection.Verdict:
        """A display controller loses its render node when its driver is unbound; it must then
        show up unhealthy, not vanish from the slice. Options cannot change while we run, so a
        function published before was never excluded by them."""
        if v.selected or v.function.address not in self._known:
            return v
        return selection.Verdict(v.function, True, f"published before; now: {v.reason}")

    # --- Driver protocol and capabilities -----------------------------------------------------
    def scan(self) -> Scan:
        with self._lock:
            accs = self._look()
            return Scan(
                tuple(accs[n].device for n in sorted(accs)),
                {name: h.device for name, h in self._held.items()},
            )

    def check_health(self) -> Mapping[str, DeviceHealth]:
        with self._lock:
            accs = self._accelerators if self._accelerators is not None else self._look()
            root = self.options.sysfs_root
            targets = {name: a.address for name, a in accs.items()}
            for name, held in self._held.items():
                targets.setdefault(name, held.address)
            out = {}
            for name, address in targets.items():
                o = health.observe(root, address)
                rise = self._aer.rise(address, o.fatal) if o.present else None
                h = health.judge(o, rise, self._bound.get(address))
                acc = accs.get(name)
                if h.health is Health.HEALTHY and acc is not None and acc.problem is not None:
                    # present and bound, but prepare would refuse it: keep the scheduler away
                    h = DeviceHealth(
                        Health.UNHEALTHY, f"{health.CANNOT_PREPARE}: {acc.problem}", "CannotPrepare"
                    )
                out[name] = h
                if o.driver is not None:
                    self._bound[address] = o.driver
            return out

    # --- prepare ------------------------------------------------------------------------------
    def prepare(
        self, claim: ClaimRef, results: Sequence[AllocatedDevice], configs: Sequence[OpaqueConfig]
    ) -> Preparation:
        with self._lock:
            _no_parameters(claim, configs)
            accs = self._look()
            label = describe_claim(claim)
            chosen: list[tuple[AllocatedDevice, Accelerator]] = []
            for r in results:
                acc = accs.get(r.device)
                held = self._held.get(r.device)
                if acc is None:
                    why = "was removed from this node" if held is not None else "is not an accelerator here"
                    raise PrepareError(f"{label}: device {r.device} {why}")
                if held is not None and held.claim.uid != claim.uid and not r.admin_access:
                    owner = f"{held.claim.namespace}/{held.claim.name}"
                    raise PrepareError(f"{label}: device {r.device} is held by claim {owner}")
                if acc.problem is not None:
                    raise PrepareError(f"{label}: device {r.device} ({acc.address}): {acc.problem}")
                self._refuse_shared_group(claim, r.device, acc, accs)
                chosen.append((r, acc))
            seen: set[str] = set()
            prepared = []
            for r, acc in chosen:
                edits = ContainerEdits(device_nodes=self._resolve(claim, acc, acc.nodes, seen))
                prepared.append(PreparedDevice(r.request, r.pool, r.device, edits, r.share_id))
            shared: list[Node] = []
            for _, acc in chosen:
                shared += [n for n in acc.shared_nodes if n.path not in {s.path for s in shared}]
            claim_nodes = self._resolve(claim, chosen[0][1], shared, seen) if chosen else ()
            addresses = list(dict.fromkeys(acc.address for _, acc in chosen))
            env = (f"{ENV}={','.join(addresses)}",) if addresses else ()
            for r, acc in chosen:
                if not r.admin_access:
                    self._held[acc.name] = _Held(claim, acc.address, acc.device, acc.driver)
                self._log.info(
                    f"prepared {acc.name} ({acc.address}) for {label}",
                    **logs.claim(claim),
                    device=acc.name,
                    pci_address=acc.address,
                    nodes=[n.path for n in acc.nodes],
                    admin_access=r.admin_access,
                )
            return Preparation(
                devices=tuple(prepared),
                claim_edits=ContainerEdits(env=env, device_nodes=claim_nodes),
                state={
                    "devices": {
                        acc.name: {
                            "address": acc.address,
                            "driver": acc.driver,
                            "held": not r.admin_access,
                            "device": acc.device.to_api(),
                        }
                        for r, acc in chosen
                    }
                },
            )

    def _refuse_shared_group(
        self, claim: ClaimRef, name: str, acc: Accelerator, accs: Mapping[str, Accelerator]
    ) -> None:
        """common/runtime/vfio.py: no function of a VFIO group another claim holds."""
        others = vfio.held_by_others(
            claim, self._held, lambda d: [n.path for n in accs[d].nodes] if d in accs else None
        )
        why = vfio.refusal(f"{name} ({acc.address})", [n.path for n in acc.nodes], others)
        if why is not None:
            raise PrepareError(f"{describe_claim(claim)}: {why}")

    def _resolve(
        self, claim: ClaimRef, acc: Accelerator, nodes: Sequence[Node], seen: set[str]
    ) -> tuple[DeviceNode, ...]:
        """Host-checked CDI nodes; a path already given to another device of the claim is skipped
        (two functions of one IOMMU group share its node)."""
        out = []
        for n in nodes:
            if n.path in seen:
                continue
            try:
                node = hostnodes.resolve(n, self.options.dev_root, strict=self.options.node_check == "strict")
            except hostnodes.NodeError as e:
                raise PrepareError(f"{describe_claim(claim)}: device {acc.name} ({acc.address}): {e}") from e
            if node is None:
                self._log.warning(
                    f"{hostnodes.host_path(self.options.dev_root, n)} is not on the host; "
                    f"{describe_claim(claim)} goes without it",
                    **logs.claim(claim),
                    device=acc.name,
                )
                continue
            seen.add(n.path)
            out.append(node)
        return tuple(out)

    # --- unprepare / restore ------------------------------------------------------------------
    def unprepare(self, claim: ClaimRef, preparation: Preparation) -> None:
        with self._lock:
            for name, held in list(self._held.items()):
                if held.claim.uid == claim.uid:
                    del self._held[name]
                    self._log.info(
                        f"released {name} ({held.address}) of {describe_claim(claim)}",
                        **logs.claim(claim),
                        device=name,
                    )

    def restore(self, prepared: Mapping[ClaimRef, Preparation]) -> None:
        with self._lock:
            held: dict[str, _Held] = {}
            for claim, prep in prepared.items():
                devices: Any = prep.state.get("devices") or {}
                try:
                    entries = list(devices.items())
                except AttributeError:
                    entries = []
                for name, raw in entries:
                    try:
                        if not raw.get("held", True):
                            continue
                        dev = device_from_api(raw["device"])
                        entry = _Held(claim, str(raw["address"]), dev, raw.get("driver"))
                    except (AttributeError, KeyError, TypeError, ValueError) as e:
                        self._log.error(
                            f"checkpoint entry {name!r} of {describe_claim(claim)} is unreadable: {e}",
                            **logs.claim(claim),
                        )
                        continue
                    held[str(name)] = entry
                    if entry.driver:
                        self._bound.setdefault(entry.address, str(entry.driver))
            self._held = held
            self._log.info(f"restored {len(held)} allocated accelerators", devices=sorted(held))

    # --- introspection (tests, debugging) -----------------------------------------------------
    def held(self) -> dict[str, ClaimRef]:
        with self._lock:
            return {name: h.claim for name, h in self._held.items()}

    def accelerators(self) -> dict[str, Accelerator]:
        with self._lock:
            return dict(self._look())


def _no_parameters(claim: ClaimRef, configs: Sequence[OpaqueConfig]) -> None:
    """The driver has no parameters yet; a config for it is a mistake that must not pass quietly."""
    for i, c in enumerate(configs):
        raise ConfigError(
            f"{describe_claim(claim)}: config {c.source or 'unknown source'} #{i}: {DRIVER} takes no "
            f"opaque parameters (got {', '.join(sorted(map(str, c.parameters))) or 'an empty object'})"
        )
