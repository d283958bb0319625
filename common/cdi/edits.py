"""CDI container edits as typed data (docs/design/cdi.md).

Drivers return these from prepare; the runtime turns them into one CDI spec file per claim and
derives the minimum cdiVersion from the fields actually used.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class DeviceNode:
    path: str  # path inside the container
    host_path: str | None = None  # needs cdiVersion >= 0.5.0
    type: str | None = None  # "c" or "b"
    major: int | None = None
    minor: int | None = None
    file_mode: int | None = None
    permissions: str | None = None  # subset of "rwm"
    uid: int | None = None
    gid: int | None = None


@dataclass(frozen=True, slots=True)
class Mount:
    host_path: str
    container_path: str
    options: tuple[str, ...] = ()
    type: str | None = None  # needs cdiVersion >= 0.4.0


@dataclass(frozen=True, slots=True)
class Hook:
    hook_name: str  # createRuntime | createContainer | startContainer | poststart | poststop
    path: str
    args: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    timeout: int | None = None


@dataclass(frozen=True, slots=True)
class NetDevice:
    host_interface_name: str
    name: str  # needs cdiVersion >= 1.1.0


@dataclass(frozen=True, slots=True)
class ContainerEdits:
    env: tuple[str, ...] = ()  # "KEY=VALUE"
    device_nodes: tuple[DeviceNode, ...] = ()
    mounts: tuple[Mount, ...] = ()
    hooks: tuple[Hook, ...] = ()
    net_devices: tuple[NetDevice, ...] = ()
    additional_gids: tuple[int, ...] = field(default=())  # needs cdiVersion >= 0.7.0
