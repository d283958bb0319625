"""The RBAC and ValidatingAdmissionPolicy in deploy/base are enough and no more.

Each driver's token (a pod-bound ServiceAccount token that names its node, as the kubelet
projects it) may write its own node's slices, is denied by the policy for any other node or
driver, and holds exactly the permissions listed in docs/design/access.md beyond what every authenticated
ServiceAccount has.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import kubernetes.client as k8s
import pytest
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from tests.controlplane.cluster import (
    DRIVER_KINDS,
    DRIVER_NAMESPACE,
    NODE_NAME_EXTRA,
    ControlPlane,
    api_resource,
    driver_name,
    service_account,
    unique_name,
)
from tests.controlplane.objects import device_class_body, eventually, pod_body
from tests.controlplane.objects import slice_body as _slice_body

pytestmark = pytest.mark.controlplane

POLICY = "topodra-resourceslices-own-node"

# docs/design/access.md, written out here rather than read from deploy/: the test is the
# document's check on the manifests. (group, resource, verb, resourceName or "*")
Rule = tuple[str, str, str, str]
# Only what the code calls: claims by name (GET), its slices listed, watched and written whole
# (POST, PUT, DELETE), the Node by name.
COMMON: set[Rule] = {
    ("resource.k8s.io", "resourceclaims", "get", "*"),
    *{("resource.k8s.io", "resourceslices", v, "*") for v in ("list", "watch", "create", "update", "delete")},
    ("", "nodes", "get", "*"),
}
# Only the NIC driver writes status.devices (network data), and only for its own node's claims
# (a PUT of the status subresource).
STATUS_WRITER: set[Rule] = {
    ("resource.k8s.io", "resourceclaims/status", "update", "*"),
    ("resource.k8s.io", "resourceclaims/driver", "associated-node:update", "nic.topodra.io"),
}
EXPECTED = {kind: COMMON | (STATUS_WRITER if kind == "nic" else set()) for kind in DRIVER_KINDS}


@pytest.fixture(scope="module")
def nodes(control_plane: ControlPlane) -> tuple[str, str]:
    own, other = unique_name("own"), unique_name("other")
    control_plane.create_node(own)
    control_plane.create_node(other)
    return own, other


def slices(client: k8s.ApiClient | DynamicClient) -> Any:
    return api_resource(client, "ResourceSlice")


def slice_body(driver: str, node: str, device: str = "d0") -> dict[str, Any]:
    return _slice_body(driver, node, [{"name": device}])


def denied_by_policy(call: Callable[[], object]) -> str:
    with pytest.raises(ApiException) as err:
        call()
    body = str(err.value.body)
    assert err.value.status == 403, body
    assert f"ValidatingAdmissionPolicy '{POLICY}'" in body, body
    return body


@pytest.mark.parametrize("kind", DRIVER_KINDS)
def test_token_names_its_node(control_plane: ControlPlane, nodes: tuple[str, str], kind: str) -> None:
    user = control_plane.whoami(control_plane.driver_token(kind, nodes[0]))
    assert user["username"] == f"system:serviceaccount:{DRIVER_NAMESPACE}:{service_account(kind)}"
    assert user["extra"][NODE_NAME_EXTRA] == [nodes[0]]


@pytest.mark.parametrize("kind", DRIVER_KINDS)
def test_driver_writes_only_its_own_nodes_slices(
    control_plane: ControlPlane, nodes: tuple[str, str], kind: str
) -> None:
    own, other = nodes
    driver = driver_name(kind)
    mine = slices(control_plane.driver_client(kind, own))
    admin = slices(control_plane.admin)

    # Own node: the whole publisher cycle works.
    created = mine.create(body=slice_body(driver, own))
    name = created.metadata.name
    body = created.to_dict()
    body["spec"]["devices"].append({"name": "d1"})
    updated = mine.replace(body=body)
    assert [d.name for d in updated.spec.devices] == ["d0", "d1"]
    assert {s.metadata.name for s in mine.get(field_selector=f"spec.nodeName={own}").items} >= {name}
    with pytest.raises(ApiException) as err:  # the publisher never patches: RBAC does not allow it
        mine.patch(
            name=name, body={"spec": {"pool": {"generation": 2}}}, content_type="application/merge-patch+json"
        )
    assert err.value.status == 403 and "ValidatingAdmissionPolicy" not in str(err.value.body)
    mine.delete(name=name)

    # Another node: create, update and delete are all denied by the policy (patch by RBAC).
    msg = denied_by_policy(lambda: mine.create(body=slice_body(driver, other)))
    assert f"on node {own} may only write ResourceSlices with spec.nodeName {own}" in msg
    theirs = admin.create(body=slice_body(driver, other))
    try:
        stolen = theirs.to_dict()
        stolen["spec"]["devices"] = [{"name": "fake"}]
        denied_by_policy(lambda: mine.replace(body=stolen))
        denied_by_policy(lambda: mine.delete(name=theirs.metadata.name))
        assert [d.name for d in admin.get(name=theirs.metadata.name).spec.devices] == ["d0"]
    finally:
        admin.delete(name=theirs.metadata.name)

    # A cluster-wide slice (no nodeName) is another node's too.
    cluster_wide = slice_body(driver, own)
    del cluster_wide["spec"]["nodeName"]
    cluster_wide["spec"]["allNodes"] = True
    denied_by_policy(lambda: mine.create(body=cluster_wide))


@pytest.mark.parametrize("kind", DRIVER_KINDS)
def test_driver_cannot_publish_for_another_driver(
    control_plane: ControlPlane, nodes: tuple[str, str], kind: str
) -> None:
    mine = slices(control_plane.driver_client(kind, nodes[0]))
    for other in DRIVER_KINDS:
        if other != kind:
            msg = denied_by_policy(partial(mine.create, body=slice_body(driver_name(other), nodes[0])))
            assert f"only write ResourceSlices of driver {driver_name(kind)}" in msg


def test_token_without_node_is_denied(control_plane: ControlPlane, nodes: tuple[str, str]) -> None:
    client = control_plane.token_client(control_plane.service_account_token(service_account("cpu")))
    msg = denied_by_policy(lambda: slices(client).create(body=slice_body("cpu.topodra.io", nodes[0])))
    assert "token names no node" in msg


def granted_rules(client: k8s.ApiClient, namespace: str) -> set[Rule]:
    """What RBAC grants the caller in `namespace`, one (group, resource, verb, name) per entry."""
    review = k8s.AuthorizationV1Api(client).create_self_subject_rules_review(
        k8s.V1SelfSubjectRulesReview(spec=k8s.V1SelfSubjectRulesReviewSpec(namespace=namespace))
    )
    assert review.status is not None
    out: set[Rule] = set()
    for rule in review.status.resource_rules:
        for group in rule.api_groups or [""]:
            for resource in rule.resources or []:
                for verb in rule.verbs:
                    for name in rule.resource_names or ["*"]:
                        out.add((group, resource, verb, name))
    return out


@pytest.fixture(scope="module")
def baseline(control_plane: ControlPlane) -> Iterator[set[Rule]]:
    """What any ServiceAccount holds (self reviews, discovery): a fresh SA without bindings."""
    core = k8s.CoreV1Api(control_plane.admin)
    name = unique_name("nobody")
    core.create_namespaced_service_account(
        DRIVER_NAMESPACE, k8s.V1ServiceAccount(metadata=k8s.V1ObjectMeta(name=name))
    )
    token = control_plane.service_account_token(name)
    yield granted_rules(control_plane.token_client(token), DRIVER_NAMESPACE)
    core.delete_namespaced_service_account(name, DRIVER_NAMESPACE)


@pytest.mark.parametrize("kind", DRIVER_KINDS)
@pytest.mark.parametrize("namespace", [DRIVER_NAMESPACE, "default"])
def test_rbac_grants_exactly_the_listed_verbs(
    control_plane: ControlPlane, nodes: tuple[str, str], baseline: set[Rule], kind: str, namespace: str
) -> None:
    granted = granted_rules(control_plane.driver_client(kind, nodes[0]), namespace)
    assert granted - baseline == EXPECTED[kind]
    assert not any(r[1].startswith("resource") for r in baseline), "baseline must not touch DRA objects"


@pytest.mark.parametrize("kind", DRIVER_KINDS)
def test_authorizer_denies_everything_else(
    control_plane: ControlPlane, nodes: tuple[str, str], kind: str
) -> None:
    """SubjectAccessReview runs the whole chain (Node, then RBAC) for the driver's identity."""
    authz = k8s.AuthorizationV1Api(control_plane.admin)
    user = control_plane.whoami(control_plane.driver_token(kind, nodes[0]))

    def allowed(group: str, resource: str, verb: str, name: str = "", namespace: str = "ns1") -> bool:
        sub = ""
        if "/" in resource:
            resource, sub = resource.split("/", 1)
        attrs = k8s.V1ResourceAttributes(
            group=group,
            resource=resource,
            subresource=sub or None,
            verb=verb,
            name=name or None,
            namespace=namespace,
        )
        spec = k8s.V1SubjectAccessReviewSpec(
            user=user["username"], groups=user["groups"], extra=user.get("extra"), resource_attributes=attrs
        )
        review = authz.create_subject_access_review(k8s.V1SubjectAccessReview(spec=spec))
        return review.status is not None and review.status.allowed

    for group, resource, verb, name in EXPECTED[kind]:
        assert allowed(group, resource, verb, "" if name == "*" else name), (resource, verb)
    denied = [
        # verbs the code never uses: listing or watching claims would show every tenant's claims
        # (and opaque configs) to every node
        ("resource.k8s.io", "resourceclaims", "list"),
        ("resource.k8s.io", "resourceclaims", "watch"),
        ("resource.k8s.io", "resourceslices", "get"),
        ("resource.k8s.io", "resourceslices", "patch"),
        ("resource.k8s.io", "resourceclaims/status", "patch"),
        ("resource.k8s.io", "resourceclaims/driver", "associated-node:patch"),
        ("resource.k8s.io", "resourceslices", "deletecollection"),
        ("resource.k8s.io", "resourceclaims", "create"),
        ("resource.k8s.io", "resourceclaims", "update"),
        ("resource.k8s.io", "resourceclaims", "delete"),
        ("resource.k8s.io", "resourceclaims/binding", "update"),
        ("resource.k8s.io", "resourceclaims/driver", "arbitrary-node:update"),
        ("resource.k8s.io", "deviceclasses", "create"),
        ("resource.k8s.io", "devicetaintrules", "create"),
        ("", "nodes", "list"),
        ("", "nodes", "update"),
        ("", "nodes/status", "patch"),
        ("", "pods", "get"),
        ("", "secrets", "get"),
        ("", "serviceaccounts/token", "create"),
    ]
    if kind != "nic":
        denied += [("resource.k8s.io", "resourceclaims/status", "update")]
    for group, resource, verb in denied:
        assert not allowed(group, resource, verb), (resource, verb)
    # The NIC driver's claim-status right is for its own driver name only.
    assert not allowed("resource.k8s.io", "resourceclaims/driver", "associated-node:update", "cpu.topodra.io")


