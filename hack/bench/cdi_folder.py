"""Where a benchmark's plugins write their CDI specs: a tmpfs, as on a node.

On a node the CDI folder the drivers write (`/var/run/cdi`, deploy/base) lies in `/run`, a
tmpfs. The benchmarks' temporary roots are on this machine's disk (ext4), where making a file
costs the writer far more system time (perf: the inode allocator's scan for recently freed
inodes). Measured with the bench plugin, one call at a time: 0.24-0.40 ms of the plugin's system
CPU per prepare+unprepare, which a node does not pay. So every plugin of a benchmark, topodra's
and the Go peer's alike, gets its CDI folder on /dev/shm; the state folder (the checkpoint, on
disk on a node too) stays on disk.
"""

from __future__ import annotations

import shutil
from pathlib import Path

TMPFS = Path("/dev/shm")


def _on_tmpfs(root: Path) -> Path:
    return TMPFS / f"topodra-bench-{root.name}-cdi"


def cdi_folder(root: Path) -> Path:
    """The CDI folder for a plugin whose other folders are under `root` (made here); `root/cdi`
    where this machine has no /dev/shm."""
    if not TMPFS.is_dir():
        return root / "cdi"
    folder = _on_tmpfs(root)
    folder.mkdir(mode=0o755, exist_ok=True)
    return folder


def remove_cdi_folder(root: Path) -> None:
    """Remove what `cdi_folder(root)` made on the tmpfs (`root/cdi` goes with `root`)."""
    shutil.rmtree(_on_tmpfs(root), ignore_errors=True)
