"""The NIC driver: publishes network functions, hands them to pods, takes them back.

Prepare does not move anything itself: the kubelet calls it before the pod's containers (and
their network namespace) exist. It writes down where the interface must go; the move happens
at container creation, either by our createRuntime hook (`--nic-netdev-mode hook`, works with
any CDI runtime that runs hooks) or by the runtime itself from CDI `netDevices`
(`--nic-netdev-mode cdi`, cdiVersion 1.1.0, runtimes that know it). Both pin the pod's
namespace so that unprepare can bring the interface back even after the pod died.

Allocated NICs stay published with their last-known attributes while they are inside a pod
(they vanish from the host's view), so the scheduler and autoscalers keep seeing them.
"""

from __future__ import annotations

import ipaddress
import os
import queue
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from topodra.common import logs
from topodra.common.cdi.edits import ContainerEdits, DeviceNode, Hook, NetDevice
from topodra.common.device import Device, Taint, device_from_api
from topodra.common.runtime.config import ConfigError, describe_claim
from topodra.common.runtime.driver import (
    AllocatedDevice,
    AllocatedDeviceStatus,
    ClaimRef,
    ClaimStatusError,
    ClaimStatusWriter,
    DeviceCondition,
    DeviceHealth,
    Health,
    NetworkDeviceData,
    OpaqueConfig,
    Preparation,
    PreparedDevice,
    PrepareError,
)
from topodra.common.topology import discover
from topodra.common.topology.model import Topology
from topodra.drivers.nic import attach, config, hookfiles, iplink, uplink
from topodra.drivers.nic.attach import Attachment, ReleaseError
from topodra.drivers.nic.devices import DRIVER, Nic, Selection, build_nics, link_is_down

MODES = ("hook", "cdi")
TAINT_KEY = f"{DRIVER}/unhealthy"
HOOK_TIMEOUT = 30
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
    rescan_interval: float = 5.0
    install_hook: bool = True
    release_settle: float = 5.0  # how long unprepare waits for a physical NIC in transit


@dataclass(slots=True)
class _Held:
    """An allocated NIC: who holds it and what it looked like when last seen on the host."""

    claim: ClaimRef
    attachment: Attachment
    device: Device
    reported_attached: bool = False


@dataclass(slots=True)
class _View:
    nics: dict[str, Nic]
    at: float
    signature: tuple[tuple[str, ...], tuple[str, ...]]
    topology: Topology | None = None


def env_token(name: str) -> str:
    return re.sub(r"[^A-Z0-9]", "_", name.upper())


