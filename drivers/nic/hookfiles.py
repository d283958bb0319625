"""The host-side hook shipped as package data, and putting it where runtimes can run it.

CDI hook paths must be absolute host paths, and the host may have no Python, so the hook is a
POSIX sh script copied to a host folder (default /opt/topodra/hooks, mounted into the driver's
pod). The driver installs it before the first prepare that needs it, so the hook always matches
the driver version that wrote the CDI spec.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from topodra.common.cdi.spec import atomic_write

HOOK_NAME = "netdev.sh"


def hook_source() -> bytes:
    return (resources.files("topodra.drivers.nic") / "hooks" / HOOK_NAME).read_bytes()


def install(hook_dir: Path) -> Path:
    """Write the hook into `hook_dir` (atomically, mode 0755) unless it is already identical."""
    path = hook_dir / HOOK_NAME
    data = hook_source()
    try:
        if path.read_bytes() == data and os.access(path, os.X_OK):
            return path
    except OSError:
        pass
    hook_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
    atomic_write(path, data, mode=0o755)
    return path
