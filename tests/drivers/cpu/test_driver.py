"""CpuDriver: prepare picks exclusive CPUs, never twice; unprepare releases; restore rebuilds;
opaque config is validated; health follows the CPUs' online files.

Machine: the captured 2-socket Intel tree (2 NUMA nodes, 8 SMT-2 cores each: node 0 is
CPUs 0-7 + 16-23, core i = (i, i+16)). The runtime path (ClaimManager, checkpoint, CDI spec
files) is the real one; only the claim GET is served by a stand-in (kit.ClaimStore).
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest
from topodra.common.cdi.spec import CdiWriter
from topodra.common.runtime.checkpoint import Checkpoint
from topodra.common.runtime.claims import ClaimManager, cdi_kind
from topodra.common.runtime.claims.spec import env_token, record_from_spec
from topodra.common.runtime.driver import ClaimRef, Health, Preparation, PrepareError
from topodra.common.topology import discover
from topodra.drivers.cpu import devices as layout
from topodra.drivers.cpu import pinning, policy
from topodra.drivers.cpu.driver import CpuDriver
from topodra.drivers.cpu.options import CpuOptions

from tests.conftest import FixtureTrees
from tests.drivers.cpu.kit import (
    NODE,
    ClaimStore,
    Result,
    claim_object,
    cpu_config,
    env_of,
    expand,
    hook_dir,
    new_uid,
)
from tests.kit.claims import claim_ref
from tests.kit.inventory import published_list

TREE = "hwloc--32intel64-2p8co2t+8ve"


@pytest.fixture
def root(fixture_trees: FixtureTrees) -> Path:
    return fixture_trees.root(TREE)


def make(root: Path, tmp: Path, **kw: object) -> CpuDriver:
    options = CpuOptions(hook_dir=hook_dir(tmp), **kw)  # type: ignore[arg-type]
    return CpuDriver(discover(root), options, root)


def ref(name: str = "c") -> ClaimRef:
    return claim_ref(name, "default")


def cpus_of(prep: Preparation) -> list[tuple[int, ...]]:
    out = []
    for d in prep.devices:
        env = env_of(d.edits.env)
        (value,) = [v for k, v in env.items() if k.startswith(pinning.CPUS_PREFIX)]
        out.append(expand(value))
    return out


# --- prepare / unprepare ------------------------------------------------------------------------


def test_claims_get_whole_cores_and_never_share(root: Path, tmp_path: Path) -> None:
    d = make(root, tmp_path)
    a, b, c = ref("a"), ref("b"), ref("c")
    pa = d.prepare(a, [Result("numa-0", 2).allocated()], [])
    pb = d.prepare(b, [Result("numa-0", 2).allocated()], [])
    pc = d.prepare(c, [Result("numa-0", 3).allocated()], [])
    assert cpus_of(pa) == [(0, 16)] and cpus_of(pb) == [(1, 17)]
    assert cpus_of(pc) == [(2, 3, 18)]  # a whole core, then one CPU of the next
    held = d.holdings()
    assert sorted(c for hs in held.values() for h in hs for c in h.cpus) == [0, 1, 2, 3, 16, 17, 18]
    # the orphan sibling 19 is what the next single CPU gets (no new split)
    pd = d.prepare(ref("d"), [Result("numa-0", 1).allocated()], [])
    assert cpus_of(pd) == [(19,)]


def test_edits_pin_with_the_hook_and_name_the_claim(root: Path, tmp_path: Path) -> None:
    d = make(root, tmp_path)
    claim = ref()
    result = Result("numa-1", 2)
    prep = d.prepare(claim, [result.allocated()], [])
    (dev,) = prep.devices
    assert (dev.request, dev.pool, dev.device, dev.share_id) == ("cpus", NODE, "numa-1", result.share_id)
    tail = pinning.suffix(claim.uid, "numa-1", result.share_id)
    assert env_of(dev.edits.env) == {f"TOPODRA_CPUS_{tail}": "8,24", f"TOPODRA_MEMS_{tail}": "1"}
    (hook,) = dev.edits.hooks
    assert hook.hook_name == "createRuntime" and hook.path == str(tmp_path / "hooks" / "cpuset.sh")
    assert hook.args == ("cpuset.sh", "8,24", "1") and hook.timeout
    claim_env = env_of(prep.claim_edits.env)
    assert claim_env == {f"TOPODRA_CPUS_{env_token(claim.uid)}": "8,24"}
    assert prep.state["results"][0]["cpus"] == "8,24"


def test_unprepare_releases(root: Path, tmp_path: Path) -> None:
    d = make(root, tmp_path)
    a = ref("a")
    pa = d.prepare(a, [Result("numa-0", 16).allocated()], [])
    with pytest.raises(PrepareError, match="only 0 free CPUs"):
        d.prepare(ref("b"), [Result("numa-0", 1).allocated()], [])
    d.unprepare(a, pa)
    d.unprepare(a, pa)  # again: nothing left, still fine
    assert d.holdings() == {}
    assert cpus_of(d.prepare(ref("b"), [Result("numa-0", 1).allocated()], [])) == [(0,)]


def test_prepare_and_release_lines_at_info_and_no_cpu_lists_formatted_below_it(
    root: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = make(root, tmp_path)
    a = ref("a")
    with caplog.at_level(logging.INFO, logger="topodra.drivers.cpu"):
        pa = d.prepare(a, [Result("numa-1", 2).allocated()], [])
        d.unprepare(a, pa)
    got = [(r.getMessage(), getattr(r, "topodra_fields", {})) for r in caplog.records]
    (gets,) = [f for m, f in got if m.endswith("device numa-1 gets CPUs 8,24")]
    assert (gets["cpus"], gets["mems"], gets["claim_uid"], gets["device"]) == ("8,24", "1", a.uid, "numa-1")
    assert any(m.endswith("released CPUs 8,24 of device numa-1") for m, _ in got)
    # below info the driver formats no CPU list for a line nobody writes (the hot path's cost)
    caplog.clear()
    made: list[object] = []
    real = policy.fmt
    monkeypatch.setattr(policy, "fmt", lambda cpus: made.append(cpus) or real(cpus))
    with caplog.at_level(logging.WARNING, logger="topodra.drivers.cpu"):
        b = ref("b")
        pb = d.prepare(b, [Result("numa-1", 2).allocated()], [])
        d.unprepare(b, pb)
    assert made == [] and caplog.records == [] and cpus_of(pb) == [(8, 24)]


def test_repeated_prepare_returns_the_same_cpus(root: Path, tmp_path: Path) -> None:
    d = make(root, tmp_path)
    claim = ref()
    r = Result("numa-0", 4)
    first = d.prepare(claim, [r.allocated()], [])
    again = d.prepare(claim, [r.allocated()], [])
    assert cpus_of(first) == cpus_of(again) == [(0, 1, 16, 17)]


def test_failed_prepare_holds_nothing(root: Path, tmp_path: Path) -> None:
    d = make(root, tmp_path)
    claim = ref()
    with pytest.raises(PrepareError, match="numa-0: asked for 15 CPUs, only 14 free CPUs are left"):
        d.prepare(
            claim, [Result("numa-0", 2).allocated(), Result("numa-0", 15, request="more").allocated()], []
        )
    assert d.holdings() == {}


def test_several_results_of_one_claim(root: Path, tmp_path: Path) -> None:
    d = make(root, tmp_path)
    claim = ref()
    prep = d.prepare(
        claim,
        [Result("numa-0", 2, request="near").allocated(), Result("numa-1", 1, request="far").allocated()],
        [],
    )
    assert cpus_of(prep) == [(0, 16), (8,)]
    assert env_of(prep.claim_edits.env) == {f"TOPODRA_CPUS_{env_token(claim.uid)}": "0,8,16"}


def test_same_device_twice_in_one_claim(root: Path, tmp_path: Path) -> None:
    d = make(root, tmp_path)
    prep = d.prepare(
        ref(),
        [Result("numa-0", 2, request="a").allocated(), Result("numa-0", 2, request="b").allocated()],
        [],
    )
    assert cpus_of(prep) == [(0, 16), (1, 17)]
    names = [k for dev in prep.devices for k in env_of(dev.edits.env)]
    assert len(set(names)) == 4  # share IDs keep the two results' variables apart


def test_core_granularity_takes_the_whole_core(root: Path, tmp_path: Path) -> None:
    d = make(root, tmp_path, granularity="core")
    prep = d.prepare(ref(), [Result("core-1-3").allocated()], [])
    assert cpus_of(prep) == [(11, 27)]
    with pytest.raises(PrepareError, match="only 0 free CPUs"):
        d.prepare(ref(), [Result("core-1-3").allocated()], [])


def test_without_consumable_capacity_the_device_is_whole(
    root: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    d = make(root, tmp_path)
    with caplog.at_level(logging.WARNING):
        prep = d.prepare(ref(), [Result("numa-1").allocated()], [])  # no consumedCapacity, no shareID
    assert len(cpus_of(prep)[0]) == 16
    assert "--cpu-device-granularity core" in caplog.text


def test_dropped_field_report_gives_the_advice_once(
    root: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    class Status:
        dropped_features = ("DRAConsumableCapacity",)

    d = make(root, tmp_path)
    with caplog.at_level(logging.WARNING):
        d.on_publisher_status(Status())
        d.on_publisher_status(Status())
    assert caplog.text.count("--cpu-device-granularity core") == 1


@pytest.mark.parametrize(
    ("consumed", "message"),
    [
        ("1500m", "not a whole number of CPUs"),
        ("0", "not a whole number of CPUs"),
        ("many", "is not a quantity"),
        ("17", "exceeds the 16 CPUs of device numa-0"),
    ],
)
def test_bad_consumed_capacity(root: Path, tmp_path: Path, consumed: str, message: str) -> None:
    d = make(root, tmp_path)
    r = Result("numa-0", 1).allocated()
    bad = type(r)(r.request, r.pool, r.device, r.share_id, {layout.CAPACITY: consumed})
    with pytest.raises(PrepareError, match=message):
        d.prepare(ref(), [bad], [])


def test_unknown_device(root: Path, tmp_path: Path) -> None:
    with pytest.raises(PrepareError, match="'numa-9' is not a CPU device of this node"):
        make(root, tmp_path).prepare(ref(), [Result("numa-9", 1).allocated()], [])


def test_missing_hook_fails_prepare(root: Path, tmp_path: Path) -> None:
    d = CpuDriver(discover(root), CpuOptions(hook_dir=tmp_path / "absent"), root)
    with pytest.raises(PrepareError, match=r"cpuset\.sh is missing"):
        d.prepare(ref(), [Result("numa-0", 1).allocated()], [])
    quiet = CpuDriver(discover(root), CpuOptions(hook_dir=tmp_path / "absent", pinning="none"), root)
    (dev,) = quiet.prepare(ref(), [Result("numa-0", 1).allocated()], []).devices
    assert dev.edits.hooks == () and dev.edits.env


def test_memory_left_alone_without_numa(fixture_trees: FixtureTrees, tmp_path: Path) -> None:
    root = fixture_trees.root("cadvisor--epyc7402")  # no NUMA folders: one device per socket
    d = make(root, tmp_path)
    (dev,) = d.prepare(ref(), [Result("socket-0", 2).allocated()], []).devices
    assert dev.edits.hooks[0].args[2] == "none"
    off = make(root, tmp_path, pin_memory="off")
    (dev,) = (
        CpuDriver(discover(root), off.options, root)
        .prepare(ref(), [Result("socket-0", 2).allocated()], [])
        .devices
    )
    assert dev.edits.hooks[0].args[2] == "none"


# --- opaque config ------------------------------------------------------------------------------


def test_full_cores_config(root: Path, tmp_path: Path) -> None:
    d = make(root, tmp_path)
    d.prepare(ref(), [Result("numa-0", 1).allocated()], [])  # splits core (0,16)
    prep = d.prepare(ref(), [Result("numa-0", 2).allocated()], [cpu_config(fullCores=True)])
    assert cpus_of(prep) == [(1, 17)]
    with pytest.raises(PrepareError, match="request 'cpus', device numa-0: numa-0: fullCores: 3 CPUs"):
        d.prepare(ref(), [Result("numa-0", 3).allocated()], [cpu_config(fullCores=True)])


def test_explicit_cpus_config(root: Path, tmp_path: Path) -> None:
    d = make(root, tmp_path)
    prep = d.prepare(ref(), [Result("numa-0", 3).allocated()], [cpu_config(cpus="5-6,21")])
    assert cpus_of(prep) == [(5, 6, 21)]
    claim = ClaimRef("team", "mine", new_uid())
    with pytest.raises(PrepareError) as e:
        d.prepare(claim, [Result("numa-0", 2).allocated()], [cpu_config(cpus="6,7")])
    assert str(e.value) == (
        "claim team/mine: request 'cpus', device numa-0 (config FromClaim #0, field 'cpus'): "
        "CPUs 6 of device numa-0 are already held by another claim"
    )
    with pytest.raises(PrepareError, match=r"CPUs 8 are not part of device numa-0"):
        d.prepare(claim, [Result("numa-0", 2).allocated()], [cpu_config(cpus="7,8")])
    with pytest.raises(
        PrepareError, match=r"lists 1 CPUs \(7\) but the allocation of device numa-0 is for 2"
    ):
        d.prepare(claim, [Result("numa-0", 2).allocated()], [cpu_config(cpus="7")])
    assert claim.uid not in d.holdings()


def test_explicit_cpus_across_two_devices_of_one_request(root: Path, tmp_path: Path) -> None:
    d = make(root, tmp_path)
    two = [Result("numa-0", 1).allocated(), Result("numa-1", 1).allocated()]
    prep = d.prepare(ref(), two, [cpu_config(cpus="3,9")])
    assert cpus_of(prep) == [(3,), (9,)]
    with pytest.raises(PrepareError, match="CPUs 31 are in none of the allocated devices"):
        make(root, tmp_path, reserved=frozenset({31})).prepare(
            ref(),
            [Result("numa-0", 1).allocated(), Result("numa-1", 1).allocated()],
            [cpu_config(cpus="4,10,31")],
        )
    # a CPU the node does not have is refused with the config, before any device is looked at
    with pytest.raises(PrepareError, match=r"field 'cpus': .* of CPUs 0-31 of this node"):
        d.prepare(ref(), two, [cpu_config(cpus="4,10,40")])


def test_config_merging_and_request_scope(root: Path, tmp_path: Path) -> None:
    d = make(root, tmp_path)
    d.prepare(ref(), [Result("numa-0", 1).allocated()], [])  # core (0,16) split
    configs = [
        cpu_config("FromClass", fullCores=True),
        cpu_config("FromClaim", requests=["loose"], fullCores=False),
    ]
    prep = d.prepare(
        ref(),
        [Result("numa-0", 1, request="loose").allocated(), Result("numa-0", 2, request="tight").allocated()],
        configs,
    )
    assert cpus_of(prep) == [(16,), (1, 17)]  # loose reuses the orphan; tight gets a whole core


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"fullCores": "yes"}, "field 'fullCores': must be true or false, got a string"),
        ({"cpus": "1-"}, "field 'cpus': must be a non-empty CPU list"),
        ({"cpus": ""}, "field 'cpus': must be a non-empty CPU list"),
        ({"coreType": "big"}, "field 'coreType': must be one of 'core', 'atom'"),
        ({"fullcores": True}, "field 'fullcores': unknown field"),
        ({"kind": "GpuConfig"}, "field 'kind': must be 'CpuConfig'"),
        ({"apiVersion": "cpu.topodra.io/v2"}, "field 'apiVersion': must be one of cpu.topodra.io/v1alpha1"),
    ],
)
def test_bad_config_names_claim_and_field(
    root: Path, tmp_path: Path, params: dict[str, object], message: str
) -> None:
    d = make(root, tmp_path)
    claim = ClaimRef("team", "bad", new_uid())
    with pytest.raises(PrepareError) as e:
        d.prepare(claim, [Result("numa-0", 1).allocated()], [cpu_config("FromClaim", (), **params)])
    assert str(e.value).startswith("claim team/bad: config FromClaim #0, ") and message in str(e.value)
    assert d.holdings() == {}


# --- restore ------------------------------------------------------------------------------------


def test_restore_rebuilds_holdings(root: Path, tmp_path: Path) -> None:
    first = make(root, tmp_path)
    a, b = ref("a"), ref("b")
    preps = {
        a: first.prepare(a, [Result("numa-0", 2).allocated()], []),
        b: first.prepare(b, [Result("numa-0", 1).allocated()], []),
    }
    second = make(root, tmp_path)  # "restarted": knows nothing until restore
    second.restore(preps)
    assert second.holdings() == first.holdings()
    assert cpus_of(second.prepare(ref(), [Result("numa-0", 1).allocated()], [])) == [(17,)]
    second.unprepare(a, preps[a])
    assert a.uid not in second.holdings()


def test_restore_survives_bad_state(root: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    d = make(root, tmp_path)
    good, bad, clash = ref("good"), ref("bad"), ref("clash")
    state = {"version": 1, "results": [{"request": "r", "pool": NODE, "device": "numa-0", "cpus": "4"}]}
    with caplog.at_level(logging.ERROR):
        d.restore(
            {
                good: Preparation(devices=(), state=state),
                bad: Preparation(devices=(), state={"version": 1, "results": [{"cpus": "x"}]}),
                clash: Preparation(devices=(), state=state),
            }
        )
    held = d.holdings()
    assert len(held) == 1 and [h.cpus for hs in held.values() for h in hs] == [(4,)]
    assert "checkpoint state unusable" in caplog.text and "CPUs of another claim" in caplog.text


def test_the_claim_core_writes_one_spec_per_cpu_claim_after_the_cpus_are_chosen(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CPU driver's holds live in its memory (a kill takes them along, and its NRI plugin
    derives every cpuset from them again at each connect), so the claim core writes no started
    mark before the driver acts: each prepare writes its claim's spec once, new, with the CPUs
    chosen and the phase completed (docs/design/claim-lifecycle.md)."""
    store = ClaimStore()
    d = make(root, tmp_path)
    cdi = tmp_path / "cdi"
    m = ClaimManager(d, NODE, store, Checkpoint(tmp_path / "state", d.name), CdiWriter(cdi, cdi_kind(d.name)))
    m.start()
    writes: list[tuple[str, bool, str]] = []
    real_put = CdiWriter.put

    def put(self: CdiWriter, spec_id: str, spec: dict[str, object]) -> str:
        record = record_from_spec(self.kind, d.name, spec_id, self.file_name(spec_id), spec)
        assert record is not None
        writes.append((spec_id, self.path(spec_id).exists(), record.phase.value))
        return real_put(self, spec_id, spec)

    monkeypatch.setattr(CdiWriter, "put", put)
    a = store.put(claim_object("a", [Result("numa-0", 4)]))
    b = store.put(claim_object("b", [Result("numa-0", 2)]))
    out = m.prepare([a, b])
    assert not out[a.uid].error and not out[b.uid].error
    assert writes == [(a.uid, False, "completed"), (b.uid, False, "completed")]
    writer = CdiWriter(cdi, cdi_kind(d.name))
    assert sorted(p.name for p in cdi.iterdir()) == sorted(writer.file_name(u) for u in (a.uid, b.uid))
    m.close()


