"""OCI image archives written without a registry or a container engine.

The real node imports images with `ctr images import`; an OCI image layout in a tar (oci-layout,
index.json, blobs/sha256/...) is what it reads. Layers are plain (uncompressed) tars, so a
layer's digest is also its diff ID. Every tar is written with fixed owners and times, so the
same inputs give the same digests and images can be cached by content.
"""

from __future__ import annotations

import hashlib
import io
import json
import platform
import tarfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER = "application/vnd.oci.image.layer.v1.tar"
NAME_ANNOTATION = "io.containerd.image.name"
REF_ANNOTATION = "org.opencontainers.image.ref.name"
_ARCH = {"x86_64": "amd64", "aarch64": "arm64", "ppc64le": "ppc64le", "s390x": "s390x"}


def host_arch() -> str:
    """The OCI architecture name of this machine (containerd refuses an image of another one)."""
    machine = platform.machine()
    return _ARCH.get(machine, machine)


@dataclass(frozen=True)
class Entry:
    """One file, folder or symlink of a layer: `path` inside the image, absolute or relative."""

    path: str
    source: Path | None = None  # a regular file's content comes from here
    data: bytes | None = None  # ... or from these bytes
    mode: int = 0o755
    link: str | None = None  # a symlink to this target
    folder: bool = False


@dataclass
class Image:
    """What goes into one image: a name (`localhost/x:tag`), layers, and the run config."""

    name: str
    layers: list[Path] = field(default_factory=list)  # uncompressed layer tars, lowest first
    entrypoint: Sequence[str] = ()
    cmd: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    workdir: str = "/"
    user: str = ""


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _tarinfo(name: str, *, kind: bytes, mode: int, size: int = 0, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name.lstrip("/"))
    info.type = kind
    info.mode = mode
    info.size = size
    info.linkname = link
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.mtime = 0
    return info


def write_layer(dest: Path, entries: Iterable[Entry]) -> Path:
    """A layer tar of `entries` (parents must be listed before their children)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(dest, "w", format=tarfile.PAX_FORMAT) as tar:
        for e in entries:
            if e.folder:
                tar.addfile(_tarinfo(e.path, kind=tarfile.DIRTYPE, mode=e.mode))
            elif e.link is not None:
                tar.addfile(_tarinfo(e.path, kind=tarfile.SYMTYPE, mode=0o777, link=e.link))
            else:
                data = e.data if e.data is not None else (e.source.read_bytes() if e.source else b"")
                info = _tarinfo(e.path, kind=tarfile.REGTYPE, mode=e.mode, size=len(data))
                tar.addfile(info, io.BytesIO(data))
    return dest


def layer_from_tree(dest: Path, root: Path, prefix: str = "") -> Path:
    """A layer holding every file under `root` (at `prefix` inside the image), owners reset to 0."""
    dest.parent.mkdir(parents=True, exist_ok=True)

    def reset(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        info.mtime = 0
        return info

    with tarfile.open(dest, "w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(root).as_posix()
            tar.add(path, arcname=f"{prefix.strip('/')}/{rel}".lstrip("/"), recursive=False, filter=reset)
    return dest


def _blob(tar: tarfile.TarFile, data: bytes) -> dict[str, Any]:
    digest = hashlib.sha256(data).hexdigest()
    info = _tarinfo(f"blobs/sha256/{digest}", kind=tarfile.REGTYPE, mode=0o644, size=len(data))
    tar.addfile(info, io.BytesIO(data))
    return {"digest": f"sha256:{digest}", "size": len(data)}


def write_archive(dest: Path, image: Image) -> Path:
    """The image as an OCI layout tar that `ctr images import` reads, named `image.name`."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    layer_descs: list[dict[str, Any]] = []
    diff_ids: list[str] = []
    partial = dest.with_name(dest.name + ".partial")
    with tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(_tarinfo("blobs", kind=tarfile.DIRTYPE, mode=0o755))
        tar.addfile(_tarinfo("blobs/sha256", kind=tarfile.DIRTYPE, mode=0o755))
        for layer in image.layers:
            digest = _sha256_file(layer)
            size = layer.stat().st_size
            info = _tarinfo(f"blobs/sha256/{digest}", kind=tarfile.REGTYPE, mode=0o644, size=size)
            with layer.open("rb") as f:
                tar.addfile(info, f)
            layer_descs.append({"mediaType": LAYER, "digest": f"sha256:{digest}", "size": size})
            diff_ids.append(f"sha256:{digest}")
        run: dict[str, Any] = {"WorkingDir": image.workdir}
        if image.entrypoint:
            run["Entrypoint"] = list(image.entrypoint)
        if image.cmd:
            run["Cmd"] = list(image.cmd)
        if image.env:
            run["Env"] = [f"{k}={v}" for k, v in image.env.items()]
        if image.user:
            run["User"] = image.user
        config = {
            "architecture": host_arch(),
            "os": "linux",
            "config": run,
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
        }
        config_desc = {"mediaType": CONFIG, **_blob(tar, _json(config))}
        manifest = {"schemaVersion": 2, "mediaType": MANIFEST, "config": config_desc, "layers": layer_descs}
        manifest_desc = {"mediaType": MANIFEST, **_blob(tar, _json(manifest))}
        tag = image.name.rsplit(":", 1)[1] if ":" in image.name.rsplit("/", 1)[-1] else "latest"
        manifest_desc["annotations"] = {NAME_ANNOTATION: image.name, REF_ANNOTATION: tag}
        manifest_desc["platform"] = {"architecture": host_arch(), "os": "linux"}
        index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                 "manifests": [manifest_desc]}  # fmt: skip
        layout = _json({"imageLayoutVersion": "1.0.0"})
        for name, data in (("oci-layout", layout), ("index.json", _json(index))):
            tar.addfile(_tarinfo(name, kind=tarfile.REGTYPE, mode=0o644, size=len(data)), io.BytesIO(data))
    partial.rename(dest)
    return dest


def _json(doc: object) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
