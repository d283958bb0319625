"""Prepare and unprepare through the claim core, with a real driver, checkpoint and CDI files."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from topodra.common.device import Device
from topodra.common.runtime.checkpoint import Checkpoint, CheckpointError, Phase, newest
from topodra.common.runtime.claims.spec import record_variable
from topodra.common.runtime.driver import ClaimRef, Scan
from topodra.common.runtime.seams import ClaimOutcome, ClaimProcessor, ResultDevice

from tests.unit.runtime_claims.claimkit import (
    DRIVER,
    NODE,
    HoldDriver,
    MemoryClaimStore,
    MemoryHoldDriver,
    Result,
    claim_object,
    driver_config,
    new_uid,
)
from tests.unit.runtime_claims.conftest import ManagerFactory

KIND = f"{DRIVER}/claim"


def put(
    store: MemoryClaimStore, name: str, *results: Result, config: list[dict[str, object]] | None = None
) -> ClaimRef:
    return store.put(claim_object("ns1", name, new_uid(), list(results), config or []))


def spec_path(dirs: dict[str, Path], uid: str) -> Path:
    return dirs["cdi"] / f"{DRIVER}-claim_{uid}.json"


def test_manager_is_a_claim_processor(make_manager: ManagerFactory) -> None:
    processor: ClaimProcessor = make_manager()
    assert processor.prepare([]) == {}
    assert processor.unprepare([]) == {}


def test_prepare_answers_devices_and_writes_owner_only_cdi_spec(
    make_manager: ManagerFactory, claim_store: MemoryClaimStore, driver: HoldDriver, dirs: dict[str, Path]
) -> None:
    ref = put(claim_store, "c1", Result("gpu/big", "dev-0"), Result("other", "dev-1"))
    m = make_manager(driver)
    out = m.prepare([ref])
    assert out == {
        ref.uid: ClaimOutcome(
            devices=(
                ResultDevice(("gpu",), NODE, "dev-0", (f"{KIND}={ref.uid}-dev-0",), None),
                ResultDevice(("other",), NODE, "dev-1", (f"{KIND}={ref.uid}-dev-1",), None),
            )
        )
    }
    path = spec_path(dirs, ref.uid)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    spec = json.loads(path.read_text())
    assert spec["kind"] == KIND
    # hostPath on device nodes needs 0.5.0, and nothing in this spec needs more
    assert spec["cdiVersion"] == "0.5.0"
    names = [d["name"] for d in spec["devices"]]
    assert names == [f"{ref.uid}-dev-0", f"{ref.uid}-dev-1"]
    first = spec["devices"][0]["containerEdits"]
    assert "TEST_DEVICE_DEV_0=gpu/big" in first["env"]
    assert f"TOPODRA_TEST_DEVICE_DEV_0={ref.uid}" in first["env"]
    assert first["deviceNodes"] == [{"path": "/dev/topodra-dev-0", "hostPath": "/dev/null"}]
    claim_env = spec["containerEdits"]["env"]
    assert claim_env[0] == "TEST_CLAIM=ns1/c1" and len(claim_env) == 2
    # the claim's record: what a damaged checkpoint is rebuilt from (claims/spec.py)
    name, _, record = claim_env[1].partition("=")
    assert name == "TOPODRA_TEST_CLAIM_RECORD"
    assert json.loads(record) == {
        "phase": "completed",
        "namespace": "ns1",
        "name": "c1",
        "uid": ref.uid,
        "allocated": [
            {"request": "gpu/big", "pool": NODE, "device": "dev-0"},
            {"request": "other", "pool": NODE, "device": "dev-1"},
        ],
        "state": {"holds": ["dev-0", "dev-1"]},
    }
    assert driver.holdings() == {"dev-0": ref.uid, "dev-1": ref.uid}
    rec = m.prepared()[ref.uid]
    assert rec.phase is Phase.COMPLETED
    assert rec.cdi_file == path.name
    assert rec.preparation is not None
    assert dict(rec.preparation.state) == {"holds": ["dev-0", "dev-1"]}
    state_dir = dirs["state"]
    assert stat.S_IMODE(state_dir.stat().st_mode) == 0o700
    for p in state_dir.iterdir():
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p


def test_prepare_twice_repeats_the_answer_without_side_effects(
    make_manager: ManagerFactory, claim_store: MemoryClaimStore, driver: HoldDriver, dirs: dict[str, Path]
) -> None:
    ref = put(claim_store, "c1", Result("r", "dev-2"))
    m = make_manager(driver)
    first = m.prepare([ref])
    gets = claim_store.gets
    mtime = spec_path(dirs, ref.uid).stat().st_mtime_ns
    second = m.prepare([ref, ref])
    assert second == first
    assert [c for c in driver.calls if c[0] == "prepare"] == [("prepare", ref.uid)]
    assert claim_store.gets == gets  # no second GET
    assert spec_path(dirs, ref.uid).stat().st_mtime_ns == mtime


def test_prepare_of_a_prepared_claim_puts_a_deleted_spec_back(
    make_manager: ManagerFactory, claim_store: MemoryClaimStore, dirs: dict[str, Path]
) -> None:
    ref = put(claim_store, "c1", Result("r", "dev-2"))
    m = make_manager()
    m.prepare([ref])
    content = spec_path(dirs, ref.uid).read_bytes()
    spec_path(dirs, ref.uid).unlink()
    assert not m.prepare([ref])[ref.uid].error
    assert spec_path(dirs, ref.uid).read_bytes() == content


def test_unprepare_releases_and_is_idempotent(
    make_manager: ManagerFactory, claim_store: MemoryClaimStore, driver: HoldDriver, dirs: dict[str, Path]
) -> None:
    ref = put(claim_store, "c1", Result("r", "dev-3"))
    m = make_manager(driver)
    m.prepare([ref])
    assert m.unprepare([ref]) == {ref.uid: ""}
    assert driver.holdings() == {}
    assert not spec_path(dirs, ref.uid).exists()
    assert m.prepared() == {}
    assert m.unprepare([ref]) == {ref.uid: ""}
    unknown = ClaimRef("ns1", "never", new_uid())
    assert m.unprepare([unknown]) == {unknown.uid: ""}
    assert [c for c in driver.calls if c[0] == "unprepare"] == [("unprepare", ref.uid)]


def test_unprepare_works_from_the_checkpoint_when_the_claim_is_deleted(
    make_manager: ManagerFactory, claim_store: MemoryClaimStore, driver: HoldDriver, dirs: dict[str, Path]
) -> None:
    ref = put(claim_store, "c1", Result("r", "dev-3"))
    make_manager(driver).prepare([ref])
    claim_store.delete("ns1", "c1")
    claim_store.down = True  # not even reachable
    m2 = make_manager()  # a restarted process: knows the claim only from the checkpoint
    assert m2.unprepare([ref]) == {ref.uid: ""}
    assert driver.holdings() == {}
    assert not spec_path(dirs, ref.uid).exists()


def test_one_bad_claim_does_not_fail_the_others(
    make_manager: ManagerFactory, claim_store: MemoryClaimStore, driver: HoldDriver
) -> None:
    good1 = put(claim_store, "good1", Result("r", "dev-0"))
    missing = ClaimRef("ns1", "missing", new_uid())
    good2 = put(claim_store, "good2", Result("r", "dev-1"))
    out = make_manager(driver).prepare([good1, missing, good2])
    assert set(out) == {good1.uid, missing.uid, good2.uid}
    assert not out[good1.uid].error and not out[good2.uid].error
    assert "ns1/missing" in out[missing.uid].error and "not found" in out[missing.uid].error
    assert out[missing.uid].devices == ()
    assert driver.holdings() == {"dev-0": good1.uid, "dev-1": good2.uid}


def test_subrequest_names_are_reduced_to_the_main_request(
    make_manager: ManagerFactory, claim_store: MemoryClaimStore
) -> None:
    ref = put(claim_store, "c1", Result("main/sub-a", "dev-4"))
    (dev,) = make_manager().prepare([ref])[ref.uid].devices
    assert dev.request_names == ("main",)


def test_only_our_driver_results_are_taken(
    make_manager: ManagerFactory, claim_store: MemoryClaimStore
) -> None:
    ref = put(
        claim_store,
        "mixed",
        Result("r", "dev-0"),
        Result("nic", "eth0", driver="nic.topodra.io", pool="elsewhere"),
    )
    out = make_manager().prepare([ref])[ref.uid]
    assert not out.error
    assert [d.device for d in out.devices] == ["dev-0"]


def test_shared_device_with_distinct_share_ids(
    make_manager: ManagerFactory, claim_store: MemoryClaimStore, driver: HoldDriver, dirs: dict[str, Path]
) -> None:
    s1, s2 = new_uid(), new_uid()
    a = put(claim_store, "a", Result("r", "shared-0", share_id=s1))
    b = put(claim_store, "b", Result("r", "shared-0", share_id=s2))
    c = put(claim_store, "c", Result("r", "shared-0", share_id=s1))  # a forged/reused share id
    m = make_manager(driver)
    out = m.prepare([a, b, c])
    assert not out[a.uid].error and not out[b.uid].error
    assert out[a.uid].devices[0].share_id == s1
    assert out[a.uid].devices[0].cdi_device_ids == (f"{KIND}={a.uid}-shared-0-{s1}",)
    assert "already held by claim ns1/a" in out[c.uid].error
    assert driver.holdings() == {f"shared-0@{s1}": a.uid, f"shared-0@{s2}": b.uid}


def test_exclusive_device_cannot_be_shared_even_with_share_ids(
    make_manager: ManagerFactory, claim_store: MemoryClaimStore
) -> None:
    a = put(claim_store, "a", Result("r", "dev-5", share_id=new_uid()))
    b = put(claim_store, "b", Result("r", "dev-5", share_id=new_uid()))
    out = make_manager().prepare([a, b])
    assert not out[a.uid].error
    assert "device 'dev-5'" in out[b.uid].error and "already held" in out[b.uid].error


def test_admin_access_coexists_with_an_exclusive_holder(
    make_manager: ManagerFactory, claim_store: MemoryClaimStore, driver: HoldDriver
) -> None:
    a = put(claim_store, "a", Result("r", "dev-6"))
    admin = put(claim_store, "admin", Result("r", "dev-6", admin_access=True))
    b = put(claim_store, "b", Result("r", "dev-6"))
    out = make_manager(driver).prepare([a, admin, b])
    assert not out[a.uid].error and not out[admin.uid].error
    assert "already held by claim ns1/a" in out[b.uid].error  # admin access is not an exclusive hold
    assert driver.holdings() == {"dev-6": a.uid}


def test_opaque_config_reaches_the_driver_class_first(
    make_manager: ManagerFactory, claim_store: MemoryClaimStore, dirs: dict[str, Path]
) -> None:
    ref = put(
        claim_store,
        "cfg",
        Result("r", "dev-0"),
        Result("q", "dev-1"),
        config=[
            driver_config("FromClaim", env=["FROM_CLAIM=1"]),
            driver_config("FromClass", env=["FROM_CLASS=1"]),
            driver_config("FromClaim", requests=["q"], env=["ONLY_Q=1"]),
            driver_config("FromClaim", requests=["absent"], fail=True),  # applies to no result of ours
            {"source": "FromClaim", "opaque": {"driver": "other.example.com", "parameters": "not ours"}},
        ],
    )
    assert not make_manager().prepare([ref])[ref.uid].error
    env = json.loads(spec_path(dirs, ref.uid).read_text())["devices"][0]["containerEdits"]["env"]
    assert env[1:4] == ["FROM_CLASS=1", "FROM_CLAIM=1", "ONLY_Q=1"]


def test_driver_failure_is_rolled_back(
    make_manager: ManagerFactory, claim_store: MemoryClaimStore, driver: HoldDriver, dirs: dict[str, Path]
) -> None:
    ref = put(claim_store, "c", Result("r", "dev-0"), config=[driver_config(fail=True)])
    m = make_manager(driver)
    out = m.prepare([ref])[ref.uid]
    assert out.error == "claim ns1/c: asked to fail"
    assert m.prepared() == {}
    assert driver.holdings() == {}
    assert not spec_path(dirs, ref.uid).exists()


def test_driver_returning_an_invalid_cdi_edit_is_rolled_back(
    make_manager: ManagerFactory, claim_store: MemoryClaimStore, dirs: dict[str, Path]
) -> None:
    driver = HoldDriver(dirs["hw"], bad_edits=True)
    ref = put(claim_store, "c", Result("r", "dev-0"))
    m = make_manager(driver)
    out = m.prepare([ref])[ref.uid]
    assert "invalid CDI spec" in out.error and "relative/path" in out.error and "ns1/c" in out.error
    assert driver.holdings() == {} and m.prepared() == {} and list(dirs["cdi"].glob("*")) == []


def test_the_spec_says_started_while_the_driver_runs_and_the_checkpoint_completed_after(
    make_manager: ManagerFactory, claim_store: MemoryClaimStore, dirs: dict[str, Path]
) -> None:
    """While the driver runs, the claim's provisional CDI spec already names it `started` with
    the allocated devices (what a restart rolls back); the checkpoint has it only once the driver
    answered (docs/design/claim-lifecycle.md)."""
    seen: list[dict[str, Any]] = []
    in_checkpoint: list[bool] = []
    prefix = f"{record_variable(DRIVER)}="

    class Spy(HoldDriver):
        def prepare(self, claim, results, config):  # type: ignore[no-untyped-def]
            spec = json.loads(spec_path(dirs, claim.uid).read_text())
            env = spec["containerEdits"]["env"]
            seen.append(json.loads(next(e for e in env if e.startswith(prefix))[len(prefix) :]))
            found = newest(dirs["state"], DRIVER)
            in_checkpoint.append(found is not None and claim.uid in found[1]["claims"])
            return super().prepare(claim, results, config)

    ref = put(claim_store, "c", Result("r", "dev-7"))
    make_manager(Spy(dirs["hw"])).prepare([ref])
    assert seen[0]["phase"] == "started" and in_checkpoint == [False]
    assert seen[0]["allocated"] == [{"request": "r", "pool": NODE, "device": "dev-7"}]
    found = newest(dirs["state"], DRIVER)
    assert found is not None
    doc = found[1]
    assert doc["claims"][ref.uid]["phase"] == "completed"
    assert doc["claims"][ref.uid]["cdiFile"] == f"{DRIVER}-claim_{ref.uid}.json"
    assert doc["claims"][ref.uid]["preparation"]["state"] == {"holds": ["dev-7"]}


def test_a_driver_holding_in_memory_gets_no_started_mark_and_its_one_spec_after(
    make_manager: ManagerFactory,
    claim_store: MemoryClaimStore,
    dirs: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A driver whose holds die with its process (the CPU and accelerator drivers') loses them in
    any kill, so no provisional spec is written before it acts: while it runs the claim has no
    spec, and afterwards exactly the final one, the same document the checkpoint keeps. A
    failing prepare of such a driver leaves no spec either."""
    present: list[bool] = []
    renames: list[str] = []

    class Spy(MemoryHoldDriver):
        def prepare(self, claim, results, config):  # type: ignore[no-untyped-def]
            present.append(spec_path(dirs, claim.uid).exists())
            return super().prepare(claim, results, config)

    real_replace = os.replace

    def counting_replace(src: Any, dst: Any) -> None:
        renames.append(os.fspath(dst))
        real_replace(src, dst)

    ref = put(claim_store, "c", Result("r", "dev-7"))
    bad = put(claim_store, "bad", Result("r", "dev-6"), config=[driver_config(fail=True)])
    m = make_manager(Spy(dirs["hw"]))
    monkeypatch.setattr(os, "replace", counting_replace)
    out = m.prepare([ref, bad])
    monkeypatch.undo()
    assert present == [False, False]
    assert out[ref.uid].error == "" and "asked to fail" in out[bad.uid].error
    assert [r for r in renames if r.startswith(str(dirs["cdi"]))] == [str(spec_path(dirs, ref.uid))]
    assert not spec_path(dirs, bad.uid).exists()
    found = newest(dirs["state"], DRIVER)
    assert found is not None and found[1]["claims"][ref.uid]["phase"] == "completed"
    assert json.loads(spec_path(dirs, ref.uid).read_text()) == m.prepared()[ref.uid].cdi_spec


