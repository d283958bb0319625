"""The driver's own record of prepared claims, in `--state-dir`, surviving crashes and reboots.

The kubelet sends unprepare from its own checkpoint, possibly after the ResourceClaim is gone,
so this file is the only place that knows what a claim holds across a reboot. Each claim has one
of two phases. `completed` is written once the driver and the CDI spec are done (the one durable
write of a prepare), so the answer can be repeated and the spec rewritten after a reboot.
`started` means "in transition, undo on restart": it is written before the driver releases
anything on unprepare (the one durable write of an unprepare), and the claim leaves the file
once released, by a write that is not synced; so a crash at any point leaves a record whose
rollback (driver unprepare + spec removal) is right, or none. An interrupted prepare is not in
this file at all: its CDI spec, written before the driver acts, is the mark a restart finds. A
`started` record still reserves its devices. Why this is crash safe:
docs/design/claim-lifecycle.md.

File `<driver>.checkpoint.json`:

    {"format": "topodra.io/claim-checkpoint", "version": 1, "driver": "cpu.topodra.io",
     "checksum": "sha256:<hex of the canonical JSON of {version, driver, claims}>",
     "claims": {"<uid>": {"namespace", "name", "uid", "phase": "started"|"completed",
                          "allocated": [{"request", "pool", "device", "shareID"?, "adminAccess"?,
                                         "consumedCapacity"?}],
                          "cdiFile": "<vendor>-<class>_<uid>.json",
                          # once the driver answered (also while unpreparing):
                          "preparation": {"devices": [{"request", "pool", "device", "shareID"?,
                                                       "containerEdits"}],
                                          "containerEdits", "state"},
                          # completed only:
                          "result": [{"requestNames", "pool", "device", "cdiDeviceIDs", "shareID"?}],
                          "cdiSpec": {...the exact spec document written...}}}}

The file is that document's canonical JSON (sorted keys, no whitespace: the same text the
checksum covers, made once per save by json's C encoder; `python -m json.tool` shows it
indented). Writes go through temp file + fsync + rename + fsync of the folder; `<driver>.lock`
(flock) serializes whole operations between instances (e.g. during a rolling update), and holds
the token of the instance that held it last, so that an instance notices another one's
operations that wrote only CDI specs (an interrupted prepare) and not this file.
"""

from __future__ import annotations

import contextlib
import enum
import errno
import fcntl
import functools
import hashlib
import json
import os
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from topodra.common import logs
from topodra.common.cdi.spec import atomic_write, edits_from_cdi, edits_to_cdi
from topodra.common.runtime.driver import AllocatedDevice, ClaimRef, Preparation, PreparedDevice
from topodra.common.runtime.names import is_dns_subdomain
from topodra.common.runtime.seams import ResultDevice

log = logs.get("topodra.runtime.checkpoint")

FORMAT = "topodra.io/claim-checkpoint"
VERSION = 1


class Phase(enum.StrEnum):
    STARTED = "started"
    COMPLETED = "completed"


class CheckpointError(Exception):
    """The checkpoint cannot be used and must not be touched (e.g. written by a newer version)."""


class LockTimeout(Exception):
    """Another instance held the state lock for too long."""


@dataclass(frozen=True, slots=True)
class ClaimRecord:
    claim: ClaimRef
    phase: Phase
    allocated: tuple[AllocatedDevice, ...]
    cdi_file: str
    preparation: Preparation | None = None
    result: tuple[ResultDevice, ...] = ()
    cdi_spec: Mapping[str, Any] = field(default_factory=dict)

    def known_preparation(self) -> Preparation:
        """What unprepare gets: the driver's answer, or (started only) just the allocated devices."""
        if self.preparation is not None:
            return self.preparation
        return Preparation(
            devices=tuple(
                PreparedDevice(a.request, a.pool, a.device, share_id=a.share_id) for a in self.allocated
            )
        )


# --- JSON mapping -------------------------------------------------------------------------------


def _opt(out: dict[str, Any], key: str, value: Any) -> None:
    if value:
        out[key] = value


def allocated_to_json(a: AllocatedDevice) -> dict[str, Any]:
    out: dict[str, Any] = {"request": a.request, "pool": a.pool, "device": a.device}
    _opt(out, "shareID", a.share_id)
    _opt(out, "adminAccess", a.admin_access)
    _opt(out, "consumedCapacity", dict(a.consumed_capacity))
    return out


def allocated_from_json(d: Mapping[str, Any]) -> AllocatedDevice:
    return AllocatedDevice(
        request=d["request"],
        pool=d["pool"],
        device=d["device"],
        share_id=d.get("shareID"),
        consumed_capacity=dict(d.get("consumedCapacity", {})),
        admin_access=bool(d.get("adminAccess", False)),
    )


