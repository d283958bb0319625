"""The checkpoint's two slots, written in place: what a power cut can leave, and what is read back.

A power cut loses or tears every write that was not synced, and the write under way when it
struck. The claim core relies on one thing: after the cut, a start finds the last document it
synced (or a later one, whole). These tests make every such cut on real files (a copy of the
state folder in which each slot written since its last sync is torn) and read it back as a
start after the reboot would (another boot id; docs/design/claim-lifecycle.md).
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import pytest
from topodra.common.runtime import checkpoint
from topodra.common.runtime.checkpoint import (
    Checkpoint,
    ClaimRecord,
    Phase,
    encode,
    newest,
    slot_paths,
    slot_size,
)
from topodra.common.runtime.driver import AllocatedDevice, ClaimRef

DRIVER = "slots.topodra.io"


def record(i: int, phase: Phase = Phase.COMPLETED) -> ClaimRecord:
    uid = f"00000000-0000-4000-8000-{i:012d}"
    return ClaimRecord(
        claim=ClaimRef("ns", f"c{i}", uid),
        phase=phase,
        allocated=(AllocatedDevice("r", "node-a", f"dev-{i}"),),
        cdi_file=f"{DRIVER}-claim_{uid}.json",
    )


def records(ids: list[int], started: frozenset[int] = frozenset()) -> dict[str, ClaimRecord]:
    out = {}
    for i in ids:
        r = record(i, Phase.STARTED if i in started else Phase.COMPLETED)
        out[r.claim.uid] = r
    return out


def after_a_power_cut(state: Path, tmp: Path, unsynced: set[Path]) -> checkpoint.Loaded:
    """A copy of `state` as a power cut may leave it (each unsynced slot torn), read back after
    the reboot."""
    cut = tmp / f"cut-{len(list(tmp.iterdir()))}"
    shutil.copytree(state, cut)
    for slot in unsynced:
        torn = cut / slot.name
        if torn.exists():
            data = torn.read_bytes()
            torn.write_bytes(data[: len(data) // 2] + b"\0" * 7)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(checkpoint, "BOOT_ID", "the-boot-after-the-cut")
        return Checkpoint(cut, DRIVER).load()


def test_a_power_cut_at_any_write_leaves_the_last_synced_document(tmp_path: Path) -> None:
    """Random saves, synced or not, as the claim core makes them; after each one (and during
    each one: the slot being written torn too), a cut leaves the records of the last synced
    save. The slot holding it is never the one written next."""
    state, cuts = tmp_path / "state", tmp_path / "cuts"
    cuts.mkdir()
    ckpt = Checkpoint(state, DRIVER)
    ckpt.load()
    rng = random.Random(7)
    held: list[int] = []
    synced: dict[str, ClaimRecord] = {}
    unsynced: set[Path] = set()
    for step in range(60):
        if held and rng.random() < 0.4:
            held.remove(rng.choice(held))
        else:
            held.append(100 + step)
        durable = rng.random() < 0.6
        now = records(held, frozenset(rng.sample(held, k=min(2, len(held)))))
        before = {p: p.read_bytes() for p in slot_paths(state, DRIVER) if p.exists()}
        ckpt.save(now, durable=durable)
        written = {p for p in slot_paths(state, DRIVER) if p.exists() and before.get(p) != p.read_bytes()}
        assert len(written) == 1, f"step {step}: one slot per save, not {written}"
        (slot,) = written
        # a cut during this save: the slot it wrote is torn, and every unsynced one
        during = after_a_power_cut(state, cuts, unsynced | {slot})
        got = during.records if during.damage is None else during.fallback
        assert got == synced, f"step {step}: a cut during the save lost the synced document"
        if durable:
            synced = now
            unsynced.discard(slot)
        else:
            unsynced.add(slot)
        after = after_a_power_cut(state, cuts, unsynced)
        got = after.records if after.damage is None else after.fallback
        assert got == synced, f"step {step}: a cut after the save lost the synced document"
        shutil.rmtree(cuts)
        cuts.mkdir()
    # and without a cut, a start reads the last save, synced or not
    assert Checkpoint(state, DRIVER).load().records == now


def test_a_slot_keeps_its_size_until_a_document_outgrows_it_or_shrinks_below_half(tmp_path: Path) -> None:
    """The same size keeps an in-place sync to data blocks (a claim more or less changes no
    size); a slot left at 1000 claims' size would cost a megabyte of spaces per save at 10."""
    ckpt = Checkpoint(tmp_path, DRIVER)
    ckpt.load()
    sizes: list[int] = []
    for n in range(1, 60):  # one claim more per save, as prepares come in
        ckpt.save(records([*range(n)]))
        size = ckpt.path.stat().st_size
        doc = encode(DRIVER, records([*range(n)]), n)
        assert size % 4096 == 0 and size >= len(doc)
        assert ckpt.path.read_bytes() == doc + b" " * (size - len(doc))
        sizes.append(size)
    changes = sum(a != b for a, b in zip(sizes, sizes[2:], strict=False))  # each slot against itself
    assert changes <= 10, f"the slots changed size {changes} times in 59 saves: {sizes}"
    assert Checkpoint(tmp_path, DRIVER).load().records == records([*range(59)])
    ckpt.save(records([*range(50)]))  # a little less: the same size, padded
    assert ckpt.path.stat().st_size == sizes[-2]
    ckpt.save(records([1]))
    ckpt.save(records([1]))  # far less: both slots cut
    assert {p.stat().st_size for p in slot_paths(tmp_path, DRIVER)} == {
        slot_size(len(encode(DRIVER, records([1]), 62)))
    }
    assert Checkpoint(tmp_path, DRIVER).load().records == records([1])


