"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-scheduler, kube-controller-manager.

There is no kubelet: Node objects are created through the API and marked Ready, so the scheduler
binds pods to them and the pods stay Pending with `spec.nodeName` set. That is all DRA allocation
needs (the scheduler allocates claims; a kubelet would only prepare them).

Usage from any test or script (the repository root must be importable)::

    from tests.controlplane.cluster import running_control_plane

    with running_control_plane() as cp:           # builds once, then ~10 s to come up
        node_uid = cp.create_node("node-a", labels={"topology.topodra.io/rack": "r1"})
        admin = kubernetes.client.ResourceV1Api(cp.api_client())
        nic = cp.driver_client("nic", "node-a")   # SA token of nic.topodra.io, bound to node-a
        kubernetes.client.ResourceV1Api(nic).create_resource_slice(...)

In pytest use the session fixture `control_plane` instead (tests/controlplane/fixtures.py), which
shares one instance across the whole run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import ssl
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import kubernetes.client as k8s
import yaml
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from tests.controlplane.binaries import REPO, Binaries, ensure_binaries
from tests.controlplane.pki import ClusterPKI, KeyPair, make_cluster_pki
from tests.controlplane.processes import Component, ProcessDied, free_port, wait_until

# Feature gates set on every component. In 1.37 all of these default to on; naming them keeps the
# tier meaningful if a default changes, and fails loudly if a gate is renamed or removed.
FEATURE_GATES: dict[str, bool] = {
    "DRAConsumableCapacity": True,  # beta: capacity.requestPolicy, allowMultipleAllocations
    "DRADeviceTaints": True,  # GA: taints on devices in ResourceSlices
    "DRADeviceTaintRules": True,  # GA: DeviceTaintRule objects
    "DRAPartitionableDevices": True,  # beta: sharedCounters / consumesCounters
    "DRAResourceClaimGranularStatusAuthorization": True,  # beta: resourceclaims/driver associated-node
}

# resource.k8s.io/v1 is GA and on by default; the betas are off by default and are served so
# that version-skew tests (an older driver talking v1beta1/v1beta2) can run against this server.
RUNTIME_CONFIG = "resource.k8s.io/v1=true,resource.k8s.io/v1beta1=true,resource.k8s.io/v1beta2=true"

DRIVER_NAMESPACE = "topodra-system"
DRIVER_KINDS = ("cpu", "accelerator", "nic")
DRIVER_ACCESS_MANIFESTS = (REPO / "deploy" / "base" / "rbac.yaml", REPO / "deploy" / "base" / "vap.yaml")
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
FIELD_MANAGER = "topodra-tests"


def driver_name(kind: str) -> str:
    """`cpu` -> `cpu.topodra.io`, the DRA driver name the slices and classes use."""
    _check_kind(kind)
    return f"{kind}.topodra.io"


def service_account(kind: str) -> str:
    """The ServiceAccount (and ClusterRole / binding) name deploy/base/rbac.yaml gives a driver."""
    _check_kind(kind)
    return f"topodra-{kind}-driver"


def _check_kind(kind: str) -> None:
    if kind not in DRIVER_KINDS:
        raise ValueError(f"unknown driver kind {kind!r}; expected one of {', '.join(DRIVER_KINDS)}")


def _feature_gate_flag(gates: dict[str, bool]) -> str:
    return ",".join(f"{k}={str(v).lower()}" for k, v in sorted(gates.items()))


@dataclass(frozen=True)
class NodeSupport:
    """How the control plane serves a real kubelet and its Pods (tests/node); default: no kubelet.

    The API server listens on `address`:443 and `service_range` starts at `address`, so the
    `kubernetes` Service's ClusterIP is where the API server really is: a Pod's in-cluster
    configuration reaches it without kube-proxy. The node-lifecycle controller runs (a kubelet
    sends heartbeats, and only that controller lifts the new node's not-ready taint), and the
    API server reaches kubelets with the admin client certificate (logs, exec).
    """

    address: str
    service_range: str
    port: int = 443


