"""The NIC driver's token and ResourceClaim status, on an API server without granular status
authorization (Kubernetes 1.34 and 1.35, which the README supports, have none; here the 1.37
server runs with DRAResourceClaimGranularStatusAuthorization off).

There RBAC's `update resourceclaims/status` is all that stands between a node's token and every
claim in the cluster. deploy/base/vap.yaml's topodra-resourceclaim-status-own-node must stop
the NIC token from changing a claim's allocation or reservedFor, from touching another driver's
status.devices entries, and from writing a claim allocated to another node, while its own
networkData entry on its own node still goes through. Claims are allocated by the real
scheduler; the tokens are pod-bound and name their node, as the kubelet projects them.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import kubernetes.client as k8s
import pytest
from kubernetes.client.exceptions import ApiException

from tests.controlplane.cluster import ControlPlane, api_resource, running_control_plane, unique_name
from tests.controlplane.objects import device_class_body, eventually, pod_body, slice_body

pytestmark = [pytest.mark.controlplane, pytest.mark.slow]

POLICY = "topodra-resourceclaim-status-own-node"
NIC = "nic.topodra.io"
CPU = "cpu.topodra.io"
MULTI = "multi"  # the own node's claim with a NIC and a CPU device


@pytest.fixture(scope="module")
def old_authz(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    from tests.conftest import skip_or_fail
    from tests.controlplane.binaries import GoMissing

    gates = {"DRAResourceClaimGranularStatusAuthorization": False}
    try:
        with running_control_plane(Path(tmp_path_factory.mktemp("no-granular")), feature_gates=gates) as cp:
            yield cp
    except GoMissing as e:
        skip_or_fail(str(e))


@dataclass
class Setup:
    cp: ControlPlane
    ns: str
    own: str
    other: str

    def claim(self, name: str) -> dict[str, Any]:
        got: dict[str, Any] = self.claims(self.cp.admin).get(name=name, namespace=self.ns).to_dict()
        return got

    def claims(self, client: Any) -> Any:
        return api_resource(client, "ResourceClaim")

    def write_status(self, kind: str, body: dict[str, Any]) -> Any:
        """A PUT of the status subresource with the `kind` driver's token of the own node."""
        client = self.cp.driver_client(kind, self.own)
        return self.claims(client).status.replace(body=body, namespace=self.ns)


@pytest.fixture(scope="module")
def setup(old_authz: ControlPlane) -> Iterator[Setup]:
    cp = old_authz
    own, other = unique_name("own"), unique_name("other")
    for node in (own, other):
        cp.create_node(node)
    ns = unique_name("tenant")
    core = k8s.CoreV1Api(cp.admin)
    core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=ns)))
    eventually("default ServiceAccount", lambda: core.list_namespaced_service_account(ns).items)
    dyn = cp.dynamic
    classes = {NIC: unique_name("nic-class"), CPU: unique_name("cpu-class")}
    for driver, cls in classes.items():
        api_resource(dyn, "DeviceClass").create(body=device_class_body(cls, driver))
    for node in (own, other):
        api_resource(cp.driver_client("nic", node), "ResourceSlice").create(
            body=slice_body(NIC, node, [{"name": "eth0"}, {"name": "eth1"}])
        )
    api_resource(cp.driver_client("cpu", own), "ResourceSlice").create(
        body=slice_body(CPU, own, [{"name": "numa-0"}])
    )
    claims = api_resource(dyn, "ResourceClaim")
    pods = api_resource(dyn, "Pod", "v1")
    for name, node, drivers in ((own, own, [NIC]), (other, other, [NIC]), (MULTI, own, [NIC, CPU])):
        requests = [{"name": d.split(".")[0], "exactly": {"deviceClassName": classes[d]}} for d in drivers]
        claims.create(
            body={
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": name},
                "spec": {"devices": {"requests": requests}},
            },
            namespace=ns,
        )
        pod = pod_body(name, [{"name": "c", "resourceClaimName": name}], {"kubernetes.io/hostname": node})
        pods.create(body=pod, namespace=ns)

    def ready(name: str) -> Any:
        status = claims.get(name=name, namespace=ns).status
        return status is not None and status.allocation and status.reservedFor

    for name in (own, other, MULTI):
        eventually(f"claim {name} allocated and reserved", partial(ready, name), timeout=60)
    done = Setup(cp, ns, own, other)

    # Policies reach the API server's admission asynchronously: wait until a dry-run write the
    # policy must refuse is refused by it.
    def enforced() -> bool:
        claim = done.claim(other)
        claim["status"]["devices"] = [nic_entry(claim)]
        try:
            done.claims(cp.driver_client("nic", own)).status.replace(body=claim, namespace=ns, dry_run="All")
        except ApiException as e:
            return e.status == 403 and POLICY in str(e.body)
        return False

    eventually(f"{POLICY} enforced", enforced, timeout=60)
    yield done
    core.delete_namespace(ns)


def nic_entry(claim: dict[str, Any], name: str = "net1") -> dict[str, Any]:
    (result,) = [r for r in claim["status"]["allocation"]["devices"]["results"] if r["driver"] == NIC]
    return {
        "driver": NIC,
        "pool": result["pool"],
        "device": result["device"],
        "networkData": {"interfaceName": name, "hardwareAddress": "02:00:00:00:00:01"},
    }


def denied_by_policy(call: Callable[[], object]) -> str:
    with pytest.raises(ApiException) as err:
        call()
    body = str(err.value.body)
    assert err.value.status == 403, body
    assert f"ValidatingAdmissionPolicy '{POLICY}'" in body, body
    return body