def preparation_to_json(p: Preparation) -> dict[str, Any]:
    devices = []
    for d in p.devices:
        out: dict[str, Any] = {"request": d.request, "pool": d.pool, "device": d.device}
        _opt(out, "shareID", d.share_id)
        out["containerEdits"] = edits_to_cdi(d.edits)
        devices.append(out)
    return {"devices": devices, "containerEdits": edits_to_cdi(p.claim_edits), "state": dict(p.state)}


def preparation_from_json(d: Mapping[str, Any]) -> Preparation:
    return Preparation(
        devices=tuple(
            PreparedDevice(
                request=x["request"],
                pool=x["pool"],
                device=x["device"],
                edits=edits_from_cdi(x.get("containerEdits", {})),
                share_id=x.get("shareID"),
            )
            for x in d.get("devices", ())
        ),
        claim_edits=edits_from_cdi(d.get("containerEdits", {})),
        state=dict(d.get("state", {})),
    )


def _result_to_json(r: ResultDevice) -> dict[str, Any]:
    out: dict[str, Any] = {
        "requestNames": list(r.request_names),
        "pool": r.pool,
        "device": r.device,
        "cdiDeviceIDs": list(r.cdi_device_ids),
    }
    _opt(out, "shareID", r.share_id)
    return out


def _result_from_json(d: Mapping[str, Any]) -> ResultDevice:
    return ResultDevice(
        request_names=tuple(d["requestNames"]),
        pool=d["pool"],
        device=d["device"],
        cdi_device_ids=tuple(d["cdiDeviceIDs"]),
        share_id=d.get("shareID"),
    )


def record_to_json(r: ClaimRecord) -> dict[str, Any]:
    out: dict[str, Any] = {
        "namespace": r.claim.namespace,
        "name": r.claim.name,
        "uid": r.claim.uid,
        "phase": r.phase.value,
        "allocated": [allocated_to_json(a) for a in r.allocated],
        "cdiFile": r.cdi_file,
    }
    if r.preparation is not None:
        out["preparation"] = preparation_to_json(r.preparation)
    if r.phase is Phase.COMPLETED:
        out["result"] = [_result_to_json(x) for x in r.result]
        out["cdiSpec"] = dict(r.cdi_spec)
    return out


def record_from_json(d: Mapping[str, Any]) -> ClaimRecord:
    prep = d.get("preparation")
    return ClaimRecord(
        claim=ClaimRef(d["namespace"], d["name"], d["uid"]),
        phase=Phase(d["phase"]),
        allocated=tuple(allocated_from_json(a) for a in d["allocated"]),
        cdi_file=d["cdiFile"],
        preparation=None if prep is None else preparation_from_json(prep),
        result=tuple(_result_from_json(x) for x in d.get("result", ())),
        cdi_spec=dict(d.get("cdiSpec", {})),
    )