@dataclass(frozen=True)
class Ports:
    etcd_client: int
    etcd_peer: int
    apiserver: int
    scheduler: int
    controller_manager: int

    @classmethod
    def pick(cls) -> Ports:
        return cls(free_port(), free_port(), free_port(), free_port(), free_port())


class ControlPlane:
    """Owns the processes, credentials and logs of one control plane under `workdir`.

    Lifecycle: `start()` ... `stop()` (or use `running_control_plane()`). Logs are in
    `workdir/logs/<component>.log`; `logs()` returns their tails for failure reports.
    """

    def __init__(
        self,
        workdir: Path,
        binaries: Binaries,
        *,
        feature_gates: dict[str, bool] | None = None,
        verbosity: int = int(os.environ.get("TOPODRA_CP_VERBOSITY", "0")),
        node_support: NodeSupport | None = None,
        profiling: bool = False,
    ) -> None:
        """`profiling`: the API server serves /debug/pprof (off as in hardened clusters; the
        benchmarks turn it on to ask it for a garbage collection: hack/bench/apiserver_gc.py)."""
        self.workdir = workdir
        self.binaries = binaries
        self.feature_gates = {**FEATURE_GATES, **(feature_gates or {})}
        self.node_support = node_support
        ports = Ports.pick()
        if node_support is not None:
            ports = dataclasses.replace(ports, apiserver=node_support.port)
        self.ports = ports
        self.api_address = node_support.address if node_support is not None else "127.0.0.1"
        self.server = f"https://{self.api_address}:{self.ports.apiserver}"
        self._verbosity = verbosity
        self._profiling = profiling
        self._pki: ClusterPKI | None = None
        self._components: dict[str, Component] = {}
        self._tokens: dict[tuple[str, str], str] = {}
        self._dynamic: DynamicClient | None = None
        self._admin: k8s.ApiClient | None = None
        self.startup_seconds: float | None = None

    # ----- paths and credentials ---------------------------------------------------------------

    @property
    def pki(self) -> ClusterPKI:
        if self._pki is None:
            raise RuntimeError("control plane not started")
        return self._pki

    @property
    def ca_file(self) -> Path:
        """CA bundle that verifies the apiserver's serving certificate."""
        return self.pki.ca.cert

    @property
    def kubeconfig(self) -> Path:
        """Admin (system:masters) kubeconfig, usable by kubectl and the Python client."""
        return self.workdir / "admin.kubeconfig"

    @property
    def log_dir(self) -> Path:
        return self.workdir / "logs"

    def api_client(self) -> k8s.ApiClient:
        """A fresh admin ApiClient; the caller may close it (or let it be collected)."""
        cfg = k8s.Configuration(host=self.server)
        cfg.ssl_ca_cert = str(self.ca_file)
        cfg.cert_file = str(self.pki.admin.cert)
        cfg.key_file = str(self.pki.admin.key)
        return k8s.ApiClient(cfg)

    def token_client(self, token: str) -> k8s.ApiClient:
        """An ApiClient that authenticates with a bearer token."""
        cfg = k8s.Configuration(host=self.server)
        cfg.ssl_ca_cert = str(self.ca_file)
        cfg.api_key = {"BearerToken": token}
        cfg.api_key_prefix = {"BearerToken": "Bearer"}
        return k8s.ApiClient(cfg)

    # ----- lifecycle ---------------------------------------------------------------------------

    def start(self, timeout: float = 120.0) -> None:
        """Brings everything up and returns once the API serves and controllers run."""
        began = time.monotonic()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        extra = [self.api_address] if self.node_support is not None else []
        self._pki = make_cluster_pki(self.workdir / "pki", extra_ips=extra)
        self._write_kubeconfigs()
        self._components = {
            "etcd": self._component("etcd", self._etcd_argv()),
            "kube-apiserver": self._component("kube-apiserver", self._apiserver_argv()),
            "kube-scheduler": self._component("kube-scheduler", self._scheduler_argv()),
            "kube-controller-manager": self._component("kube-controller-manager", self._kcm_argv()),
        }
        try:
            etcd = self._components["etcd"]
            etcd.start()
            health = f"http://127.0.0.1:{self.ports.etcd_client}/health"
            wait_until("etcd", lambda: b'"true"' in _get(health), timeout, alive=etcd.check_alive)
            self.start_apiserver(timeout)
            for name in ("kube-scheduler", "kube-controller-manager"):
                self._start_on_a_free_port(name, timeout)
            # Pods need their namespace's default ServiceAccount, which the controller-manager makes.
            core = k8s.CoreV1Api(self.admin)
            wait_until(
                "default ServiceAccount",
                lambda: core.read_namespaced_service_account("default", "default") is not None,
                timeout,
                alive=self._alive,
            )
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - began

    def _start_on_a_free_port(self, name: str, timeout: float, tries: int = 3) -> None:
        """The scheduler's and controller-manager's ports serve only their health checks. They
        are picked when the plane is made, seconds before these start, and meanwhile a port the
        kernel hands out to an outgoing connection can take one ("bind: address already in use",
        seen once in a CI run): then a new port is picked and the component started again."""
        field = {"kube-scheduler": "scheduler", "kube-controller-manager": "controller_manager"}[name]
        for attempt in range(tries):
            comp = self._components[name]
            comp.start()
            port = getattr(self.ports, field)
            try:
                wait_until(
                    name, partial(_healthy, f"https://127.0.0.1:{port}/healthz"), timeout, alive=self._alive
                )
                return
            except ProcessDied:
                if attempt == tries - 1 or "address already in use" not in comp.tail(5):
                    raise
            comp.stop(grace=0.0)
            self.ports = dataclasses.replace(self.ports, **{field: free_port()})
            argv = self._scheduler_argv() if name == "kube-scheduler" else self._kcm_argv()
            self._components[name] = self._component(name, argv)

    def stop(self) -> None:
        """Stops every component (newest first); safe to call twice."""
        for comp in reversed(list(self._components.values())):
            comp.stop(grace=5.0)
        self._dynamic = None
        self._admin = None

    def stop_apiserver(self, *, crash: bool = False) -> None:
        """Stops only kube-apiserver (etcd, scheduler and controller-manager keep running).

        Default: SIGTERM, as in a rolling upgrade; it stops listening at once but drains for up
        to a minute, so after 5 s it is killed. crash=True sends SIGKILL straight away.
        """
        self._components["kube-apiserver"].stop(grace=0.0 if crash else 5.0)

    def start_apiserver(self, timeout: float = 90.0) -> None:
        """(Re)starts kube-apiserver on the same port with the same etcd and keys; waits for /readyz."""
        api = self._components["kube-apiserver"]
        api.start()
        wait_until("kube-apiserver", lambda: _get(f"{self.server}/readyz", ctx=self.admin_tls()) == b"ok",
                   timeout, alive=api.check_alive)  # fmt: skip

    def running(self) -> dict[str, bool]:
        """Which components are up right now, by name."""
        return {name: comp.running for name, comp in self._components.items()}

    def server_pids(self) -> dict[str, int]:
        """kube-apiserver's and etcd's process ids (benchmarks read their CPU time)."""
        pids = {name: self._components[name].pid for name in ("kube-apiserver", "etcd")}
        return {name: pid for name, pid in pids.items() if pid is not None}

    def logs(self, lines: int = 60) -> str:
        """The tail of every component's log, for failure messages."""
        return "\n".join(c.tail(lines) for c in self._components.values())

    def _alive(self) -> None:
        for comp in self._components.values():
            comp.check_alive()

    def _component(self, name: str, argv: list[str]) -> Component:
        return Component(name, argv, self.log_dir / f"{name}.log")

    # ----- command lines -----------------------------------------------------------------------

    def _etcd_argv(self) -> list[str]:
        client = f"http://127.0.0.1:{self.ports.etcd_client}"
        peer = f"http://127.0.0.1:{self.ports.etcd_peer}"
        return [
            str(self.binaries.etcd),
            "--name=default",
            f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=default={peer}",
            "--log-level=warn",
            # Test data: durability across power loss buys nothing and fsync costs seconds on CI.
            "--unsafe-no-fsync",
        ]

    def _apiserver_argv(self) -> list[str]:
        p = self.pki
        return [
            str(self.binaries.kube_apiserver),
            f"--etcd-servers=http://127.0.0.1:{self.ports.etcd_client}",
            f"--bind-address={self.api_address}",
            f"--advertise-address={self.api_address}",
            # The endpoint reconciler refuses a loopback address, and nothing in-cluster dials the
            # `kubernetes` Service here (no kubelet, no pods run).
            "--endpoint-reconciler-type=none",
            f"--secure-port={self.ports.apiserver}",
            f"--cert-dir={self.workdir / 'apiserver-certs'}",
            f"--tls-cert-file={p.apiserver.cert}",
            f"--tls-private-key-file={p.apiserver.key}",
            f"--client-ca-file={p.ca.cert}",
            # Published in extension-apiserver-authentication for the scheduler's and
            # controller-manager's delegated authn; no certificate with this name is issued.
            f"--requestheader-client-ca-file={p.ca.cert}",
            "--requestheader-allowed-names=topodra-front-proxy",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--service-cluster-ip-range={self._service_range}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={p.sa_public_key}",
            f"--service-account-signing-key-file={p.sa_private_key}",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction,ValidatingAdmissionPolicy",
            # As kubeadm and kind set it: the NIC driver's DaemonSet (deploy/) is privileged.
            "--allow-privileged=true",
            f"--runtime-config={RUNTIME_CONFIG}",
            f"--feature-gates={_feature_gate_flag(self.feature_gates)}",
            f"--profiling={'true' if self._profiling else 'false'}",
            f"--v={self._verbosity}",
            *self._kubelet_client_flags(),
        ]

    @property
    def _service_range(self) -> str:
        return self.node_support.service_range if self.node_support is not None else "10.0.0.0/24"

    def _kubelet_client_flags(self) -> list[str]:
        if self.node_support is None:
            return []
        p = self.pki
        return [
            f"--kubelet-client-certificate={p.admin.cert}",
            f"--kubelet-client-key={p.admin.key}",
            "--kubelet-preferred-address-types=InternalIP,Hostname",
        ]

    def _common_component_flags(self, kubeconfig: Path, port: int) -> list[str]:
        return [
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            "--leader-elect=false",
            f"--feature-gates={_feature_gate_flag(self.feature_gates)}",
            f"--v={self._verbosity}",
        ]

    def _scheduler_argv(self) -> list[str]:
        return [
            str(self.binaries.kube_scheduler),
            *self._common_component_flags(self.workdir / "scheduler.kubeconfig", self.ports.scheduler),
            f"--cert-dir={self.workdir / 'scheduler-certs'}",
        ]

    def _kcm_argv(self) -> list[str]:
        p = self.pki
        return [
            str(self.binaries.kube_controller_manager),
            *self._common_component_flags(
                self.workdir / "controller-manager.kubeconfig", self.ports.controller_manager
            ),
            f"--cert-dir={self.workdir / 'controller-manager-certs'}",
            # Each controller runs as its own ServiceAccount, so the stock bootstrap roles
            # (system:controller:resource-claim-controller, ...) are what is exercised.
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={p.sa_private_key}",
            f"--root-ca-file={p.ca.cert}",
            # Without a kubelet no node sends heartbeats: node-lifecycle would mark every node
            # NotReady after 40 s, taint it and evict its pods. Nodes here are Ready because the
            # test says so. With a real kubelet (node_support) it runs, as on any cluster.
            "--controllers=*" if self.node_support else "--controllers=*,-node-lifecycle-controller",
        ]

    def _write_kubeconfigs(self) -> None:
        p = self.pki
        for name, pair in (
            ("admin", p.admin),
            ("scheduler", p.scheduler),
            ("controller-manager", p.controller_manager),
        ):
            user = {"client-certificate": str(pair.cert), "client-key": str(pair.key)}
            self._write_kubeconfig(self.workdir / f"{name}.kubeconfig", name, user)

    def write_kubeconfig(self, path: Path, user_name: str, user: dict[str, str]) -> None:
        """A kubeconfig for this API server with `user`'s credentials (cert/key paths or a token)."""
        self._write_kubeconfig(path, user_name, user)

    def _write_kubeconfig(self, path: Path, user_name: str, user: dict[str, str]) -> None:
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "topodra",
                    "cluster": {"server": self.server, "certificate-authority": str(self.pki.ca.cert)},
                }
            ],
            "users": [{"name": user_name, "user": user}],
            "contexts": [{"name": user_name, "context": {"cluster": "topodra", "user": user_name}}],
            "current-context": user_name,
        }
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        path.chmod(0o600)

    def admin_tls(self) -> ssl.SSLContext:
        """TLS as the admin (system:masters), for raw HTTPS calls: /metrics, /debug/pprof."""
        return _tls_context(self.pki.ca.cert, self.pki.admin)

    # ----- API helpers -------------------------------------------------------------------------

    @property
    def admin(self) -> k8s.ApiClient:
        """A shared admin ApiClient (for the fixture's own calls; tests may use api_client())."""
        if self._admin is None:
            self._admin = self.api_client()
        return self._admin

    @property
    def dynamic(self) -> DynamicClient:
        """Admin dynamic client (discovery-driven, plain dicts in and out)."""
        if self._dynamic is None:
            self._dynamic = dynamic_client(self.admin)
        return self._dynamic

    def create_node(
        self,
        name: str,
        labels: dict[str, str] | None = None,
        *,
        cpu: str = "64",
        memory: str = "256Gi",
        pods: str = "110",
    ) -> str:
        """Creates a Ready, untainted Node (as a kubelet would report it) and returns its UID.

        The admission chain taints new nodes `node.kubernetes.io/not-ready`; a kubelet's node
        lifecycle would lift it once Ready, here the taint is dropped explicitly.
        """
        core = k8s.CoreV1Api(self.admin)
        all_labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", **(labels or {})}
        node = core.create_node(k8s.V1Node(metadata=k8s.V1ObjectMeta(name=name, labels=all_labels)))
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        resources = {"cpu": cpu, "memory": memory, "pods": pods}
        status = {
            "status": {
                "capacity": resources,
                "allocatable": resources,
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "simulated node of the topodra test control plane",
                        "lastHeartbeatTime": now,
                        "lastTransitionTime": now,
                    }
                ],
                "addresses": [{"type": "Hostname", "address": name}],
            }
        }
        core.patch_node_status(name, status, _content_type="application/merge-patch+json")
        current = node.spec.taints if node.spec is not None else None
        taints = [t for t in current or [] if not t.key.startswith("node.kubernetes.io/")]
        core.patch_node(
            name,
            {"spec": {"taints": [t.to_dict() for t in taints] or None}},
            _content_type="application/merge-patch+json",
        )
        if node.metadata is None or not node.metadata.uid:
            raise RuntimeError(f"node {name} was created without a UID")
        return node.metadata.uid

    def apply_manifests(self, paths: Iterable[Path | str]) -> list[dict[str, Any]]:
        """Server-side applies every object in the YAML files (like `kubectl apply --server-side`).

        Kustomization documents are skipped: these are the plain manifests a kustomization lists.
        Returns the applied objects as the server returned them.
        """
        applied: list[dict[str, Any]] = []
        for path in paths:
            for doc in yaml.safe_load_all(Path(path).read_text()):
                if not doc or doc.get("kind") == "Kustomization":
                    continue
                resource = self.dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
                namespace = doc.get("metadata", {}).get("namespace") or (
                    "default" if resource.namespaced else None
                )
                out = resource.server_side_apply(
                    body=doc, namespace=namespace, field_manager=FIELD_MANAGER, force_conflicts=True
                )
                applied.append(out.to_dict())
        return applied

    def install_driver_access(self, timeout: float = 30.0) -> None:
        """Applies deploy/base/rbac.yaml and vap.yaml and waits until both are enforced.

        RBAC and admission policies reach the apiserver's caches asynchronously. The probe is a
        dry-run slice create by a driver token without a node: RBAC must allow it and the policy
        must deny it. Only then do tests see the final behaviour.
        """
        self.apply_manifests(DRIVER_ACCESS_MANIFESTS)
        token = self.service_account_token(service_account("cpu"))
        slices = api_resource(self.token_client(token), "ResourceSlice")
        body = _slice_body("probe-", driver_name("cpu"), "no-such-node")

        last: list[str] = ["no answer yet"]

        def enforced() -> bool:
            try:
                slices.create(body=body, dry_run="All")
                last[0] = "the dry-run create was accepted (policy not enforced)"
            except ApiException as e:
                last[0] = f"{e.status}: {e.body}"
                return e.status == 403 and "ValidatingAdmissionPolicy" in (e.body or "")
            return False

        try:
            wait_until("driver RBAC + ValidatingAdmissionPolicy", enforced, timeout, alive=self._alive)
        except TimeoutError as e:
            raise RuntimeError(f"{e}; last probe answer: {last[0]}") from None

    def driver_token(self, kind: str, node_name: str) -> str:
        """A token of the driver's ServiceAccount that carries `node_name`, as the driver's pod gets.

        A kubelet projects a token bound to the driver's Pod; the apiserver then adds the Pod's
        node to the token (ServiceAccountTokenPodNodeInfo), and authentication puts it in
        `userInfo.extra["authentication.kubernetes.io/node-name"]`. Here a Pod of that
        ServiceAccount is bound directly to the node (no kubelet runs it) and a TokenRequest
        bound to that Pod yields the same token. The node must exist (create_node first).
        """
        key = (kind, node_name)
        if key in self._tokens:
            return self._tokens[key]
        sa = service_account(kind)
        pod_name = f"{sa}-{node_name}"[:253]
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": pod_name,
                "namespace": DRIVER_NAMESPACE,
                "labels": {"app.kubernetes.io/name": sa},
            },
            "spec": {
                "nodeName": node_name,
                "serviceAccountName": sa,
                "automountServiceAccountToken": False,
                "tolerations": [{"operator": "Exists"}],
                "containers": [{"name": "driver", "image": "topodra.invalid/driver:test"}],
            },
        }
        try:
            created = api_resource(self.dynamic, "Pod", "v1").create(body=pod, namespace=DRIVER_NAMESPACE)
            pod_uid = created.metadata.uid
        except ApiException as e:
            if e.status != 409:
                raise
            pod_uid = (
                api_resource(self.dynamic, "Pod", "v1")
                .get(name=pod_name, namespace=DRIVER_NAMESPACE)
                .metadata.uid
            )
        request = k8s.AuthenticationV1TokenRequest(
            spec=k8s.V1TokenRequestSpec(
                audiences=[],
                expiration_seconds=24 * 3600,
                bound_object_ref=k8s.V1BoundObjectReference(
                    api_version="v1", kind="Pod", name=pod_name, uid=pod_uid
                ),
            )
        )
        token = self._issue_token(sa, request)
        seen = self.whoami(token)
        if seen.get("extra", {}).get(NODE_NAME_EXTRA) != [node_name]:
            raise RuntimeError(f"token for {sa} on {node_name} does not carry the node: {seen}")
        self._tokens[key] = token
        return token

    def service_account_token(self, name: str, namespace: str = DRIVER_NAMESPACE, seconds: int = 600) -> str:
        """A plain (unbound) token for a ServiceAccount: no pod, so no node in it."""
        spec = k8s.V1TokenRequestSpec(audiences=[], expiration_seconds=seconds)
        return self._issue_token(name, k8s.AuthenticationV1TokenRequest(spec=spec), namespace)

    def _issue_token(
        self, sa: str, request: k8s.AuthenticationV1TokenRequest, namespace: str = DRIVER_NAMESPACE
    ) -> str:
        out = k8s.CoreV1Api(self.admin).create_namespaced_service_account_token(sa, namespace, request)
        if out.status is None or not out.status.token:
            raise RuntimeError(f"TokenRequest for {namespace}/{sa} returned no token")
        return out.status.token

    def driver_client(self, kind: str, node_name: str) -> k8s.ApiClient:
        """ApiClient authenticated as driver `kind` (cpu/accelerator/nic) running on `node_name`."""
        return self.token_client(self.driver_token(kind, node_name))

    def driver_kubeconfig(self, kind: str, node_name: str) -> Path:
        """The same credentials as driver_client(), as a kubeconfig file for a driver process."""
        path = self.workdir / "kubeconfigs" / f"{kind}-{node_name}.kubeconfig"
        path.parent.mkdir(exist_ok=True)
        self._write_kubeconfig(path, service_account(kind), {"token": self.driver_token(kind, node_name)})
        return path

    def whoami(self, token: str) -> dict[str, Any]:
        """userInfo (username, groups, extra) the apiserver derives from `token` (SelfSubjectReview)."""
        client = self.token_client(token)
        try:
            review = k8s.AuthenticationV1Api(client).create_self_subject_review(
                k8s.V1SelfSubjectReview(api_version="authentication.k8s.io/v1", kind="SelfSubjectReview")
            )
        finally:
            client.close()  # type: ignore[no-untyped-call]
        if review.status is None or review.status.user_info is None:
            raise RuntimeError("SelfSubjectReview returned no userInfo")
        info = review.status.user_info
        return {"username": info.username, "groups": info.groups or [], "extra": info.extra or {}}