def test_the_answers_of_a_batch_are_given_inside_answering(
    make_manager: ManagerFactory, claim_store: MemoryClaimStore, driver: HoldDriver
) -> None:
    """The thread that serves a batch gives every answer of it inside `answering()`, once per
    batch: the DRA servicer sets its gRPC server's `gathered` there, so that the answers leave
    in one write (common/runtime/grpcserver/connection.py)."""
    m = make_manager(driver)
    entered: list[str] = []
    inside = [False]

    @contextlib.contextmanager
    def answering() -> Iterator[None]:
        entered.append("enter")
        inside[0] = True
        try:
            yield
        finally:
            inside[0] = False

    m.answering = answering
    refs = [put(claim_store, f"c{i}", Result("r", f"dev-{i}")) for i in range(3)]
    seen: list[tuple[bool, list[str]]] = []
    m.prepare_async(
        refs, lambda got: seen.append((inside[0], sorted(u for u, o in got.items() if not o.error)))
    )
    m.unprepare_async(refs, lambda got: seen.append((inside[0], sorted(u for u, e in got.items() if not e))))
    everyone = sorted(r.uid for r in refs)
    assert seen == [(True, everyone), (True, everyone)]
    assert entered == ["enter", "enter"]


def test_failed_unprepare_keeps_the_claim(
    make_manager: ManagerFactory, claim_store: MemoryClaimStore, driver: HoldDriver, dirs: dict[str, Path]
) -> None:
    ref = put(claim_store, "c", Result("r", "dev-0"))
    m = make_manager(driver)
    m.prepare([ref])
    driver.fail_unprepare = True
    err = m.unprepare([ref])[ref.uid]
    assert "ns1/c" in err and "device busy" in err
    assert ref.uid in m.prepared() and spec_path(dirs, ref.uid).exists()
    driver.fail_unprepare = False
    assert m.unprepare([ref]) == {ref.uid: ""}