def test_own_entry_on_own_node_goes_through(setup: Setup) -> None:
    claim = setup.claim(setup.own)
    claim["status"]["devices"] = [nic_entry(claim)]
    setup.write_status("nic", claim)
    written = setup.claim(setup.own)["status"]["devices"]
    assert [d["networkData"]["interfaceName"] for d in written] == ["net1"]
    # and it may change and remove its own entry again
    written[0]["networkData"]["interfaceName"] = "net2"
    claim = setup.claim(setup.own)
    claim["status"]["devices"] = written
    setup.write_status("nic", claim)
    claim = setup.claim(setup.own)
    claim["status"].pop("devices")
    setup.write_status("nic", claim)
    assert not setup.claim(setup.own)["status"].get("devices")


def denied(call: Callable[[], object]) -> None:
    """Refused by the policy, or by the API server's own validation (an allocation cannot be
    edited in place; it can only be removed, which is what the policy must stop)."""
    with pytest.raises(ApiException) as err:
        call()
    body = str(err.value.body)
    assert err.value.status == 422 or (err.value.status == 403 and POLICY in body), body


def test_allocation_cannot_change(setup: Setup) -> None:
    claim = setup.claim(setup.own)
    before = copy.deepcopy(claim["status"]["allocation"])
    claim["status"]["allocation"]["devices"]["results"][0]["device"] = "eth1"  # not what it got
    denied(lambda: setup.write_status("nic", claim))
    claim = setup.claim(setup.own)
    terms = claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"]
    terms[0]["matchFields"][0]["values"] = [setup.other]
    denied(lambda: setup.write_status("nic", claim))
    # Deallocation: reservedFor emptied and the allocation removed in one write. The API server
    # accepts that from anyone allowed to update the status; the scheduler would then hand the
    # device to another claim while this claim's pod still runs with it.
    claim = setup.claim(setup.own)
    claim["status"]["reservedFor"] = []
    del claim["status"]["allocation"]
    msg = denied_by_policy(lambda: setup.write_status("nic", claim))
    assert "may not change status" in msg
    assert setup.claim(setup.own)["status"]["allocation"] == before


def test_reserved_for_cannot_change(setup: Setup) -> None:
    claim = setup.claim(setup.own)
    before = copy.deepcopy(claim["status"]["reservedFor"])
    claim["status"]["reservedFor"] = []  # unreserve: the pod would lose its claim
    msg = denied_by_policy(lambda: setup.write_status("nic", claim))
    assert "may not change status.reservedFor" in msg
    claim = setup.claim(setup.own)
    claim["status"]["reservedFor"].append({"resource": "pods", "name": "intruder", "uid": "0" * 8})
    denied_by_policy(lambda: setup.write_status("nic", claim))
    assert setup.claim(setup.own)["status"]["reservedFor"] == before


def test_other_drivers_entries_are_not_its_to_write(setup: Setup) -> None:
    """A claim with a NIC and a CPU device: the NIC token writes its entry beside the CPU
    driver's, and may not add, change or remove the CPU driver's."""
    claim = setup.claim(MULTI)
    (cpu,) = [r for r in claim["status"]["allocation"]["devices"]["results"] if r["driver"] == CPU]
    cpu_entry = {"driver": CPU, "pool": cpu["pool"], "device": cpu["device"], "data": {"cpus": "2-3"}}
    # adding one is refused
    claim["status"]["devices"] = [nic_entry(claim), cpu_entry]
    msg = denied_by_policy(lambda: setup.write_status("nic", claim))
    assert f"may only write status.devices entries of driver {NIC}" in msg
    # the CPU driver's entry as the admin writes it stands for the CPU driver's own write
    claim = setup.claim(MULTI)
    claim["status"]["devices"] = [cpu_entry]
    setup.claims(setup.cp.admin).status.replace(body=claim, namespace=setup.ns)
    claim = setup.claim(MULTI)
    claim["status"]["devices"].append(nic_entry(claim))
    setup.write_status("nic", claim)  # its own, beside the other: fine
    claim = setup.claim(MULTI)
    claim["status"]["devices"][0]["data"] = {"cpus": "0-63"}
    denied_by_policy(lambda: setup.write_status("nic", claim))
    claim = setup.claim(MULTI)
    claim["status"]["devices"] = claim["status"]["devices"][1:]
    denied_by_policy(lambda: setup.write_status("nic", claim))
    kept = {k: v for k, v in setup.claim(MULTI)["status"]["devices"][0].items() if v is not None}
    assert kept == cpu_entry


def test_a_claim_of_another_node_is_not_its_to_write(setup: Setup) -> None:
    claim = setup.claim(setup.other)
    claim["status"]["devices"] = [nic_entry(claim)]
    msg = denied_by_policy(lambda: setup.write_status("nic", claim))
    assert f"may only write the status of ResourceClaims allocated to node {setup.own}" in msg
    claim = setup.claim(setup.other)
    claim["status"]["reservedFor"] = []
    del claim["status"]["allocation"]
    denied_by_policy(lambda: setup.write_status("nic", claim))
    assert not setup.claim(setup.other)["status"].get("devices")
    assert setup.claim(setup.other)["status"]["allocation"]


def test_the_cpu_token_may_not_write_status_at_all(setup: Setup) -> None:
    claim = setup.claim(setup.own)
    claim["status"]["devices"] = [nic_entry(claim)]
    with pytest.raises(ApiException) as err:
        setup.write_status("cpu", claim)
    assert err.value.status == 403 and "ValidatingAdmissionPolicy" not in str(err.value.body)  # RBAC