def _canonical(value: Any) -> str:
    """The JSON the checksum is defined over: sorted keys, no spaces (json's C encoder)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _checksum(driver: str, claims: Mapping[str, Any]) -> str:
    return _signature(driver, _canonical(claims).encode())


def _signature(driver: str, *claims_json: bytes) -> str:
    """sha256 of the canonical JSON of {version, driver, claims}, from the claims' own JSON
    (given in parts, so that megabytes of claims are not copied only to be hashed)."""
    h = hashlib.sha256(b'{"claims":')
    for part in claims_json:
        h.update(part)
    h.update(_frame(driver, "")[0])
    return "sha256:" + h.hexdigest()


@functools.lru_cache(maxsize=16)
def _frame(driver: str, boot_id: str) -> tuple[bytes, bytes, bytes]:
    """The parts of the document around the claims that depend only on the driver and the boot
    (the checksum's tail, the file's head up to the checksum, the file's tail): made once, not
    by four JSON encodings per save."""
    driver_json = _canonical(driver)
    return (
        f',"driver":{driver_json},"version":{VERSION}}}'.encode(),
        f'{{"bootID":{_canonical(boot_id)},"checksum":"'.encode(),
        f',"driver":{driver_json},"format":{_canonical(FORMAT)},"version":{VERSION}}}\n'.encode(),
    )


def _member(uid: str, rec: ClaimRecord) -> bytes:
    """`"<uid>":<record JSON>`, one claim's part of the canonical document."""
    return f"{_canonical(uid)}:{_canonical(record_to_json(rec))}".encode()


def _boot_id() -> str:
    """The running kernel's boot id ("" when unknown): tells whether the CDI specs in a tmpfs
    such as /var/run/cdi could have survived since a file was written (see `Loaded`)."""
    try:
        with open("/proc/sys/kernel/random/boot_id", "rb") as f:
            return f.read(64).decode("ascii", "replace").strip()
    except OSError:
        return ""


BOOT_ID = _boot_id()


def _document(driver: str, members: Iterable[bytes], boot_id: str = BOOT_ID) -> bytes:
    """The file from the claims' `_member` texts in uid order: itself the canonical JSON of the
    whole document (what `json.dumps(doc, sort_keys=True, separators=(",", ":"))` gives), so
    the claims' text is made once for both the checksum and the file. `bootID` is outside the
    checksum, so files of earlier versions (without it) still verify."""
    joined = b",".join(members)  # 1.1 MB at 1000 claims held: copied once more, into the file
    _, head, tail = _frame(driver, boot_id)
    checksum = _signature(driver, b"{", joined, b"}").encode()
    return b"".join((head, checksum, b'","claims":{', joined, b"}", tail))


def encode(driver: str, records: Mapping[str, ClaimRecord]) -> bytes:
    return _document(driver, (_member(uid, r) for uid, r in sorted(records.items())))


class _Corrupt(Exception):
    pass


def decode(driver: str, data: bytes) -> dict[str, ClaimRecord]:
    """Raises _Corrupt for damage, CheckpointError for a file we must not interpret."""
    return _decode(driver, data)[0]


def _decode(driver: str, data: bytes) -> tuple[dict[str, ClaimRecord], str]:
    """(records, the boot id the file was written in, "" when it does not say)."""
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _Corrupt(f"not JSON: {str(e)[:200]}") from e
    except RecursionError as e:  # we never write deeper than a few levels
        raise _Corrupt("nested deeper than a checkpoint ever is") from e
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise _Corrupt("not a topodra claim checkpoint")
    version = doc.get("version")
    if not isinstance(version, int):
        raise _Corrupt("no version")
    if version > VERSION:
        raise CheckpointError(f"checkpoint version {version} is newer than this program's {VERSION}")
    if doc.get("driver") != driver:
        raise _Corrupt(f"checkpoint is for driver {doc.get('driver')!r}, not {driver!r}")
    claims = doc.get("claims")
    if not isinstance(claims, dict):
        raise _Corrupt("no claims object")
    if doc.get("checksum") != _checksum(driver, claims):
        raise _Corrupt("checksum mismatch")
    try:
        records = {uid: record_from_json(c) for uid, c in claims.items()}
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise _Corrupt(f"malformed claim entry: {type(e).__name__}: {e}") from e
    for uid, r in records.items():
        if r.claim.uid != uid:
            raise _Corrupt(f"claim entry {uid!r} carries uid {r.claim.uid!r}")
    boot = doc.get("bootID")
    return records, boot if isinstance(boot, str) else ""


@dataclass(frozen=True, slots=True)
class Loaded:
    """What `Checkpoint.load` found.

    `damage` is None for a usable file (or none at all). For a damaged one (set aside as
    `<file>.corrupt-<time>-<pid>`) `records` is empty and `fallback` holds the records of the
    previous good file when that one may know claims whose CDI specs are gone: it was written
    in another boot of the machine (a reboot empties /var/run/cdi) or does not say when. In the
    boot it was written in, the specs on disk know every claim the driver may hold, and the
    previous file would only bring back claims released since. The claim core rebuilds from
    the specs and the fallback (docs/design/claim-lifecycle.md)."""

    records: dict[str, ClaimRecord]
    damage: str | None = None
    fallback: dict[str, ClaimRecord] = field(default_factory=dict)


class Checkpoint:
    """One driver's checkpoint file and lock in a state folder (created 0700, files 0600).

    `<driver>.checkpoint.json` is the file; `<driver>.checkpoint-prev.json` is the outcome of the
    operation before the last one (a damaged file falls back to it, see `Loaded`);
    `<driver>.lock` serializes whole operations between instances."""

    def __init__(self, state_dir: Path, driver_name: str, lock_timeout: float = 30.0) -> None:
        if not is_dns_subdomain(driver_name):
            raise ValueError(f"driver name {driver_name!r} is not a DNS subdomain")
        self.state_dir = state_dir
        self.driver = driver_name
        self.path = state_dir / f"{driver_name}.checkpoint.json"
        self.prev_path = state_dir / f"{driver_name}.checkpoint-prev.json"
        self.lock_path = state_dir / f"{driver_name}.lock"
        self._prev_tmp = state_dir / f".{self.prev_path.name}.{os.getpid()}.tmp"
        self._lock_timeout = lock_timeout
        self._identity: tuple[int, int, int, int] | None = None
        self._encoded: dict[str, tuple[ClaimRecord, bytes]] = {}  # uid -> (record, its _member)
        self._dir_ready = False
        # this instance's mark in the lock file (fixed size: a rewrite needs no truncate)
        self._token = f"topodra-instance {os.urandom(8).hex()}\n".encode()
        self._foreign = False  # another instance held the lock since we last did

    def ensure_dir(self) -> None:
        self.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        if self.state_dir.stat().st_uid == os.getuid():
            os.chmod(self.state_dir, 0o700)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the cross-process lock for one whole operation."""
        if not self._dir_ready:  # once: a mkdir, stat and chmod per operation were syscalls
            self.ensure_dir()
            self._dir_ready = True
        try:
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        except FileNotFoundError:  # the folder was removed under us
            self.ensure_dir()
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            deadline = time.monotonic() + self._lock_timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as e:
                    if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                        raise
                    if time.monotonic() > deadline:
                        raise LockTimeout(
                            f"another instance holds {self.lock_path} for more than {self._lock_timeout:.0f}s"
                        ) from e
                    time.sleep(0.002)
            # another instance may have held the lock meanwhile and written only CDI specs (a
            # prepare it did not finish): its token in the lock file says so
            if os.pread(fd, len(self._token) + 1, 0) != self._token:
                self._foreign = True
                os.pwrite(fd, self._token, 0)
            yield
        finally:
            os.close(fd)  # releases the flock

    def _stat_identity(self) -> tuple[int, int, int, int] | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)

    def changed_on_disk(self) -> bool:
        """True when someone else wrote the file, or held the lock, since our last load (call
        under lock); the next `load` clears it."""
        return self._foreign or self._stat_identity() != self._identity

    def load(self) -> Loaded:
        """The records in the file; a damaged file is set aside (see `Loaded`)."""
        self._foreign = False
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            self._identity = None
            return Loaded({})
        try:
            records, _ = _decode(self.driver, data)
        except _Corrupt as e:
            return self._damaged(str(e))
        self._identity = self._stat_identity()
        return Loaded(records)

    def _damaged(self, why: str) -> Loaded:
        aside = self.path.with_name(
            f"{self.path.name}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
        )
        os.replace(self.path, aside)
        self._identity = None
        fallback: dict[str, ClaimRecord] = {}
        prev = "no previous good file"
        try:
            records, boot = _decode(self.driver, self.prev_path.read_bytes())
        except FileNotFoundError:
            pass
        except _Corrupt as e:
            prev = f"the previous file {self.prev_path} is damaged too ({e})"
        else:
            if boot and boot == BOOT_ID:
                prev = f"the previous file {self.prev_path} is of this boot: the CDI specs know more"
            else:
                fallback = records
                prev = f"falling back to {len(records)} claims of the previous file {self.prev_path}"
        log.error(
            f"checkpoint {self.path} is damaged ({why}); kept aside as {aside}; rebuilding the claims "
            f"from the CDI specs on disk; {prev}",
            driver=self.driver,
            checkpoint=str(self.path),
            aside=str(aside),
            error=why,
        )
        return Loaded({}, damage=why, fallback=fallback)

    def save(self, records: Mapping[str, ClaimRecord], *, durable: bool = True) -> None:
        """Write `records` atomically and durably (fsync of the file before the rename and of the
        folder after it; the claim core makes one such write per operation). The file it replaces,
        the outcome of the operation before, is kept as the previous good one (a hard link: no
        data written, made durable by the same fsync of the folder).

        `durable=False`: atomic only, and the previous file is left as it is; for a write whose
        loss in a power cut leaves a file that says the same (see the claim core's unprepare).

        Each record's JSON is kept from the save that first wrote it, keyed on the record object
        itself: records are immutable values (the claim core replaces a record to change it), so
        a save costs the encoding of the records that changed, not of every claim held."""
        if not self._dir_ready:
            self.ensure_dir()
            self._dir_ready = True
        encoded: dict[str, tuple[ClaimRecord, bytes]] = {}
        for uid in sorted(records):
            rec = records[uid]
            known = self._encoded.get(uid)
            encoded[uid] = known if known is not None and known[0] is rec else (rec, _member(uid, rec))
        if durable:
            self._keep_previous()
        atomic_write(self.path, _document(self.driver, [e[1] for e in encoded.values()]), durable=durable)
        self._encoded = encoded
        self._identity = self._stat_identity()

    def _keep_previous(self) -> None:
        tmp = self._prev_tmp
        try:
            os.link(self.path, tmp)
        except FileNotFoundError:
            return
        except FileExistsError:  # left by a crash
            os.unlink(tmp)
            os.link(self.path, tmp)
        os.replace(tmp, self.prev_path)
