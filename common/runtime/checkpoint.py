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

Two slot files `<driver>.checkpoint-a.json` and `<driver>.checkpoint-b.json`, each one whole
document; the verified one with the higher `sequence` is the checkpoint (see `Checkpoint`):

    {"format": "topodra.io/claim-checkpoint", "version": 1, "driver": "cpu.topodra.io",
     "sequence": <count of saves>, "bootID": "<the kernel's boot id when written>",
     "checksum": "sha256:<hex of the canonical JSON of {version, driver, sequence, claims}>",
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

A slot is that document's canonical JSON (sorted keys, no whitespace: the same text the
checksum covers, made once per save by json's C encoder; `python -m json.tool` shows it
indented), padded with spaces to the slot's size (`slot_size`). A save overwrites the other
slot in place and, when durable, syncs it (one fdatasync); `<driver>.lock` (flock) serializes
whole operations between instances (e.g. during a rolling update), and holds the token of the
instance that held it last, so that an instance notices another one's operations that wrote
only CDI specs (an interrupted prepare) and not the checkpoint. `newest` reads what a start
would use, for tools and tests.
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
from topodra.common.cdi.spec import atomic_write, canonical_json, edits_from_cdi, edits_to_cdi
from topodra.common.runtime.driver import AllocatedDevice, ClaimRef, Preparation, PreparedDevice
from topodra.common.runtime.names import is_dns_subdomain
from topodra.common.runtime.seams import ResultDevice

log = logs.get("topodra.runtime.checkpoint")

FORMAT = "topodra.io/claim-checkpoint"
VERSION = 2  # 2: two slots with a sequence number; 1: the single file of earlier versions
UNFINISHED = b"\0"  # the first byte of a slot while it is being written in place
_HEAD = b'"bootID":"'  # what follows the first byte of every slot, old or new


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
    # The canonical JSON of fields a phase change keeps ("allocated", "preparation", and
    # "cdiSpec" until a member is made of it, see `_member`), shared by the copies `with_phase`
    # makes of this record (the record's fields never change: see `Checkpoint.save`). The claim
    # core seeds it with the texts it already has (the spec file's, the devices' of the spec's
    # record), so a prepare and its unprepare encode the preparation once and the spec and
    # devices not again.
    encoded: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

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


def _checksum(driver: str, claims: Mapping[str, Any], sequence: int | None, version: int) -> str:
    return _signature(driver, canonical_json(claims).encode(), sequence=sequence, version=version)


def _signature(driver: str, *claims_json: bytes, sequence: int | None = None, version: int = VERSION) -> str:
    """sha256 of the canonical JSON of {claims, driver, sequence, version} (a file of an earlier
    version has no sequence), from the claims' own JSON (given in parts, so that megabytes of
    claims are not copied only to be hashed). The sequence is inside the checksum: a slot
    written in place and torn by a power cut cannot pass for the newer one."""
    h = hashlib.sha256(b'{"claims":')
    for part in claims_json:
        h.update(part)
    h.update(_tails(driver, sequence, version)[0])
    return "sha256:" + h.hexdigest()


@functools.lru_cache(maxsize=16)
def _fixed(driver: str, boot_id: str) -> tuple[str, bytes]:
    """What depends only on the driver and the boot (the driver's JSON, the file's head up to the
    checksum): made once, not by JSON encodings per save."""
    return canonical_json(driver), f'{{"bootID":{canonical_json(boot_id)},"checksum":"'.encode()


def _tails(driver: str, sequence: int | None, version: int = VERSION) -> tuple[bytes, bytes]:
    """The checksum's tail and the file's tail after the claims (keys in sorted order)."""
    driver_json = _fixed(driver, "")[0]
    seq = "" if sequence is None else f',"sequence":{sequence}'
    return (
        f',"driver":{driver_json}{seq},"version":{version}}}'.encode(),
        f',"driver":{driver_json},"format":{_FORMAT_JSON}{seq},"version":{version}}}\n'.encode(),
    )


_FORMAT_JSON = canonical_json(FORMAT)


def devices_json(allocated: Iterable[AllocatedDevice]) -> str:
    """The canonical JSON of a record's allocated devices (the checkpoint's and the spec's)."""
    return canonical_json([allocated_to_json(a) for a in allocated])


