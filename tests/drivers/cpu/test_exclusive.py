"""Exclusive CPUs through NRI, the decisions (pool.py, exclusive.py's handler) without a runtime:
which CPUs are kept out of every device for the shared pool, which containers use which claims
(from the CDI device names the real ClaimManager hands the kubelet, never from the environment),
and what CreateContainer/UpdateContainer answer. The runtime side runs for real in
tests/node/test_cpu_exclusive.py.

Machine: the captured 2-socket Intel tree (node 0 is CPUs 0-7 + 16-23, core i = (i, i+16)).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from topodra.common.cdi.spec import CdiWriter
from topodra.common.runtime.checkpoint import Checkpoint
from topodra.common.runtime.claims import ClaimManager, cdi_kind
from topodra.common.runtime.driver import ClaimRef, Preparation
from topodra.common.topology import discover
from topodra.drivers.cpu import devices as layout
from topodra.drivers.cpu import exclusive, pool
from topodra.drivers.cpu.driver import CpuDriver
from topodra.drivers.cpu.holdings import Holding
from topodra.drivers.cpu.options import CpuOptions
from topodra.proto.nri.v1alpha1 import api_pb2 as api

from tests.conftest import FixtureTrees
from tests.drivers.cpu.kit import NODE, ClaimStore, Result, claim_object, hook_dir, new_uid

TREE = "hwloc--32intel64-2p8co2t+8ve"
KIND = cdi_kind(layout.DRIVER)


@pytest.fixture
def root(fixture_trees: FixtureTrees) -> Path:
    return fixture_trees.root(TREE)


# --- the CPUs kept for the shared pool ------------------------------------------------------------


@pytest.mark.parametrize(
    ("reserved", "shared_min", "kept"),
    [
        (set(), 1, {0, 16}),  # a whole core, the lowest
        ({0}, 1, {16}),  # the free sibling of a reserved CPU first: that core is split already
        ({0, 16}, 1, {1, 17}),
        (set(), 3, {0, 16, 1, 17}),  # at least 3, in whole cores
        (set(), 0, set()),
    ],
)
def test_shared_keep(root: Path, reserved: set[int], shared_min: int, kept: set[int]) -> None:
    topo = discover(root)
    options = CpuOptions(reserved=frozenset(reserved), shared_min=shared_min)
    assert layout.shared_keep(topo, options) == kept
    published = {c for g in layout.groups(topo, options) for c in g.cpus}
    assert published == set(topo.usable_cpus()) - kept - reserved
    node0 = set(range(8)) | set(range(16, 24))
    (numa0,) = [d for d in layout.build_devices(topo, options) if d.name == "numa-0"]
    assert numa0.capacity[layout.CAPACITY].value == str(len(node0 - kept - reserved))


def test_everything_kept_when_there_is_no_more(root: Path) -> None:
    topo = discover(root)
    options = CpuOptions(shared_min=1000)
    assert layout.shared_keep(topo, options) == set(topo.usable_cpus())
    assert layout.groups(topo, options) == ()


def test_negative_shared_min_is_refused() -> None:
    with pytest.raises(ValueError, match="--cpu-shared-min"):
        CpuOptions(shared_min=-1)


def test_the_pool_is_never_empty() -> None:
    assert pool.shared_pool({0, 1, 2, 3}, {1, 2}, {0}) == {0, 3}
    assert pool.shared_pool({0, 1}, {0, 1}, {0}) == {0}  # a checkpoint from other options took all
    assert pool.shared_pool({0, 1}, {0, 1}, set()) == {0, 1}  # nothing else left to give


# --- which containers use which claims --------------------------------------------------------------


def container(cdi: list[str] = (), env: list[str] = (), hooks: list[api.Hook] = ()) -> api.Container:  # type: ignore[assignment]
    c = api.Container(id="c1", name="main", state=api.CONTAINER_RUNNING, env=list(env))
    c.CDI_devices.extend(api.CDIDevice(name=n) for n in cdi)
    c.hooks.create_runtime.extend(hooks)
    return c


def test_claim_use_reads_cdi_devices_of_our_kind_only() -> None:
    uid = new_uid()
    c = container([f"{KIND}={uid}-numa-0-{new_uid()}", f"gpu.example.com/claim={uid}-gpu-0"])
    use = pool.claim_use(c, KIND, "/opt/topodra/hooks/cpuset.sh")
    assert len(use.cdi_names) == 1 and use.cdi_names[0].startswith(f"{uid}-numa-0-")


def test_the_environment_is_never_trusted() -> None:
    """A pod's author can set any variable: one naming a claim's CPUs makes nobody a holder."""
    c = container(env=[f"TOPODRA_CPUS_{new_uid().upper().replace('-', '_')}=2-3"])
    assert not pool.claim_use(c, KIND, "/opt/topodra/hooks/cpuset.sh").any


def test_the_hook_is_the_fallback_for_runtimes_without_cdi_device_names() -> None:
    ours = api.Hook(path="/opt/topodra/hooks/cpuset.sh", args=["cpuset.sh", "2-3", "0"])
    other = api.Hook(path="/usr/bin/other", args=["cpuset.sh", "4", "0"])
    use = pool.claim_use(container(hooks=[ours, other]), KIND, "/opt/topodra/hooks/cpuset.sh")
    assert use.hook_cpus == (frozenset({2, 3}),)
    # CDI names win when the runtime passes them (the hook then says nothing more)
    with_cdi = container([f"gpu.example.com/claim={new_uid()}-gpu-0"], hooks=[ours])
    assert not pool.claim_use(with_cdi, KIND, "/opt/topodra/hooks/cpuset.sh").any


def holding(uid: str, device: str, cpus: tuple[int, ...], mems: tuple[int, ...] | None = (0,)) -> Holding:
    return Holding(uid, "cpus", NODE, device, new_uid(), cpus, mems)


def test_assign_claim_containers_and_everybody_else() -> None:
    a, b = new_uid(), new_uid()
    ha, hb = holding(a, "numa-0", (2, 18)), holding(b, "numa-0", (3,))
    table = pool.Table.build({a: (ha,), b: (hb,)}, range(32), {0, 16})
    assert table.pool == frozenset(range(32)) - {2, 18, 3}
    mine = pool.ClaimUse(cdi_names=(pool.cdi_name(a, ha),))
    got, unknown = pool.assign(mine, table, pin_memory=True)
    assert (got.cpus, got.mems, got.claims, unknown) == ({2, 18}, {0}, (a,), ())
    assert pool.assign(mine, table, pin_memory=False)[0].mems is None
    shared, _ = pool.assign(pool.ClaimUse(), table, pin_memory=True)
    assert shared.shared and shared.cpus == table.pool and shared.mems is None
    # both claims in one container: the union
    both = pool.ClaimUse(cdi_names=(pool.cdi_name(a, ha), pool.cdi_name(b, hb)))
    assert pool.assign(both, table, pin_memory=True)[0].cpus == {2, 3, 18}
    # a claim nobody holds (unprepared under a running container): the shared pool, reported
    gone = pool.ClaimUse(cdi_names=(f"{new_uid()}-numa-0",))
    got, unknown = pool.assign(gone, table, pin_memory=True)
    assert got.shared and unknown == gone.cdi_names
    # an admin-access device of a held claim holds no CPUs: no complaint
    admin = pool.ClaimUse(cdi_names=(f"{a}-numa-1",))
    assert pool.assign(admin, table, pin_memory=True) == (pool.Assignment(table.pool), ())
    # the hook fallback: CPUs that one claim holds
    hooked, unknown = pool.assign(pool.ClaimUse(hook_cpus=(frozenset({2, 18}),)), table, True)
    assert hooked.claims == (a,) and not unknown
    stray, unknown = pool.assign(pool.ClaimUse(hook_cpus=(frozenset({2, 5}),)), table, True)
    assert stray.shared and unknown


def test_cdi_ids_from_the_real_claim_manager_are_recognised(root: Path, tmp_path: Path) -> None:
    """The names the claim core gives the kubelet (and the kubelet the runtime) are what pool.py
    matches: prepare through the real ClaimManager, then assign the container those IDs."""
    driver = CpuDriver(discover(root), CpuOptions(hook_dir=hook_dir(tmp_path)), root)
    store = ClaimStore()
    manager = ClaimManager(
        driver, NODE, store, Checkpoint(tmp_path / "state", driver.name), CdiWriter(tmp_path / "cdi", KIND)
    )
    manager.start()
    try:
        a = store.put(claim_object("a", [Result("numa-0", 2), Result("numa-1", 2, request="more")]))
        out = manager.prepare([a])[a.uid]
        assert not out.error, out.error
        ids = [i for d in out.devices for i in d.cdi_device_ids]
        assert all(i.startswith(f"{KIND}=") for i in ids) and len(ids) == 2
        table = pool.Table.build(driver.holdings(), discover(root).usable_cpus(), driver.withheld)
        whole, _ = pool.assign(pool.claim_use(container(ids), KIND, None), table, True)
        assert whole.cpus == {0, 16, 8, 24} and whole.claims == (a.uid,)
        # a container that names one request gets only that request's CPUs
        (first,) = [i for d in out.devices if d.device == "numa-0" for i in d.cdi_device_ids]
        part, _ = pool.assign(pool.claim_use(container([first]), KIND, None), table, True)
        assert part.cpus == {0, 16} and part.mems == {0}
    finally:
        manager.close()


# --- the handler's answers ------------------------------------------------------------------------


def make(root: Path, tmp_path: Path, **kw: object) -> CpuDriver:
    options = CpuOptions(hook_dir=hook_dir(tmp_path), shared_min=1, **kw)  # type: ignore[arg-type]
    return CpuDriver(discover(root), options, root)


def create(driver: CpuDriver, c: api.Container) -> api.CreateContainerResponse:
    assert driver.exclusive is not None
    pod = api.PodSandbox(id="p1", name="pod", namespace="ns", uid=new_uid())
    c.pod_sandbox_id = "p1"
    return driver.exclusive.create_container(api.CreateContainerRequest(pod=pod, container=c))


def test_create_container_pins_claim_containers_and_shrinks_everybody_else(
    root: Path, tmp_path: Path
) -> None:
    d = make(root, tmp_path)
    everything = "0-31"  # the fixture's devices/system/cpu/online (32-111: possible, not present)
    before = create(d, container())
    assert before.adjust.linux.resources.cpu.cpus == everything
    assert not before.adjust.linux.resources.cpu.mems
    store = ClaimStore()
    manager = ClaimManager(
        d, NODE, store, Checkpoint(tmp_path / "state", d.name), CdiWriter(tmp_path / "cdi", KIND)
    )
    manager.start()
    try:
        a = store.put(claim_object("a", [Result("numa-0", 2)]))
        out = manager.prepare([a])[a.uid]
        ids = [i for dev in out.devices for i in dev.cdi_device_ids]
        others = "0,2-16,18-31"  # everything but the claim's 1 and 17
        mine = create(d, container(ids))
        # the lowest free core: 0 and 16 are kept for the shared pool
        assert mine.adjust.linux.resources.cpu.cpus == "1,17"
        assert mine.adjust.linux.resources.cpu.mems == "0"  # --cpu-pin-memory auto
        other = create(d, container())
        assert other.adjust.linux.resources.cpu.cpus == others
        # the kubelet resizing a container keeps it where it belongs
        assert d.exclusive is not None
        update = d.exclusive.update_container(api.UpdateContainerRequest(container=api.Container(id="c1")))
        (u,) = update.update
        assert u.container_id == "c1" and u.linux.resources.cpu.cpus == others
        assert manager.unprepare([a])[a.uid] == ""
        assert create(d, container()).adjust.linux.resources.cpu.cpus == everything
    finally:
        manager.close()


def test_a_cpuset_chosen_by_someone_else_is_replaced_reported_and_counted(
    root: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The kubelet's CPU manager `static` puts a cpuset in every CRI request (its default set, or
    a Guaranteed container's own CPUs) and re-sends it as updates. Our answer still wins (the
    node's pool), and the node's misconfiguration is told: once per container in the log, every
    time in the counter, the last one in /readyz."""
    d = make(root, tmp_path)
    assert d.exclusive is not None
    everything = "0-31"  # the fixture's devices/system/cpu/online
    assert "foreign_cpusets" not in d.status_detail()
    before = exclusive.FOREIGN_CPUSETS.labels(d.name, "create")._value.get()
    with caplog.at_level(logging.WARNING, logger="topodra.drivers.cpu.exclusive"):
        for _ in range(2):
            c = container()
            c.linux.resources.cpu.cpus = "3"  # a Guaranteed container's CPU, as the kubelet chose it
            assert create(d, c).adjust.linux.resources.cpu.cpus == everything
        pod = api.PodSandbox(id="p1", name="pod", namespace="ns")
        update = api.UpdateContainerRequest(pod=pod, container=api.Container(id="c1", name="main"))
        update.linux_resources.cpu.cpus = "0-15"  # the kubelet's default set, after its exclusive CPUs
        (u,) = d.exclusive.update_container(update).update
        assert u.linux.resources.cpu.cpus == everything
        assert create(d, container()).adjust.linux.resources.cpu.cpus == everything  # none: not told
        # our own answer in the request (the other instance's, during a surge update): not told
        again = container()
        again.name = "surge"
        again.linux.resources.cpu.cpus = everything
        assert create(d, again).adjust.linux.resources.cpu.cpus == everything
    warned = [r for r in caplog.records if "chosen by someone else" in r.getMessage()]
    assert len(warned) == 1 and "ns/pod/main came with cpuset 3" in warned[0].getMessage()
    assert "cpuManagerPolicy: none" in warned[0].getMessage()
    assert exclusive.FOREIGN_CPUSETS.labels(d.name, "create")._value.get() == before + 2
    foreign = d.status_detail()["foreign_cpusets"]
    assert foreign["count"] == 3
    last = dict(foreign["last"])
    assert last.pop("at").startswith("20")  # when, so a count from before a fix is told apart
    assert last == {"event": "update", "pod": "ns/pod", "container": "main", "cpus": "0-15"}


