"""A damaged checkpoint fails closed: the claims are rebuilt from the CDI specs on disk (which carry
each claim's record, see common/runtime/claims/spec.py), every device a surviving spec names stays
held, and the other checkpoint slot (the outcome of the operation before) is the fallback when the
specs are gone (a reboot empties /var/run/cdi).

Real ClaimManager, real files; the CPU driver case runs the real CPU driver on a captured machine
(the case where a fresh start handed a running pod's exclusive CPUs to the next claim).
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from topodra.common.cdi.spec import CdiWriter
from topodra.common.runtime import checkpoint
from topodra.common.runtime.checkpoint import Checkpoint, Phase
from topodra.common.runtime.claims import ClaimManager, cdi_kind
from topodra.common.runtime.driver import ClaimRef

from tests.conftest import FixtureTrees
from tests.unit.runtime_claims.claimkit import (
    DRIVER,
    NODE,
    HoldDriver,
    MemoryClaimStore,
    Result,
    claim_object,
    driver_config,
    new_uid,
)
from tests.unit.runtime_claims.conftest import ManagerFactory


def flip(data: bytes, *at: float) -> bytes:
    out = bytearray(data)
    for where in at:
        out[int(where * (len(out) - 1))] ^= 0x5A
    return bytes(out)


DAMAGE: dict[str, Callable[[bytes], bytes]] = {
    "zero length": lambda b: b"",
    "truncated": lambda b: b[: len(b) // 3],
    "garbage": lambda b: b"\x00\xff\x13 garbage \x99" * 40,
    "flipped bytes in the claims": lambda b: flip(b, 0.4, 0.7),
    "flipped byte in the checksum": lambda b: flip(b, 0.02),
    "edited device": lambda b: b.replace(b'"dev-0"', b'"dev-7"'),
    "deeply nested JSON": lambda b: b"[" * 100_000 + b"]" * 100_000,
    "not a checkpoint": lambda b: b"[]",
}


def spec_path(dirs: dict[str, Path], uid: str) -> Path:
    return dirs["cdi"] / f"{DRIVER}-claim_{uid}.json"


def ckpt_path(dirs: dict[str, Path]) -> Path:
    """The slot a start would read (the other one holds the outcome of the operation before)."""
    found = checkpoint.newest(dirs["state"], DRIVER)
    assert found is not None, "no verified checkpoint slot"
    return found[0]


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_checkpoint_is_rebuilt_from_the_cdi_specs(
    damage: str,
    make_manager: ManagerFactory,
    claim_store: MemoryClaimStore,
    dirs: dict[str, Path],
    caplog: pytest.LogCaptureFixture,
) -> None:
    share = new_uid()
    a = claim_store.put(
        claim_object(
            "ns1",
            "a",
            new_uid(),
            [Result("r", "dev-0"), Result("g/x", "dev-1")],
            [driver_config(env=["A=1"])],
        )
    )
    b = claim_store.put(claim_object("ns1", "b", new_uid(), [Result("s", "shared-0", share_id=share)]))
    m1 = make_manager()
    answers = m1.prepare([a, b])
    assert not any(o.error for o in answers.values())
    held = m1.prepared()
    data = ckpt_path(dirs).read_bytes()
    damaged = DAMAGE[damage](data)
    ckpt_path(dirs).write_bytes(damaged)

    driver = HoldDriver(dirs["hw"])
    with caplog.at_level(logging.ERROR, logger="topodra.runtime.checkpoint"):
        m = make_manager(driver)
    (aside,) = dirs["state"].glob(f"{DRIVER}.checkpoint-*.json.corrupt-*")
    assert aside.read_bytes() == damaged
    assert any("is damaged" in r.getMessage() and str(aside) in r.getMessage() for r in caplog.records)
    if damage == "deeply nested JSON":
        assert "nested deeper" in caplog.text

    # the records are back as they were: devices, driver state, answers
    rebuilt = m.prepared()
    assert set(rebuilt) == {a.uid, b.uid}
    for uid, rec in rebuilt.items():
        assert rec.phase is Phase.COMPLETED and rec.claim == held[uid].claim
        assert rec.allocated == held[uid].allocated and rec.result == held[uid].result
        assert rec.preparation is not None and held[uid].preparation is not None
        assert rec.preparation.state == held[uid].preparation.state
        assert rec.cdi_spec == json.loads(spec_path(dirs, uid).read_text())
    assert {c.uid: dict(p.state) for c, p in driver.restored.items()} == {
        a.uid: {"holds": ["dev-0", "dev-1"]},
        b.uid: {"holds": [f"shared-0@{share}"]},
    }
    # ... so their devices are not handed out again, and they answer as before
    c = claim_store.put(claim_object("ns1", "c", new_uid(), [Result("r", "dev-0")]))
    d = claim_store.put(claim_object("ns1", "d", new_uid(), [Result("s", "shared-0", share_id=share)]))
    out = m.prepare([c, d])
    assert "device 'dev-0' (pool 'node-a') is already held by claim ns1/a" in out[c.uid].error
    assert "device 'shared-0' (pool 'node-a') is already held by claim ns1/b" in out[d.uid].error
    assert m.prepare([a, b]) == answers
    assert [x for x in driver.calls if x[0] == "prepare"] == []
    assert driver.violations() == []
    # and the rebuilt checkpoint is a good one again
    assert checkpoint.decode(DRIVER, ckpt_path(dirs).read_bytes()) == m.prepared()

    assert m.unprepare([a]) == {a.uid: ""}
    assert not spec_path(dirs, a.uid).exists()
    assert driver.holdings() == {f"shared-0@{share}": b.uid}


def test_a_spec_without_a_readable_record_still_holds_the_devices_it_names(
    make_manager: ManagerFactory, claim_store: MemoryClaimStore, dirs: dict[str, Path]
) -> None:
    """A spec torn by a power loss on a persistent CDI folder, or written before specs carried
    their record: its device names are all that is left, and they stay held."""
    share = new_uid()
    a = claim_store.put(
        claim_object("ns1", "a", new_uid(), [Result("r", "dev-3"), Result("s", "shared-0", share_id=share)])
    )
    m1 = make_manager()
    assert not m1.prepare([a])[a.uid].error
    spec = json.loads(spec_path(dirs, a.uid).read_text())
    spec["containerEdits"]["env"] = [e for e in spec["containerEdits"]["env"] if "_CLAIM_RECORD=" not in e]
    text = json.dumps(spec, indent=2)
    spec_path(dirs, a.uid).write_text(text[: text.index('"kind"')])  # torn after the devices
    ckpt_path(dirs).write_bytes(b"")

    m = make_manager()
    (rec,) = m.prepared().values()
    assert rec.claim.uid == a.uid and rec.phase is Phase.COMPLETED
    assert {(x.device, x.share_id) for x in rec.allocated} == {("dev-3", None), ("shared-0", share)}
    other = claim_store.put(claim_object("ns1", "o", new_uid(), [Result("r", "dev-3")]))
    assert f"already held by claim / (uid {a.uid})" in m.prepare([other])[other.uid].error
    assert spec_path(dirs, a.uid).read_text() == text[: text.index('"kind"')]  # left as it is
    # the kubelet's unprepare of the claim releases them
    assert m.unprepare([a]) == {a.uid: ""}
    assert not m.prepare([other])[other.uid].error


def test_after_a_reboot_the_previous_good_checkpoint_is_the_fallback(
    make_manager: ManagerFactory,
    claim_store: MemoryClaimStore,
    dirs: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The CDI specs are gone with the reboot (tmpfs) and the newer checkpoint slot is damaged:
    the other slot, the outcome of the operation before the last one, still knows those claims."""
    a, b = (
        claim_store.put(claim_object("ns1", n, new_uid(), [Result("r", f"dev-{i}")]))
        for i, n in enumerate("ab")
    )
    c = claim_store.put(claim_object("ns1", "c", new_uid(), [Result("r", "dev-2")]))
    m1 = make_manager()
    assert not any(o.error for o in m1.prepare([a, b]).values())
    assert not m1.prepare([c])[c.uid].error  # the last operation: the other slot lacks it
    specs = {r.uid: spec_path(dirs, r.uid).read_bytes() for r in (a, b)}
    shutil.rmtree(dirs["cdi"])
    ckpt_path(dirs).write_bytes(b'{"format": "topodra.io/claim-checkpoint", "claims": {')
    monkeypatch.setattr(checkpoint, "BOOT_ID", "the-next-boot")

    m = make_manager()
    assert {u: r.phase for u, r in m.prepared().items()} == {a.uid: Phase.COMPLETED, b.uid: Phase.COMPLETED}
    assert {u: spec_path(dirs, u).read_bytes() for u in specs} == specs  # rewritten for the pods
    other = claim_store.put(claim_object("ns1", "o", new_uid(), [Result("r", "dev-0")]))
    assert "already held by claim ns1/a" in m.prepare([other])[other.uid].error


