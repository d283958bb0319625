"""Device nodes on the host, checked before a container gets them.

A node under `/dev` is only a name: after a rebind, a hot-plug or a stale tmpfs, `/dev/dri/
renderD128` can point at another device (or none). Prepare therefore stats each host node and
requires a character device with exactly the major:minor sysfs gives for the function; a
mismatch refuses the claim instead of handing a pod someone else's GPU.

Host paths are `<dev root>/<path>`: `/` on a real node; a test or a synthetic machine points
the dev root at a folder whose nodes are harmless real character devices (with the numbers
sysfs gives when no driver on the host owns them, or stand-ins such as 1:3 with
`--accelerator-node-check exists`).

The accelerator driver checks its nodes here; nothing in it is specific to accelerators.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from topodra.common.cdi.edits import DeviceNode


@dataclass(frozen=True, slots=True)
class Node:
    """A character device the container gets: `path` in the container and under the dev root."""

    path: str  # e.g. /dev/dri/renderD128
    major: int | None  # what sysfs/procfs say; None: not known, any char device is taken
    minor: int | None
    optional: bool = False  # left out (with a log line) when the host has no such node


class NodeError(Exception):
    """A required node is missing, not a character device, or not the device sysfs names."""


def host_path(dev_root: Path, node: Node) -> Path:
    path: Path = dev_root / node.path.lstrip("/")
    return path


def resolve(node: Node, dev_root: Path, *, strict: bool = True) -> DeviceNode | None:
    """The CDI device node for `node`, or None for an optional node the host does not have.

    `strict` False accepts any character device (stand-in nodes of a synthetic machine); the
    CDI node then carries the host node's own numbers, so the container gets what is there."""
    path = host_path(dev_root, node)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if node.optional:
            return None
        raise NodeError(f"{path} is missing on the host") from None
    except OSError as e:
        raise NodeError(f"{path} cannot be checked: {e.strerror}") from e
    if not stat.S_ISCHR(st.st_mode):
        raise NodeError(f"{path} is not a character device")
    major, minor = os.major(st.st_rdev), os.minor(st.st_rdev)
    want = (node.major, node.minor)
    wrong = (node.major is not None and major != node.major) or (
        node.minor is not None and minor != node.minor
    )
    if strict and wrong:
        expected = ":".join("?" if v is None else str(v) for v in want)
        raise NodeError(
            f"{path} is character device {major}:{minor}, but sysfs says {expected} "
            "(a stale node; refusing to hand it out)"
        )
    return DeviceNode(
        path=node.path,
        host_path=None if str(path) == node.path else str(path),
        type="c",
        major=major,
        minor=minor,
    )