def test_restart_through_the_claim_manager(root: Path, tmp_path: Path) -> None:
    """The real runtime path: checkpoint + CDI spec written, a new process's driver restored."""
    store = ClaimStore()
    state, cdi = tmp_path / "state", tmp_path / "cdi"

    def manager() -> ClaimManager:
        d = make(root, tmp_path)
        m = ClaimManager(d, NODE, store, Checkpoint(state, d.name), CdiWriter(cdi, cdi_kind(d.name)))
        m.start()
        return m

    m1 = manager()
    a = store.put(claim_object("a", [Result("numa-0", 4)]))
    out = m1.prepare([a])[a.uid]
    assert not out.error, out.error
    spec = CdiWriter(cdi, cdi_kind(layout.DRIVER)).read(a.uid)
    assert spec is not None and spec["cdiVersion"] in ("0.3.0", "0.5.0")  # podman 4.3 reads ≤ 0.5.0
    (device,) = spec["devices"]
    assert device["containerEdits"]["hooks"][0]["args"] == ["cpuset.sh", "0-1,16-17", "0"]
    m1.close()

    m2 = manager()  # restarted: restore() from the checkpoint
    driver = m2.driver
    assert isinstance(driver, CpuDriver)
    assert [h.cpus for hs in driver.holdings().values() for h in hs] == [(0, 1, 16, 17)]
    b = store.put(claim_object("b", [Result("numa-0", 2)]))
    out = m2.prepare([b])[b.uid]
    assert not out.error, out.error
    (b_spec,) = CdiWriter(cdi, cdi_kind(layout.DRIVER)).read(b.uid)["devices"]  # type: ignore[index]
    assert b_spec["containerEdits"]["hooks"][0]["args"][1] == "2,18"
    assert m2.unprepare([a])[a.uid] == ""
    assert a.uid not in driver.holdings()
    m2.close()