def test_nic_driver_writes_status_only_for_claims_on_its_node(
    control_plane: ControlPlane, nodes: tuple[str, str]
) -> None:
    """resourceclaims/driver associated-node: the NIC token may report network data for a claim
    allocated on its node, not for one allocated elsewhere; the CPU token may not write status."""
    own, other = nodes
    dyn = control_plane.dynamic
    ns = unique_name("nic")
    core = k8s.CoreV1Api(control_plane.admin)
    core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=ns)))
    eventually("default ServiceAccount", lambda: core.list_namespaced_service_account(ns).items)
    try:
        cls = unique_name("nic-class")
        dyn.resources.get(api_version="resource.k8s.io/v1", kind="DeviceClass").create(
            body=device_class_body(cls, "nic.topodra.io")
        )
        for node in (own, other):
            slices(control_plane.driver_client("nic", node)).create(
                body=slice_body("nic.topodra.io", node, "eth0")
            )
        claims = dyn.resources.get(api_version="resource.k8s.io/v1", kind="ResourceClaim")
        pods = dyn.resources.get(api_version="v1", kind="Pod")
        for node in (own, other):
            claim = {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": node},
                "spec": {"devices": {"requests": [{"name": "nic", "exactly": {"deviceClassName": cls}}]}},
            }
            claims.create(body=claim, namespace=ns)
            pod = pod_body(
                node, [{"name": "nic", "resourceClaimName": node}], {"kubernetes.io/hostname": node}
            )
            pods.create(body=pod, namespace=ns)

        def allocated(name: str) -> Any:
            return claims.get(name=name, namespace=ns).status.allocation

        for node in (own, other):
            eventually(f"claim {node} allocated", partial(allocated, node))

        def report(client: k8s.ApiClient, claim_name: str) -> None:
            claim = claims.get(name=claim_name, namespace=ns).to_dict()
            result = claim["status"]["allocation"]["devices"]["results"][0]
            claim["status"]["devices"] = [
                {
                    "driver": result["driver"],
                    "pool": result["pool"],
                    "device": result["device"],
                    "networkData": {"interfaceName": "net1", "hardwareAddress": "02:00:00:00:00:01"},
                }
            ]
            api_resource(client, "ResourceClaim").status.replace(body=claim, namespace=ns)

        report(control_plane.driver_client("nic", own), own)
        written = claims.get(name=own, namespace=ns).status.devices[0]
        assert written.networkData.interfaceName == "net1"
        with pytest.raises(ApiException) as err:
            report(control_plane.driver_client("nic", own), other)
        # Granular status authorization answers with a field error naming the missing verb.
        assert err.value.status == 422, err.value.body
        assert 'verb=\\"[arbitrary-node:update]\\"' in str(err.value.body), err.value.body
        with pytest.raises(ApiException) as err:
            report(control_plane.driver_client("cpu", own), own)
        assert err.value.status == 403, err.value.body
    finally:
        core.delete_namespace(ns)
        admin_slices = slices(control_plane.admin)
        for node in (own, other):
            for s in admin_slices.get(
                field_selector=f"spec.nodeName={node},spec.driver=nic.topodra.io"
            ).items:
                admin_slices.delete(name=s.metadata.name)
