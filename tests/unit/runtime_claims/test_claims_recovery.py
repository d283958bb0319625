"""Restart, reboot, corrupt files, reconcile with the API server, two instances on one state dir."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from topodra.common.runtime.checkpoint import (
    Checkpoint,
    CheckpointError,
    ClaimRecord,
    LockTimeout,
    Phase,
    decode,
    encode,
)
from topodra.common.runtime.driver import AllocatedDevice, ClaimRef, Preparation

from tests.conftest import REPO
from tests.unit.runtime_claims.claimkit import (
    DRIVER,
    NODE,
    HoldDriver,
    MemoryClaimStore,
    Result,
    claim_object,
    new_uid,
)
from tests.unit.runtime_claims.conftest import ManagerFactory


def put(store: MemoryClaimStore, name: str, device: str) -> ClaimRef:
    return store.put(claim_object("ns1", name, new_uid(), [Result("r", device)]))


def spec_path(dirs: dict[str, Path], uid: str) -> Path:
    return dirs["cdi"] / f"{DRIVER}-claim_{uid}.json"


def test_restart_restores_completed_claims_and_their_answers(
    make_manager: ManagerFactory, claim_store: MemoryClaimStore, dirs: dict[str, Path]
) -> None:
    ref = put(claim_store, "c", "dev-0")
    answer = make_manager().prepare([ref])
    d2 = HoldDriver(dirs["hw"])
    m2 = make_manager(d2)
    assert list(d2.restored) == [ref]
    assert dict(d2.restored[ref].state) == {"holds": ["dev-0"]}
    assert m2.prepare([ref]) == answer
    assert [c for c in d2.calls if c[0] == "prepare"] == []


def test_reboot_rewrites_the_cdi_specs(
    make_manager: ManagerFactory, claim_store: MemoryClaimStore, dirs: dict[str, Path]
) -> None:
    refs = [put(claim_store, f"c{i}", f"dev-{i}") for i in range(3)]
    make_manager().prepare(refs)
    before = {r.uid: spec_path(dirs, r.uid).read_bytes() for r in refs}
    for p in dirs["cdi"].iterdir():
        p.unlink()
    dirs["cdi"].rmdir()  # /var/run is a tmpfs: the folder itself is gone
    make_manager()
    assert {r.uid: spec_path(dirs, r.uid).read_bytes() for r in refs} == before


def test_started_only_claim_is_rolled_back_on_start(
    make_manager: ManagerFactory, claim_store: MemoryClaimStore, dirs: dict[str, Path]
) -> None:
    """The state a kill -9 between "started" and "completed" leaves: checkpoint, holds, a spec."""
    ref = put(claim_store, "c", "dev-4")
    ckpt = Checkpoint(dirs["state"], DRIVER)
    rec = ClaimRecord(
        claim=ref,
        phase=Phase.STARTED,
        allocated=(AllocatedDevice("r", NODE, "dev-4"),),
        cdi_file=f"{DRIVER}-claim_{ref.uid}.json",
    )
    with ckpt.locked():
        ckpt.save({ref.uid: rec})
    dirs["hw"].mkdir(parents=True)
    (dirs["hw"] / "dev-4").write_text(ref.uid[:5])  # an interrupted write
    dirs["cdi"].mkdir()
    spec_path(dirs, ref.uid).write_text("{}")
    (dirs["cdi"] / f".{DRIVER}-claim_{ref.uid}.json.123.tmp").write_text("{")

    d = HoldDriver(dirs["hw"])
    m = make_manager(d)
    assert ("unprepare", ref.uid) in d.calls
    assert m.prepared() == {}
    assert d.holdings() == {}
    assert list(dirs["cdi"].iterdir()) == []
    # and the claim can now be prepared normally
    assert not m.prepare([ref])[ref.uid].error


def test_failed_rollback_keeps_devices_reserved_and_retries(
    make_manager: ManagerFactory, claim_store: MemoryClaimStore, dirs: dict[str, Path]
) -> None:
    ref = put(claim_store, "c", "dev-4")
    other = put(claim_store, "other", "dev-4")
    ckpt = Checkpoint(dirs["state"], DRIVER)
    rec = ClaimRecord(ref, Phase.STARTED, (AllocatedDevice("r", NODE, "dev-4"),), "x.json")
    with ckpt.locked():
        ckpt.save({ref.uid: rec})
    d = HoldDriver(dirs["hw"], fail_unprepare=True)
    m = make_manager(d)
    assert m.prepared()[ref.uid].phase is Phase.STARTED
    assert "already held by claim ns1/c" in m.prepare([other])[other.uid].error
    d.fail_unprepare = False
    m.reconcile()
    assert m.prepared() == {}
    assert not m.prepare([other])[other.uid].error


def test_newer_checkpoint_version_is_refused_untouched(dirs: dict[str, Path]) -> None:
    ckpt = Checkpoint(dirs["state"], DRIVER)
    doc = json.loads(encode(DRIVER, {}))
    doc["version"] = 99
    dirs["state"].mkdir()
    ckpt.path.write_text(json.dumps(doc))
    with pytest.raises(CheckpointError, match="version 99 is newer"):
        ckpt.load()
    assert json.loads(ckpt.path.read_text())["version"] == 99


def test_checkpoint_round_trip() -> None:
    ref = ClaimRef("ns", "n", new_uid())
    rec = ClaimRecord(
        ref,
        Phase.STARTED,
        (
            AllocatedDevice(
                "a/b", "p", "d", share_id=new_uid(), consumed_capacity={"mem": "1Gi"}, admin_access=True
            ),
        ),
        "f.json",
    )
    assert decode(DRIVER, encode(DRIVER, {ref.uid: rec})) == {ref.uid: rec}


def test_orphan_specs_of_ours_are_removed_but_foreign_files_kept(
    make_manager: ManagerFactory, dirs: dict[str, Path]
) -> None:
    dirs["cdi"].mkdir(parents=True)
    orphan = spec_path(dirs, new_uid())
    orphan.write_text("{}")
    foreign = dirs["cdi"] / "nvidia.com-gpu.json"
    foreign.write_text("{}")
    make_manager()
    assert not orphan.exists()
    assert foreign.exists()


def test_reconcile_unprepares_claims_gone_from_this_node(
    make_manager: ManagerFactory, claim_store: MemoryClaimStore, dirs: dict[str, Path]
) -> None:
    deleted = put(claim_store, "deleted", "dev-0")
    recreated = put(claim_store, "recreated", "dev-1")
    deallocated = put(claim_store, "deallocated", "dev-2")
    moved = put(claim_store, "moved", "dev-3")
    kept = put(claim_store, "kept", "dev-4")
    d = HoldDriver(dirs["hw"])
    m = make_manager(d)
    assert all(not o.error for o in m.prepare([deleted, recreated, deallocated, moved, kept]).values())

    claim_store.delete("ns1", "deleted")
    claim_store.put(claim_object("ns1", "recreated", new_uid(), [Result("r", "dev-1")]))
    claim_store.put(claim_object("ns1", "deallocated", deallocated.uid, None))
    claim_store.put(claim_object("ns1", "moved", moved.uid, [Result("r", "dev-3", pool="node-b")]))

    report = m.reconcile()
    # an answer with the claim in it is authoritative; NotFound must be seen in two rounds
    assert sorted(report.unprepared) == sorted([recreated.uid, deallocated.uid, moved.uid])
    assert report.suspected == [deleted.uid]
    assert report.kept == [kept.uid]
    assert set(m.prepared()) == {deleted.uid, kept.uid}
    report = m.reconcile()
    assert report.unprepared == [deleted.uid]
    assert set(m.prepared()) == {kept.uid}
    assert d.holdings() == {"dev-4": kept.uid}
    assert [p.name for p in dirs["cdi"].iterdir()] == [f"{DRIVER}-claim_{kept.uid}.json"]


def test_reconcile_keeps_a_deleted_claim_while_the_driver_sees_a_pod_use_it(
    make_manager: ManagerFactory, claim_store: MemoryClaimStore, dirs: dict[str, Path]
) -> None:
    """A tenant can remove a claim's finalizer and delete it under a running pod. Releasing its
    devices then would let the scheduler give them to another claim while the pod holds them:
    the claim is kept, round after round, while the driver sees something use it; once nothing
    does, it is unprepared. A driver whose look fails keeps it too."""
    gone = put(claim_store, "gone", "dev-0")
    users: dict[str, str] = {gone.uid: "container ns1/pod/main uses its devices"}

    class Watching(HoldDriver):
        def in_use(self, claim: ClaimRef, preparation: Preparation) -> str:
            if users.get(claim.uid) == "fail":
                raise OSError("cannot read /proc")
            return users.get(claim.uid, "")

    d = Watching(dirs["hw"])
    m = make_manager(d)
    assert not m.prepare([gone])[gone.uid].error
    claim_store.delete("ns1", "gone")
    assert m.reconcile().suspected == [gone.uid]
    for _ in range(3):
        report = m.reconcile()
        assert report.unprepared == [] and report.kept == [gone.uid]
    users[gone.uid] = "fail"
    assert m.reconcile().kept == [gone.uid]
    assert d.holdings() == {"dev-0": gone.uid}
    del users[gone.uid]  # the pod is gone
    assert m.reconcile().unprepared == [gone.uid]
    assert d.holdings() == {}


def test_reconcile_keeps_a_deleted_claim_while_the_kubelet_lists_a_container_with_it(
    make_manager: ManagerFactory, claim_store: MemoryClaimStore, dirs: dict[str, Path]
) -> None:
    """The same for a driver that sees no use itself (the accelerator driver): the kubelet's pod
    resources list (common/runtime/podresources.py) says which containers were given the claim.
    While it names one, or cannot be asked, the claim is kept; once it names none, released.
    The kubelet's answer is given here as its text; the socket is tested in
    tests/unit/runtime_grpc/test_podresources.py and with the real kubelet in tests/node."""
    gone = put(claim_store, "gone", "dev-0")
    kubelet: dict[tuple[str, str], str] = {
        ("ns1", "gone"): "the kubelet lists container ns1/pod/main with it"
    }
    asked: list[str] = []

    def kubelet_users(claims: Sequence[ClaimRef]) -> dict[str, str]:
        asked.extend(c.uid for c in claims)
        if "fail" in kubelet.values():
            raise ConnectionRefusedError("kubelet.sock")
        return {c.uid: kubelet.get((c.namespace, c.name), "") for c in claims}

    d = HoldDriver(dirs["hw"])
    m = make_manager(d, kubelet_users=kubelet_users)
    assert not m.prepare([gone])[gone.uid].error
    claim_store.delete("ns1", "gone")
    assert m.reconcile().suspected == [gone.uid]
    assert asked == []  # asked only about a claim reconcile would release
    for _ in range(2):
        report = m.reconcile()
        assert report.unprepared == [] and report.kept == [gone.uid]
    kubelet[("ns1", "gone")] = "fail"
    assert m.reconcile().kept == [gone.uid]
    assert d.holdings() == {"dev-0": gone.uid}
    del kubelet[("ns1", "gone")]  # the pod ended
    assert m.reconcile().unprepared == [gone.uid]
    assert d.holdings() == {}
    assert asked == [gone.uid] * 4


def test_reconcile_keeps_everything_while_the_api_is_unreachable(
    make_manager: ManagerFactory, claim_store: MemoryClaimStore, dirs: dict[str, Path]
) -> None:
    refs = [put(claim_store, f"c{i}", f"dev-{i}") for i in range(3)]
    m = make_manager()
    m.prepare(refs)
    claim_store.delete("ns1", "c0")
    claim_store.down = True
    report = m.reconcile()
    assert report.unreachable and report.unprepared == []
    # a restart while the API is down drops nothing either
    m2 = make_manager()
    assert set(m2.prepared()) == {r.uid for r in refs}
    claim_store.down = False
    assert m2.reconcile().suspected == [refs[0].uid]
    assert m2.reconcile().unprepared == [refs[0].uid]


def test_lock_keeps_a_second_instance_out(dirs: dict[str, Path]) -> None:
    """Hold the lock in another process; this one times out with a clear error."""
    code = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from topodra.common.runtime.checkpoint import Checkpoint
        with Checkpoint(Path({str(dirs["state"])!r}), {DRIVER!r}).locked():
            print("locked", flush=True)
            sys.stdin.read()
        """
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=REPO
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == b"locked\n"
        ckpt = Checkpoint(dirs["state"], DRIVER, lock_timeout=0.2)
        with pytest.raises(LockTimeout, match="another instance holds"), ckpt.locked():
            pass
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(10)
    with Checkpoint(dirs["state"], DRIVER, lock_timeout=0.2).locked():
        pass