# --- health -------------------------------------------------------------------------------------


def test_offline_cpu_in_the_kernels_mask_makes_its_device_unhealthy(root: Path, tmp_path: Path) -> None:
    """A poll reads the kernel's online mask, `cpu/online`, not each CPU's file: a CPU outside
    the mask is offline whatever its own file still says (the kernel keeps both in step)."""
    copy = tmp_path / "tree"  # CPUs and NUMA nodes are all the driver reads
    shutil.copytree(root / "sys/devices/system", copy / "sys/devices/system", symlinks=True)
    d = CpuDriver(discover(copy), CpuOptions(hook_dir=hook_dir(tmp_path)), copy)
    cpus = sorted(c for g in d.groups.values() for c in g.cpus)
    mask = copy / "sys/devices/system/cpu/online"
    mask.write_text(f"0-2,4-{cpus[-1]}\n")
    assert (copy / "sys/devices/system/cpu/cpu3/online").read_text().strip() == "1"
    now = d.check_health()
    assert now["numa-0"].health is Health.UNHEALTHY and now["numa-0"].message == "CPUs 3 are offline"
    assert now["numa-1"].health is Health.HEALTHY
    mask.write_text(f"0-{cpus[-1]}\n")
    assert d.check_health()["numa-0"].health is Health.HEALTHY
    for bad in ("garbage\n", "0-99999999\n", "\xff\n"):  # not a list: each CPU's own file decides
        mask.write_bytes(bad.encode("latin-1"))
        (copy / "sys/devices/system/cpu/cpu3/online").write_text("0\n")
        assert d.check_health()["numa-0"].message == "CPUs 3 are offline", bad
        (copy / "sys/devices/system/cpu/cpu3/online").write_text("1\n")
        assert d.check_health()["numa-0"].health is Health.HEALTHY, bad


