"""The node's images, made here without a registry and cached by content.

- pause: the sandbox image, one static program (hack/node/pause) that holds the Pod's namespaces.
- busybox: Debian's busybox-static with its applet links, for test Pods.
- topodra: what the Dockerfile builds, made without Docker: a Debian rootfs (mmdebstrap, the
  Dockerfile's runtime packages) as one layer, and a wheel of this checkout with its
  dependencies installed into Debian's Python path as the second. The DaemonSets of deploy/
  run it under the image name their manifests give.

Archives live in ${XDG_CACHE_HOME:-~/.cache}/topodra/node-images, named after the hash of what
went into them; a lock keeps two sessions from writing the same one.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import REPO
from tests.node.oci import Entry, Image, layer_from_tree, write_archive, write_layer

CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "topodra" / "node-images"
DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = os.environ.get("TOPODRA_DEBIAN_MIRROR", "http://deb.debian.org/debian")
# The Dockerfile's runtime packages, plus the interpreter its python:3.11 base image brings.
# libstdc++6: protobuf's and cel-expr-python's extensions link it (the python image has it,
# Debian's essential set not).
DEBIAN_PACKAGES = ("python3", "libstdc++6", "iproute2", "util-linux", "mount", "libudev1", "pci.ids")
DEBIAN_PYTHON = "3.11"
DEBIAN_GLIBC_MINOR = 36  # bookworm's glibc 2.36
# What the wheel is built from (as the Dockerfile and .dockerignore say).
WHEEL_INPUTS = ("pyproject.toml", "README.md", "common", "drivers", "proto")
_LAUNCHER = b"""#!/usr/bin/python3
import sys

from topodra.drivers.cli.main import main