def _member(uid: str, rec: ClaimRecord) -> bytes:
    """`"<uid>":<record JSON>`, one claim's part of the canonical document: the text of
    `canonical_json(record_to_json(rec))` (a test holds them equal), its keys written in sorted
    order around the parts `rec.encoded` keeps. A completed record's member is made once (the
    checkpoint keeps it per record object), so the spec's text is dropped once used: kept, it
    cost ~1.2 KB more per claim held; the devices and the preparation stay for the started copy."""
    enc = rec.encoded
    allocated = enc.get("allocated")
    if allocated is None:
        allocated = enc["allocated"] = devices_json(rec.allocated)
    claim = rec.claim
    completed = rec.phase is Phase.COMPLETED
    parts = [canonical_json(uid), ':{"allocated":', allocated, ',"cdiFile":', canonical_json(rec.cdi_file)]
    if completed:  # the spec's text is given up once used (see the docstring)
        spec = enc.pop("cdiSpec", None)
        if spec is None:
            spec = canonical_json(dict(rec.cdi_spec))
        parts += (',"cdiSpec":', spec)
    parts += (',"name":', canonical_json(claim.name), ',"namespace":', canonical_json(claim.namespace))
    parts += (',"phase":', canonical_json(rec.phase.value))
    if rec.preparation is not None:
        prep = enc.get("preparation")
        if prep is None:
            prep = enc["preparation"] = canonical_json(preparation_to_json(rec.preparation))
        parts += (',"preparation":', prep)
    if completed:
        result = canonical_json([_result_to_json(x) for x in rec.result])
        parts += (',"result":', result)
    parts += (',"uid":', canonical_json(claim.uid), "}")
    return "".join(parts).encode()


def _boot_id() -> str:
    """The running kernel's boot id ("" when unknown): tells whether the CDI specs in a tmpfs
    such as /var/run/cdi could have survived since a file was written (see `Loaded`)."""
    try:
        with open("/proc/sys/kernel/random/boot_id", "rb") as f:
            return f.read(64).decode("ascii", "replace").strip()
    except OSError:
        return ""


BOOT_ID = _boot_id()


def _document(
    driver: str,
    members: Iterable[bytes],
    boot_id: str = BOOT_ID,
    sequence: int | None = None,
    version: int = VERSION,
) -> bytes:
    """The file from the claims' `_member` texts in uid order: itself the canonical JSON of the
    whole document (what `json.dumps(doc, sort_keys=True, separators=(",", ":"))` gives), so
    the claims' text is made once for both the checksum and the file. `bootID` is outside the
    checksum, so files of earlier versions (without it) still verify."""
    joined = b",".join(members)  # 1.1 MB at 1000 claims held: copied once more, into the file
    head = _fixed(driver, boot_id)[1]
    checksum = _signature(driver, b"{", joined, b"}", sequence=sequence, version=version).encode()
    return b"".join((head, checksum, b'","claims":{', joined, b"}", _tails(driver, sequence, version)[1]))


def encode(
    driver: str, records: Mapping[str, ClaimRecord], sequence: int | None = None, version: int = VERSION
) -> bytes:
    members = (_member(uid, r) for uid, r in sorted(records.items()))
    return _document(driver, members, sequence=sequence, version=version)


class _Corrupt(Exception):
    pass


def decode(driver: str, data: bytes) -> dict[str, ClaimRecord]:
    """Raises _Corrupt for damage, CheckpointError for a file we must not interpret."""
    return _decode(driver, data)[0]


def _decode(driver: str, data: bytes) -> tuple[dict[str, ClaimRecord], str, int | None]:
    """(records, the boot id the file was written in or "", its sequence number or None)."""
    doc = _verified(driver, data)
    try:
        records = {uid: record_from_json(c) for uid, c in doc["claims"].items()}
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise _Corrupt(f"malformed claim entry: {type(e).__name__}: {e}") from e
    for uid, r in records.items():
        if r.claim.uid != uid:
            raise _Corrupt(f"claim entry {uid!r} carries uid {r.claim.uid!r}")
    boot = doc.get("bootID")
    return records, boot if isinstance(boot, str) else "", doc.get("sequence")


def _verified(driver: str, data: bytes) -> dict[str, Any]:
    """The document, once its format, driver, sequence and checksum hold."""
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
    sequence = doc.get("sequence")
    if sequence is not None and (type(sequence) is not int or sequence < 0):
        raise _Corrupt("sequence is not a count")
    if doc.get("checksum") != _checksum(driver, claims, sequence, version):
        raise _Corrupt("checksum mismatch")
    return doc


