"""topodra's NRI client (common/nri) against the real node's containerd: registration and
Synchronize, an adjustment at CreateContainer and an unsolicited update that the kernel really
applies (Cpus_allowed_list of the container's process), and the two ways a plugin loses its
connection: a handler slower than the runtime's request timeout, and a containerd restart.

The plugin here is a test handler, not the CPU driver (tests/node/test_cpu_exclusive.py runs
that); it only touches containers of its own namespace.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from topodra.common.nri.plugin import Handler, NriPlugin, State
from topodra.common.topology import discover
from topodra.common.topology.parse import compress, parse_cpulist
from topodra.proto.nri.v1alpha1 import api_pb2 as api

from tests.controlplane.objects import eventually
from tests.node.cpu_host_driver import no_cpu_daemonset
from tests.node.node import RealNode
from tests.node.pods import busybox_pod, create, delete_namespace, make_namespace, wait_running

pytestmark = pytest.mark.node


class Recorder(Handler):
    """Remembers what the runtime told it; pins containers of `namespace` to `pin` at creation."""

    events = frozenset({api.CREATE_CONTAINER, api.POST_CREATE_CONTAINER, api.REMOVE_CONTAINER})

    def __init__(self, namespace: str, pin: str = "") -> None:
        self.namespace = namespace
        self.pin = pin
        self.delay = 0.0  # seconds CreateContainer sleeps once (then it is reset)
        self.lock = threading.Lock()
        self.synced: list[tuple[list[api.PodSandbox], list[api.Container]]] = []
        self.created: list[api.Container] = []
        self.post_created: list[api.Container] = []
        self.disconnects: list[str] = []

    def synchronize(
        self, pods: Sequence[api.PodSandbox], containers: Sequence[api.Container]
    ) -> Sequence[api.ContainerUpdate]:
        with self.lock:
            self.synced.append((list(pods), list(containers)))
        return ()

    def create_container(self, request: api.CreateContainerRequest) -> api.CreateContainerResponse:
        if request.pod.namespace != self.namespace:
            return api.CreateContainerResponse()
        delay, self.delay = self.delay, 0.0
        time.sleep(delay)
        with self.lock:
            self.created.append(request.container)
        if not self.pin:
            return api.CreateContainerResponse()
        resources = api.LinuxResources(cpu=api.LinuxCPU(cpus=self.pin))
        adjust = api.ContainerAdjustment(linux=api.LinuxContainerAdjustment(resources=resources))
        return api.CreateContainerResponse(adjust=adjust)

    def container_event(self, event: int, pod: api.PodSandbox, container: api.Container) -> None:
        if event == api.POST_CREATE_CONTAINER and pod.namespace == self.namespace:
            with self.lock:
                self.post_created.append(container)

    def disconnected(self, reason: str) -> None:
        self.disconnects.append(reason)


@pytest.fixture(scope="module", autouse=True)
def alone(real_node: RealNode) -> Iterator[None]:
    """The tests adjust cpusets themselves: no CPU driver plugin beside them."""
    with no_cpu_daemonset():
        yield


@pytest.fixture
def ns(real_node: RealNode) -> Iterator[str]:
    name = make_namespace(real_node, "nric")
    yield name
    delete_namespace(real_node, name)


def start_plugin(node: RealNode, handler: Recorder) -> NriPlugin:
    plugin = NriPlugin(
        handler, "topodra-test", str(node.containerd.paths.nri_socket), index="90", retry_interval=0.5
    )
    plugin.start()
    assert plugin.wait_synchronized(15), plugin.status().as_dict()
    return plugin


def allowed(pid: int) -> frozenset[int]:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            cpus = parse_cpulist(line.split(":", 1)[1].strip())
            assert cpus is not None
            return frozenset(cpus)
    raise AssertionError(f"no Cpus_allowed_list for pid {pid}")


def online() -> frozenset[int]:
    return frozenset(discover("/").usable_cpus())


def sleeper(node: RealNode, name: str) -> dict[str, object]:
    return busybox_pod(node, name, "sleep 3600", extra={"terminationGracePeriodSeconds": 0})


def test_registration_and_synchronize_see_running_containers(real_node: RealNode, ns: str) -> None:
    create(real_node, ns, sleeper(real_node, "seen"))
    wait_running(real_node, ns, "seen")
    handler = Recorder(ns)
    plugin = start_plugin(real_node, handler)
    try:
        status = plugin.status()
        assert status.state is State.SYNCHRONIZED and status.runtime.startswith("containerd v2.")
        pods, containers = handler.synced[-1]
        (pod,) = [p for p in pods if p.namespace == ns and p.name == "seen"]
        (ctr,) = [c for c in containers if c.pod_sandbox_id == pod.id]
        assert ctr.name == "main" and ctr.state == api.CONTAINER_RUNNING and ctr.pid > 0
        assert pod.uid and ctr.linux.cgroups_path
        # what Synchronize says matches the kernel: no cpuset in the spec, every CPU allowed
        assert allowed(ctr.pid) == online()
    finally:
        plugin.stop()


def test_adjustment_at_create_and_an_unsolicited_update_reach_the_kernel(
    real_node: RealNode, ns: str
) -> None:
    cpus = sorted(online())
    if len(cpus) < 2:
        pytest.skip("needs two CPUs")
    first, last = cpus[0], cpus[-1]
    handler = Recorder(ns, pin=str(last))
    plugin = start_plugin(real_node, handler)
    try:
        create(real_node, ns, sleeper(real_node, "pinned"))
        wait_running(real_node, ns, "pinned")
        (post,) = handler.post_created
        assert post.linux.resources.cpu.cpus == str(last)  # the runtime kept our adjustment
        pid = post.pid or wait_pid(plugin, handler, ns, "pinned")
        assert allowed(pid) == {last}
        update = api.ContainerUpdate(
            container_id=post.id,
            linux=api.LinuxContainerUpdate(resources=api.LinuxResources(cpu=api.LinuxCPU(cpus=str(first)))),
        )
        assert plugin.update_containers([update]) == []
        assert allowed(pid) == {first}
        everything = compress(cpus)
        update.linux.resources.cpu.cpus = everything
        assert plugin.update_containers([update]) == []
        assert allowed(pid) == frozenset(cpus)
    finally:
        plugin.stop()


def wait_pid(plugin: NriPlugin, handler: Recorder, ns: str, name: str) -> int:
    """The container's pid, from a fresh Synchronize (reconnecting makes the runtime send one)."""
    before = len(handler.synced)
    plugin.stop()
    plugin.start()
    assert plugin.wait_synchronized(15) and len(handler.synced) > before
    pods, containers = handler.synced[-1]
    (pod,) = [p for p in pods if p.namespace == ns and p.name == name]
    (ctr,) = [c for c in containers if c.pod_sandbox_id == pod.id]
    return ctr.pid