def test_in_the_same_boot_the_specs_are_the_truth(
    make_manager: ManagerFactory, claim_store: MemoryClaimStore, dirs: dict[str, Path]
) -> None:
    """The other slot still has a claim unprepared since; its spec is gone, so it stays gone."""
    a, b = (
        claim_store.put(claim_object("ns1", n, new_uid(), [Result("r", f"dev-{i}")]))
        for i, n in enumerate("ab")
    )
    m1 = make_manager()
    m1.prepare([a, b])
    assert m1.unprepare([b]) == {b.uid: ""}
    ckpt_path(dirs).write_bytes(b"")
    assert set(make_manager().prepared()) == {a.uid}


def test_an_interrupted_prepare_is_rolled_back_from_its_provisional_spec(
    make_manager: ManagerFactory, claim_store: MemoryClaimStore, dirs: dict[str, Path]
) -> None:
    """Killed after the driver acted and before its answer, with the checkpoint then damaged: the
    provisional spec written before the driver acted names what to roll back."""
    a = claim_store.put(claim_object("ns1", "a", new_uid(), [Result("r", "dev-5")]))
    driver = HoldDriver(dirs["hw"])
    m1 = make_manager(driver)
    real = driver.prepare

    def killed(*args: Any) -> Any:
        real(*args)  # the hardware is changed ...
        raise SystemExit("killed")  # ... and the process dies before the final spec

    setattr(driver, "prepare", killed)  # noqa: B010 (an instance attribute over the method)
    with pytest.raises(SystemExit):
        m1.prepare([a])
    assert driver.holdings() == {"dev-5": a.uid}
    assert "_CLAIM_RECORD=" in spec_path(dirs, a.uid).read_text()
    ckpt_path(dirs).write_bytes(b"\x00" * 64)

    d2 = HoldDriver(dirs["hw"])
    m = make_manager(d2)
    assert m.prepared() == {} and d2.holdings() == {} and not spec_path(dirs, a.uid).exists()
    assert ("unprepare", a.uid) in d2.calls