def test_the_sequence_number_is_inside_the_checksum(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """An older slot whose sequence is raised (by hand, or a torn header) must not win."""
    ckpt = Checkpoint(tmp_path, DRIVER)
    ckpt.load()
    ckpt.save(records([1, 2]))
    ckpt.save(records([1]))
    found = newest(tmp_path, DRIVER)
    assert found is not None and found[1]["sequence"] == 2
    older = next(p for p in slot_paths(tmp_path, DRIVER) if p != found[0])
    older.write_bytes(older.read_bytes().replace(b'"sequence":1', b'"sequence":9'))
    loaded = Checkpoint(tmp_path, DRIVER).load()
    assert loaded.damage is not None and "checksum mismatch" in loaded.damage
    assert list(tmp_path.glob(f"{older.name}.corrupt-*"))


def test_an_earlier_versions_single_file_is_read_then_becomes_a_marker_it_refuses(tmp_path: Path) -> None:
    """An upgrade finds `<driver>.checkpoint.json` (version 1, and its `-prev`): the claims come
    back; once a slot is synced the file becomes a document of version 2 without claims, which
    version 1 refuses to touch ("newer than this program"), so an old instance still running
    beside the new one (a DaemonSet rolling with maxSurge) fails its calls instead of reading
    an absent file as a node where nothing is held."""
    legacy = tmp_path / f"{DRIVER}.checkpoint.json"
    prev = tmp_path / f"{DRIVER}.checkpoint-prev.json"
    legacy.write_bytes(encode(DRIVER, records([1, 2]), version=1))
    prev.write_bytes(encode(DRIVER, records([1]), version=1))
    ckpt = Checkpoint(tmp_path, DRIVER)
    assert ckpt.load().records == records([1, 2])
    found = newest(tmp_path, DRIVER)
    assert found is not None and found[0] == legacy
    ckpt.save(records([1, 2]), durable=False)
    assert legacy.read_bytes() == encode(DRIVER, records([1, 2]), version=1)  # not yet: no slot synced
    ckpt.save(records([1, 2, 3]))
    marker = json.loads(legacy.read_text())
    assert (
        marker["version"] > 1 and marker["format"] == "topodra.io/claim-checkpoint" and "claims" not in marker
    )
    assert not prev.exists()
    assert Checkpoint(tmp_path, DRIVER).load().records == records([1, 2, 3])


def test_a_fresh_folder_gets_the_marker_too(tmp_path: Path) -> None:
    """No earlier file at all: an old instance started later (a rollback) must still find one."""
    ckpt = Checkpoint(tmp_path, DRIVER)
    ckpt.load()
    ckpt.save({})
    assert json.loads((tmp_path / f"{DRIVER}.checkpoint.json").read_text())["version"] > 1


def test_the_marker_without_slots_is_a_damaged_checkpoint(tmp_path: Path) -> None:
    """Both slots gone (a hand in the folder): the claims are rebuilt from the CDI specs, not
    taken as none."""
    ckpt = Checkpoint(tmp_path, DRIVER)
    ckpt.load()
    ckpt.save(records([1]))
    for slot in slot_paths(tmp_path, DRIVER):
        slot.unlink(missing_ok=True)
    loaded = Checkpoint(tmp_path, DRIVER).load()
    assert loaded.damage is not None and "both checkpoint slots are gone" in loaded.damage


def test_a_damaged_earlier_versions_file_falls_back_to_its_previous_file_after_a_reboot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / f"{DRIVER}.checkpoint.json").write_bytes(b"{torn")
    (tmp_path / f"{DRIVER}.checkpoint-prev.json").write_bytes(encode(DRIVER, records([4]), version=1))
    monkeypatch.setattr(checkpoint, "BOOT_ID", "another-boot")
    loaded = Checkpoint(tmp_path, DRIVER).load()
    assert loaded.damage is not None and loaded.fallback == records([4])
    assert list(tmp_path.glob(f"{DRIVER}.checkpoint.json.corrupt-*"))