@pytest.mark.parametrize("threads", [4])
def test_concurrent_calls_never_double_allocate(
    make_manager: ManagerFactory, claim_store: MemoryClaimStore, driver: HoldDriver, threads: int
) -> None:
    import concurrent.futures

    refs = [put(claim_store, f"c{i}", Result("r", "dev-0")) for i in range(16)]
    m = make_manager(driver)
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        outs = list(pool.map(lambda r: m.prepare([r])[r.uid], refs))
    winners = [r for r, o in zip(refs, outs, strict=True) if not o.error]
    assert len(winners) == 1
    assert driver.holdings() == {"dev-0": winners[0].uid}
    assert driver.violations() == []


def count_saves(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Each checkpoint write from now on, as whether it was durable."""
    saves: list[bool] = []
    real = Checkpoint.save

    def counting(self: Checkpoint, records: Any, *, durable: bool = True) -> None:
        saves.append(durable)
        real(self, records, durable=durable)

    monkeypatch.setattr(Checkpoint, "save", counting)
    return saves


def test_a_call_with_many_claims_writes_the_checkpoint_as_for_one(
    make_manager: ManagerFactory,
    claim_store: MemoryClaimStore,
    driver: HoldDriver,
    dirs: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Group commit: a call with many claims writes the checkpoint as a call with one does (a
    prepare once; an unprepare once synced and once, without the claims, not), not per claim,
    and a claim the driver fails is rolled back without touching the others."""
    refs = [put(claim_store, f"c{i}", Result("r", f"dev-{i}")) for i in range(5)]
    refs.append(put(claim_store, "bad", Result("r", "dev-5"), config=[driver_config(fail=True)]))
    m = make_manager(driver)
    saves = count_saves(monkeypatch)  # durable or not, per checkpoint write
    out = m.prepare(refs)
    assert [bool(out[r.uid].error) for r in refs] == [False] * 5 + [True]
    assert saves == [True]
    assert driver.holdings() == {f"dev-{i}": refs[i].uid for i in range(5)}
    saves.clear()
    assert m.unprepare(refs) == {r.uid: "" for r in refs}
    assert saves == [True, False]
    assert driver.holdings() == {}


def test_concurrent_calls_share_a_batch_and_return_without_waiting_for_the_next(
    make_manager: ManagerFactory, claim_store: MemoryClaimStore, driver: HoldDriver, dirs: dict[str, Path]
) -> None:
    """Group commit across callers: calls queued while the serving one waits are answered in one
    batch (one checkpoint write), and an answered call returns at once, even while
    the next batch (a call that arrived later) is still being served."""
    a, b, c = (put(claim_store, n, Result("r", f"dev-{i}")) for i, n in enumerate("abc"))
    m = make_manager(driver)
    gates = {a.uid: threading.Event(), c.uid: threading.Event()}
    entered = {uid: threading.Event() for uid in gates}
    real = driver.prepare

    def gated(claim: ClaimRef, *args: Any) -> Any:
        if claim.uid in gates:
            entered[claim.uid].set()
            assert gates[claim.uid].wait(30)
        return real(claim, *args)

    setattr(driver, "prepare", gated)  # noqa: B010 (an instance attribute over the method)
    answers: dict[str, ClaimOutcome] = {}

    def call(ref: ClaimRef) -> threading.Thread:
        t = threading.Thread(target=lambda: answers.update(m.prepare([ref])))
        t.start()
        return t

    other = Checkpoint(dirs["state"], DRIVER)  # another instance holds the state lock for a moment
    with other.locked():
        ta = call(a)
        tb = call(b)
        deadline = time.monotonic() + 10
        while m._calls.waiting() < 2 and time.monotonic() < deadline:
            time.sleep(0.005)
    assert entered[a.uid].wait(10)  # a and b: one batch, stopped inside the driver at a
    tc = call(c)  # c queues behind that batch
    gates[a.uid].set()
    ta.join(10)
    tb.join(10)
    assert not ta.is_alive() and not tb.is_alive()  # a and b answered while c's batch runs
    assert entered[c.uid].wait(10) and tc.is_alive()
    assert not answers[a.uid].error and not answers[b.uid].error
    gates[c.uid].set()
    tc.join(10)
    assert not answers[c.uid].error
    assert driver.holdings() == {"dev-0": a.uid, "dev-1": b.uid, "dev-2": c.uid}


def test_a_call_whose_batch_cannot_be_served_does_not_leave_the_others_waiting(
    make_manager: ManagerFactory, claim_store: MemoryClaimStore, dirs: dict[str, Path]
) -> None:
    """The serving caller raises (here: the checkpoint is from a newer program, which must not be
    touched); every queued call still gets its turn, and its own error, instead of hanging."""
    dirs["state"].mkdir(parents=True)
    (dirs["state"] / f"{DRIVER}.checkpoint.json").write_text(
        json.dumps({"format": "topodra.io/claim-checkpoint", "version": 99, "driver": DRIVER})
    )
    m = make_manager(start=False)
    refs = [put(claim_store, f"c{i}", Result("r", f"dev-{i}")) for i in range(4)]
    errors: list[BaseException] = []

    def call(ref: ClaimRef) -> None:
        try:
            m.prepare([ref])
        except CheckpointError as e:
            errors.append(e)

    threads = [threading.Thread(target=call, args=(r,)) for r in refs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert not any(t.is_alive() for t in threads)
    assert len(errors) == 4
    with pytest.raises(CheckpointError, match="newer"):
        m.prepare([refs[0]])  # and later calls too


def test_devices_that_come_and_go_are_seen_by_the_next_call(
    make_manager: ManagerFactory, claim_store: MemoryClaimStore, driver: HoldDriver
) -> None:
    """The device map is only rebuilt when the driver's answer changes: it must change then."""
    first, second = put(claim_store, "a", Result("r", "dev-0")), put(claim_store, "b", Result("r", "dev-7"))
    m = make_manager(driver)
    assert not m.prepare([first])[first.uid].error
    driver.exclusive = tuple(d for d in driver.exclusive if d != "dev-7")  # unplugged
    assert "does not exist on node" in m.prepare([second])[second.uid].error
    driver.exclusive = (*driver.exclusive, "dev-7")  # back
    assert not m.prepare([second])[second.uid].error
    # a driver answering with the same list of the same objects (kept, not rebuilt), changed in place
    stable = list(driver.scan().devices)
    setattr(driver, "scan", lambda: Scan(tuple(stable)))  # noqa: B010 (an instance attribute over the method)
    third = put(claim_store, "c", Result("r", "dev-6"))
    m.unprepare([first, second])
    assert not m.prepare([first])[first.uid].error  # the map is kept from here on
    stable[:] = [d for d in stable if d.name != "dev-6"]
    assert "does not exist on node" in m.prepare([third])[third.uid].error
    stable.append(Device("dev-6"))
    assert not m.prepare([third])[third.uid].error


def test_metrics_and_structured_logs_name_the_claim(
    make_manager: ManagerFactory, claim_store: MemoryClaimStore, caplog: pytest.LogCaptureFixture
) -> None:
    from prometheus_client import REGISTRY

    def sample(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, {"driver": DRIVER, **labels}) or 0.0

    count_before = sample("topodra_claim_operation_duration_seconds_count", operation="prepare")
    refs = [put(claim_store, f"c{i}", Result("r", f"dev-{i}")) for i in range(2)]
    missing = ClaimRef("ns1", "missing", new_uid())
    m = make_manager()
    with caplog.at_level("INFO", logger="topodra.runtime.claims"):
        m.prepare([*refs, missing])
    assert sample("topodra_prepared_claims") == 2
    assert sample("topodra_claim_operation_duration_seconds_count", operation="prepare") == count_before + 3
    fields = [getattr(r, "topodra_fields", {}) for r in caplog.records]
    assert {"claim": "ns1/missing", "claim_uid": missing.uid, "driver": DRIVER}.items() <= next(
        f for f in fields if f.get("claim_uid") == missing.uid
    ).items()
    assert any(f.get("claim") == "ns1/c0" and f.get("device") == "dev-0" for f in fields)
    m.unprepare(refs)
    assert sample("topodra_prepared_claims") == 0


def test_a_prepare_and_an_unprepare_of_one_claim_that_overlap_are_served_in_arrival_order(
    make_manager: ManagerFactory, claim_store: MemoryClaimStore, driver: HoldDriver, dirs: dict[str, Path]
) -> None:
    """Both calls wait in one batch behind a call being served. The kubelet sent prepare, then
    unprepare: the claim must end unprepared, as the unprepare's success says."""
    blocker = claim_store.put(claim_object("ns1", "blocker", new_uid(), [Result("r", "dev-0")]))
    ref = claim_store.put(claim_object("ns1", "c", new_uid(), [Result("r", "dev-1")]))
    m = make_manager(driver)
    gate, inside = threading.Event(), threading.Event()
    real = driver.prepare

    def held(claim: ClaimRef, *args: Any) -> Any:
        if claim.uid == blocker.uid:
            inside.set()
            gate.wait(10)
        return real(claim, *args)

    setattr(driver, "prepare", held)  # noqa: B010 (an instance attribute over the method)
    answers: dict[str, Any] = {}

    def queued(count: int) -> None:
        deadline = time.monotonic() + 10
        while m._calls.waiting() < count:
            assert time.monotonic() < deadline, "call never queued"
            time.sleep(0.001)

    first = threading.Thread(target=lambda: answers.update(blocker=m.prepare([blocker])))
    first.start()
    assert inside.wait(10)
    calls = [
        threading.Thread(target=lambda: answers.update(prepare=m.prepare([ref]))),
        threading.Thread(target=lambda: answers.update(unprepare=m.unprepare([ref]))),
    ]
    for i, t in enumerate(calls, 1):
        t.start()
        queued(i)
    gate.set()
    for t in (first, *calls):
        t.join(10)
    assert not answers["prepare"][ref.uid].error
    assert answers["unprepare"] == {ref.uid: ""}
    assert set(m.prepared()) == {blocker.uid}
    assert driver.holdings() == {"dev-0": blocker.uid}
    assert [p.name for p in dirs["cdi"].iterdir()] == [f"{DRIVER}-claim_{blocker.uid}.json"]


def test_callback_calls_queued_behind_a_batch_share_the_next_one_and_nobody_waits(
    make_manager: ManagerFactory,
    claim_store: MemoryClaimStore,
    driver: HoldDriver,
    dirs: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The kubelet's path (prepare_async): a call queued behind a leader returns to its caller at
    once, and the leader answers every queued call, all in one batch with one checkpoint write."""
    refs = [put(claim_store, f"c{i}", Result("r", f"dev-{i}")) for i in range(8)]
    m = make_manager(driver)
    saves = count_saves(monkeypatch)
    answers: dict[str, tuple[ClaimOutcome, int]] = {}
    done = threading.Event()

    def answer(got: dict[str, ClaimOutcome]) -> None:
        for uid, outcome in got.items():
            answers[uid] = (outcome, threading.get_ident())
        if len(answers) == len(refs):
            done.set()

    other = Checkpoint(dirs["state"], DRIVER)  # another instance holds the state lock meanwhile
    with other.locked():
        leader = threading.Thread(target=m.prepare_async, args=([refs[0]], answer))
        leader.start()  # becomes the leader, waits for the lock
        deadline = time.monotonic() + 10
        while m._calls.waiting() < 1 and time.monotonic() < deadline:
            time.sleep(0.005)
        for r in refs[1:]:
            m.prepare_async([r], answer)  # returns at once: this thread does not lead or wait
        assert m._calls.waiting() == len(refs) and not answers
    assert done.wait(10)
    leader.join(10)
    assert {uid: o.error for uid, (o, _) in answers.items()} == {r.uid: "" for r in refs}
    assert {t for _, t in answers.values()} == {leader.ident}  # the leader answered them all
    assert saves == [True]  # one batch
    assert driver.holdings() == {f"dev-{i}": r.uid for i, r in enumerate(refs)}


def test_a_waiting_caller_behind_callback_calls_is_answered_too(
    make_manager: ManagerFactory, claim_store: MemoryClaimStore, driver: HoldDriver, dirs: dict[str, Path]
) -> None:
    a, b, c = (put(claim_store, n, Result("r", f"dev-{i}")) for i, n in enumerate("abc"))
    m = make_manager(driver)
    got: dict[str, str] = {}
    other = Checkpoint(dirs["state"], DRIVER)
    with other.locked():
        leader = threading.Thread(
            target=m.prepare_async, args=([a], lambda o: got.update({a.uid: o[a.uid].error}))
        )
        leader.start()
        while m._calls.waiting() < 1:
            time.sleep(0.005)
        m.prepare_async([b], lambda o: got.update({b.uid: o[b.uid].error}))
        waiter = threading.Thread(target=lambda: got.update({c.uid: m.prepare([c])[c.uid].error}))
        waiter.start()
        while m._calls.waiting() < 3:
            time.sleep(0.005)
    leader.join(10)
    waiter.join(10)
    assert not leader.is_alive() and not waiter.is_alive()
    assert got == {a.uid: "", b.uid: "", c.uid: ""}
    assert m.unprepare([a, b, c]) == {a.uid: "", b.uid: "", c.uid: ""}
    assert m._calls.waiting() == 0


def test_callback_calls_whose_batch_cannot_be_served_each_get_their_error(
    make_manager: ManagerFactory, claim_store: MemoryClaimStore, dirs: dict[str, Path]
) -> None:
    dirs["state"].mkdir(parents=True)
    (dirs["state"] / f"{DRIVER}.checkpoint.json").write_text(
        json.dumps({"format": "topodra.io/claim-checkpoint", "version": 99, "driver": DRIVER})
    )
    m = make_manager(start=False)
    refs = [put(claim_store, f"c{i}", Result("r", f"dev-{i}")) for i in range(4)]
    errors: dict[str, str] = {}
    for r in refs:
        m.prepare_async([r], lambda got: errors.update({uid: o.error for uid, o in got.items()}))
    assert set(errors) == {r.uid for r in refs}
    assert all("CheckpointError" in e and "newer" in e for e in errors.values()), errors
    assert m._calls.waiting() == 0
    with pytest.raises(CheckpointError, match="newer"):
        m.prepare([refs[0]])  # the queue is free again: a waiting caller still gets the exception