# --- the real CPU driver ------------------------------------------------------------------------


def test_cpu_driver_never_gives_a_running_claims_cpus_to_another_after_damage(
    fixture_trees: FixtureTrees, tmp_path: Path
) -> None:
    from topodra.common.topology import discover
    from topodra.drivers.cpu.driver import CpuDriver
    from topodra.drivers.cpu.options import CpuOptions

    from tests.drivers.cpu.kit import ClaimStore, hook_dir
    from tests.drivers.cpu.kit import Result as CpuResult
    from tests.drivers.cpu.kit import claim_object as cpu_claim

    root = fixture_trees.root("hwloc--32intel64-2p8co2t+8ve")
    store = ClaimStore()
    state, cdi = tmp_path / "state", tmp_path / "cdi"

    def manager() -> ClaimManager:
        d = CpuDriver(discover(root), CpuOptions(hook_dir=hook_dir(tmp_path)), root)
        m = ClaimManager(d, NODE, store, Checkpoint(state, d.name), CdiWriter(cdi, cdi_kind(d.name)))
        m.start()
        return m

    def cpus(m: ClaimManager, ref: ClaimRef) -> list[str]:
        spec = CdiWriter(cdi, cdi_kind(m.driver.name)).read(ref.uid)
        assert spec is not None
        return [d["containerEdits"]["hooks"][0]["args"][1] for d in spec["devices"]]

    m1 = manager()
    a = store.put(cpu_claim("a", [CpuResult("numa-0", 4)]))
    assert not m1.prepare([a])[a.uid].error
    assert cpus(m1, a) == ["0-1,16-17"]
    m1.close()
    found = checkpoint.newest(state, "cpu.topodra.io")
    assert found is not None
    found[0].write_bytes(b"")  # zero length

    m2 = manager()
    b = store.put(cpu_claim("b", [CpuResult("numa-0", 4)]))
    assert not m2.prepare([b])[b.uid].error
    assert cpus(m2, b) == ["2-3,18-19"]  # not a's
    assert m2.unprepare([a]) == {a.uid: ""}
    assert sorted(p.name for p in cdi.iterdir()) == [f"cpu.topodra.io-claim_{b.uid}.json"]
    m2.close()