def newest(state_dir: Path, driver: str) -> tuple[Path, dict[str, Any]] | None:
    """The file and document a start would use (the verified slot with the highest sequence, else
    the file of an earlier version), or None; for tools and tests: it only reads."""
    best: tuple[int, Path, dict[str, Any]] | None = None
    for path in slot_paths(state_dir, driver):
        try:
            doc = _verified(driver, path.read_bytes())
        except (OSError, _Corrupt):
            continue
        sequence = doc.get("sequence")
        if isinstance(sequence, int) and (best is None or sequence > best[0]):
            best = (sequence, path, doc)
    if best is not None:
        return best[1], best[2]
    legacy = legacy_path(state_dir, driver)
    try:
        return legacy, _verified(driver, legacy.read_bytes())
    except (OSError, _Corrupt):
        return None


def slot_size(length: int) -> int:
    """The size a slot is given when a document outgrows it, or is less than half of it: a
    quarter more, in whole 4 KiB blocks, so that the next saves (a claim more or less) keep the
    size and their sync writes no inode."""
    return -(-(length + length // 4) // 4096) * 4096


def slot_paths(state_dir: Path, driver: str) -> tuple[Path, Path]:
    return (state_dir / f"{driver}.checkpoint-a.json", state_dir / f"{driver}.checkpoint-b.json")


def legacy_path(state_dir: Path, driver: str) -> Path:
    """The single file of earlier versions; this version's marker once a slot is synced."""
    return state_dir / f"{driver}.checkpoint.json"


@dataclass(frozen=True, slots=True)
class Loaded:
    """What `Checkpoint.load` found.

    `damage` is None for a usable checkpoint (or none at all). For a damaged one (the slot that
    does not verify set aside as `<slot>.corrupt-<time>-<pid>`) `records` is empty and
    `fallback` holds the records of the other, good slot (the outcome of the operation before)
    when that one may know claims whose CDI specs are gone: it was written in another boot of the
    machine (a reboot empties /var/run/cdi) or does not say when. In the boot it was written in,
    the specs on disk know every claim the driver may hold, and the other slot would only bring
    back claims released since. The claim core rebuilds from
    the specs and the fallback (docs/design/claim-lifecycle.md)."""

    records: dict[str, ClaimRecord]
    damage: str | None = None
    fallback: dict[str, ClaimRecord] = field(default_factory=dict)


class Checkpoint:
    """One driver's checkpoint and lock in a state folder (created 0700, files 0600).

    The checkpoint is two slot files, `<driver>.checkpoint-a.json` and `-b.json`, each a whole
    document with a sequence number; the verified one with the higher number is the checkpoint.
    A save overwrites the other slot in place (write, then one fdatasync when durable): no temp
    file, rename, link or folder sync per operation, which cost ~10x the CPU of an in-place
    synced write on ext4. The slot holding the last synced document is never overwritten, so a
    power cut during any write leaves it whole, and it is the outcome of the operation before
    the last one: the fallback when the newer slot is damaged (see `Loaded`). The first write of
    a slot creates it whole (temp file + rename). `<driver>.checkpoint.json` (and `-prev.json`)
    are the single file of earlier versions: read when no slot exists; once a slot is durable
    the first becomes a marker those versions refuse (`_mark`) and the second goes.
    `<driver>.lock` serializes whole operations between instances."""

    def __init__(self, state_dir: Path, driver_name: str, lock_timeout: float = 30.0) -> None:
        if not is_dns_subdomain(driver_name):
            raise ValueError(f"driver name {driver_name!r} is not a DNS subdomain")
        self.state_dir = state_dir
        self.driver = driver_name
        self.slots = slot_paths(state_dir, driver_name)
        self._slot_names = tuple(os.fspath(p) for p in self.slots)
        self.legacy_path = legacy_path(state_dir, driver_name)
        self.legacy_prev_path = state_dir / f"{driver_name}.checkpoint-prev.json"
        self.lock_path = state_dir / f"{driver_name}.lock"
        self._lock_timeout = lock_timeout
        self._sequence = 0  # of the newest document written or loaded
        self._current: int | None = None  # the slot holding it
        self._durable: int | None = None  # the slot holding the last synced one: never overwritten
        # `<driver>.checkpoint.json` is the marker every earlier version refuses (see `_mark`)
        self._marked = False
        self._identity: tuple[tuple[int, int, int, int] | None, ...] = (None, None)
        self._encoded: dict[str, tuple[ClaimRecord, bytes]] = {}  # uid -> (record, its _member)
        self._dir_ready = False
        # this instance's mark in the lock file (fixed size: a rewrite needs no truncate)
        self._token = f"topodra-instance {os.urandom(8).hex()}\n".encode()
        self._foreign = False  # another instance held the lock since we last did

    @property
    def path(self) -> Path:
        """The file holding the newest document (for messages)."""
        if self._current is None:
            return self.slots[0]
        return self.slots[self._current]

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

    def _stat_identity(self) -> tuple[tuple[int, int, int, int] | None, ...]:
        return tuple(_identity(name) for name in self._slot_names)

    def changed_on_disk(self) -> bool:
        """True when someone else wrote a slot, or held the lock, since our last load (call under
        lock); the next `load` clears it."""
        return self._foreign or self._stat_identity() != self._identity

    def load(self) -> Loaded:
        """The records of the newest slot. A slot whose `{` is NUL (the rest a slot's text) holds a
        save cut short by a stop (`_write_slot`) and is skipped; a damaged one is set aside (see
        `Loaded`)."""
        self._foreign = False
        self._current = self._durable = None
        self._encoded = {}
        found: list[tuple[int, int, dict[str, ClaimRecord], str]] = []  # sequence, slot, records, boot
        bad: list[tuple[int, str]] = []
        unfinished: list[int] = []
        for slot, path in enumerate(self.slots):
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                continue
            if data[:1] == UNFINISHED and data[1 : 1 + len(_HEAD)] == _HEAD:
                unfinished.append(slot)
                continue
            try:
                records, boot, sequence = _decode(self.driver, data)
            except _Corrupt as e:
                bad.append((slot, str(e)))
                continue
            if sequence is None:
                bad.append((slot, "no sequence number"))
                continue
            found.append((sequence, slot, records, boot))
        if not found and not bad and not unfinished:
            return self._load_legacy()
        found.sort(key=lambda f: (f[0], f[1]))
        if not found:
            bad += [(slot, "a write cut short, and no other good slot") for slot in unfinished]
        else:
            for slot in unfinished:
                # a stop during a save: that save was not over, so its operation was not either;
                # the other slot is the checkpoint, as a temp file never renamed left it before
                log.warning(
                    f"checkpoint slot {self.slots[slot]} holds a write cut short; using "
                    f"{self.slots[found[-1][1]]}",
                    driver=self.driver,
                    checkpoint=str(self.slots[slot]),
                )
        try:
            self._marked = self.legacy_path.read_bytes() == self._marker()
        except FileNotFoundError:
            self._marked = False
        if found:
            sequence, slot = found[-1][:2]
            self._sequence, self._current, self._durable = sequence, slot, slot
            self._sync(slot)  # what a restart builds on must outlive a power cut from now on
        if bad:
            return self._damaged_slots(bad, found)
        self._identity = self._stat_identity()
        return Loaded(found[-1][2])

    def _sync(self, slot: int) -> None:
        fd = os.open(self._slot_names[slot], os.O_RDONLY | os.O_NOFOLLOW)
        try:
            os.fdatasync(fd)
        finally:
            os.close(fd)

    def _aside(self, path: Path) -> Path:
        aside = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}")
        os.replace(path, aside)
        return aside

    def _damaged_slots(
        self, bad: list[tuple[int, str]], found: list[tuple[int, int, dict[str, ClaimRecord], str]]
    ) -> Loaded:
        """A slot that does not verify is a write torn by a power cut or a file damaged since:
        the two cannot be told apart, so both fail closed, as a damaged file always did."""
        asides = [(self._aside(self.slots[slot]), why) for slot, why in bad]
        why = "; ".join(f"{self.slots[slot].name}: {text}" for slot, text in bad)
        self._identity = self._stat_identity()
        if not found:
            return self._report_damage(why, asides, {}, "no other good slot")
        records, boot = found[-1][2], found[-1][3]
        other = self.slots[found[-1][1]]
        if boot and boot == BOOT_ID:
            return self._report_damage(
                why, asides, {}, f"the other slot {other} is of this boot: the CDI specs know more"
            )
        return self._report_damage(
            why, asides, records, f"falling back to {len(records)} claims of the other slot {other}"
        )

    def _report_damage(
        self, why: str, asides: list[tuple[Path, str]], fallback: dict[str, ClaimRecord], prev: str
    ) -> Loaded:
        kept = ", ".join(str(a) for a, _ in asides)
        log.error(
            f"checkpoint in {self.state_dir} is damaged ({why}); kept aside as {kept}; "
            f"rebuilding the claims from the CDI specs on disk; {prev}",
            driver=self.driver,
            checkpoint=str(self.state_dir),
            aside=kept,
            error=why,
        )
        return Loaded({}, damage=why, fallback=fallback)

    def _load_legacy(self) -> Loaded:
        """No slot yet: the single file an earlier version wrote, if any."""
        self._marked = False
        try:
            data = self.legacy_path.read_bytes()
        except FileNotFoundError:
            self._identity = self._stat_identity()
            return Loaded({})
        if data == self._marker():
            return self._damaged_legacy("this version's marker is there, but both checkpoint slots are gone")
        try:
            records, _, _ = _decode(self.driver, data)
        except _Corrupt as e:
            return self._damaged_legacy(str(e))
        self._identity = self._stat_identity()
        return Loaded(records)

    def _damaged_legacy(self, why: str) -> Loaded:
        aside = self._aside(self.legacy_path)
        self._identity = self._stat_identity()
        fallback: dict[str, ClaimRecord] = {}
        prev = "no previous good file"
        try:
            records, boot, _ = _decode(self.driver, self.legacy_prev_path.read_bytes())
        except FileNotFoundError:
            pass
        except _Corrupt as e:
            prev = f"the previous file {self.legacy_prev_path} is damaged too ({e})"
        else:
            if boot and boot == BOOT_ID:
                prev = f"the previous file {self.legacy_prev_path} is of this boot: the CDI specs know more"
            else:
                fallback = records
                prev = f"falling back to {len(records)} claims of the previous file {self.legacy_prev_path}"
        return self._report_damage(why, [(aside, why)], fallback, prev)

    def save(self, records: Mapping[str, ClaimRecord], *, durable: bool = True) -> None:
        """Write `records` into the slot that does not hold the last synced document; `durable`
        (the claim core makes one such write per operation) syncs it before returning, and it
        becomes the slot not to overwrite. `durable=False`: for a write whose loss in a power cut
        leaves a checkpoint that says the same (see the claim core's unprepare); a torn one fails
        verification and the synced slot is used.

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
        slot = 0 if self._durable is None else 1 - self._durable
        sequence = self._sequence + 1
        data = _document(self.driver, [e[1] for e in encoded.values()], sequence=sequence)
        identity = self._write_slot(slot, data, durable)
        self._sequence, self._current = sequence, slot
        self._identity = tuple(identity if i == slot else x for i, x in enumerate(self._identity))
        self._encoded = encoded
        if durable:
            self._durable = slot
            if not self._marked:
                self._mark()

    def _write_slot(self, slot: int, data: bytes, durable: bool) -> tuple[int, int, int, int]:
        name = self._slot_names[slot]
        try:
            fd = os.open(name, os.O_RDWR | os.O_NOFOLLOW)
        except FileNotFoundError:
            # created whole (no half-made slot), with room for the next saves (see slot_size)
            atomic_write(name, data + b" " * (slot_size(len(data)) - len(data)), durable=durable)
            identity = _identity(name)
            if identity is None:  # removed at once by someone else: the next load sees it
                raise FileNotFoundError(
                    errno.ENOENT, "checkpoint slot vanished after its write", name
                ) from None
            return identity
        try:
            had = size = os.fstat(fd).st_size
            if len(data) > size or len(data) * 2 < size:
                size = slot_size(len(data))  # grown with room to spare, or cut
            # spaces to the slot's size (JSON allows them after the document): an in-place sync
            # of a file whose size did not change writes its data blocks, not its inode
            data += b" " * (size - len(data))
            # the first byte last, over a NUL written first: a kill stops a write between pages,
            # and a slot that starts with NUL is a write cut short, which a start skips (`load`)
            os.pwrite(fd, UNFINISHED, 0)
            view, at = memoryview(data), 1
            while at < len(view):
                at += os.pwrite(fd, view[at:], at)
            os.pwrite(fd, view[:1], 0)
            if size < had:
                os.ftruncate(fd, size)
            if durable:
                os.fdatasync(fd)
            st = os.fstat(fd)
        finally:
            os.close(fd)
        return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)

    def _marker(self) -> bytes:
        names = " and ".join(p.name for p in self.slots)
        doc = {
            "driver": self.driver,
            "format": FORMAT,
            "note": f"this driver's checkpoint is in {names}; versions before {VERSION} refuse this file",
            "version": VERSION,
        }
        return (canonical_json(doc) + "\n").encode()

    def _mark(self) -> None:
        """Once a slot is durable, `<driver>.checkpoint.json` (the single file of earlier versions)
        becomes a document of this version without claims: an earlier version's instance sharing
        the folder (a DaemonSet rolling with maxSurge, or rolled back) refuses to touch a newer
        version's checkpoint, so it fails its calls instead of taking the file's absence for a
        node where nothing is held. Its `-prev.json` goes."""
        atomic_write(self.legacy_path, self._marker())
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.legacy_prev_path)
        self._marked = True


def _identity(name: str) -> tuple[int, int, int, int] | None:
    try:
        st = os.stat(name)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
