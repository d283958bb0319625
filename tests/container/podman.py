"""Real containers for tests: Debian's podman with runc, a busybox image built without a registry.

What works on this host: `crun` fails on this host's cgroup setup, so
every run uses `--runtime runc --cgroup-manager cgroupfs`, and the two `--ulimit` flags keep runc
from failing on rlimits. podman reads CDI specs from /etc/cdi and /var/run/cdi (cdiVersion up to
0.5.0 in podman 4.3).

Use from a test module:

    from tests.container.podman import busybox_image, run  # noqa: F401  (busybox_image is a fixture)

    @pytest.mark.container
    def test_x(busybox_image: str) -> None:
        out = run(busybox_image, ["sh", "-c", "env"], devices=["vendor.io/class=name"])
        assert out.returncode == 0, out.stderr
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.conftest import skip_or_fail

BUSYBOX = Path("/bin/busybox")
APPLETS = (
    "sh",
    "env",
    "ls",
    "cat",
    "grep",
    "ip",
    "stat",
    "echo",
    "test",
    "true",
    "id",
    "sleep",
    "head",
    "mkdir",
)
BASE = ["--runtime", "runc", "--cgroup-manager", "cgroupfs"]
RUN_FLAGS = ["--rm", "--network=none", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]


def unavailable() -> str | None:
    """Why real containers cannot run here, or None."""
    if shutil.which("podman") is None:
        return "podman is not installed (apt-get install podman runc busybox-static)"
    if shutil.which("runc") is None:
        return "runc is not installed"
    if not BUSYBOX.is_file():
        return f"{BUSYBOX} is missing (apt-get install busybox-static)"
    if os.geteuid() != 0:
        return "container tests need root (rootful podman)"
    return None


def podman(*args: str, timeout: float = 120, check: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["podman", *BASE, *args], capture_output=True, text=True, timeout=timeout, check=check
    )


def image_name() -> str:
    """Named after the busybox binary's hash and the applet list, so a change builds a new image."""
    digest = hashlib.sha256(BUSYBOX.read_bytes() + " ".join(APPLETS).encode()).hexdigest()[:12]
    return f"localhost/topodra-busybox:{digest}"


def build_image() -> str:
    """`podman import` of a one-binary rootfs; reused when an image of this name exists."""
    name = image_name()
    if podman("image", "exists", name).returncode == 0:
        return name
    with tempfile.TemporaryDirectory(prefix="topodra-rootfs-") as tmp:
        root = Path(tmp) / "rootfs"
        (root / "bin").mkdir(parents=True)
        for d in ("dev", "proc", "sys", "tmp", "etc"):
            (root / d).mkdir()
        shutil.copy2(BUSYBOX, root / "bin" / "busybox")
        for applet in APPLETS:
            (root / "bin" / applet).symlink_to("busybox")
        archive = Path(tmp) / "rootfs.tar"
        with tarfile.open(archive, "w") as tar:
            tar.add(root, arcname=".")
        out = podman("import", str(archive), name)
        if out.returncode != 0:
            raise RuntimeError(f"podman import failed: {out.stderr}")
    return name


@pytest.fixture(scope="session")
def busybox_image() -> str:
    """The image name; skips (fails in CI) where real containers cannot run."""
    reason = unavailable()
    if reason:
        skip_or_fail(reason)
    return build_image()


def run(
    image: str,
    command: Sequence[str],
    devices: Sequence[str] = (),
    extra: Sequence[str] = (),
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """`podman run` with the flags that work here; `devices` are CDI ids or host device paths."""
    args = ["run", *RUN_FLAGS]
    for d in devices:
        args += ["--device", d]
    return podman(*args, *extra, image, *command, timeout=timeout)
