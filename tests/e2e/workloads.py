"""The shipped examples (deploy/examples) as workloads on the e2e fleet, and what came of them.

The tests use the example files themselves (that is what proves them): each file holds a
ResourceClaimTemplate and a Pod using it. Two adaptations, both made here and nowhere in the
files: objects go into the test's own namespace under unique names (tests share one cluster),
and pods get a node selector that keeps them on the fleet (other tests publish slices too).
`without_constraints` derives "the same claim without constraints" from an example.

No kubelet runs, so pods stay Pending once bound; deletion must be forced (grace 0), as a
kubelet would confirm it. The resource-claim controller then deletes the generated claims.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes.client as k8s
import yaml
from kubernetes.client.exceptions import ApiException

from tests.conftest import REPO
from tests.controlplane.cluster import ControlPlane, api_resource
from tests.controlplane.objects import eventually

EXAMPLES = REPO / "deploy" / "examples"
DEVICE_CLASSES = REPO / "deploy" / "base" / "deviceclasses.yaml"


@dataclass(frozen=True)
class Example:
    """One example file: its ResourceClaimTemplate and its Pod (plain dicts, as written)."""

    name: str
    template: dict[str, Any]
    pod: dict[str, Any]

    @property
    def claim_spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = self.template["spec"]["spec"]
        return spec

    @property
    def constraints(self) -> list[dict[str, Any]]:
        return list(self.claim_spec["devices"].get("constraints") or [])

    @property
    def requests(self) -> list[str]:
        return [r["name"] for r in self.claim_spec["devices"]["requests"]]


def load_examples(folder: Path = EXAMPLES) -> dict[str, Example]:
    """Every example of the folder's kustomization that ships a Pod, by file stem.

    The best-locality-* templates ship no Pod (a user's workload references them); the real
    scheduler walks their fallback levels in tests/controlplane/test_fallback.py and a real Pod
    runs them in tests/node/test_examples.py.
    """
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    out: dict[str, Example] = {}
    for resource in kustomization["resources"]:
        docs = [d for d in yaml.safe_load_all((folder / resource).read_text()) if d]
        pods = [d for d in docs if d["kind"] == "Pod"]
        if not pods:
            continue
        (template,) = [d for d in docs if d["kind"] == "ResourceClaimTemplate"]
        (pod,) = pods
        out[Path(resource).stem] = Example(Path(resource).stem, template, pod)
    return out


def without_constraints(example: Example) -> Example:
    """The same requests, no constraints: what a user gets who only counts devices."""
    template = copy.deepcopy(example.template)
    template["spec"]["spec"]["devices"].pop("constraints", None)
    return Example(f"{example.name}-unconstrained", template, copy.deepcopy(example.pod))


@dataclass(frozen=True)
class Allocated:
    """One device of an allocation result."""

    request: str
    driver: str
    pool: str
    device: str
    share_id: str | None
    consumed: Mapping[str, str]


@dataclass(frozen=True)
class Placement:
    """Where the scheduler put a pod and what its claim got."""

    pod: str
    pod_uid: str
    node: str
    claim: dict[str, Any]  # the generated ResourceClaim as stored, with status.allocation

    @property
    def claim_ref(self) -> tuple[str, str, str]:
        meta = self.claim["metadata"]
        return (meta["namespace"], meta["name"], meta["uid"])

    @property
    def results(self) -> list[Allocated]:
        return [
            Allocated(
                r["request"],
                r["driver"],
                r["pool"],
                r["device"],
                r.get("shareID"),
                dict(r.get("consumedCapacity") or {}),
            )
            for r in self.claim["status"]["allocation"]["devices"]["results"]
        ]

    def by_request(self, requests: Iterable[str] | None = None) -> list[Allocated]:
        wanted = None if requests is None else set(requests)
        return [r for r in self.results if wanted is None or r.request.split("/")[0] in wanted]


def attribute(attrs: Mapping[str, Any], name: str, driver: str) -> Any:
    """An attribute's value by its qualified name (the server may keep the driver's own
    domain implicit: `cpuCount` for `cpu.topodra.io/cpuCount`)."""
    if name in attrs:
        return attrs[name]
    domain, _, short = name.rpartition("/")
    return attrs.get(short) if domain == driver else None


def constraint_holds(
    constraint: Mapping[str, Any], devices: Sequence[Allocated], attrs: Mapping[tuple[str, str], Any]
) -> tuple[bool, list[Any]]:
    """Whether `devices` (those of the constraint's requests) satisfy it, and the values seen.

    matchAttribute: every device has the attribute and all values are equal; distinctAttribute:
    every device has it and no two are equal (the scheduler's rules, checked independently).
    """
    key = constraint.get("matchAttribute") or constraint["distinctAttribute"]
    values = [attribute(attrs[(d.driver, d.device)], key, d.driver) for d in devices]
    if any(v is None for v in values):
        return False, values
    if "matchAttribute" in constraint:
        return len(set(values)) == 1, values
    return len(set(values)) == len(values), values


class Workloads:
    """Examples applied into one namespace; `close()` force-deletes what was created."""

    def __init__(self, cp: ControlPlane, namespace: str) -> None:
        self.cp = cp
        self.namespace = namespace
        self._core = k8s.CoreV1Api(cp.admin)
        self._templates = api_resource(cp.dynamic, "ResourceClaimTemplate")
        self._claims = api_resource(cp.dynamic, "ResourceClaim")
        self._pods = api_resource(cp.dynamic, "Pod", "v1")
        self._created_pods: list[str] = []
        cp.apply_manifests([DEVICE_CLASSES])
        self._core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=namespace)))

    def create_template(self, example: Example, name: str) -> None:
        body = copy.deepcopy(example.template)
        body["metadata"]["name"] = name
        self._templates.create(body=body, namespace=self.namespace)

    def create_pod(
        self, example: Example, name: str, template: str, node_selector: Mapping[str, str]
    ) -> None:
        """The example's pod under `name`, its claim from `template`, kept to `node_selector`."""
        body = copy.deepcopy(example.pod)
        body["metadata"]["name"] = name
        for claim in body["spec"]["resourceClaims"]:
            claim["resourceClaimTemplateName"] = template
        body["spec"]["nodeSelector"] = {**(body["spec"].get("nodeSelector") or {}), **node_selector}
        self._pods.create(body=body, namespace=self.namespace)
        self._created_pods.append(name)

    def run(
        self, example: Example, name: str, node_selector: Mapping[str, str], timeout: float = 60.0
    ) -> Placement:
        """Template + pod, then waits for the scheduler to bind and allocate."""
        self.create_template(example, name)
        self.create_pod(example, name, name, node_selector)
        return self.wait_placed(name, timeout)

    def placement(self, pod_name: str) -> Placement | None:
        """The pod's node and its allocated, reserved claim; None while that is not so yet."""
        pod = self._pods.get(name=pod_name, namespace=self.namespace).to_dict()
        node = pod["spec"].get("nodeName")
        statuses = (pod.get("status") or {}).get("resourceClaimStatuses") or []
        if not node or not statuses or not statuses[0].get("resourceClaimName"):
            return None
        claim = self._claims.get(name=statuses[0]["resourceClaimName"], namespace=self.namespace).to_dict()
        status = claim.get("status") or {}
        reserved = [r.get("uid") for r in status.get("reservedFor") or []]
        if not status.get("allocation") or pod["metadata"]["uid"] not in reserved:
            return None
        return Placement(pod_name, pod["metadata"]["uid"], node, claim)

    def wait_placed(self, pod_name: str, timeout: float = 60.0) -> Placement:
        def placed() -> Placement | None:
            return self.placement(pod_name)

        try:
            return eventually(
                f"pod {self.namespace}/{pod_name} bound with an allocated claim", placed, timeout
            )
        except AssertionError as e:
            raise AssertionError(f"{e}\n{self.why_pending(pod_name)}") from None

    def why_pending(self, pod_name: str) -> str:
        """The scheduler's word on a pod (its PodScheduled condition and events)."""
        pod = self._pods.get(name=pod_name, namespace=self.namespace).to_dict()
        conditions = (pod.get("status") or {}).get("conditions") or []
        events = self._core.list_namespaced_event(
            self.namespace, field_selector=f"involvedObject.name={pod_name}"
        )
        lines = [
            f"{c.get('type')}={c.get('status')} {c.get('reason')}: {c.get('message')}" for c in conditions
        ]
        lines += [f"event {e.reason}: {e.message}" for e in events.items]
        return "\n".join(lines)

    def delete_pod(self, pod_name: str, timeout: float = 60.0) -> None:
        """Force-deletes the pod (no kubelet confirms) and waits until its claim is gone, so its
        devices are free for the scheduler again."""
        placed = None
        try:
            placed = self.placement(pod_name)
            self._pods.delete(name=pod_name, namespace=self.namespace, grace_period_seconds=0)
        except ApiException as e:
            if e.status != 404:
                raise
        if pod_name in self._created_pods:
            self._created_pods.remove(pod_name)
        if placed is None:
            return
        _ns, claim_name, _uid = placed.claim_ref

        def gone() -> bool:
            try:
                self._claims.get(name=claim_name, namespace=self.namespace)
            except ApiException as e:
                return bool(e.status == 404)
            return False

        eventually(f"claim {claim_name} of deleted pod {pod_name} to go", gone, timeout)

    def close(self) -> None:
        for name in list(self._created_pods):
            try:
                self._pods.delete(name=name, namespace=self.namespace, grace_period_seconds=0)
            except ApiException as e:
                if e.status != 404:
                    raise
        self._created_pods.clear()
        # Claims go with their pods (owner references); the namespace takes the templates.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if not self._claims.get(namespace=self.namespace).items:
                break
            time.sleep(0.5)
        self._core.delete_namespace(self.namespace)
