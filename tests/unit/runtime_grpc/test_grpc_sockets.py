"""Socket names (docs/design/kubelet.md), length limits and stale-file handling."""

from __future__ import annotations

import base64
import hashlib
import socket
from pathlib import Path

import pytest
from topodra.common.runtime import sockets

UID = "5f3d8b9e-2c41-4f5e-9a7b-1c2d3e4f5a6b"
DRIVER = "accelerator.topodra.io"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def registry_of_length(total: int, name: str) -> Path:
    """A registry folder such that `<folder>/<name>` is exactly `total` bytes."""
    base = "/var/lib/kubelet/plugins_registry"
    pad = total - len(base) - 1 - len(name) - 1
    assert pad > 0
    return Path(base + "/" + "r" * pad)


def test_default_names() -> None:
    reg = Path("/var/lib/kubelet/plugins_registry")
    assert sockets.registration_socket(reg, DRIVER, None) == reg / f"{DRIVER}-reg.sock"
    plugin = Path("/var/lib/kubelet/plugins") / DRIVER
    assert sockets.dra_socket(plugin, None) == plugin / "dra.sock"
    assert sockets.dra_socket(plugin, UID) == plugin / f"dra-{UID}.sock"


def test_rolling_update_registration_name_fits_first_candidate() -> None:
    reg = Path("/var/lib/kubelet/plugins_registry")
    assert sockets.registration_socket(reg, DRIVER, UID) == reg / f"{DRIVER}-{UID}-reg.sock"


def test_rolling_update_falls_back_to_hash_of_uid_then_of_driver_and_uid() -> None:
    first = f"{DRIVER}-{UID}-reg.sock"
    second = f"{DRIVER}-{b64url(hashlib.sha256(UID.encode()).digest()[:8])}-reg.sock"
    both = DRIVER.encode() + b"\0" + UID.encode()
    third = f"dra-{b64url(hashlib.sha256(both).digest()[:16])}-reg.sock"
    assert len(second) == len(DRIVER) + 1 + 11 + len("-reg.sock")
    assert len(third) == 4 + 22 + len("-reg.sock")

    exactly = registry_of_length(108, first)
    assert sockets.registration_socket(exactly, DRIVER, UID).name == first

    one_over = registry_of_length(109, first)
    assert sockets.registration_socket(one_over, DRIVER, UID).name == second

    reg = registry_of_length(109, second)  # the second candidate misses by one byte too
    got = sockets.registration_socket(reg, DRIVER, UID)
    assert got.name == third
    assert len(str(got).encode()) <= 108


def test_no_candidate_fits_is_a_clear_error() -> None:
    reg = Path("/" + "x" * 100)
    with pytest.raises(
        sockets.SocketPathError, match=r"is \d+ bytes; a unix socket path may have at most 108"
    ):
        sockets.registration_socket(reg, DRIVER, UID)
    with pytest.raises(sockets.SocketPathError, match="at most 108"):
        sockets.registration_socket(reg, DRIVER, None)
    with pytest.raises(sockets.SocketPathError, match="at most 108"):
        sockets.dra_socket(reg, UID)


@pytest.mark.parametrize("uid", ["../../etc", "a/b", "x\0y", "a" * 200])
def test_pod_uid_cannot_escape_the_folder(uid: str) -> None:
    with pytest.raises(ValueError, match="pod UID"):
        sockets.dra_socket(Path("/p"), uid)


@pytest.mark.parametrize("name", ["../evil", "a/b", "UPPER.io", ""])
def test_driver_name_must_be_a_dns_subdomain(name: str) -> None:
    with pytest.raises(ValueError, match="DNS subdomain"):
        sockets.registration_socket(Path("/r"), name, None)


def test_remove_stale_removes_sockets_and_refuses_other_files(tmp_path: Path) -> None:
    assert sockets.remove_stale(tmp_path / "absent.sock") is False
    path = tmp_path / "old.sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.close()
    assert sockets.remove_stale(path) is True
    assert not path.exists()
    (tmp_path / "file.sock").write_text("x")
    with pytest.raises(sockets.SocketPathError, match="not a socket"):
        sockets.remove_stale(tmp_path / "file.sock")
    assert (tmp_path / "file.sock").exists()
