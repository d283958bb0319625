"""Claims the real scheduler allocated are prepared on the chosen node's drivers
through the kubelet-side test client (each driver GETs the claim from the API server with its
own node-bound token; the scheduler put the pod into reservedFor), real containers (podman +
runc) consume the CDI specs, and unprepare releases everything.

Two nodes, because no single machine here has everything:
- `hgx` (synthetic 2s-8acc-8nic) runs the numa-aligned example. Its 224 CPUs do not exist on
  this 2-CPU host, so its CPU driver runs with `--cpu-pinning none` (env only); its accelerator
  nodes are `topodra synth --dev-nodes` stand-ins under the tree (`--accelerator-dev-root`).
  The container gets the CPU and accelerator CDI devices. The NIC's CDI device is prepared and
  checked as a spec but not run: its netdev and RDMA verbs nodes exist only in the tree, so
  the runtime (rightly) could not attach them.
- `host` (this machine's own /) runs a CPU + NIC claim: real pinning by the CPU driver's hook
  (Cpus_allowed_list inside = the CPUs the driver chose) and a real veth moved into the
  container under the name the claim asks for, and back to the host on unprepare.

Stand-in kept (the Python kubelet client, podman): several nodes with machines this host is not;
one real node with the real kubelet is tests/node.
"""

from __future__ import annotations

import json
import re
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.container.podman import busybox_image, run  # noqa: F401  (busybox_image is a fixture)
from tests.controlplane.cluster import ControlPlane, unique_name
from tests.drivers.nic.conftest import Links, host_link, netns_unavailable
from tests.e2e.conftest import FLEET_LABEL, Fleet
from tests.e2e.nodes import HOST_CDI_ROOT, NodeSpec, SimNode
from tests.e2e.workloads import Example, Placement, Workloads, load_examples

pytestmark = [pytest.mark.controlplane, pytest.mark.container]

MACHINE = "topodra.io/e2e-machine"


@pytest.fixture
def workloads(fleet: Fleet) -> Iterator[Workloads]:
    w = Workloads(fleet.nodes["hgx"].cp, unique_name("e2e-prep"))
    try:
        yield w
    finally:
        w.close()


def cdi_ids(answers: dict[str, Any]) -> dict[str, list[str]]:
    return {d: [i for dev in a.devices for i in dev.cdi_device_ids] for d, a in answers.items()}


def spec_files(uid: str) -> list[Path]:
    return sorted(HOST_CDI_ROOT.glob(f"*{uid}*"))


def env_of(out: Any) -> dict[str, str]:
    assert out.returncode == 0, out.stderr
    pairs = [line.split("=", 1) for line in out.stdout.splitlines() if "=" in line]
    return {k: v for k, v in pairs if k.startswith("TOPODRA_")}


def prepare_all(node: SimNode, placed: Placement) -> dict[str, Any]:
    drivers = {r.driver for r in placed.results}
    answers = node.prepare(placed.claim_ref, drivers)
    for driver, answer in answers.items():
        assert answer.error == "", f"{driver} on {node.name}: {answer.error}"
        got = sorted((d.device_name, d.pool_name) for d in answer.devices)
        assert got == sorted((r.device, r.pool) for r in placed.results if r.driver == driver)
    return answers


def assert_released(node: SimNode, placed: Placement) -> None:
    uid = placed.claim_ref[2]
    drivers = {r.driver for r in placed.results}
    assert node.unprepare(placed.claim_ref, drivers) == {d: "" for d in drivers}
    assert spec_files(uid) == []
    for kind in node.drivers:
        assert node.checkpoint_claims(kind) == {}, f"{kind} on {node.name} still records claims"


def same_accelerator(example: Example, bus_id: str) -> Example:
    """The example's claim narrowed to one accelerator by its PCI address."""
    template = json.loads(json.dumps(example.template))
    for r in template["spec"]["spec"]["devices"]["requests"]:
        if r["name"] == "accelerator":
            expr = f'device.attributes["resource.kubernetes.io"].pciBusID == "{bus_id}"'
            r["exactly"]["selectors"] = [{"cel": {"expression": expr}}]
    return Example(f"{example.name}-again", template, example.pod)


