"""CDI spec files: JSON shape, minimum cdiVersion, name rules, and an atomic writer.

One spec file per claim (`<vendor>-<class>_<claim-uid>.json`, the transient-spec naming of the
CDI library), so a claim's devices appear and disappear as a unit and names are never reused
(runtimes cache specs). The version written is the lowest the used fields allow, because older
runtimes (podman 4.3 reads up to 0.5.0) refuse specs newer than they know.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from topodra.common.cdi.edits import ContainerEdits, DeviceNode, Hook, Mount, NetDevice

# docs/design/cdi.md: vendor and class start with a letter, end with a letter or digit.
_VENDOR_OR_CLASS = re.compile(r"[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?")
_DEVICE_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?")
_HOOK_NAMES = frozenset({"createRuntime", "createContainer", "startContainer", "poststart", "poststop"})
_VERSIONS = ("0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0")
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class SpecError(ValueError):
    """A spec that a CDI consumer would reject; raised before anything is written."""


def validate_vendor_or_class(value: str, what: str) -> None:
    if len(value) > 63 or not _VENDOR_OR_CLASS.fullmatch(value):
        raise SpecError(f"CDI {what} {value!r} is not valid (letter first, [A-Za-z0-9_.-], ≤63 chars)")


def split_kind(kind: str) -> tuple[str, str]:
    """(vendor, class) of a CDI kind `vendor/class`, both checked."""
    vendor, sep, cls = kind.partition("/")
    if not sep:
        raise SpecError(f"CDI kind {kind!r} must be vendor/class")
    validate_vendor_or_class(vendor, "vendor")
    validate_vendor_or_class(cls, "class")
    return vendor, cls


def validate_device_name(name: str) -> None:
    if not _DEVICE_NAME.fullmatch(name):
        raise SpecError(f"CDI device name {name!r} is not valid (letters, digits, '_.:-', alnum ends)")


def qualified_name(kind: str, device: str) -> str:
    """`vendor/class=device`, the id the kubelet passes to the runtime."""
    return f"{kind}={device}"


# --- container edits <-> CDI JSON ---------------------------------------------------------------


def _node_to_cdi(n: DeviceNode) -> dict[str, Any]:
    out: dict[str, Any] = {"path": n.path}
    for key, value in (
        ("hostPath", n.host_path),
        ("type", n.type),
        ("major", n.major),
        ("minor", n.minor),
        ("fileMode", n.file_mode),
        ("permissions", n.permissions),
        ("uid", n.uid),
        ("gid", n.gid),
    ):
        if value is not None:
            out[key] = value
    return out


def _mount_to_cdi(m: Mount) -> dict[str, Any]:
    out: dict[str, Any] = {"hostPath": m.host_path, "containerPath": m.container_path}
    if m.options:
        out["options"] = list(m.options)
    if m.type is not None:
        out["type"] = m.type
    return out


def _hook_to_cdi(h: Hook) -> dict[str, Any]:
    out: dict[str, Any] = {"hookName": h.hook_name, "path": h.path}
    if h.args:
        out["args"] = list(h.args)
    if h.env:
        out["env"] = list(h.env)
    if h.timeout is not None:
        out["timeout"] = h.timeout
    return out


def edits_to_cdi(e: ContainerEdits) -> dict[str, Any]:
    """CDI `containerEdits` JSON (only keys that carry something)."""
    out: dict[str, Any] = {}
    if e.env:
        out["env"] = list(e.env)
    if e.device_nodes:
        out["deviceNodes"] = [_node_to_cdi(n) for n in e.device_nodes]
    if e.mounts:
        out["mounts"] = [_mount_to_cdi(m) for m in e.mounts]
    if e.hooks:
        out["hooks"] = [_hook_to_cdi(h) for h in e.hooks]
    if e.net_devices:
        out["netDevices"] = [
            {"hostInterfaceName": d.host_interface_name, "name": d.name} for d in e.net_devices
        ]
    if e.additional_gids:
        out["additionalGids"] = list(e.additional_gids)
    return out


def edits_from_cdi(data: Mapping[str, Any]) -> ContainerEdits:
    """Inverse of `edits_to_cdi`; used to keep edits in the checkpoint in CDI's own words."""

    def opt_int(d: Mapping[str, Any], key: str) -> int | None:
        v = d.get(key)
        return None if v is None else int(v)

    nodes = tuple(
        DeviceNode(
            path=n["path"],
            host_path=n.get("hostPath"),
            type=n.get("type"),
            major=opt_int(n, "major"),
            minor=opt_int(n, "minor"),
            file_mode=opt_int(n, "fileMode"),
            permissions=n.get("permissions"),
            uid=opt_int(n, "uid"),
            gid=opt_int(n, "gid"),
        )
        for n in data.get("deviceNodes", ())
    )
    mounts = tuple(
        Mount(
            host_path=m["hostPath"],
            container_path=m["containerPath"],
            options=tuple(m.get("options", ())),
            type=m.get("type"),
        )
        for m in data.get("mounts", ())
    )
    hooks = tuple(
        Hook(
            hook_name=h["hookName"],
            path=h["path"],
            args=tuple(h.get("args", ())),
            env=tuple(h.get("env", ())),
            timeout=opt_int(h, "timeout"),
        )
        for h in data.get("hooks", ())
    )
    nets = tuple(NetDevice(d["hostInterfaceName"], d["name"]) for d in data.get("netDevices", ()))
    return ContainerEdits(
        env=tuple(data.get("env", ())),
        device_nodes=nodes,
        mounts=mounts,
        hooks=hooks,
        net_devices=nets,
        additional_gids=tuple(int(g) for g in data.get("additionalGids", ())),
    )


