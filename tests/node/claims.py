"""What a Pod's claims got, read back from the API and from inside its container.

A container of the examples prints `Cpus_allowed_list`, `ls /dev`, `ip -o link` and the
TOPODRA_* environment; these helpers parse that and look up what the allocation says it should
be (device attributes from the node's ResourceSlices, device nodes from the synthetic machine).
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from typing import Any

from tests.controlplane.cluster import api_resource
from tests.node.drivers import Drivers


@dataclass(frozen=True)
class Allocated:
    request: str
    driver: str
    device: str
    attributes: dict[str, Any]


def parse_cpu_list(text: str) -> set[int]:
    """`0-3,8` -> {0, 1, 2, 3, 8}."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def allowed_cpus(output: str) -> set[int]:
    found = re.search(r"^Cpus_allowed_list:\s*(\S+)$", output, re.MULTILINE)
    assert found, f"no Cpus_allowed_list in:\n{output}"
    return parse_cpu_list(found.group(1))


def env_lines(output: str, prefix: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in output.splitlines() if line.startswith(prefix) and "=" in line)


def claim_cpus(output: str) -> set[int]:
    """The claim-wide TOPODRA_CPUS_<claim uid>=<list> the CPU driver puts in the environment."""
    env = env_lines(output, "TOPODRA_CPUS_")
    assert env, f"no TOPODRA_CPUS_* in:\n{output}"
    key = min(env, key=len)  # the claim-wide variable has the shortest name
    return parse_cpu_list(env[key])


def pod_links(output: str) -> list[str]:
    """Interface names of `ip -o link` output (`2: eth0@if9: <...>` -> eth0)."""
    names = []
    for line in output.splitlines():
        m = re.match(r"^\d+: ([^:@ ]+)(@\S+)?: <", line)
        if m:
            names.append(m.group(1))
    return names


def host_has_link(name: str) -> bool:
    return subprocess.run(["ip", "link", "show", name], capture_output=True, timeout=30).returncode == 0


def allocation(drivers: Drivers, namespace: str, claim_name: str) -> list[Allocated]:
    claims = api_resource(drivers.node.cp.dynamic, "ResourceClaim")
    claim = claims.get(name=claim_name, namespace=namespace).to_dict()
    results = claim["status"]["allocation"]["devices"]["results"]
    attrs = {
        (kind, d["name"]): {k: next(iter(v.values())) for k, v in d.get("attributes", {}).items()}
        for kind in ("cpu", "accelerator", "nic")
        for d in drivers.devices(kind)
    }
    out = []
    for r in results:
        kind = r["driver"].split(".", 1)[0]
        out.append(Allocated(r["request"], r["driver"], r["device"], attrs.get((kind, r["device"]), {})))
    return out


def pod_claim_names(pod: Any) -> dict[str, str]:
    """Pod claim name -> ResourceClaim name (generated ones from the Pod's status)."""
    out = {}
    for s in pod.status.resource_claim_statuses or []:
        out[s.name] = s.resource_claim_name
    for c in pod.spec.resource_claims or []:
        if c.resource_claim_name:
            out[c.name] = c.resource_claim_name
    return out


def device_nodes_of(drivers: Drivers, pci_address: str) -> list[str]:
    """Container paths of an accelerator's device nodes, from the synthetic machine's manifest."""
    assert drivers.synthetic is not None
    return [n["path"] for n in drivers.synthetic.device_nodes if n["pci"] == pci_address]


def allocated_attr(a: Allocated, name: str) -> Any:
    """The allocated device's attribute `<domain>/<name>` (whichever domain publishes it)."""
    found = [v for k, v in a.attributes.items() if k.rsplit("/", 1)[-1] == name]
    assert found, f"{a.driver} device {a.device} has no attribute */{name}: {a.attributes}"
    return found[0]