def test_offline_cpu_makes_its_device_unhealthy(root: Path, tmp_path: Path) -> None:
    """Without the kernel's mask (some captures lack it), each CPU's own file decides."""
    copy = tmp_path / "tree"  # CPUs and NUMA nodes are all the driver reads
    shutil.copytree(root / "sys/devices/system", copy / "sys/devices/system", symlinks=True)
    (copy / "sys/devices/system/cpu/online").unlink(missing_ok=True)
    d = CpuDriver(discover(copy), CpuOptions(hook_dir=hook_dir(tmp_path)), copy)
    assert {n: h.health for n, h in d.check_health().items()} == {
        "numa-0": Health.HEALTHY,
        "numa-1": Health.HEALTHY,
    }
    online = copy / "sys/devices/system/cpu/cpu3/online"
    online.write_text("0\n")
    now = d.check_health()
    assert now["numa-0"].health is Health.UNHEALTHY and now["numa-0"].message == "CPUs 3 are offline"
    assert now["numa-1"].health is Health.HEALTHY
    online.write_text("1\n")
    assert d.check_health()["numa-0"].health is Health.HEALTHY
    online.write_text("garbage\n")
    assert d.check_health()["numa-0"].health is Health.UNKNOWN
    online.write_text("1\n")
    shutil.rmtree(copy / "sys/devices/system/cpu/cpu24")  # hot-removed
    assert (
        d.check_health()["numa-1"] == d.check_health()["numa-1"]
        and d.check_health()["numa-1"].health is Health.UNHEALTHY
    )