def test_lock_timeout_is_a_per_claim_error(
    make_manager: ManagerFactory, claim_store: MemoryClaimStore, dirs: dict[str, Path]
) -> None:
    ref = put(claim_store, "c", "dev-0")
    m = make_manager()
    m._checkpoint._lock_timeout = 0.05
    other = Checkpoint(dirs["state"], DRIVER)
    with other.locked():
        out = m.prepare([ref])
        errs = m.unprepare([ref])
    assert "ns1/c" in out[ref.uid].error and "another instance" in out[ref.uid].error
    assert "another instance" in errs[ref.uid]


def test_two_managers_on_one_state_dir_see_each_others_claims(
    make_manager: ManagerFactory, claim_store: MemoryClaimStore, dirs: dict[str, Path]
) -> None:
    """Rolling update: old and new instance alternate; neither loses or double-books a claim."""
    a, b = make_manager(), make_manager()
    c1, c2, c3 = (
        put(claim_store, "c1", "dev-0"),
        put(claim_store, "c2", "dev-1"),
        put(claim_store, "c3", "dev-0"),
    )
    assert not a.prepare([c1])[c1.uid].error
    assert not b.prepare([c2])[c2.uid].error
    assert "already held by claim ns1/c1" in b.prepare([c3])[c3.uid].error
    assert set(a.prepared()) == {c1.uid, c2.uid}
    assert a.unprepare([c2]) == {c2.uid: ""}
    assert set(b.prepared()) == {c1.uid}


