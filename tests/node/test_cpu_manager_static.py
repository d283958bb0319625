"""The CPU driver on a node whose kubelet runs its CPU manager with policy `static`, against the
driver's requirement (`none`): the real kubelet puts its cpuset into every container's CRI
request, containerd hands it to the driver's NRI plugin, and the driver, whose answer replaces
it, says so: a warning naming the container with the cure, /readyz's `foreign_cpusets`, and the
`topodra_cpu_foreign_cpusets_total` counter. With `none` restored, a new container arrives
without a cpuset and nothing more is reported. Meanwhile the answer holds: a container with a
one-CPU claim runs on that CPU only, and a container without a claim never on it, although the
kubelet asked for every CPU for both.

The kubelet of the tier's node is restarted twice here (static, then none again); its CPU
manager checkpoint is removed each time, as the kubelet requires on a policy change.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import pytest
import yaml
from topodra.common.topology import discover
from topodra.common.topology.parse import compress

from tests.controlplane.objects import eventually
from tests.node.cpu_host_driver import HostCpuDriver, cpu_samples, in_nri_mode
from tests.node.cpu_pods import cpu_claim, cpu_device_class, watching_pod
from tests.node.node import RealNode
from tests.node.pods import busybox_pod, create, delete_namespace, make_namespace, wait_running

pytestmark = pytest.mark.node

DRIVER = "cpu.topodra.io"
METRIC = "topodra_cpu_foreign_cpusets_total"


@contextlib.contextmanager
def kubelet_cpu_manager_static(node: RealNode, reserved: str) -> Iterator[None]:
    kubelet = node.kubelet
    before = yaml.safe_load(kubelet.paths.config.read_text())

    def restart(**config: str | None) -> None:
        kubelet.stop()
        kubelet.cpu_manager_state.unlink(missing_ok=True)
        kubelet.set_config(**config)
        kubelet.start()
        node.wait_node_ready()

    restart(cpuManagerPolicy="static", reservedSystemCPUs=reserved)
    try:
        yield
    finally:  # the configuration as it was (None: a key it did not have)
        restart(
            cpuManagerPolicy=before.get("cpuManagerPolicy"),
            reservedSystemCPUs=before.get("reservedSystemCPUs"),
        )


def foreign(d: HostCpuDriver) -> dict[str, object]:
    got = d.detail().get("foreign_cpusets") or {}
    assert isinstance(got, dict)
    return got


def test_a_static_kubelet_is_noticed_and_its_cpusets_replaced(real_node: RealNode) -> None:
    online = frozenset(discover("/").usable_cpus())
    if len(online) < 2:
        pytest.skip("the static policy needs a CPU to reserve and one to hand out")
    with in_nri_mode(real_node) as d:
        assert foreign(d) == {}
        with kubelet_cpu_manager_static(real_node, compress(sorted(online)[:1])):
            ns = make_namespace(real_node, "static")
            try:
                cpu_device_class(real_node)
                cpu_claim(real_node, ns, "c")
                create(real_node, ns, watching_pod(real_node, "holder", claim="c"))
                wait_running(real_node, ns, "holder")
                # after the claim holds its CPU: the kubelet's cpuset for it (every CPU) and the
                # shared pool differ from then on
                create(real_node, ns, watching_pod(real_node, "other"))
                wait_running(real_node, ns, "other")
                for name in ("holder", "other"):
                    told = f"{ns}/{name}/main came with cpuset"
                    eventually(f"the driver reports {name}'s cpuset", lambda t=told: t in d.log_text(), 30)
                log = d.log_text()
                assert "cpuManagerPolicy: none" in log
                assert (d.metric(METRIC, driver=DRIVER, event="create") or 0) >= 2
                reported = foreign(d)
                count = reported["count"]
                assert isinstance(count, int) and count >= 2 and "cpuManagerPolicy" in str(reported["advice"])
                time.sleep(3)  # a few samples of both
                held = cpu_samples(real_node, ns, "holder", "main")
                assert held and len(held[0].cpus) == 1 and all(x.cpus == held[0].cpus for x in held)
                claimed = held[0].cpus
                seen = [x for x in cpu_samples(real_node, ns, "other", "main") if x.at > held[0].at]
                assert seen and all(x.cpus == online - claimed for x in seen), [sorted(x.cpus) for x in seen]
            finally:
                delete_namespace(real_node, ns)
        count = foreign(d)["count"]
        ns = make_namespace(real_node, "none-again")
        try:
            create(real_node, ns, busybox_pod(real_node, "q", "sleep 3600"))
            wait_running(real_node, ns, "q")
            assert f"{ns}/q/main came with cpuset" not in d.log_text()
            assert foreign(d)["count"] == count
        finally:
            delete_namespace(real_node, ns)