def dynamic_client(client: k8s.ApiClient) -> DynamicClient:
    """A dynamic (plain-dict) client over `client`'s credentials; runs discovery once."""
    return DynamicClient(client)  # type: ignore[no-untyped-call]


def api_resource(
    client: k8s.ApiClient | DynamicClient, kind: str, api_version: str = "resource.k8s.io/v1"
) -> Any:
    """The dynamic resource for `kind` (default group resource.k8s.io/v1): .get/.create/.replace/..."""
    dyn = client if isinstance(client, DynamicClient) else dynamic_client(client)
    return dyn.resources.get(api_version=api_version, kind=kind)


def unique_name(prefix: str) -> str:
    """`prefix-<8 hex>`: tests share one cluster per session, so names must not collide."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _slice_body(prefix: str, driver: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"generateName": prefix},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
        },
    }


def _tls_context(ca: Path, client: KeyPair | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca))
    if client is not None:
        ctx.load_cert_chain(str(client.cert), str(client.key))
    return ctx


def _get(url: str, *, ctx: ssl.SSLContext | None = None, insecure: bool = False) -> bytes:
    if insecure:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    with urllib.request.urlopen(url, timeout=5, context=ctx) as resp:
        body: bytes = resp.read()
        return body


def _healthy(url: str) -> bool:
    """Scheduler and controller-manager serve /healthz on a self-signed cert; only the body matters."""
    return _get(url, insecure=True) == b"ok"


@contextlib.contextmanager
def running_control_plane(
    workdir: Path | None = None,
    *,
    driver_access: bool = True,
    keep_workdir: bool = False,
    feature_gates: dict[str, bool] | None = None,
    profiling: bool = False,
) -> Iterator[ControlPlane]:
    """Builds (first time only), starts and finally stops a control plane, without pytest.

    driver_access=True also applies deploy/base RBAC and VAP, so driver_client() works. Without
    workdir a temp folder is used and removed afterwards unless keep_workdir is set.
    """
    binaries = ensure_binaries(echo=True)
    own = workdir is None
    root = Path(tempfile.mkdtemp(prefix="topodra-cp-")) if workdir is None else workdir
    cp = ControlPlane(root, binaries, feature_gates=feature_gates, profiling=profiling)
    try:
        cp.start()
        if driver_access:
            cp.install_driver_access()
        yield cp
    finally:
        cp.stop()
        if own and not keep_workdir:
            shutil.rmtree(root, ignore_errors=True)