def test_not_found_must_be_seen_in_two_rounds_in_a_row(
    make_manager: ManagerFactory, claim_store: MemoryClaimStore, dirs: dict[str, Path]
) -> None:
    """NotFound, found, NotFound: never two rounds in a row, so never unprepared."""
    keep, flaky = put(claim_store, "keep", "dev-0"), put(claim_store, "flaky", "dev-1")
    m = make_manager()
    m.prepare([keep, flaky])
    obj = claim_store.get("ns1", "flaky")
    claim_store.delete("ns1", "flaky")
    assert m.reconcile().suspected == [flaky.uid]
    claim_store.put(obj)
    assert m.reconcile().suspected == []
    claim_store.delete("ns1", "flaky")
    assert m.reconcile().suspected == [flaky.uid]
    assert set(m.prepared()) == {keep.uid, flaky.uid}
    assert m.reconcile().unprepared == [flaky.uid]


def test_reconcile_reads_the_watch_cache_and_confirms_changes_with_a_quorum_read(
    make_manager: ManagerFactory, claim_store: MemoryClaimStore
) -> None:
    refs = [put(claim_store, f"c{i}", f"dev-{i}") for i in range(4)]
    m = make_manager()
    m.prepare(refs)
    gets, cached = claim_store.gets, claim_store.cached_gets
    m.reconcile()  # nothing changed: one cached read per claim, no quorum read
    assert (claim_store.gets - gets, claim_store.cached_gets - cached) == (4, 4)
    claim_store.delete("ns1", "c0")
    claim_store.put(claim_object("ns1", "c1", refs[1].uid, None))  # deallocated
    gets, cached = claim_store.gets, claim_store.cached_gets
    report = m.reconcile()  # the two changed claims are read again from etcd before acting
    assert (claim_store.gets - gets, claim_store.cached_gets - cached) == (6, 4)
    assert report.unprepared == [refs[1].uid] and report.suspected == [refs[0].uid]


