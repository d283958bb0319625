"""The NIC driver: publishes network functions, hands them to pods, takes them back.

Prepare does not move anything itself: the kubelet calls it before the pod's containers (and
their network namespace) exist. It writes down where the interface must go (edits.py); the
move happens at container creation, either by our createRuntime hook (`--nic-netdev-mode
hook`, works with any CDI runtime that runs hooks) or by the runtime itself from CDI
`netDevices` (`--nic-netdev-mode cdi`, cdiVersion 1.1.0, runtimes that know it). Both pin the
pod's namespace so that unprepare can bring the interface back even after the pod died.

A NIC inside a pod is gone from the host's view; the scan reports it as held with its
last-known attributes, so the inventory keeps it published and the scheduler keeps seeing it.
Health is in health.py; held NICs inside pods (their claim status, orphans) in pods.py;
the CDI edits in edits.py; moving interfaces in and out in attach.py.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from topodra.common import logs
from topodra.common.cdi.edits import ContainerEdits
from topodra.common.device import device_from_api
from topodra.common.hostnet import iplink, uplink
from topodra.common.inventory import InventoryHandle, Policy
from topodra.common.runtime import vfio
from topodra.common.runtime.config import describe_claim
from topodra.common.runtime.driver import (
    AllocatedDevice,
    ClaimRef,
    ClaimStatusWriter,
    DeviceHealth,
    OpaqueConfig,
    Preparation,
    PreparedDevice,
    PrepareError,
    Scan,
)
from topodra.common.topology import discover
from topodra.common.topology.model import Topology
from topodra.drivers.nic import attach, config, edits, health, hookfiles
from topodra.drivers.nic.attach import Attachment, ReleaseError
from topodra.drivers.nic.devices import DRIVER, Nic, Selection, partition
from topodra.drivers.nic.pods import Held, PodWatch, prepared_entry

MODES = ("hook", "cdi")
SUBSYSTEMS = ("pci", "net", "infiniband")
_LINK_FILES = ("operstate", "carrier", "speed", "mtu", "address")  # attributes a scan reads
_log = logs.get("topodra.nic")


@dataclass(frozen=True, slots=True)
class NicOptions:
    sysfs_root: str = "/"
    node_name: str = ""
    selection: Selection = field(default_factory=Selection)
    node_ips: tuple[str, ...] = ()
    netdev_mode: str = "hook"
    hook_dir: Path = Path("/opt/topodra/hooks")
    state_dir: Path = Path("/var/lib/topodra/nic")
    taint_unhealthy: bool = False
    rescan_interval: float = 5.0  # the inventory's polling, and how often pods' NICs are looked at
    install_hook: bool = True
    release_settle: float = 5.0  # how long unprepare waits for a physical NIC in transit


class NicDriver:
    """Implements the Driver protocol for `nic.topodra.io`, with claim status and health."""

    name = DRIVER

    def __init__(
        self,
        options: NicOptions,
        *,
        discover_fn: Callable[[str], Topology] = discover,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if options.netdev_mode not in MODES:
            raise ValueError(
                f"--nic-netdev-mode must be one of {', '.join(MODES)}, got {options.netdev_mode!r}"
            )
        self.options = options
        self._discover = discover_fn
        self._lock = threading.RLock()
        self._nics: dict[str, Nic] | None = None  # as of the last look
        self._withheld: dict[str, str] = {}  # device -> why it is not published, as of the last look
        self._held: dict[str, Held] = {}
        self._status: ClaimStatusWriter | None = None
        self._inventory: InventoryHandle | None = None
        self._hook_installed = False
        self._log = _log.bind(driver=DRIVER, node=options.node_name)
        self._pods = PodWatch(options.sysfs_root, options.rescan_interval, clock, self._log)

    # --- capabilities -------------------------------------------------------------------------
    def inventory_policy(self) -> Policy:
        return Policy(
            sysfs_root=self.options.sysfs_root,
            subsystems=SUBSYSTEMS,
            listings=("sys/bus/pci/devices",),
            # a port joining or leaving a bond or bridge sends no uevent: its `master` link changes
            links=(("sys/class/net", "master"),),
            files=(("sys/class/net", _LINK_FILES),),
            interval=self.options.rescan_interval,
            taint_unhealthy=self.options.taint_unhealthy,
        )

    def bind_inventory(self, inventory: InventoryHandle) -> None:
        self._inventory = inventory

    def set_status_writer(self, writer: ClaimStatusWriter) -> None:
        self._status = writer
        self._pods.status = writer

    # --- the host view ------------------------------------------------------------------------
    def _look(self) -> dict[str, Nic]:
        """Discover now (caller holds the lock)."""
        topo = self._discover(self.options.sysfs_root)
        uplinks = (
            frozenset()
            if self.options.selection.allow_uplink
            else uplink.find_uplinks(self.options.sysfs_root, self.options.node_ips)
        )
        published, left_out = partition(topo, uplinks, self.options.selection)
        nics = {n.name: n for n in published}
        if self._nics is None or set(nics) != set(self._nics) or left_out != self._withheld:
            self._log.info(
                f"discovered {len(nics)} NICs, {len(left_out)} withheld",
                devices=sorted(nics),
                uplinks=sorted(uplinks),
                withheld=left_out,
            )
        self._nics = nics
        self._withheld = left_out
        return nics

    def scan(self) -> Scan:
        """Devices on the host; a held NIC without its interface on the host is in a pod and is
        left to the inventory, which publishes it from its last-known attributes."""
        with self._lock:
            nics = self._look()
            found = []
            for name in sorted(nics):
                nic = nics[name]
                held = self._held.get(name)
                if held is not None and nic.interface is None:
                    continue
                if held is not None:
                    held.device = nic.device
                found.append(nic.device)
            return Scan(tuple(found), {name: h.device for name, h in self._held.items()})

    def check_health(self) -> Mapping[str, DeviceHealth]:
        with self._lock:
            if self._pods.return_orphans(list(self._held.values())) and self._inventory is not None:
                self._inventory.request_rescan()
            nics = self._nics if self._nics is not None else self._look()
            root = self.options.sysfs_root
            out: dict[str, DeviceHealth] = {}
            for name, nic in nics.items():
                held = self._held.get(name)
                if held is None or nic.interface is not None:
                    out[name] = health.on_host(root, nic)
            for name, held in self._held.items():
                if name not in out:
                    out[name] = self._pods.health(held)
            return out

    # --- prepare ------------------------------------------------------------------------------
    def prepare(
        self, claim: ClaimRef, results: Sequence[AllocatedDevice], configs: Sequence[OpaqueConfig]
    ) -> Preparation:
        with self._lock:
            config.validate_all(claim, configs)
            nics = self._look()
            atts = [self._attachment(claim, r, nics, configs) for r in results]
            dup = config.duplicate_names_error(
                claim, [(a.device, a.container_name) for a in atts if a.mode != "none"]
            )
            if dup is not None:
                raise dup
            if any(a.mode != "none" for a in atts):
                self._ensure_hook()
                (self.options.state_dir / "netns").mkdir(mode=0o700, parents=True, exist_ok=True)
            chosen = [nics[a.device] for a in atts]
            for att, nic in zip(atts, chosen, strict=True):
                self._hand_out(claim, att, nic)
            if self._status is not None:
                self._status.set_devices(claim, [prepared_entry(a) for a in atts])
            o = self.options
            return Preparation(
                devices=tuple(
                    PreparedDevice(
                        a.request,
                        a.pool,
                        a.device,
                        edits.device_edits(
                            a,
                            n,
                            o.state_dir,
                            o.hook_dir,
                            allow_stacked=o.selection.allow_stacked,
                            sysfs_root=o.sysfs_root,
                        ),
                        a.share_id,
                    )
                    for a, n in zip(atts, chosen, strict=True)
                ),
                claim_edits=ContainerEdits(device_nodes=edits.claim_nodes(o.sysfs_root, chosen)),
                state={
                    "attachments": [a.to_json() for a in atts],
                    "devices": {a.device: n.device.to_api() for a, n in zip(atts, chosen, strict=True)},
                },
            )

    def _attachment(
        self, claim: ClaimRef, r: AllocatedDevice, nics: Mapping[str, Nic], configs: Sequence[OpaqueConfig]
    ) -> Attachment:
        """Where one allocated NIC must go; refuses one that another claim holds or that is gone."""
        held = self._held.get(r.device)
        if held is not None and held.claim.uid != claim.uid and not r.admin_access:
            raise PrepareError(
                f"{describe_claim(claim)}: device {r.device} is held by claim "
                f"{held.claim.namespace}/{held.claim.name}"
            )
        nic = nics.get(r.device)
        if nic is None:
            why = self._withheld.get(r.device)
            if why is not None:
                raise PrepareError(f"{describe_claim(claim)}: device {r.device} is not handed out: {why}")
            raise PrepareError(f"{describe_claim(claim)}: device {r.device} is not on this node")
        if not r.admin_access:
            others = vfio.held_by_others(
                claim, self._held, lambda d: [c.path for c in nics[d].char_devices] if d in nics else None
            )
            why = vfio.refusal(r.device, [c.path for c in nic.char_devices], others)
            if why is not None:
                raise PrepareError(f"{describe_claim(claim)}: {why}")
        cfg = config.for_request(claim, configs, r.request)
        att = edits.attachment(claim, r, nic, cfg, self.options.netdev_mode, self.options.state_dir)
        if att.mode != "none":
            # what the port was made with tells it from a sibling port a pod renamed (attach.py)
            made_with = attach.recorded_made_with(att, self.options.sysfs_root)
            if made_with is not None:
                att = dataclasses.replace(att, perm_mac=made_with)
        return att

    def _hand_out(self, claim: ClaimRef, att: Attachment, nic: Nic) -> None:
        """Record the NIC as held, unless nothing moves (admin access), and log where it goes."""
        if att.mode != "none":
            self._held[att.device] = Held(claim, att, nic.device)
            self._pods.forget(att.device)
        self._log.info(
            f"prepared {att.device} for {describe_claim(claim)}: "
            f"{att.host_name} -> {att.container_name} ({att.mode})",
            **logs.claim(claim),
            device=att.device,
            interface=att.host_name,
            pod_interface=att.container_name,
            mode=att.mode,
        )

    def _ensure_hook(self) -> None:
        if self._hook_installed or not self.options.install_hook:
            return
        try:
            hookfiles.install(self.options.hook_dir)
            self._hook_installed = True
        except OSError as e:
            raise PrepareError(f"cannot install the NIC hook into {self.options.hook_dir}: {e}") from e

    # --- unprepare ----------------------------------------------------------------------------
    def unprepare(self, claim: ClaimRef, preparation: Preparation) -> None:
        try:
            self._unprepare(claim, preparation)
        finally:  # a released interface is back on the host: published again now, not at the next poll
            if self._inventory is not None:
                self._inventory.request_rescan()

    def _unprepare(self, claim: ClaimRef, preparation: Preparation) -> None:
        with self._lock:
            atts = _attachments(preparation)
            if not atts:
                # a rollback of an interrupted prepare: the runtime knows only the devices
                wanted = {d.device for d in preparation.devices}
                atts = [
                    h.attachment
                    for h in self._held.values()
                    if h.claim.uid == claim.uid and h.attachment.device in wanted
                ]
            errors = []
            for att in atts:
                try:
                    done = attach.release(att, self.options.sysfs_root, settle=self.options.release_settle)
                except (ReleaseError, iplink.IpError) as e:
                    errors.append(str(e))
                    self._log.error(
                        f"unprepare of {att.device} failed: {e}", **logs.claim(claim), device=att.device
                    )
                    continue
                self._log.info(
                    f"released {att.device} of {describe_claim(claim)}: {done}",
                    **logs.claim(claim),
                    device=att.device,
                )
                held = self._held.get(att.device)
                if held is not None and held.claim.uid == claim.uid:
                    del self._held[att.device]
                self._pods.forget(att.device)
            if errors:
                raise PrepareError(f"{describe_claim(claim)}: " + "; ".join(errors))
            if self._status is not None and atts:
                self._status.remove_devices(claim, [(a.pool, a.device, a.share_id) for a in atts])

    def in_use(self, claim: ClaimRef, preparation: Preparation) -> str:
        """driver.SeesUse (attach.in_use)."""
        return attach.in_use(_attachments(preparation))

    def restore(self, prepared: Mapping[ClaimRef, Preparation]) -> None:
        with self._lock:
            held: dict[str, Held] = {}
            for claim, prep in prepared.items():
                devices = prep.state.get("devices") or {}
                for raw in prep.state.get("attachments") or ():
                    try:
                        att = Attachment.from_json(raw)
                        dev = device_from_api(devices[att.device])
                    except (KeyError, TypeError, ValueError) as e:
                        self._log.error(
                            f"checkpoint entry of {describe_claim(claim)} is unreadable: {e}",
                            **logs.claim(claim),
                        )
                        continue
                    if att.mode != "none":
                        held[att.device] = Held(claim, att, dev)
            self._held = held
            self._pods.clear()

    # --- introspection (tests, debugging) -----------------------------------------------------
    def held(self) -> dict[str, tuple[ClaimRef, Attachment]]:
        with self._lock:
            return {k: (h.claim, h.attachment) for k, h in self._held.items()}

    def nics(self) -> dict[str, Nic]:
        with self._lock:
            return dict(self._look())


def _attachments(preparation: Preparation) -> list[Attachment]:
    """The attachments a prepare kept in the claim's checkpoint state."""
    return [Attachment.from_json(a) for a in preparation.state.get("attachments") or ()]