@pytest.mark.parametrize("taint", [True, False])
def test_offline_cpu_taints_its_device_when_asked(root: Path, tmp_path: Path, taint: bool) -> None:
    """What the publisher receives: with --cpu-taint-unhealthy the device with the offline CPU
    carries cpu.topodra.io/unhealthy=CpuOffline:NoSchedule, the other none; without it, no taint."""
    copy = tmp_path / "tree"  # CPUs and NUMA nodes are all the driver reads
    shutil.copytree(root / "sys/devices/system", copy / "sys/devices/system", symlinks=True)
    (copy / "sys/devices/system/cpu/online").unlink(missing_ok=True)
    d = CpuDriver(discover(copy), CpuOptions(hook_dir=hook_dir(tmp_path), taint_unhealthy=taint), copy)

    def taints() -> dict[str, list[tuple[str, str, str]]]:
        return {x.name: [(t.key, t.value, t.effect) for t in x.taints] for x in published_list(d)}

    assert taints() == {"numa-0": [], "numa-1": []}
    (copy / "sys/devices/system/cpu/cpu3/online").write_text("0\n")
    want = [(f"{layout.DRIVER}/unhealthy", "CpuOffline", "NoSchedule")] if taint else []
    assert taints() == {"numa-0": want, "numa-1": []}
    (copy / "sys/devices/system/cpu/cpu3/online").write_text("1\n")
    assert taints() == {"numa-0": [], "numa-1": []}


def test_cpu_without_online_file_is_online(root: Path, tmp_path: Path) -> None:
    copy = tmp_path / "tree"  # CPUs and NUMA nodes are all the driver reads
    shutil.copytree(root / "sys/devices/system", copy / "sys/devices/system", symlinks=True)
    (copy / "sys/devices/system/cpu/cpu0/online").unlink(missing_ok=True)
    (copy / "sys/devices/system/cpu/online").unlink(missing_ok=True)
    d = CpuDriver(discover(copy), CpuOptions(hook_dir=hook_dir(tmp_path)), copy)
    assert d.check_health()["numa-0"].health is Health.HEALTHY