class _StatusQueue:
    """Writes claim status off the prepare path: the kubelet must not wait for the API server,
    and a failed write is retried with backoff rather than failing the pod."""

    def __init__(self, writer: ClaimStatusWriter, *, max_attempts: int = 6) -> None:
        self._writer = writer
        self._q: queue.Queue[tuple[str, ClaimRef, Any, int] | None] = queue.Queue()
        self._max = max_attempts
        self._idle = threading.Condition()
        self._busy = 0
        self._thread = threading.Thread(target=self._run, name="nic-claim-status", daemon=True)
        self._thread.start()

    def set(self, claim: ClaimRef, devices: Sequence[AllocatedDeviceStatus]) -> None:
        self._put(("set", claim, tuple(devices), 0))

    def remove(self, claim: ClaimRef, keys: Sequence[tuple[str, str, str | None]]) -> None:
        self._put(("remove", claim, tuple(keys), 0))

    def _put(self, item: tuple[str, ClaimRef, Any, int]) -> None:
        with self._idle:
            self._busy += 1
        self._q.put(item)

    def flush(self, timeout: float) -> bool:
        with self._idle:
            return self._idle.wait_for(lambda: self._busy == 0, timeout)

    def _run(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            op, claim, payload, attempt = item
            retry = False
            try:
                if op == "set":
                    self._writer.set_devices(claim, payload)
                else:
                    self._writer.remove_devices(claim, payload)
            except ClaimStatusError as e:
                retry = attempt + 1 < self._max
                _log.warning(
                    f"cannot write status of {describe_claim(claim)}: {e}"
                    + ("; will retry" if retry else ""),
                    **logs.claim(claim),
                    error=str(e),
                )
            except Exception:
                _log.exception(f"status write of {describe_claim(claim)} crashed", **logs.claim(claim))
            if retry:
                time.sleep(min(0.2 * 2**attempt, 5.0))
                self._q.put((op, claim, payload, attempt + 1))
                continue
            with self._idle:
                self._busy -= 1
                self._idle.notify_all()

    def close(self) -> None:
        self._q.put(None)


class NicDriver:
    """Implements the Driver protocol (and StatusWritingDriver) for `nic.topodra.io`."""

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
        self._clock = clock
        self._lock = threading.RLock()
        self._view: _View | None = None
        self._held: dict[str, _Held] = {}
        self._status: _StatusQueue | None = None
        self._hook_installed = False
        self._pod_state: dict[str, tuple[float, DeviceHealth]] = {}
        self._orphans_at = float("-inf")
        self._log = _log.bind(driver=DRIVER, node=options.node_name)

    # --- optional runtime hook ----------------------------------------------------------------
    def set_status_writer(self, writer: ClaimStatusWriter) -> None:
        with self._lock:
            if self._status is not None:
                self._status.close()
            self._status = _StatusQueue(writer)

    def flush_status(self, timeout: float = 10.0) -> bool:
        """Wait until queued status writes are done (tests, shutdown)."""
        return True if self._status is None else self._status.flush(timeout)

    # --- the host view ----------------------------------------------------------------------------
    def _signature(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        root = self.options.sysfs_root

        def names(rel: str) -> tuple[str, ...]:
            try:
                return tuple(sorted(os.listdir(os.path.join(root, rel))))
            except OSError:
                return ()

        return names("sys/class/net"), names("sys/bus/pci/devices")

    def _refresh(self, force: bool = False) -> dict[str, Nic]:
        """Rediscover when forced, after `rescan_interval`, or when an interface or PCI function
        came or went (a listing is cheap; the full discovery is not, on big machines)."""
        now = self._clock()
        sig = self._signature()
        v = self._view
        if v is not None and not force and sig == v.signature and now - v.at < self.options.rescan_interval:
            return v.nics
        topo = self._discover(self.options.sysfs_root)
        uplinks = (
            frozenset()
            if self.options.selection.allow_uplink
            else uplink.find_uplinks(self.options.sysfs_root, self.options.node_ips)
        )
        nics = {n.name: n for n in build_nics(topo, uplinks, self.options.selection)}
        if v is None or set(nics) != set(v.nics):
            self._log.info(f"discovered {len(nics)} NICs", devices=sorted(nics), uplinks=sorted(uplinks))
        self._view = _View(nics, now, sig, topo)
        return nics

    def _on_host(self, nic: Nic | None) -> bool:
        return nic is not None and nic.interface is not None

    # --- Driver protocol ----------------------------------------------------------------------
    def devices(self) -> Sequence[Device]:
        with self._lock:
            self._return_orphans()
            nics = self._refresh()
            health = self._health_locked(nics)
            out: dict[str, Device] = {}
            for name, nic in nics.items():
                held = self._held.get(name)
                if held is not None and not self._on_host(nic):
                    continue  # in a pod: published below from its last-known attributes
                dev = nic.device
                if held is not None:
                    held.device = dev
                out[name] = dev
            for name, held in self._held.items():
                if name not in out:
                    out[name] = held.device
            result = []
            for name in sorted(out):
                dev = out[name]
                h = health.get(name)
                if self.options.taint_unhealthy and h is not None and h.health is Health.UNHEALTHY:
                    dev = replace(
                        dev, taints=(*dev.taints, Taint(TAINT_KEY, _taint_value(h.message), "NoSchedule"))
                    )
                result.append(dev)
            return result

    def health(self) -> Mapping[str, DeviceHealth]:
        with self._lock:
            self._return_orphans()
            return self._health_locked(self._refresh())

    def _return_orphans(self) -> bool:
        """Interfaces whose pod namespace has no process left go home at once (the claim stays
        prepared: a re-created sandbox gets it again from the hook). At most once per rescan
        interval, and only where every process is visible (host PID namespace)."""
        now = self._clock()
        if now - self._orphans_at < self.options.rescan_interval:
            return False
        self._orphans_at = now
        pinned = [h for h in self._held.values() if iplink.is_pinned_netns(h.attachment.pin)]
        if not pinned or not attach.sees_all_processes():
            return False
        in_use = attach.netns_in_use()
        moved = False
        for held in pinned:
            att = held.attachment
            try:
                done = attach.return_orphan(att, in_use)
            except (ReleaseError, iplink.IpError, OSError) as e:
                self._log.error(f"cannot return {att.device} from its dead pod: {e}", device=att.device)
                continue
            if done is None:
                continue
            moved = True
            self._log.info(
                f"{att.device}: the pod's network namespace is gone; {done} (claim still prepared)",
                **logs.claim(held.claim),
                device=att.device,
            )
            held.reported_attached = False
            self._pod_state.pop(att.device, None)
            if self._status is not None:
                entry = _status_entry(att, "PodGone", f"back on the host as {att.host_name}", ())
                entry = replace(entry, conditions=(DeviceCondition("Ready", "False", "PodGone", done),))
                self._status.set(held.claim, [entry])
        if moved:
            self._view = None
        return moved

    def _health_locked(self, nics: Mapping[str, Nic]) -> dict[str, DeviceHealth]:
        out: dict[str, DeviceHealth] = {}
        for name, nic in nics.items():
            held = self._held.get(name)
            if held is not None and not self._on_host(nic):
                continue
            out[name] = self._host_health(nic)
        for name, held in self._held.items():
            if name in out:
                continue
            out[name] = self._pod_health(held, nics.get(name))
        return out

    def _live_link(self, ifname: str) -> tuple[str | None, bool | None, bool | None]:
        """operstate, carrier and admin-up read now (the cached view may be seconds old)."""
        base = os.path.join(self.options.sysfs_root, "sys/class/net", ifname)

        def read(f: str) -> str | None:
            try:
                with open(os.path.join(base, f)) as fh:
                    return fh.read().strip()
            except OSError:
                return None

        oper = read("operstate")
        carrier_text = read("carrier")
        carrier = None if carrier_text not in ("0", "1") else carrier_text == "1"
        flags = read("flags")
        try:
            admin_up = None if flags is None else bool(int(flags, 16) & 0x1)  # IFF_UP
        except ValueError:
            admin_up = None
        return oper, carrier, admin_up

    def _host_health(self, nic: Nic) -> DeviceHealth:
        if nic.interface is None:
            if nic.driver == "vfio-pci":
                return DeviceHealth(Health.HEALTHY, "bound to vfio-pci (no network interface)")
            if nic.pci_address and not self._pci_present(nic.pci_address):
                return DeviceHealth(Health.UNHEALTHY, "device removed")
            return DeviceHealth(
                Health.UNHEALTHY, f"no network interface (kernel driver {nic.driver or 'none'})"
            )
        oper, carrier, admin_up = self._live_link(nic.interface)
        if oper is None and carrier is None:
            oper, carrier = nic.operstate, nic.carrier
        if admin_up is False:
            # Spare NICs meant for pods are often left down on the host: the physical link
            # cannot be known without bringing it up, which is not ours to do.
            return DeviceHealth(Health.UNKNOWN, f"{nic.interface}: administratively down on the host")
        down = link_is_down(oper, carrier)
        if down is not None:
            return DeviceHealth(Health.UNHEALTHY, f"{nic.interface}: {down}")
        if oper == "up" or carrier is True:
            return DeviceHealth(Health.HEALTHY, f"{nic.interface}: link up")
        return DeviceHealth(Health.UNKNOWN, f"{nic.interface}: operstate {oper or 'unknown'}")

    def _pci_present(self, address: str) -> bool:
        return os.path.exists(os.path.join(self.options.sysfs_root, "sys/bus/pci/devices", address))

    def _pod_health(self, held: _Held, nic: Nic | None) -> DeviceHealth:
        """A NIC inside a pod: removed if its PCI function is gone, else its link as seen in the
        pinned namespace (looked at once per rescan interval: it forks nsenter)."""
        att = held.attachment
        if att.pci_address and not self._pci_present(att.pci_address):
            return DeviceHealth(Health.UNHEALTHY, "device removed")
        cached = self._pod_state.get(att.device)
        now = self._clock()
        if cached is not None and now - cached[0] < self.options.rescan_interval:
            return cached[1]
        result = DeviceHealth(Health.UNKNOWN, "in a pod; its namespace is not pinned")
        if iplink.is_pinned_netns(att.pin):
            try:
                link = iplink.find(iplink.links(att.pin), mac=att.mac) if att.mac else None
                if link is None:
                    link = iplink.find(iplink.links(att.pin), name=att.container_name)
            except (iplink.IpError, ValueError) as e:
                link = None
                result = DeviceHealth(Health.UNKNOWN, f"cannot look into the pod's namespace: {e}")
            else:
                if link is None:
                    result = DeviceHealth(Health.UNHEALTHY, "interface not found in the pod's namespace")
                else:
                    down = link_is_down(link.operstate, link.carrier)
                    if not link.up:
                        result = DeviceHealth(Health.UNKNOWN, f"{link.name} (in pod): administratively down")
                    elif down is not None:
                        result = DeviceHealth(Health.UNHEALTHY, f"{link.name} (in pod): {down}")
                    else:
                        result = DeviceHealth(Health.HEALTHY, f"{link.name} (in pod): link {link.operstate}")
                    self._report_attached(held)
        elif att.virtual:
            result = DeviceHealth(Health.UNHEALTHY, "interface gone from the host")
        self._pod_state[att.device] = (now, result)
        return result

    def _report_attached(self, held: _Held) -> None:
        """Once the hook put the interface into the pod: Ready=Attached with the pod-side IPs."""
        if held.reported_attached or self._status is None:
            return
        att = held.attachment
        try:
            found = iplink.addresses(att.container_name, att.pin)
            # link-local addresses exist on every link and say nothing about the pod's network
            ips = tuple(a for a in found if not ipaddress.ip_interface(a).ip.is_link_local)
        except (iplink.IpError, ValueError):
            ips = att.ips
        held.reported_attached = True
        self._status.set(
            held.claim, [_status_entry(att, "Attached", f"{att.container_name} is in the pod", ips)]
        )

    # --- prepare ------------------------------------------------------------------------------
    def prepare(
        self, claim: ClaimRef, results: Sequence[AllocatedDevice], configs: Sequence[OpaqueConfig]
    ) -> Preparation:
        with self._lock:
            config.validate_all(claim, configs)
            nics = self._refresh(force=True)
            atts: list[Attachment] = []
            prepared: list[PreparedDevice] = []
            uses_rdma = uses_vfio = False
            for r in results:
                nic = nics.get(r.device)
                held = self._held.get(r.device)
                if held is not None and held.claim.uid != claim.uid and not r.admin_access:
                    raise PrepareError(
                        f"{describe_claim(claim)}: device {r.device} is held by claim "
                        f"{held.claim.namespace}/{held.claim.name}"
                    )
                if nic is None:
                    raise PrepareError(f"{describe_claim(claim)}: device {r.device} is not on this node")
                cfg = config.for_request(claim, configs, r.request)
                att = self._attachment(claim, r, nic, cfg)
                atts.append(att)
                prepared.append(
                    PreparedDevice(r.request, r.pool, r.device, self._edits(att, nic), r.share_id)
                )
                uses_rdma |= bool(nic.rdma_device) and any(
                    c.path.startswith("/dev/infiniband/") for c in nic.char_devices
                )
                uses_vfio |= any(c.path.startswith("/dev/vfio/") for c in nic.char_devices)
            dup = config.duplicate_names_error(
                claim, [(a.device, a.container_name) for a in atts if a.mode != "none"]
            )
            if dup is not None:
                raise dup
            if any(a.mode == "hook" for a in atts) or any(a.mode == "cdi" for a in atts):
                self._ensure_hook()
                (self.options.state_dir / "netns").mkdir(mode=0o700, parents=True, exist_ok=True)
            for att in atts:
                if att.mode != "none":
                    self._held[att.device] = _Held(claim, att, nics[att.device].device)
                    self._pod_state.pop(att.device, None)
            claim_edits = ContainerEdits(device_nodes=self._claim_nodes(uses_rdma, uses_vfio))
            for att in atts:
                self._log.info(
                    f"prepared {att.device} for {describe_claim(claim)}: "
                    f"{att.host_name} -> {att.container_name} ({att.mode})",
                    **logs.claim(claim),
                    device=att.device,
                    interface=att.host_name,
                    pod_interface=att.container_name,
                    mode=att.mode,
                )
            if self._status is not None:
                self._status.set(
                    claim,
                    [
                        _status_entry(
                            a,
                            "Prepared",
                            f"{a.host_name} will be {a.container_name} in the pod"
                            if a.mode != "none"
                            else "admin access: interface stays on the host",
                            a.ips,
                        )
                        for a in atts
                    ],
                )
            return Preparation(
                devices=tuple(prepared),
                claim_edits=claim_edits,
                state={
                    "attachments": [a.to_json() for a in atts],
                    "devices": {a.device: nics[a.device].device.to_api() for a in atts},
                },
            )

    def _attachment(self, claim: ClaimRef, r: AllocatedDevice, nic: Nic, cfg: config.NicConfig) -> Attachment:
        mode = "none" if r.admin_access else self.options.netdev_mode
        where = f"{describe_claim(claim)}: device {r.device}"
        if nic.interface is None and mode != "none":
            if any(c.path.startswith("/dev/vfio/") for c in nic.char_devices):
                mode = "none"  # a VFIO-bound function: the pod gets the device nodes, no netdev to move
            else:
                raise PrepareError(f"{where} has no network interface on the host (already in a pod?)")
        if cfg.ips and mode == "cdi":
            raise ConfigError(
                f"{where}: 'ips' needs --nic-netdev-mode hook (CDI netDevices cannot set addresses)"
            )
        host = nic.interface or ""
        suffix = f"_{r.share_id}" if r.share_id else ""
        return Attachment(
            device=r.device,
            request=r.request,
            pool=r.pool,
            host_name=host,
            container_name=cfg.interface_name or host,
            mac=nic.mac,
            pci_address=nic.pci_address,
            virtual=nic.virtual,
            mode=mode,
            pin=str(self.options.state_dir / "netns" / f"{claim.uid}_{r.device}{suffix}"),
            share_id=r.share_id,
            ips=cfg.ips,
            link_up=cfg.link_up,
        )

    def _hook_path(self) -> str:
        return str(self.options.hook_dir / hookfiles.HOOK_NAME)

    def _ensure_hook(self) -> None:
        if self._hook_installed or not self.options.install_hook:
            return
        try:
            hookfiles.install(self.options.hook_dir)
            self._hook_installed = True
        except OSError as e:
            raise PrepareError(f"cannot install the NIC hook into {self.options.hook_dir}: {e}") from e

    def _edits(self, att: Attachment, nic: Nic) -> ContainerEdits:
        token = env_token(att.device)
        env = [f"TOPODRA_NIC_{token}_INTERFACE={att.container_name}"] if att.container_name else []
        if nic.pci_address:
            env.append(f"TOPODRA_NIC_{token}_PCI_ADDRESS={nic.pci_address}")
        if nic.mac:
            env.append(f"TOPODRA_NIC_{token}_MAC_ADDRESS={nic.mac}")
        if nic.rdma_device:
            env.append(f"TOPODRA_NIC_{token}_RDMA_DEVICE={nic.rdma_device}")
        nodes = tuple(
            DeviceNode(c.path, type="c", major=c.major, minor=c.minor)
            if c.major is not None and c.minor is not None
            else DeviceNode(c.path)
            for c in nic.char_devices
        )
        hooks: tuple[Hook, ...] = ()
        nets: tuple[NetDevice, ...] = ()
        state = str(self.options.state_dir)
        pin_id = os.path.basename(att.pin)
        if att.mode == "hook":
            args = [
                "netdev.sh",
                "attach",
                "--state-dir",
                state,
                "--pin",
                pin_id,
                "--host-name",
                att.host_name,
            ]
            args += ["--name", att.container_name]
            if att.mac:
                args += ["--mac", att.mac]
            if att.pci_address:
                args += ["--pci", att.pci_address]
            for ip in att.ips:
                args += ["--ip", ip]
            if att.link_up:
                args.append("--up")
            hooks = (Hook("createRuntime", self._hook_path(), tuple(args), timeout=HOOK_TIMEOUT),)
        elif att.mode == "cdi":
            nets = (NetDevice(att.host_name, att.container_name),)
            args = ["netdev.sh", "pin", "--state-dir", state, "--pin", pin_id]
            hooks = (Hook("createRuntime", self._hook_path(), tuple(args), timeout=HOOK_TIMEOUT),)
        return ContainerEdits(env=tuple(env), device_nodes=nodes, hooks=hooks, net_devices=nets)

    def _misc_node(self, name: str, path: str) -> DeviceNode | None:
        try:
            with open(os.path.join(self.options.sysfs_root, "sys/class/misc", name, "dev")) as f:
                major, _, minor = f.read().strip().partition(":")
            return DeviceNode(path, type="c", major=int(major), minor=int(minor))
        except (OSError, ValueError):
            return None

    def _claim_nodes(self, rdma: bool, vfio: bool) -> tuple[DeviceNode, ...]:
        nodes = []
        if rdma and (n := self._misc_node("rdma_cm", "/dev/infiniband/rdma_cm")) is not None:
            nodes.append(n)
        if vfio and (n := self._misc_node("vfio", "/dev/vfio/vfio")) is not None:
            nodes.append(n)
        return tuple(nodes)

    # --- unprepare ----------------------------------------------------------------------------
    def unprepare(self, claim: ClaimRef, preparation: Preparation) -> None:
        with self._lock:
            atts = [Attachment.from_json(a) for a in preparation.state.get("attachments") or ()]
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
                self._pod_state.pop(att.device, None)
            self._view = None  # the interface is back: rediscover at once
            if errors:
                raise PrepareError(f"{describe_claim(claim)}: " + "; ".join(errors))
            if self._status is not None and atts:
                self._status.remove(claim, [(a.pool, a.device, a.share_id) for a in atts])

    def restore(self, prepared: Mapping[ClaimRef, Preparation]) -> None:
        with self._lock:
            held: dict[str, _Held] = {}
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
                        held[att.device] = _Held(claim, att, dev)
            self._held = held
            self._pod_state.clear()
            self._view = None

    # --- introspection (tests, debugging) -----------------------------------------------------
    def held(self) -> dict[str, tuple[ClaimRef, Attachment]]:
        with self._lock:
            return {k: (h.claim, h.attachment) for k, h in self._held.items()}

    def nics(self) -> dict[str, Nic]:
        with self._lock:
            return dict(self._refresh())


def _status_entry(att: Attachment, reason: str, message: str, ips: Sequence[str]) -> AllocatedDeviceStatus:
    net = NetworkDeviceData(
        interface_name=att.container_name if att.mode != "none" else att.host_name,
        hardware_address=att.mac or "",
        ips=tuple(ips),
    )
    return AllocatedDeviceStatus(
        pool=att.pool,
        device=att.device,
        share_id=att.share_id,
        conditions=(DeviceCondition("Ready", "True", reason, message),),
        network_data=net,
    )


def _taint_value(message: str) -> str:
    """A label-value token for the taint (the health message itself may have spaces)."""
    m = message.lower()
    if "removed" in m:
        return "DeviceRemoved"
    if "no carrier" in m:
        return "NoCarrier"
    if ("link" in m and "down" in m) or "lowerlayerdown" in m or "notpresent" in m:
        return "LinkDown"
    if "no network interface" in m:
        return "NoInterface"
    return "Unhealthy"
