"""Where a plugin's unix sockets live, what they are called, and how they are opened and removed.

Names follow the kubelet helper (docs/design/kubelet.md) so that two instances of a driver can run
side by side during a rolling update: with a pod UID each instance gets its own DRA and
registration socket. Sockets are owner-only: the kubelet runs as root and nobody else has any
business talking to a DRA driver.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

# sun_path is 108 bytes; the kubelet (Go) accepts paths of up to 108 bytes.
UNIX_PATH_MAX = 108

_POD_UID = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,127}")
_DRIVER = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_umask_lock = threading.Lock()


class SocketPathError(ValueError):
    """A socket path cannot be used (too long, or something that is not a socket is in the way)."""


def check_driver_name(name: str) -> str:
    """The driver name becomes a file name: it must be a DNS subdomain (no `/`, no `..`)."""
    if len(name) > 253 or not _DRIVER.fullmatch(name):
        raise ValueError(f"driver name {name!r} is not a DNS subdomain")
    return name


def check_pod_uid(uid: str) -> str:
    if not _POD_UID.fullmatch(uid):
        raise ValueError(f"pod UID {uid!r} may hold only letters, digits and '-' (it becomes a file name)")
    return uid


def _length(path: Path) -> int:
    return len(os.fsencode(path))


def check_length(path: Path) -> Path:
    n = _length(path)
    if n > UNIX_PATH_MAX:
        raise SocketPathError(
            f"socket path {path} is {n} bytes; a unix socket path may have at most {UNIX_PATH_MAX}"
            " (shorten --kubelet-root-dir)"
        )
    return path


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def registration_socket(registry_dir: Path, driver: str, pod_uid: str | None) -> Path:
    """`<driver>-reg.sock`; with a pod UID the first candidate that fits in 108 bytes of
    `<driver>-<uid>-reg.sock`, `<driver>-<b64(sha256(uid))[:8 bytes]>-reg.sock`,
    `dra-<b64(sha256(driver NUL uid))[:16 bytes]>-reg.sock`."""
    check_driver_name(driver)
    if not pod_uid:
        return check_length(registry_dir / f"{driver}-reg.sock")
    check_pod_uid(pod_uid)
    uid_hash = hashlib.sha256(pod_uid.encode()).digest()
    both_hash = hashlib.sha256(f"{driver}\0{pod_uid}".encode()).digest()
    candidates = (
        f"{driver}-{pod_uid}-reg.sock",
        f"{driver}-{_b64(uid_hash[:8])}-reg.sock",
        f"dra-{_b64(both_hash[:16])}-reg.sock",
    )
    for name in candidates:
        if _length(registry_dir / name) <= UNIX_PATH_MAX:
            return registry_dir / name
    return check_length(registry_dir / candidates[-1])


def dra_socket(plugin_dir: Path, pod_uid: str | None) -> Path:
    """`<plugin dir>/dra.sock`, or `dra-<pod UID>.sock` during rolling updates."""
    if not pod_uid:
        return check_length(plugin_dir / "dra.sock")
    return check_length(plugin_dir / f"dra-{check_pod_uid(pod_uid)}.sock")


def remove_stale(path: Path) -> bool:
    """Remove a leftover socket at `path` (a previous run that was killed); refuse anything else."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return False
    if not stat.S_ISSOCK(mode):
        raise SocketPathError(f"{path} exists and is not a socket; refusing to replace it")
    path.unlink()
    return True


@contextmanager
def owner_only() -> Iterator[None]:
    """Create files with mode 0600/0700 meanwhile. The umask is per process, hence the lock;
    other threads creating files meanwhile only get stricter modes, never looser ones."""
    with _umask_lock:
        old = os.umask(0o077)
        try:
            yield
        finally:
            os.umask(old)


@dataclass(frozen=True, slots=True)
class OwnedSocket:
    """A socket file this process created; removed only while it is still the same file."""

    path: Path
    device: int
    inode: int

    @classmethod
    def record(cls, path: Path) -> OwnedSocket:
        st = path.lstat()
        if not stat.S_ISSOCK(st.st_mode):
            raise SocketPathError(f"{path} was not created as a socket")
        os.chmod(path, 0o600)
        return cls(path, st.st_dev, st.st_ino)

    def remove(self) -> bool:
        try:
            st = self.path.lstat()
        except FileNotFoundError:
            return False
        if (st.st_dev, st.st_ino) != (self.device, self.inode):
            return False  # replaced by another instance meanwhile: not ours any more
        self.path.unlink(missing_ok=True)
        return True