def test_a_claim_whose_cdi_devices_a_live_container_has_is_in_use(root: Path, tmp_path: Path) -> None:
    """What reconcile asks before it releases a claim the API server dropped: a container the
    runtime told us about carries one of the claim's CDI devices. Only while connected: no
    runtime is here, so the plugin's state is set as a Synchronize would leave it (the real
    connection is the node tier's)."""
    from topodra.common.nri.plugin import State

    d = make(root, tmp_path)
    assert d.exclusive is not None
    uid, other = new_uid(), new_uid()
    ref = ClaimRef(namespace="ns", name="c", uid=uid)
    nothing = Preparation(devices=())
    create(d, container([f"{KIND}={uid}-numa-0"]))
    assert d.in_use(ref, nothing) == ""  # not connected: nothing is known
    d.exclusive.plugin._status.state = State.SYNCHRONIZED
    assert d.in_use(ref, nothing) == "container ns/pod/main uses its CPUs"
    assert d.in_use(ClaimRef(namespace="ns", name="o", uid=other), nothing) == ""
    d.exclusive.container_event(api.REMOVE_CONTAINER, api.PodSandbox(), api.Container(id="c1"))
    assert d.in_use(ref, nothing) == ""
    # connected once, away now (a containerd restart): its containers are not known
    d.exclusive.plugin._status.synchronizations = 1  # as a Synchronize leaves it
    d.exclusive.plugin._status.state = State.CONNECTING
    assert "NRI is disconnected" in d.in_use(ref, nothing)


def test_modes_and_readiness_detail(root: Path, tmp_path: Path) -> None:
    auto = make(root, tmp_path)
    assert auto.pinning_mode() == "hook"  # not connected yet
    detail = auto.status_detail()
    assert detail["pinning"] == "hook" and "exclusive only among claim holders" in detail["pinning_note"]
    assert detail["nri"]["state"] == "connecting"
    hook = make(root, tmp_path, pinning="hook")
    assert hook.exclusive is None and hook.status_detail()["pinning"] == "hook"
    assert make(root, tmp_path, pinning="none").pinning_mode() == "none"