def is_empty(e: ContainerEdits) -> bool:
    return not (e.env or e.device_nodes or e.mounts or e.hooks or e.net_devices or e.additional_gids)


def validate_edits(e: ContainerEdits, where: str) -> None:
    """The checks a CDI consumer makes on load, so a driver bug fails prepare, not container start."""
    for env in e.env:
        key, sep, _ = env.partition("=")
        if not sep or not _ENV_KEY.fullmatch(key):
            raise SpecError(f"{where}: env entry {env!r} is not KEY=VALUE")
    for n in e.device_nodes:
        if not n.path.startswith("/"):
            raise SpecError(f"{where}: device node path {n.path!r} is not absolute")
        if n.host_path is not None and not n.host_path.startswith("/"):
            raise SpecError(f"{where}: device node hostPath {n.host_path!r} is not absolute")
        if n.type is not None and n.type not in ("b", "c", "u", "p"):
            raise SpecError(f"{where}: device node {n.path!r} has invalid type {n.type!r}")
        if n.permissions is not None and n.permissions != "none" and set(n.permissions) - set("rwm"):
            raise SpecError(f"{where}: device node {n.path!r} has invalid permissions {n.permissions!r}")
    for m in e.mounts:
        if not m.host_path.startswith("/") or not m.container_path.startswith("/"):
            raise SpecError(f"{where}: mount {m.host_path!r} -> {m.container_path!r} needs absolute paths")
    for h in e.hooks:
        if h.hook_name not in _HOOK_NAMES:
            raise SpecError(f"{where}: unknown hook name {h.hook_name!r}")
        if not h.path.startswith("/"):
            raise SpecError(f"{where}: hook path {h.path!r} is not absolute")
        if h.timeout is not None and h.timeout <= 0:
            raise SpecError(f"{where}: hook timeout must be > 0")
    for d in e.net_devices:
        if not d.host_interface_name or not d.name:
            raise SpecError(f"{where}: netDevice needs hostInterfaceName and name")
    for g in e.additional_gids:
        if g < 0 or g > 0xFFFFFFFF:
            raise SpecError(f"{where}: additionalGids entry {g} is not a uint32")


# --- whole specs --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SpecDevice:
    name: str
    edits: ContainerEdits


_RANK = {v: i for i, v in enumerate(_VERSIONS)}


def newest(versions: Iterable[str]) -> str:
    """The highest of `versions` (cdiVersion strings)."""
    return max(versions, key=_RANK.__getitem__)


def kind_version(kind: str) -> str:
    """What the kind alone needs: a dot in the class name needs 0.6.0."""
    return "0.6.0" if "." in kind.partition("/")[2] else "0.3.0"


