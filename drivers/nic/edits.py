"""What prepare makes of an allocated NIC: where its interface must go, and the CDI edits that
put it there at container creation (our createRuntime hook, or the runtime's own netDevices)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from topodra.common.cdi.edits import ContainerEdits, DeviceNode, Hook, NetDevice
from topodra.common.runtime.claims.spec import env_token
from topodra.common.runtime.config import ConfigError, describe_claim
from topodra.common.runtime.driver import AllocatedDevice, ClaimRef, PrepareError
from topodra.common.topology.hostfiles import dev_numbers, is_this_host
from topodra.drivers.nic import config, hookfiles
from topodra.drivers.nic.attach import Attachment
from topodra.drivers.nic.devices import Nic

HOOK_TIMEOUT = 30


def attachment(
    claim: ClaimRef, r: AllocatedDevice, nic: Nic, cfg: config.NicConfig, netdev_mode: str, state_dir: Path
) -> Attachment:
    mode = "none" if r.admin_access else netdev_mode
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
        pin=str(state_dir / "netns" / f"{claim.uid}_{r.device}{suffix}"),
        share_id=r.share_id,
        ips=cfg.ips,
        link_up=cfg.link_up,
    )


def device_edits(
    att: Attachment,
    nic: Nic,
    state_dir: Path,
    hook_dir: Path,
    *,
    allow_stacked: bool = False,
    sysfs_root: str = "/",
) -> ContainerEdits:
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
    hook = str(hook_dir / hookfiles.HOOK_NAME)
    hooks: tuple[Hook, ...] = ()
    nets: tuple[NetDevice, ...] = ()
    state = str(state_dir)
    pin_id = os.path.basename(att.pin)
    if att.mode == "hook":
        args = ["netdev.sh", "attach", "--state-dir", state, "--pin", pin_id, "--host-name", att.host_name]
        args += ["--name", att.container_name]
        if att.mac:
            args += ["--mac", att.mac]
        if att.pci_address:
            args += ["--pci", att.pci_address]
        for ip in att.ips:
            args += ["--ip", ip]
        if att.link_up:
            args.append("--up")
        if allow_stacked:
            args.append("--allow-stacked")
        # the hook looks for the NIC under its PCI function in the sysfs the driver publishes
        # from: under a --sysfs-root at a synthetic machine, the host's own /sys may have a real
        # NIC at the synthetic address
        root = os.path.realpath(sysfs_root)
        hook_env = () if is_this_host(root) else (f"TOPODRA_HOOK_SYSFS={os.path.join(root, 'sys')}",)
        hooks = (Hook("createRuntime", hook, tuple(args), env=hook_env, timeout=HOOK_TIMEOUT),)
    elif att.mode == "cdi":
        nets = (NetDevice(att.host_name, att.container_name),)
        args = ["netdev.sh", "pin", "--state-dir", state, "--pin", pin_id]
        hooks = (Hook("createRuntime", hook, tuple(args), timeout=HOOK_TIMEOUT),)
    return ContainerEdits(env=tuple(env), device_nodes=nodes, hooks=hooks, net_devices=nets)


def _misc_node(sysfs_root: str, name: str, path: str) -> DeviceNode | None:
    numbers = dev_numbers(Path(sysfs_root, "sys/class/misc", name, "dev"))
    return DeviceNode(path, type="c", major=numbers[0], minor=numbers[1]) if numbers else None


def claim_nodes(sysfs_root: str, nics: Sequence[Nic]) -> tuple[DeviceNode, ...]:
    """The shared nodes a claim needs once: rdma_cm for RDMA, the VFIO container for VFIO."""
    rdma = any(
        n.rdma_device and any(c.path.startswith("/dev/infiniband/") for c in n.char_devices) for n in nics
    )
    vfio = any(c.path.startswith("/dev/vfio/") for n in nics for c in n.char_devices)
    nodes = []
    if rdma and (n := _misc_node(sysfs_root, "rdma_cm", "/dev/infiniband/rdma_cm")) is not None:
        nodes.append(n)
    if vfio and (n := _misc_node(sysfs_root, "vfio", "/dev/vfio/vfio")) is not None:
        nodes.append(n)
    return tuple(nodes)
