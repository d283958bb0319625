"""Every deploy/examples claim on the real node, applied as the README says (template + Pod in a
namespace), scheduled by the real scheduler, prepared by the DaemonSets, run by containerd.

What the container sees is checked against what the allocation says: its CPUs
(`Cpus_allowed_list` equals the claim's CPUs, fewer than the machine's), the accelerators'
device nodes in /dev and TOPODRA_ACCELERATORS, the NIC inside the Pod's network namespace; after
the Pod is gone the NIC is back on the host and the claim is released.

This machine has few CPUs: an example asking for more CPUs than one NUMA node of the node has
is run with its CPU count lowered to one less than that node's (so pinning stays visible); the
rest of the example (requests, constraints, classes) is used as written.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.render import example_files, load
from tests.node.claims import (
    allocated_attr,
    allocation,
    allowed_cpus,
    claim_cpus,
    device_nodes_of,
    env_lines,
    host_has_link,
    pod_claim_names,
    pod_links,
)
from tests.node.drivers import Drivers
from tests.node.pods import delete_namespace, make_namespace, wait_gone, wait_running

pytestmark = pytest.mark.node

CPU_CAPACITY = "cpu.topodra.io/cpu"


def fit_cpus(template: dict[str, Any], per_device: int) -> dict[str, Any]:
    out = copy.deepcopy(template)
    for req in out["spec"]["spec"]["devices"]["requests"]:
        cap = req.get("exactly", {}).get("capacity", {}).get("requests", {})
        if CPU_CAPACITY in cap and int(cap[CPU_CAPACITY]) >= per_device:
            cap[CPU_CAPACITY] = str(max(1, per_device - 1))
    return out


def cpu_capacity(drivers: Drivers) -> int:
    return max(int(d["capacity"][CPU_CAPACITY]["value"]) for d in drivers.devices("cpu"))


def wait_output(drivers: Drivers, ns: str, pod: str, container: str, marker: str, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    out = ""
    while time.monotonic() < deadline:
        out = drivers.node.pod_log(ns, pod, container)
        if marker in out:
            return out
        time.sleep(0.5)
    raise AssertionError(f"{ns}/{pod} never printed {marker!r}:\n{out}")


@pytest.mark.parametrize("example", example_files(), ids=lambda p: p.stem)
def test_example_runs_with_what_it_claimed(node_drivers: Drivers, example: Path) -> None:
    node = node_drivers.node
    objs = load([example])
    (template,) = [o for o in objs if o["kind"] == "ResourceClaimTemplate"]
    (pod,) = [o for o in objs if o["kind"] == "Pod"]
    template = fit_cpus(template, cpu_capacity(node_drivers))
    ns = make_namespace(node, example.stem[:20])
    try:
        for obj in (template, pod):
            res = node.cp.dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
            res.create(body=obj, namespace=ns)
        name = pod["metadata"]["name"]
        (container,) = [c["name"] for c in pod["spec"]["containers"]]
        running = wait_running(node, ns, name, timeout=120)
        out = wait_output(node_drivers, ns, name, container, "TOPODRA_")
        (claim_name,) = pod_claim_names(running).values()
        got = allocation(node_drivers, ns, claim_name)
        assert got, "nothing allocated"
        nics = []
        for a in got:
            if a.driver == "cpu.topodra.io":
                cpus = claim_cpus(out)
                assert allowed_cpus(out) == cpus, out
                assert len(cpus) < cpu_capacity(node_drivers) or cpu_capacity(node_drivers) == 1
            elif a.driver == "accelerator.topodra.io":
                pci = allocated_attr(a, "pciBusID")
                nodes = device_nodes_of(node_drivers, pci)
                listed = set(_ls_dev(out))
                assert {Path(n).relative_to("/dev").parts[0] for n in nodes} <= listed, (nodes, out)
                listed_env = env_lines(out, "TOPODRA_ACCELERATORS").get("TOPODRA_ACCELERATORS", "")
                assert pci in listed_env.split(","), out
            elif a.driver == "nic.topodra.io":
                ifname = allocated_attr(a, "interfaceName")
                assert ifname in pod_links(out), out
                assert not host_has_link(ifname), f"{ifname} is still on the host while the pod runs"
                nics.append(ifname)
        node.core.delete_namespaced_pod(name, ns)
        wait_gone(node, ns, name)
        for ifname in nics:
            assert host_has_link(ifname), f"{ifname} did not come back to the host"
    finally:
        delete_namespace(node, ns)


def _ls_dev(out: str) -> list[str]:
    """Names `ls /dev` printed (one per line, busybox without a tty)."""
    return [line.strip() for line in out.splitlines() if line.strip() and " " not in line.strip()]