def test_numa_aligned_claim_runs_in_a_container_on_the_hgx_node(
    fleet: Fleet,
    workloads: Workloads,
    busybox_image: str,  # noqa: F811
) -> None:
    hgx = fleet.nodes["hgx"]
    truth = json.loads((hgx.root / "synth-manifest.json").read_text())
    example = load_examples()["numa-aligned"]
    on_hgx = {**fleet.node_selector(), MACHINE: "hgx"}
    placed = workloads.run(example, "numa", on_hgx, timeout=90)
    assert placed.node == hgx.name
    uid = placed.claim_ref[2]
    answers = prepare_all(hgx, placed)
    ids = cdi_ids(answers)
    assert set(ids) == {"cpu.topodra.io", "accelerator.topodra.io", "nic.topodra.io"}
    assert len(spec_files(uid)) == 3  # one spec per driver, each named after the claim

    (acc,) = placed.by_request(["accelerator"])
    attrs = hgx.device_attributes()
    bus_id = attrs[(acc.driver, acc.device)]["resource.kubernetes.io/pciBusID"]
    numa = attrs[(acc.driver, acc.device)]["resource.kubernetes.io/numaNode"]
    nodes = [n["path"] for n in truth["device_nodes"] if n["pci"] == bus_id]
    assert nodes, f"the manifest lists no device node for {bus_id}"
    script = "env; " + "; ".join(f"test -c {p} && echo char:{p}" for p in nodes)
    out = run(
        busybox_image, ["sh", "-c", script], devices=ids["cpu.topodra.io"] + ids["accelerator.topodra.io"]
    )
    env = env_of(out)
    assert env["TOPODRA_ACCELERATORS"] == bus_id
    assert all(f"char:{p}" in out.stdout for p in nodes), out.stdout
    cpu_vars = {k: v for k, v in env.items() if k.startswith("TOPODRA_CPUS_")}
    assert f"TOPODRA_CPUS_{uid.upper().replace('-', '_')}" in cpu_vars, env
    numa_cpus = next(n["cpus"] for n in truth["numa"] if n["id"] == numa)
    for value in cpu_vars.values():
        cpus = expand(value)
        assert len(cpus) == 4 and cpus <= set(numa_cpus), (value, numa)

    sys.stdout.write(
        f"\nhgx container: TOPODRA_ACCELERATORS={env['TOPODRA_ACCELERATORS']} nodes={nodes} "
        f"cpus={sorted(cpu_vars.values())} (NUMA {numa})\n"
    )
    nic_spec = next(p for p in spec_files(uid) if p.name.startswith("nic.topodra.io"))
    spec = json.loads(nic_spec.read_text())
    (nic,) = placed.by_request(["nic"])
    nic_env = [e for d in spec["devices"] for e in d["containerEdits"].get("env") or []]
    nic_bus = attrs[(nic.driver, nic.device)]["resource.kubernetes.io/pciBusID"]
    assert f"TOPODRA_NIC_{nic.device.upper().replace('-', '_')}_PCI_ADDRESS={nic_bus}" in nic_env, nic_env

    assert_released(hgx, placed)
    # the same accelerator again, for a new claim: nothing of the first one holds it
    workloads.delete_pod("numa")
    again = workloads.run(same_accelerator(example, bus_id), "again", on_hgx, timeout=90)
    (acc2,) = again.by_request(["accelerator"])
    assert acc2.device == acc.device
    ids2 = cdi_ids(prepare_all(hgx, again))
    out = run(busybox_image, ["sh", "-c", "env"], devices=ids2["accelerator.topodra.io"])
    assert env_of(out)["TOPODRA_ACCELERATORS"] == bus_id
    assert_released(hgx, again)


def expand(cpu_list: str) -> set[int]:
    out: set[int] = set()
    for part in cpu_list.split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


# ----- the host node: real pinning and a real interface --------------------------------------------