def name_version(name: str) -> str:
    """What a device name alone needs: a name starting with a digit needs 0.5.0."""
    return "0.5.0" if name[:1].isdigit() else "0.3.0"


def edits_version(e: ContainerEdits) -> str:
    """What the fields used in `e` need."""
    if e.net_devices:
        return "1.1.0"
    if e.additional_gids:
        return "0.7.0"
    if any(n.host_path is not None for n in e.device_nodes):
        return "0.5.0"
    if any(m.type is not None for m in e.mounts):
        return "0.4.0"
    return "0.3.0"


def minimum_version(kind: str, devices: Sequence[SpecDevice], spec_edits: ContainerEdits) -> str:
    """The lowest cdiVersion whose schema covers every field used (docs/design/cdi.md)."""
    return newest(
        (
            kind_version(kind),
            edits_version(spec_edits),
            *(edits_version(d.edits) for d in devices),
            *(name_version(d.name) for d in devices),
        )
    )


def build_spec(kind: str, devices: Sequence[SpecDevice], spec_edits: ContainerEdits) -> dict[str, Any]:
    """A complete, validated CDI spec document (JSON-ready)."""
    split_kind(kind)
    if not devices:
        raise SpecError("a CDI spec needs at least one device")
    seen: set[str] = set()
    for d in devices:
        validate_device_name(d.name)
        if d.name in seen:
            raise SpecError(f"CDI device name {d.name!r} appears twice")
        seen.add(d.name)
        if is_empty(d.edits):
            raise SpecError(f"CDI device {d.name!r} has no edits (consumers reject empty devices)")
        validate_edits(d.edits, f"CDI device {d.name!r}")
    validate_edits(spec_edits, "claim-wide CDI edits")
    spec: dict[str, Any] = {
        "cdiVersion": minimum_version(kind, devices, spec_edits),
        "kind": kind,
        "devices": [{"name": d.name, "containerEdits": edits_to_cdi(d.edits)} for d in devices],
    }
    if not is_empty(spec_edits):
        spec["containerEdits"] = edits_to_cdi(spec_edits)
    return spec


# --- files --------------------------------------------------------------------------------------


_pid = os.getpid()  # in temp names; a getpid per write was a syscall per write


def _forked() -> None:
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_forked)


