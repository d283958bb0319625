"""What survives a power loss: the order in which the claim core makes its writes durable.

A kill -9 (test_claims_faults.py) cannot tell a synced write from an unsynced one: the page
cache outlives the process. A power loss can, so the order is checked here on the real calls:
one durable write per operation (the checkpoint slot not holding the last synced document,
written in place and fdatasynced; the first write of a slot makes it whole by a temp file
fsynced, renamed, folder fsynced): a prepare's
`completed` record before the kubelet gets the answer, an unprepare's `started` record before
the driver releases anything. CDI specs are only renamed into place, never synced: every start
rewrites them from the checkpoint (exercised below with a torn spec), and the provisional spec
that marks a prepare under way only has to outlive a kill, as a power loss also undoes what the
driver did (docs/design/claim-lifecycle.md).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from topodra.common.runtime.checkpoint import decode, encode, newest, slot_paths

from tests.unit.runtime_claims.claimkit import (
    DRIVER,
    HoldDriver,
    MemoryClaimStore,
    Result,
    claim_object,
    new_uid,
)
from tests.unit.runtime_claims.conftest import ManagerFactory


def put(store: MemoryClaimStore, name: str, device: str) -> Any:
    return store.put(claim_object("ns1", name, new_uid(), [Result("r", device)]))


def spec_path(dirs: dict[str, Path], uid: str) -> Path:
    return dirs["cdi"] / f"{DRIVER}-claim_{uid}.json"


class IoRecorder:
    """Logs fsync/fdatasync/rename/unlink of the state and CDI folders' files, in-place writes of
    the checkpoint, and the driver's calls."""

    def __init__(self, dirs: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
        self.events: list[str] = []
        self._paths: dict[int, str] = {}
        self._names = {str(dirs["state"]): "state-dir", str(dirs["cdi"]): "cdi-dir"}
        self._dirs = dirs
        real_open, real_fsync, real_replace, real_unlink = os.open, os.fsync, os.replace, os.unlink
        real_fdatasync, real_pwrite = os.fdatasync, os.pwrite

        def opened(path: Any, *args: Any, **kwargs: Any) -> int:
            fd = real_open(path, *args, **kwargs)
            self._paths[fd] = str(path)
            return fd

        def fsync(fd: int) -> None:
            real_fsync(fd)
            self._log("fsync", self._paths.get(fd, "?"))

        def fdatasync(fd: int) -> None:
            real_fdatasync(fd)
            self._log("fsync", self._paths.get(fd, "?"))

        def pwrite(fd: int, data: Any, at: int) -> int:
            n = real_pwrite(fd, data, at)
            self._log("write", self._paths.get(fd, "?"))
            return n

        def replace(src: Any, dst: Any) -> None:
            real_replace(src, dst)
            self._log("rename", str(dst))

        def unlink(path: Any, *args: Any, **kwargs: Any) -> None:
            real_unlink(path, *args, **kwargs)
            self._log("unlink", str(path))

        monkeypatch.setattr(os, "open", opened)
        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(os, "fdatasync", fdatasync)
        monkeypatch.setattr(os, "pwrite", pwrite)
        monkeypatch.setattr(os, "replace", replace)
        monkeypatch.setattr(os, "unlink", unlink)

    def _log(self, op: str, path: str) -> None:
        name = self._names.get(path)
        if name is None:
            p = Path(path)
            if p.parent == self._dirs["state"] and ".checkpoint-" in p.name:
                name = "checkpoint-temp" if p.name.endswith(".tmp") else "checkpoint"
            elif p.parent == self._dirs["cdi"]:
                name = "cdi-temp" if p.name.endswith(".tmp") else "cdi-spec"
            else:
                return  # the lock file, the test driver's own hold files
        self.events.append(f"{op} {name}")

    def around(self, driver: HoldDriver) -> None:
        for op in ("prepare", "unprepare"):
            real: Callable[..., Any] = getattr(driver, op)

            def call(*args: Any, _real: Callable[..., Any] = real, _op: str = op) -> Any:
                self.events.append(f"driver {_op}")
                return _real(*args)

            setattr(driver, op, call)


# a slot in place: NUL over its first byte (a stop from here on leaves a write a start skips),
# the rest of the document, then its first byte
IN_PLACE = ["write checkpoint"] * 3
DURABLE_CHECKPOINT = [*IN_PLACE, "fsync checkpoint"]
FIRST_WRITE_OF_A_SLOT = ["fsync checkpoint-temp", "rename checkpoint", "fsync state-dir"]


@pytest.fixture
def recorder(dirs: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> Iterator[IoRecorder]:
    yield IoRecorder(dirs, monkeypatch)


def test_completed_is_durable_before_the_answer_and_started_before_the_driver_releases(
    make_manager: ManagerFactory,
    claim_store: MemoryClaimStore,
    driver: HoldDriver,
    dirs: dict[str, Path],
    recorder: IoRecorder,
) -> None:
    ref = put(claim_store, "c", "dev-0")
    m = make_manager(driver)
    recorder.around(driver)
    for first in (True, False):
        recorder.events.clear()
        assert not m.prepare([ref])[ref.uid].error
        assert recorder.events == [
            "rename cdi-spec",  # provisional: names the devices before the driver acts (the mark)
            "driver prepare",
            "rename cdi-spec",  # atomic, not synced: rebuilt from the checkpoint on every start
            # completed: only then the answer (the start wrote one slot; the other is made whole once)
            *(FIRST_WRITE_OF_A_SLOT if first else DURABLE_CHECKPOINT),
        ]
        recorder.events.clear()
        assert m.unprepare([ref]) == {ref.uid: ""}
        assert recorder.events == [
            *DURABLE_CHECKPOINT,  # back to started: a crash from here on is rolled back
            "driver unprepare",
            "unlink cdi-spec",
            *IN_PLACE,  # gone, not synced: if a power cut loses it, "started" is rolled back
        ]


class FsyncCounter:
    """Counts os.fsync and os.fdatasync calls of a real run, except on the test driver's own hold
    files (a real driver's state is in memory or the kernel; HoldDriver syncs its files to stand
    for that)."""

    def __init__(self, hw: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        paths: dict[int, str] = {}
        real_open = os.open

        def opened(path: Any, *args: Any, **kwargs: Any) -> int:
            fd = real_open(path, *args, **kwargs)
            paths[fd] = str(path)
            return fd

        def counted(real: Callable[[int], None]) -> Callable[[int], None]:
            def sync(fd: int) -> None:
                real(fd)
                if Path(paths.get(fd, "?")).parent != hw:
                    self.count += 1

            return sync

        monkeypatch.setattr(os, "open", opened)
        monkeypatch.setattr(os, "fsync", counted(os.fsync))
        monkeypatch.setattr(os, "fdatasync", counted(os.fdatasync))

    def during(self, action: Callable[[], Any]) -> int:
        before = self.count
        action()
        return self.count - before


@pytest.mark.parametrize("claims", [1, 3])
def test_one_durable_write_per_prepare_and_per_unprepare(
    make_manager: ManagerFactory,
    claim_store: MemoryClaimStore,
    dirs: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    claims: int,
) -> None:
    """fsync was about a quarter of the driver's CPU with two durable writes per operation (8
    fsyncs per prepare + unprepare), and a durable write by temp file, rename and folder fsync
    cost ~10x the CPU of an in-place one. One durable write is one fdatasync of the slot written
    in place; a call with several claims still makes one."""
    refs = [put(claim_store, f"c{i}", f"dev-{i}") for i in range(claims)]
    m = make_manager()
    warm = put(claim_store, "warm", "dev-7")
    assert not m.prepare([warm])[warm.uid].error  # the start made one slot; this makes the other
    assert m.unprepare([warm]) == {warm.uid: ""}
    counter = FsyncCounter(dirs["hw"], monkeypatch)
    prepare = counter.during(lambda: m.prepare(refs))
    unprepare = counter.during(lambda: m.unprepare(refs))
    print(f"\nfsyncs for {claims} claim(s): prepare {prepare}, unprepare {unprepare}")
    assert (prepare, unprepare) == (1, 1)
    assert m.prepared() == {}


def test_a_torn_cdi_spec_is_rewritten_on_start(
    make_manager: ManagerFactory, claim_store: MemoryClaimStore, dirs: dict[str, Path]
) -> None:
    """What a power loss can leave of an unsynced spec on a persistent --cdi-root."""
    refs = [put(claim_store, f"c{i}", f"dev-{i}") for i in range(3)]
    make_manager().prepare(refs)
    good = {r.uid: spec_path(dirs, r.uid).read_bytes() for r in refs}
    spec_path(dirs, refs[0].uid).write_bytes(good[refs[0].uid][:17])  # torn
    spec_path(dirs, refs[1].uid).write_bytes(b"")  # renamed before its data reached the disk
    make_manager()
    assert {r.uid: spec_path(dirs, r.uid).read_bytes() for r in refs} == good


def test_the_file_is_the_canonical_document_after_every_kind_of_change(
    make_manager: ManagerFactory, claim_store: MemoryClaimStore, dirs: dict[str, Path]
) -> None:
    """A save re-encodes only the records that changed; whatever the history, the file must be
    byte for byte the full encoding of what the manager holds (and its checksum verifies)."""

    def check(m: Any) -> None:
        found = newest(dirs["state"], DRIVER)
        assert found is not None
        data = found[0].read_bytes()
        held = m.prepared()
        assert decode(DRIVER, data) == held
        text = data.rstrip(b" ")  # a slot is padded with spaces to the size it had
        assert text == encode(DRIVER, held, sequence=found[1]["sequence"])
        assert text == (json.dumps(json.loads(data), sort_keys=True, separators=(",", ":")) + "\n").encode()

    m = make_manager()
    a, b, c = (put(claim_store, n, f"dev-{i}") for i, n in enumerate("abc"))
    m.prepare([a, b])
    check(m)
    m.prepare([c])
    check(m)
    m.unprepare([a])
    check(m)
    m.prepare([a])  # the same uid again: a new record replaces the cached one
    check(m)
    claim_store.put(claim_object("ns1", "b", b.uid, [Result("r", "dev-7")]))  # reallocated
    m.unprepare([b])
    m.prepare([b])
    assert [x.device for x in m.prepared()[b.uid].allocated] == ["dev-7"]
    check(m)
    m2 = make_manager()  # another instance loads, then both write in turn
    m2.unprepare([c])
    check(m2)
    m.prepare([c])  # m notices the foreign write, reloads, re-encodes
    check(m)


def test_driver_state_is_copied_into_the_record(
    make_manager: ManagerFactory, claim_store: MemoryClaimStore, driver: HoldDriver, dirs: dict[str, Path]
) -> None:
    """The checkpoint keeps each record's encoding, so a driver that changes the state mapping it
    returned must not change the record: the record holds its own copy, exactly as a restart
    would read it back."""
    returned: list[Any] = []
    real = driver.prepare

    def keeping(*args: Any) -> Any:
        prep = real(*args)
        returned.append(prep.state)
        return prep

    setattr(driver, "prepare", keeping)  # noqa: B010 (an instance attribute over the method)
    m = make_manager(driver)
    ref, other = put(claim_store, "c", "dev-0"), put(claim_store, "d", "dev-1")
    m.prepare([ref])
    returned[0]["holds"].append("dev-99")  # the driver misbehaves after answering
    m.prepare([other])
    prep: Any = m.prepared()[ref.uid].preparation
    assert list(prep.state["holds"]) == ["dev-0"]
    found = newest(dirs["state"], DRIVER)
    assert found is not None
    assert decode(DRIVER, found[0].read_bytes()) == m.prepared()


def test_operations_make_no_folder_and_set_no_mode_once_started(
    make_manager: ManagerFactory,
    claim_store: MemoryClaimStore,
    dirs: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The state and CDI folders are made (and the state folder's mode set) once; each prepare
    and unprepare asked the kernel again: a failing mkdir per CDI spec and per lock, a chmod per
    lock, an fchmod per file written. A folder removed meanwhile is made again."""
    ref, first = put(claim_store, "c", "dev-0"), put(claim_store, "first", "dev-1")
    m = make_manager()
    assert not m.prepare([first])[first.uid].error  # the CDI folder is made by the first spec
    calls: list[str] = []
    for name in ("mkdir", "chmod", "fchmod"):
        real = getattr(os, name)

        def counted(*args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
            calls.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(os, name, counted)
    assert not m.prepare([ref])[ref.uid].error
    assert m.unprepare([ref]) == {ref.uid: ""}
    assert calls == []
    shutil.rmtree(dirs["cdi"])
    assert not m.prepare([ref])[ref.uid].error
    assert stat.S_IMODE(spec_path(dirs, ref.uid).stat().st_mode) == 0o600
    for slot in slot_paths(dirs["state"], DRIVER):
        assert stat.S_IMODE(slot.stat().st_mode) == 0o600