@pytest.fixture
def host_node(fleet: Fleet, control_plane: ControlPlane) -> Iterator[tuple[SimNode, str]]:
    """This machine as a node (cpu + nic drivers on /), with one veth for the NIC driver."""
    reason = netns_unavailable()
    if reason:
        pytest.skip(reason)
    links = Links(uuid.uuid4().hex[:5], [], [], [])
    node: SimNode | None = None
    try:
        veth = links.name("h")
        links.veth(veth, links.name("p"), links.netns("n"))
        spec = NodeSpec(
            unique_name("e2e-host"),
            Path("/"),
            kinds=("cpu", "nic"),
            driver_args={"nic": ["--nic-include-virtual", "--nic-include-interfaces", f"tdn{links.tag}*"]},
            cdi_root=HOST_CDI_ROOT,
            labels={FLEET_LABEL: fleet.label, MACHINE: "host"},
            description="this host",
        )
        node = SimNode(control_plane, spec, fleet.workdir / "host")
        node.start()
        node.wait_ready()
        links.track_mount(str(node.nic_state_dir / "netns"))  # pins left by a failed test
        yield node, veth
    finally:
        if node is not None:
            codes = node.stop()
            assert codes == {"cpu": 0, "nic": 0}, node.logs()
        links.cleanup()


def host_claim(name: str) -> Example:
    """One CPU and the test's veth, which the pod shall see as net1."""
    nic_config = {"apiVersion": "nic.topodra.io/v1alpha1", "kind": "NicConfig", "interfaceName": "net1"}
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "cpus",
                            "exactly": {
                                "deviceClassName": "cpu.topodra.io",
                                "capacity": {"requests": {"cpu.topodra.io/cpu": "1"}},
                            },
                        },
                        {"name": "nic", "exactly": {"deviceClassName": "nic.topodra.io"}},
                    ],
                    "config": [
                        {
                            "requests": ["nic"],
                            "opaque": {"driver": "nic.topodra.io", "parameters": nic_config},
                        }
                    ],
                }
            }
        },
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "resourceClaims": [{"name": "devices", "resourceClaimTemplateName": name}],
            "containers": [
                {
                    "name": "app",
                    "image": "topodra.invalid/app:test",
                    "resources": {"claims": [{"name": "devices"}]},
                }
            ],
        },
    }
    return Example(name, template, pod)


def test_host_claim_pins_the_container_and_moves_the_interface(
    fleet: Fleet,
    workloads: Workloads,
    host_node: tuple[SimNode, str],
    busybox_image: str,  # noqa: F811
) -> None:
    node, veth = host_node
    on_host = {**fleet.node_selector(), MACHINE: "host"}
    placed = workloads.run(host_claim("pinned"), "pinned", on_host, timeout=90)
    assert placed.node == node.name
    (nic,) = placed.by_request(["nic"])
    assert nic.device == f"net-{veth}"
    answers = prepare_all(node, placed)
    ids = [i for v in cdi_ids(answers).values() for i in v]
    assert host_link(veth) is not None  # prepare moves nothing: no container yet
    script = "grep Cpus_allowed_list /proc/self/status; ip -o link; env"
    out = run(busybox_image, ["sh", "-c", script], devices=ids)
    env = env_of(out)
    (allowed,) = re.findall(r"^Cpus_allowed_list:\s*(\S+)$", out.stdout, re.M)
    cpu_vars = {k: v for k, v in env.items() if k.startswith("TOPODRA_CPUS_")}
    claim_var = f"TOPODRA_CPUS_{placed.claim_ref[2].upper().replace('-', '_')}"
    assert claim_var in cpu_vars, env
    assert all(expand(v) == expand(allowed) for v in cpu_vars.values()), (allowed, env)
    assert len(expand(allowed)) == 1  # the one CPU the claim asked for, really pinned
    assert re.search(r"^\d+: net1[@:]", out.stdout, re.M), out.stdout
    assert any(
        v == "net1" for k, v in env.items() if k.startswith("TOPODRA_NIC_") and k.endswith("_INTERFACE")
    )
    inside = re.findall(r"^\d+: (\S+?)[@:]", out.stdout, re.M)
    sys.stdout.write(f"\nhost container: Cpus_allowed_list={allowed} {sorted(cpu_vars)} links={inside}\n")
    assert_released(node, placed)
    assert host_link(veth) is not None  # the interface is back on the host, under its own name

    # the same (only) veth again, for a new claim
    workloads.delete_pod("pinned")
    again = workloads.run(host_claim("again"), "again", on_host, timeout=90)
    assert again.by_request(["nic"])[0].device == nic.device
    prepare_all(node, again)
    assert_released(node, again)