def fsync_dir(path: str | os.PathLike[str]) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(
    path: str | os.PathLike[str], data: bytes, mode: int = 0o600, *, durable: bool = True
) -> None:
    """Write via a temp file in the same folder renamed over `path`: a reader (or a restarted
    process) sees the old content or the new, never a mix.

    `durable` (the default) also makes the new content survive a power loss: the data is
    fsynced before the rename (else the rename can reach the disk before the data, leaving an
    empty or torn file) and the folder after it (else the rename itself can be lost). Files
    that are rebuilt from durable state on every start pass `durable=False` (see CdiWriter).
    The temp name ends in `.tmp`, which CDI consumers ignore while it exists. It is created
    new (a stale one, left by a crash, is removed first), so a mode without group or other bits
    is exact without a chmod: a umask only ever takes those away. Names are plain strings (no
    pathlib objects made per write: this runs several times per claim).
    """
    target = os.fspath(path)
    folder, name = os.path.split(target)
    tmp = os.path.join(folder, f".{name}.{_pid}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    try:
        fd = os.open(tmp, flags, mode)
    except FileExistsError:
        os.unlink(tmp)
        fd = os.open(tmp, flags, mode)
    try:
        if mode & 0o077:
            os.fchmod(fd, mode)  # O_CREAT's mode is filtered by the umask
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if durable:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    os.close(fd)
    os.replace(tmp, target)
    if durable:
        fsync_dir(folder or ".")


# Canonical JSON: sorted keys, no whitespace (what `json.dumps(x, sort_keys=True,
# separators=(",", ":"))` gives, through one encoder made once: json.dumps with arguments builds
# a new one per call; it keeps no state between calls). A claim's spec file holds exactly this
# text, and so does the checkpoint's copy of it, so the claim core encodes each spec once.
canonical_json = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode


class CdiWriter:
    """Writes, lists and removes this driver's per-claim spec files in one CDI folder.

    `root` (e.g. /var/run/cdi) is shared with other vendors, so only files named
    `<vendor>-<class>_<id>.json` are ever touched, and `id` must be a safe single path component.

    Writes and removals are atomic (temp file + rename) but not fsynced: a spec is a copy of
    the `cdiSpec` the claim core keeps in its checkpoint, which is durable before the kubelet
    hears of the claim, and every start rewrites each completed claim's spec that is missing,
    unreadable or different and removes specs of claims it does not hold. Only a power loss or
    a kernel crash loses unsynced page-cache data, and both reboot the node: /var/run/cdi is a
    tmpfs (emptied anyway), and no container of the claim starts again before the kubelet has
    re-prepared it through this plugin, which recovers first. A kill -9 of the plugin loses
    nothing (the page cache survives the process).
    """

    def __init__(self, root: Path, kind: str) -> None:
        vendor, cls = split_kind(kind)
        self.root = root
        self.kind = kind
        self._prefix = f"{vendor}-{cls}_"
        self._folder = os.fspath(root)
        self._base = os.path.join(self._folder, self._prefix)  # + "<id>.json": a file's path

    def file_name(self, spec_id: str) -> str:
        if not _DEVICE_NAME.fullmatch(spec_id) or "/" in spec_id or spec_id in (".", ".."):
            raise SpecError(f"CDI spec id {spec_id!r} is not a safe file-name component")
        return f"{self._prefix}{spec_id}.json"

    def path(self, spec_id: str) -> Path:
        return self.root / self.file_name(spec_id)

    def _file(self, spec_id: str) -> str:
        """`path` as a plain string, for the per-claim calls below (no os.path.join per call)."""
        self.file_name(spec_id)  # checks the id
        return f"{self._base}{spec_id}.json"

    def write(self, spec_id: str, spec: Mapping[str, Any]) -> Path:
        """`put`, answering with the file's path."""
        self.put(spec_id, spec)
        return self.path(spec_id)

    def put(self, spec_id: str, spec: Mapping[str, Any]) -> str:
        """One line of `canonical_json` (json's C encoder; `indent=` would switch to the
        pure-Python encoder, which cost more than the rest of the write; two writes per claim).
        Answers that text (without the newline), which the claim core's checkpoint keeps instead
        of encoding the spec again. No Path made: the claim core calls this twice per prepare."""
        if spec.get("kind") != self.kind:
            raise SpecError(f"spec kind {spec.get('kind')!r} is not this writer's {self.kind!r}")
        path = self._file(spec_id)
        text = canonical_json(spec)
        data = text.encode() + b"\n"
        try:
            atomic_write(path, data, durable=False)
        except FileNotFoundError:  # the folder is made on the first write (and after a removal)
            self.root.mkdir(mode=0o755, parents=True, exist_ok=True)
            atomic_write(path, data, durable=False)
        return text

    def read(self, spec_id: str) -> dict[str, Any] | None:
        try:
            with open(self._file(spec_id), "rb") as f:
                data: dict[str, Any] = json.loads(f.read())
        except FileNotFoundError:
            return None
        return data

    def remove(self, spec_id: str) -> bool:
        """True when a file was removed; a missing file is fine (idempotent)."""
        try:
            os.unlink(self._file(spec_id))
        except FileNotFoundError:
            return False
        return True

    def list_ids(self) -> list[str]:
        """Ids of our spec files present now (stale temp files are not specs and are skipped)."""
        if not self.root.is_dir():
            return []
        ids = []
        for p in self.root.iterdir():
            n = p.name
            if n.startswith(self._prefix) and n.endswith(".json"):
                spec_id = n[len(self._prefix) : -len(".json")]
                if _DEVICE_NAME.fullmatch(spec_id):
                    ids.append(spec_id)
        return sorted(ids)

    def remove_stale_temps(self) -> Iterable[Path]:
        """Temp files a crash left behind (ours only: `.<prefix>....tmp`)."""
        removed = []
        if self.root.is_dir():
            for p in self.root.glob(f".{self._prefix}*.tmp"):
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()
                    removed.append(p)
        return removed
