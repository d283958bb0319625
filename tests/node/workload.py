"""A Pod holding one claim on all three drivers, and what the node keeps about that claim.

The lifecycle tests (restarts, outages, rolling updates, reboots) check the same things each
time: the Pod keeps running in the same container, the container still sees its CPUs, device
nodes and NIC, each driver's checkpoint holds the claim exactly once, and after the Pod is
gone the claim is released everywhere (checkpoint, CDI spec, NIC back on the host).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes.client.exceptions import ApiException
from topodra.common.runtime.checkpoint import newest

from tests.controlplane.cluster import api_resource, unique_name
from tests.node.claims import allowed_cpus, claim_cpus, host_has_link, pod_links
from tests.node.drivers import KINDS, Drivers
from tests.node.pods import busybox_pod, wait_gone, wait_running

POD_NIC_NAME = "net1"
REPORT = (
    "report() { grep Cpus_allowed_list /proc/self/status; ls /dev; ip -o link; env | grep TOPODRA_; "
    "echo REPORTED; }; report; trap report USR1; while true; do sleep 1; done"
)


def claim_body(name: str, *, cpus: int = 1) -> dict[str, Any]:
    """One CPU, one accelerator, one NIC (moved in as net1): something for every driver to hold."""
    nic_config = {
        "apiVersion": "nic.topodra.io/v1alpha1",
        "kind": "NicConfig",
        "interfaceName": POD_NIC_NAME,
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "cpus",
                        "exactly": {
                            "deviceClassName": "cpu.topodra.io",
                            "capacity": {"requests": {"cpu.topodra.io/cpu": str(cpus)}},
                        },
                    },
                    {"name": "gpu", "exactly": {"deviceClassName": "accelerator.topodra.io"}},
                    {"name": "nic", "exactly": {"deviceClassName": "nic.topodra.io"}},
                ],
                "config": [
                    {"requests": ["nic"], "opaque": {"driver": "nic.topodra.io", "parameters": nic_config}}
                ],
            }
        },
    }


@dataclass
class Workload:
    """A Pod and its claim in `namespace`, started by start()."""

    drivers: Drivers
    namespace: str
    name: str
    restart: str = "Never"
    claim_uid: str = ""
    container_id: str = ""
    host_nic: str = ""

    @classmethod
    def create(cls, drivers: Drivers, namespace: str, prefix: str = "wl", restart: str = "Never") -> Workload:
        w = cls(drivers, namespace, unique_name(prefix), restart)
        claims = api_resource(drivers.node.cp.dynamic, "ResourceClaim")
        created = claims.create(body=claim_body(w.name), namespace=namespace)
        w.claim_uid = created.metadata.uid
        pod = busybox_pod(drivers.node, w.name, REPORT, claims={"devices": w.name}, restart=restart)
        drivers.node.core.create_namespaced_pod(namespace, pod)
        return w

    @property
    def node(self) -> Any:
        return self.drivers.node

    def wait_running(self, timeout: float = 180.0) -> None:
        pod = wait_running(self.node, self.namespace, self.name, timeout)
        self.container_id = pod.status.container_statuses[0].container_id
        allocated = self.claim()["status"]["allocation"]["devices"]["results"]
        (nic,) = [r["device"] for r in allocated if r["driver"] == "nic.topodra.io"]
        (dev,) = [d for d in self.drivers.devices("nic") if d["name"] == nic]
        self.host_nic = next(iter(dev["attributes"]["nic.topodra.io/interfaceName"].values()))

    def claim(self) -> dict[str, Any]:
        claims = api_resource(self.node.cp.dynamic, "ResourceClaim")
        out: dict[str, Any] = claims.get(name=self.name, namespace=self.namespace).to_dict()
        return out

    def report(self, timeout: float = 30.0) -> str:
        """What the container sees now (it prints again on SIGUSR1; the last report is returned)."""
        node = self.node
        before = node.pod_log(self.namespace, self.name, "main").count("REPORTED")
        if before:
            node.containerd.ctr("tasks", "kill", "--signal", "SIGUSR1", self.container_id.split("//", 1)[1])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            log = node.pod_log(self.namespace, self.name, "main")
            if log.count("REPORTED") > before or (before == 0 and "REPORTED" in log):
                return log.rsplit("REPORTED", 2)[-2]
            time.sleep(0.3)
        raise AssertionError(
            f"{self.name} printed no new report:\n{node.pod_log(self.namespace, self.name, 'main')}"
        )

    def assert_intact(self) -> None:
        """Still running in the same container, and it still sees what its claim holds."""
        pod = self.node.core.read_namespaced_pod(self.name, self.namespace)
        (status,) = pod.status.container_statuses
        assert pod.status.phase == "Running" and status.state.running is not None, status
        assert status.container_id == self.container_id and status.restart_count == 0, status
        seen = self.report()
        assert allowed_cpus(seen) == claim_cpus(seen), seen
        assert POD_NIC_NAME in pod_links(seen), seen
        assert not host_has_link(self.host_nic), f"{self.host_nic} is on the host while {self.name} runs"
        assert "nvidiactl" in seen.split(), seen

    def held_by(self) -> dict[str, int]:
        """How many times each driver's checkpoint holds this claim (1 each while prepared)."""
        return {kind: checkpoint_claims(self.drivers, kind).count(self.claim_uid) for kind in KINDS}

    def cdi_specs(self) -> list[str]:
        return sorted(p.name for p in cdi_dir(self.drivers).glob(f"*_{self.claim_uid}*.json"))

    def delete(self, timeout: float = 120.0) -> None:
        """Deletes the Pod (if not already asked) and waits until the kubelet has finished with it."""
        try:
            self.node.core.delete_namespaced_pod(self.name, self.namespace)
        except ApiException as e:
            if e.status != 404:
                raise
        wait_gone(self.node, self.namespace, self.name, timeout)

    def assert_released(self, timeout: float = 60.0) -> None:
        """Every driver let go: no checkpoint entry, no CDI spec, the NIC back on the host."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not any(self.held_by().values()) and not self.cdi_specs() and host_has_link(self.host_nic):
                return
            time.sleep(0.5)
        raise AssertionError(
            f"claim {self.name} not released: checkpoints {self.held_by()}, CDI specs {self.cdi_specs()}, "
            f"{self.host_nic} on the host: {host_has_link(self.host_nic)}"
        )


def checkpoint_claims(drivers: Drivers, kind: str) -> list[str]:
    """Claim UIDs in the driver's checkpoint, as its next start would read it (a list, so a
    doubled entry would show)."""
    driver = f"{kind}.topodra.io"
    state = drivers.node.kubelet.paths.plugins / driver
    found = newest(state, driver)
    if found is None:
        assert state.is_dir(), f"{driver} keeps no state in {state}: the checkpoint is elsewhere"
        return []
    return [c.get("uid", uid) for uid, c in found[1].get("claims", {}).items()]


def cdi_dir(drivers: Drivers) -> Path:
    return drivers.node.run_dir / "cdi"