def synchronized_again(plugin: NriPlugin) -> bool:
    status = plugin.status()
    return status.state is State.SYNCHRONIZED and status.synchronizations >= 2


def test_a_handler_slower_than_the_request_timeout_costs_the_connection_then_reconnects(
    real_node: RealNode, ns: str
) -> None:
    handler = Recorder(ns)
    handler.delay = 3.0  # containerd's default request timeout is 2 s
    plugin = start_plugin(real_node, handler)
    try:
        assert plugin.request_timeout == 2.0
        create(real_node, ns, sleeper(real_node, "slow"))
        eventually("the runtime to drop the slow plugin", lambda: handler.disconnects, 60)
        eventually("the plugin to register and synchronize again", lambda: synchronized_again(plugin), 60)
        # the kubelet retries the container; the handler now answers at once
        wait_running(real_node, ns, "slow", timeout=180)
    finally:
        plugin.stop()


def test_containerd_restart_reconnects_and_resynchronizes(real_node: RealNode, ns: str) -> None:
    create(real_node, ns, sleeper(real_node, "survivor"))
    wait_running(real_node, ns, "survivor")
    handler = Recorder(ns)
    plugin = start_plugin(real_node, handler)
    try:
        real_node.containerd.stop()
        eventually("the plugin to notice", lambda: plugin.status().state is State.CONNECTING, 30)
        real_node.containerd.start()
        eventually(
            "the plugin to synchronize with the new containerd", lambda: synchronized_again(plugin), 60
        )
        pods, containers = handler.synced[-1]
        (pod,) = [p for p in pods if p.namespace == ns and p.name == "survivor"]
        assert [c.name for c in containers if c.pod_sandbox_id == pod.id] == ["main"]
    finally:
        plugin.stop()
        real_node.wait_node_ready()