def _big(fill: str) -> dict[str, ClaimRecord]:
    """One claim whose spec is 8 MB: a write of it takes milliseconds, long enough to be killed in."""
    r = record(1)
    r = ClaimRecord(r.claim, r.phase, r.allocated, r.cdi_file, cdi_spec={"x": fill * 8_000_000})
    return {r.claim.uid: r}


def _save_forever(state: str, tell: int) -> None:
    """Saves two documents in turn; says so on `tell` right before each big in-place write."""
    real = os.pwrite

    def told(fd: int, data: Any, at: int) -> int:
        if len(data) > 1_000_000:
            os.write(tell, b"w")
        return real(fd, data, at)

    ckpt = Checkpoint(Path(state), DRIVER)
    ckpt.load()
    a, b = _big("a"), _big("b")
    ckpt.save(a)
    ckpt.save(b)
    os.pwrite = told  # type: ignore[assignment]
    while True:  # not synced: the page cache is what a kill leaves
        ckpt.save(a, durable=False)
        ckpt.save(b, durable=False)


def test_a_kill_in_the_middle_of_a_slot_write_is_no_damage(tmp_path: Path) -> None:
    """A kill stops a write between pages: a torn slot in the page cache, no power cut needed.
    A slot is written with NUL over its first byte first and that byte last, so a torn one
    starts with NUL and a start skips it for the other slot, as a temp file never renamed was
    skipped: no `.corrupt-*`, no rebuild from the specs, the last finished save read back. Real
    SIGKILLs, sent the moment an 8 MB in-place write begins; without the NUL every round found
    a damaged slot."""
    import multiprocessing
    import signal

    ctx = multiprocessing.get_context("fork")
    rng = random.Random(11)
    for round_ in range(6):
        listen, tell = os.pipe()
        proc = ctx.Process(target=_save_forever, args=(str(tmp_path), tell), daemon=True)
        proc.start()
        os.close(tell)
        for _ in range(rng.randint(1, 4)):
            assert os.read(listen, 1) == b"w"
        assert proc.pid is not None
        os.kill(proc.pid, signal.SIGKILL)
        proc.join()
        os.close(listen)
        loaded = Checkpoint(tmp_path, DRIVER).load()
        assert loaded.damage is None, f"round {round_}: {loaded.damage}"
        assert not list(tmp_path.glob("*.corrupt-*")), f"round {round_}"
        assert loaded.records in (_big("a"), _big("b")), f"round {round_}"
