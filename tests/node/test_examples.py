"""Every deploy/examples claim on the real node, applied as the README says (template + Pod in a
namespace), scheduled by the real scheduler, prepared by the DaemonSets, run by containerd.

What the container sees is checked against what the allocation says: its CPUs
(`Cpus_allowed_list` equals the claim's CPUs, fewer than the machine's), the accelerators'
device nodes in /dev and TOPODRA_ACCELERATORS, the NIC inside the Pod's network namespace; after
the Pod is gone the NIC is back on the host and the claim is released.

This machine has few CPUs: an example's CPU counts are lowered so that its CPU requests fit one
NUMA node's published capacity (the driver keeps `--cpu-shared-min` CPUs out of it for the shared
pool, so pinning always shows as fewer CPUs than the machine's); the rest of the example
(requests, subrequests, constraints, classes) is used as written. An example with more CPU
requests than a device publishes CPUs is skipped, naming the counts. A template-only
example runs in the Pod its comment describes (the other examples' Pod). An example that asks
for more accelerators or NICs than the tier's machine has (tests/node/machine.json: 2 and 4) is
skipped, naming the count.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import pytest
from topodra.common.topology import discover

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
from tests.node.drivers import EXAMPLE_BUSYBOX, Drivers
from tests.node.pods import delete_namespace, make_namespace, wait_gone, wait_running

pytestmark = pytest.mark.node

CPU_CAPACITY = "cpu.topodra.io/cpu"


def _exactly(template: dict[str, Any]) -> list[dict[str, Any]]:
    """Every device request of a template (the `exactly` ones and each `firstAvailable` choice)."""
    out = []
    for req in template["spec"]["spec"]["devices"]["requests"]:
        out += [req["exactly"]] if "exactly" in req else list(req.get("firstAvailable", []))
    return out


def fit_cpus(template: dict[str, Any], per_device: int) -> dict[str, Any]:
    """CPU counts lowered so that all of the claim's CPU requests fit one device's published
    capacity (which already leaves the shared pool's CPUs out)."""
    out = copy.deepcopy(template)

    def asks_cpus(req: dict[str, Any]) -> bool:
        choices = [req["exactly"]] if "exactly" in req else req.get("firstAvailable", [])
        return any(CPU_CAPACITY in c.get("capacity", {}).get("requests", {}) for c in choices)

    cpu_requests = [r for r in out["spec"]["spec"]["devices"]["requests"] if asks_cpus(r)]
    share = max(1, per_device // max(1, len(cpu_requests)))
    for e in _exactly(out):
        cap = e.get("capacity", {}).get("requests", {})
        if CPU_CAPACITY in cap and int(cap[CPU_CAPACITY]) > share:
            cap[CPU_CAPACITY] = str(share)
    return out


def unsatisfiable(template: dict[str, Any], drivers: Drivers) -> str | None:
    """Why this node cannot hold the claim (more devices of a class than it has), or None."""
    wanted: dict[str, int] = {}
    for req in template["spec"]["spec"]["devices"]["requests"]:
        first = req["exactly"] if "exactly" in req else req["firstAvailable"][0]
        cls = first["deviceClassName"]
        wanted[cls] = wanted.get(cls, 0) + int(first.get("count", 1))
    for cls, n in wanted.items():
        kind = cls.split(".", 1)[0]
        have = len(drivers.devices(kind))
        if kind != "cpu" and n > have:
            return f"asks for {n} {cls} devices; this node has {have}"
        if kind == "cpu" and n > cpu_capacity(drivers):
            return (
                f"has {n} CPU requests of at least one CPU each; a CPU device here publishes "
                f"{cpu_capacity(drivers)} (the rest is kept for the shared pool)"
            )
    return None


def example_pod(template_name: str, image: str) -> dict[str, Any]:
    """For a template-only example: the Pod its comment describes (as numa-aligned.yaml's)."""
    script = (
        "grep Cpus_allowed_list /proc/self/status; ls /dev; ip -o link; env | grep -i topodra; sleep 3600"
    )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": template_name},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "resourceClaims": [{"name": "devices", "resourceClaimTemplateName": template_name}],
            "containers": [
                {
                    "name": "app",
                    "image": image,
                    "command": ["sh", "-c", script],
                    "resources": {"claims": [{"name": "devices"}]},
                }
            ],
        },
    }


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
    pods = [o for o in objs if o["kind"] == "Pod"]
    (pod,) = pods or [example_pod(template["metadata"]["name"], EXAMPLE_BUSYBOX)]
    why = unsatisfiable(template, node_drivers)
    if why:
        pytest.skip(f"{example.name} {why}")
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
                assert len(cpus) < len(discover("/").usable_cpus()), out
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