sys.exit(main())
"""


class ImageToolMissing(RuntimeError):
    """A tool an image is made with is not installed (the message says which)."""


@dataclass(frozen=True)
class BuiltImage:
    name: str
    archive: Path


@contextlib.contextmanager
def _locked(cache: Path) -> Iterator[None]:
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _digest(parts: Iterable[bytes]) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(hashlib.sha256(p).digest())
    return h.hexdigest()[:16]


def pause_image(pause_binary: Path, cache: Path = CACHE) -> BuiltImage:
    key = _digest([pause_binary.read_bytes()])
    name = f"localhost/topodra/pause:{key}"
    archive = cache / f"pause-{key}.tar"
    with _locked(cache):
        if not archive.exists():
            with tempfile.TemporaryDirectory(dir=cache) as tmp:
                layer = write_layer(Path(tmp) / "layer.tar", [Entry("pause", source=pause_binary)])
                write_archive(archive, Image(name, [layer], entrypoint=["/pause"]))
    return BuiltImage(name, archive)


def busybox_applets(busybox: Path) -> list[str]:
    done = subprocess.run([str(busybox), "--list"], capture_output=True, text=True, timeout=30, check=True)
    return sorted({a for a in done.stdout.split() if a and "/" not in a and a != "busybox"})


def busybox_image(busybox: Path, cache: Path = CACHE) -> BuiltImage:
    applets = busybox_applets(busybox)
    key = _digest([busybox.read_bytes(), " ".join(applets).encode()])
    name = f"localhost/topodra/busybox:{key}"
    archive = cache / f"busybox-{key}.tar"
    with _locked(cache):
        if not archive.exists():
            entries = [Entry(d, folder=True) for d in ("bin", "etc", "tmp", "proc", "sys", "dev")]
            entries.append(Entry("bin/busybox", source=busybox))
            entries += [Entry(f"bin/{a}", link="busybox") for a in applets]
            entries.append(Entry("etc/passwd", data=b"root:x:0:0:root:/:/bin/sh\n", mode=0o644))
            with tempfile.TemporaryDirectory(dir=cache) as tmp:
                layer = write_layer(Path(tmp) / "layer.tar", entries)
                env = {"PATH": "/bin"}
                write_archive(archive, Image(name, [layer], cmd=["sh"], env=env))
    return BuiltImage(name, archive)


def _wheel_input_files() -> list[Path]:
    files: list[Path] = []
    for item in WHEEL_INPUTS:
        path = REPO / item
        if path.is_file():
            files.append(path)
            continue
        for f in sorted(path.rglob("*")):
            if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".pyc":
                files.append(f)
    return files


def checkout_key() -> str:
    """Hash of everything the wheel is built from (paths and contents)."""
    parts: list[bytes] = []
    for f in _wheel_input_files():
        parts += [f.relative_to(REPO).as_posix().encode(), f.read_bytes()]
    return _digest(parts)


def debian_rootfs(cache: Path = CACHE) -> Path:
    """The Debian base layer (a tar mmdebstrap writes); built once per package list."""
    args = [
        "--variant=essential",
        f"--include={','.join(DEBIAN_PACKAGES)}",
        "--dpkgopt=path-exclude=/usr/share/doc/*",
        "--dpkgopt=path-exclude=/usr/share/man/*",
        "--dpkgopt=path-exclude=/usr/share/locale/*",
    ]
    key = _digest([DEBIAN_SUITE.encode(), DEBIAN_MIRROR.encode(), " ".join(args).encode()])
    out = cache / f"debian-{DEBIAN_SUITE}-{key}.tar"
    with _locked(cache):
        if out.exists():
            return out
        exe = shutil.which("mmdebstrap")
        if exe is None:
            raise ImageToolMissing("mmdebstrap is not installed (Debian: apt-get install mmdebstrap)")
        partial = out.with_name(out.name + ".partial.tar")
        sys.stderr.write(f"node images: building the Debian {DEBIAN_SUITE} rootfs with mmdebstrap\n")
        done = subprocess.run(
            [exe, "--quiet", *args, DEBIAN_SUITE, str(partial), DEBIAN_MIRROR],
            capture_output=True,
            text=True,
            timeout=1800,
            check=False,
        )
        if done.returncode != 0:
            partial.unlink(missing_ok=True)
            raise RuntimeError(f"mmdebstrap failed:\n{done.stderr[-3000:]}")
        partial.rename(out)
        _prune(cache, f"debian-{DEBIAN_SUITE}-*.tar", keep=out, newest=1)
    return out


def _pip(*args: str, cwd: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"pip {' '.join(args)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")


def topodra_image(name: str, cache: Path = CACHE) -> BuiltImage:
    """The drivers' image of this checkout under `name` (the DaemonSets' image reference)."""
    base = debian_rootfs(cache)
    key = _digest([base.name.encode(), checkout_key().encode(), name.encode()])
    archive = cache / f"topodra-{key}.tar"
    with _locked(cache):
        if archive.exists():
            return BuiltImage(name, archive)
        sys.stderr.write(f"node images: building {name} from this checkout\n")
        with tempfile.TemporaryDirectory(dir=cache) as tmp_name:
            tmp = Path(tmp_name)
            _pip("wheel", "--no-deps", "--quiet", "--wheel-dir", str(tmp / "wheels"), str(REPO), cwd=tmp)
            (wheel,) = (tmp / "wheels").glob("topodra-*.whl")
            tree = tmp / "tree"
            site = tree / "usr" / "local" / "lib" / f"python{DEBIAN_PYTHON}" / "dist-packages"
            # Wheels for Debian's interpreter, whatever runs this: binary only, its Python version,
            # every manylinux tag its glibc runs.
            arch = os.uname().machine
            platforms = [
                f"--platform=manylinux_2_{minor}_{arch}" for minor in range(17, DEBIAN_GLIBC_MINOR + 1)
            ]
            _pip(
                "install", "--quiet", "--no-compile", "--target", str(site),
                "--only-binary=:all:", f"--python-version={DEBIAN_PYTHON}", "--implementation=cp",
                f"--platform=manylinux2014_{arch}", *platforms, f"--platform=linux_{arch}",
                str(wheel), cwd=tmp,
            )  # fmt: skip
            shutil.rmtree(site / "bin", ignore_errors=True)
            launcher = tree / "usr" / "local" / "bin" / "topodra"
            launcher.parent.mkdir(parents=True)
            launcher.write_bytes(_LAUNCHER)
            launcher.chmod(0o755)
            app = layer_from_tree(tmp / "app.tar", tree)
            env = {
                "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "PYTHONUNBUFFERED": "1",
                "PYTHONDONTWRITEBYTECODE": "1",
            }
            user = "65532:65532"  # as the Dockerfile's; the DaemonSets that need root say so
            image = Image(name, [base, app], entrypoint=["topodra"], cmd=["--help"], env=env, user=user)
            write_archive(archive, image)
        _prune(cache, "topodra-*.tar", keep=archive)
    return BuiltImage(name, archive)


def _prune(cache: Path, pattern: str, keep: Path, newest: int = 3, min_age: float = 3600.0) -> None:
    """Every checkout change makes a new ~300 MB archive: keep the newest few, and any younger
    than an hour (another session may be about to import it)."""
    now = time.time()
    old = sorted(cache.glob(pattern), key=lambda p: p.stat().st_mtime, reverse=True)[newest:]
    for path in old:
        if path != keep and now - path.stat().st_mtime > min_age:
            path.unlink(missing_ok=True)


def normalize_reference(ref: str) -> str:
    """The full name containerd stores for an image reference (`topodra:0.1.0` ->
    `docker.io/library/topodra:0.1.0`), by the docker reference rules the kubelet follows."""
    name, _, digest = ref.partition("@")
    first, _, rest = name.partition("/")
    if not rest or ("." not in first and ":" not in first and first != "localhost"):
        name = f"docker.io/{name}" if rest else f"docker.io/library/{name}"
    if ":" not in name.rsplit("/", 1)[-1] and not digest:
        name += ":latest"
    return f"{name}@{digest}" if digest else name