def _dies_after_the_driver_acted(driver: HoldDriver) -> None:
    """The process is killed after the driver prepared and before the checkpoint's one write."""
    real = driver.prepare

    def killed(*args: Any) -> Any:
        real(*args)
        raise SystemExit("killed")

    setattr(driver, "prepare", killed)  # noqa: B010 (an instance attribute over the method)


def test_an_instance_finds_the_prepare_another_instance_never_finished(
    make_manager: ManagerFactory, claim_store: MemoryClaimStore, dirs: dict[str, Path]
) -> None:
    """A prepare writes the checkpoint only once the driver answered, so an instance that dies
    before leaves only its CDI spec. The other instance on the state folder learns that someone
    held the lock from the lock file's token, re-reads the specs and rolls the claim back, instead
    of handing its device out again."""
    first, second = HoldDriver(dirs["hw"]), HoldDriver(dirs["hw"])
    a, b = make_manager(first), make_manager(second)
    c1, c2 = put(claim_store, "c1", "dev-0"), put(claim_store, "c2", "dev-0")  # c1 deallocated since
    _dies_after_the_driver_acted(first)
    with pytest.raises(SystemExit):
        a.prepare([c1])
    assert second.holdings() == {"dev-0": c1.uid} and spec_path(dirs, c1.uid).exists()
    assert not b.prepare([c2])[c2.uid].error
    assert second.violations() == []
    assert second.holdings() == {"dev-0": c2.uid} and not spec_path(dirs, c1.uid).exists()


def test_a_claim_prepared_again_after_its_unprepare_is_rolled_back_with_its_new_devices(
    make_manager: ManagerFactory, claim_store: MemoryClaimStore, dirs: dict[str, Path]
) -> None:
    """The unprepare's "started" record stays in the file until the next write. If the same claim
    is prepared again (reallocated meanwhile) and the process dies before that write, the record
    names the old devices; the new spec names what the driver holds now, and the restart
    releases that."""
    ref = put(claim_store, "c", "dev-0")
    driver = HoldDriver(dirs["hw"])
    m = make_manager(driver)
    assert not m.prepare([ref])[ref.uid].error
    assert m.unprepare([ref]) == {ref.uid: ""}
    claim_store.put(claim_object("ns1", "c", ref.uid, [Result("r", "dev-1")]))
    _dies_after_the_driver_acted(driver)
    with pytest.raises(SystemExit):
        m.prepare([ref])
    assert driver.holdings() == {"dev-1": ref.uid}

    d2 = HoldDriver(dirs["hw"])
    m2 = make_manager(d2)
    assert m2.prepared() == {} and d2.holdings() == {} and not spec_path(dirs, ref.uid).exists()
    assert d2.violations() == []
