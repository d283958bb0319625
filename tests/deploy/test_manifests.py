"""The plain manifests in deploy/base and deploy/examples, checked against the code they deploy.

Nothing here is compared with a copy of itself: DaemonSet arguments go through `topodra`'s own
argument parser and the drivers' option checks, probe paths are asked of the real health
endpoint, hook and state folders are matched with where the CLI writes them, the examples'
attribute names with what the drivers publish for a synthetic machine.
"""

from __future__ import annotations

import argparse
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from topodra.common.runtime.observability import Observability, parse_address
from topodra.common.runtime.plugin import PluginStatus
from topodra.drivers import registry
from topodra.drivers.cli.main import build_parser
from topodra.drivers.cpu import devices as cpu_devices

from tests.controlplane.cluster import DRIVER_NAMESPACE, service_account
from tests.deploy.render import (
    DEPLOY,
    KINDS,
    SAMPLE_FIELDS,
    Obj,
    base_file,
    by_key,
    check_daemonset,
    container_args,
    daemonsets,
    driver_container,
    example_files,
    load,
    parse,
)
from tests.kit.inventory import published_list

BASE = load(sorted((DEPLOY / "base").glob("*.yaml")))
DS = daemonsets(BASE)
CHECK_DS = check_daemonset(BASE)


def serve_args(ds: Obj) -> argparse.Namespace:
    """The driver container's command line as `topodra` parses it (ENTRYPOINT is `topodra`)."""
    argv = container_args(driver_container(ds))
    assert argv[0] == "serve"
    return build_parser("serve").parse_args(argv)


def mounts(container: Obj, pod: Obj) -> dict[str, tuple[Obj, Obj]]:
    """mountPath -> (volumeMount, volume) of a container."""
    volumes = {v["name"]: v for v in pod["volumes"]}
    return {m["mountPath"]: (m, volumes[m["name"]]) for m in container.get("volumeMounts", [])}


def host_mount(container: Obj, pod: Obj, path: Path | str) -> tuple[Obj, str]:
    """The mount at `path` and the host path behind it (which must be a hostPath)."""
    found = mounts(container, pod).get(str(path))
    assert found is not None, f"{container['name']}: nothing mounted at {path}"
    mount, volume = found
    assert "hostPath" in volume, f"{path} is not a hostPath volume: {volume}"
    return mount, volume["hostPath"]["path"]


def test_every_manifest_parses_with_names() -> None:
    files = [p for p in DEPLOY.rglob("*.yaml") if "helm" not in p.parts]
    assert len(files) >= 12
    for path in files:
        for doc in parse(path.read_text()):
            if isinstance(doc, list):  # a JSON 6902 patch an overlay applies
                assert all({"op", "path"} <= op.keys() for op in doc), path
                continue
            assert {"apiVersion", "kind"} <= doc.keys(), path
            if doc["kind"] not in ("Kustomization", "Component"):
                assert doc["metadata"]["name"], path


def test_one_daemonset_per_driver() -> None:
    assert sorted(DS) == sorted(KINDS)
    for kind, ds in DS.items():
        assert ds["metadata"]["name"] == service_account(kind)
        assert ds["metadata"]["namespace"] == DRIVER_NAMESPACE
        assert driver_container(ds)["args"][1] == kind


@pytest.mark.parametrize("kind", KINDS)
def test_arguments_are_real_flags_and_match_the_mounts(kind: str) -> None:
    ds = DS[kind]
    pod = ds["spec"]["template"]["spec"]
    container = driver_container(ds)
    args = serve_args(ds)
    assert args.kind == kind
    # sockets and checkpoint: the kubelet's folders, at their host paths
    driver = registry.module(kind).NAME
    for path in (args.kubelet_root_dir / "plugins_registry", args.kubelet_root_dir / "plugins" / driver):
        mount, host = host_mount(container, pod, path)
        assert host == str(path) and not mount.get("readOnly")
    assert args.state_dir is None  # checkpoint in the plugin folder (host disk), mounted above
    mount, host = host_mount(container, pod, args.cdi_root)
    assert host == str(args.cdi_root) and not mount.get("readOnly")
    # sysfs: the host's, read-only, under the root the driver reads
    mount, host = host_mount(container, pod, Path(args.sysfs_root) / "sys")
    assert host == "/sys" and mount["readOnly"] is True
    # the health endpoint is where the probes look
    host, port = parse_address(args.metrics_address)
    (metrics,) = [p for p in container["ports"] if p["name"] == "metrics"]
    assert metrics["containerPort"] == port
    if pod.get("hostNetwork"):
        # on the host network it binds the node's IP (where probes and scrapes arrive), not
        # every interface of the node
        assert host == SAMPLE_FIELDS["status.hostIP"], args.metrics_address
    if kind == "cpu":
        from topodra.drivers.cpu import options

        opts = options.from_args(args)  # the driver's own checks of its flags
        mount, host = host_mount(container, pod, args.cpu_hook_dir)
        assert host == str(args.cpu_hook_dir) and mount["readOnly"] is True  # runtime runs it by host path
        assert opts is not None
    if kind == "accelerator":
        from topodra.drivers.accelerator import options as acc_options

        acc = acc_options.from_args(args, Path(args.sysfs_root), "node-a")
        mount, host = host_mount(container, pod, acc.dev_root / "dev")
        assert host == "/dev" and mount["readOnly"] is True
    if kind == "nic":
        mount, host = host_mount(container, pod, args.nic_hook_dir)
        assert host == str(args.nic_hook_dir) and not mount.get("readOnly")  # the driver installs its hook
        mount, host = host_mount(container, pod, args.nic_state_dir)
        assert host == str(args.nic_state_dir) and mount["mountPropagation"] == "Bidirectional"


@pytest.mark.parametrize("kind", ["cpu", "nic"])
def test_init_container_installs_the_hook_where_the_driver_looks(kind: str) -> None:
    ds = DS[kind]
    pod = ds["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    parsed = build_parser("install-hooks").parse_args(init["args"])
    assert parsed.driver == [kind]
    hook_dir = getattr(serve_args(ds), f"{kind}_hook_dir")
    assert parsed.dest == hook_dir
    _, host = host_mount(init, pod, parsed.dest)
    assert host == str(hook_dir)
    assert init["image"] == driver_container(ds)["image"]


def test_accelerator_has_no_init_container() -> None:
    assert "initContainers" not in DS["accelerator"]["spec"]["template"]["spec"]


@pytest.mark.parametrize("kind", KINDS)
def test_host_paths_are_the_same_inside(kind: str) -> None:
    """The kubelet and the runtime use the paths the driver writes (sockets, CDI specs, hooks)."""
    pod = DS[kind]["spec"]["template"]["spec"]
    for container in [*pod.get("initContainers", []), *pod["containers"]]:
        for path, (_, volume) in mounts(container, pod).items():
            if "hostPath" in volume and volume["hostPath"]["path"] != "/dev":
                assert volume["hostPath"]["path"] == path, (container["name"], volume)


@pytest.mark.parametrize("kind", KINDS)
def test_downward_api(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    fields = [e for e in driver_container(DS[kind])["env"] if "valueFrom" in e]
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in fields}
    assert env["NODE_NAME"] == "spec.nodeName"
    assert env["POD_UID"] == "metadata.uid"  # rolling-update socket names
    if kind == "nic":
        assert env["NODE_IP"] == "status.hostIP"  # its interface is the uplink, never published
    # serve takes them from the environment, with no flag in the DaemonSet overriding them
    monkeypatch.setenv("NODE_NAME", "node-a")
    monkeypatch.setenv("POD_UID", "0b3c5a0e-1d2f-4e5a-9b8c-7d6e5f4a3b2c")
    args = serve_args(DS[kind])
    assert (args.node_name, args.pod_uid) == ("node-a", "0b3c5a0e-1d2f-4e5a-9b8c-7d6e5f4a3b2c")


@pytest.mark.parametrize("kind", KINDS)
def test_two_malloc_arenas(kind: str) -> None:
    """glibc's per-thread malloc arenas grow a driver's RSS under concurrent prepares; the
    DaemonSet caps them at two, and so does the image for any other way of running it."""
    env = {e["name"]: e.get("value") for e in driver_container(DS[kind])["env"]}
    assert env["MALLOC_ARENA_MAX"] == "2"
    lines = (DEPLOY.parent / "Dockerfile").read_text().replace("\\\n", " ").splitlines()
    runtime = lines[max(i for i, line in enumerate(lines) if line.startswith("FROM ")) :]  # the image
    image_env = [word for line in runtime if line.startswith("ENV ") for word in line.split()[1:]]
    assert "MALLOC_ARENA_MAX=2" in image_env


@pytest.mark.parametrize("kind", KINDS)
def test_drivers_run_without_docstrings_from_bytecode_the_image_carries(kind: str) -> None:
    """PYTHONOPTIMIZE=2 keeps docstrings out of every driver's memory; the image must carry
    that level's bytecode (nothing can be written at run time), for the standard library and
    site-packages alike. tests/e2e runs its drivers with the DaemonSets' env."""
    env = {e["name"]: e.get("value") for e in driver_container(DS[kind])["env"]}
    assert env["PYTHONOPTIMIZE"] == "2"
    text = (DEPLOY.parent / "Dockerfile").read_text().replace("\\\n", " ")
    compiles = [line for line in text.splitlines() if "compileall" in line]
    assert any("-o 2" in line and 'get_path("stdlib")' in line for line in compiles), compiles


@pytest.mark.parametrize("kind", ["cpu", "accelerator"])
def test_unprivileged_drivers(kind: str) -> None:
    pod = DS[kind]["spec"]["template"]["spec"]
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        assert not pod.get(key), key
    for container in [*pod.get("initContainers", []), *pod["containers"]]:
        sc = container["securityContext"]
        assert not sc.get("privileged")
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
        for mount in container.get("volumeMounts", []):
            assert mount.get("mountPropagation", "None") == "None", mount


def test_nic_driver_privileges() -> None:
    """Host network and PID namespace, privileged (Bidirectional propagation needs it), and
    the propagation only on the folder of namespace pins."""
    pod = DS["nic"]["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True and pod["hostPID"] is True and not pod.get("hostIPC")
    assert pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    container = driver_container(DS["nic"])
    assert container["securityContext"]["privileged"] is True
    propagated = [m for m in container["volumeMounts"] if m.get("mountPropagation")]
    assert [m["mountPath"] for m in propagated] == [str(serve_args(DS["nic"]).nic_state_dir)]
    (init,) = pod["initContainers"]
    assert init["securityContext"]["capabilities"] == {"drop": ["ALL"]}  # it only copies a file


@pytest.mark.parametrize("kind", KINDS)
def test_scheduling_and_updates(kind: str) -> None:
    ds = DS[kind]
    pod = ds["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == "system-node-critical"
    assert {"operator": "Exists"} in pod["tolerations"]
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert pod["serviceAccountName"] == service_account(kind)
    labels = ds["spec"]["template"]["metadata"]["labels"]
    assert ds["spec"]["selector"]["matchLabels"].items() <= labels.items()
    rolling = ds["spec"]["updateStrategy"]["rollingUpdate"]
    if kind == "nic":  # hostNetwork port and host-side actions outside the checkpoint lock
        assert (rolling["maxSurge"], rolling["maxUnavailable"]) == (0, 1)
    else:
        assert (rolling["maxSurge"], rolling["maxUnavailable"]) == (1, 0)
        assert driver_container(ds)["env"][1]["name"] == "POD_UID"


@pytest.mark.parametrize("kind", KINDS)
def test_resources(kind: str) -> None:
    res = driver_container(DS[kind])["resources"]
    assert "cpu" not in res["limits"]  # no throttling of the kubelet's calls
    mib = {"Mi": 1, "Gi": 1024}
    request, limit = (int(v[:-2]) * mib[v[-2:]] for v in (res["requests"]["memory"], res["limits"]["memory"]))
    # hack/bench-driver-rss measured 67-86 MiB: the request covers it, the limit leaves headroom
    assert 86 <= request <= limit and limit >= 2 * 86


@pytest.fixture
def health_endpoint() -> Iterator[tuple[str, list[PluginStatus]]]:
    statuses: list[PluginStatus] = []
    obs = Observability("127.0.0.1:0", lambda: statuses)
    obs.start()
    try:
        yield f"http://127.0.0.1:{obs.port}", statuses
    finally:
        obs.stop()


def _code(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return e.code


@pytest.mark.parametrize("kind", KINDS)
def test_probes_ask_the_real_endpoint(kind: str, health_endpoint: tuple[str, list[PluginStatus]]) -> None:
    """Liveness follows the gRPC servers, readiness also the kubelet's registration."""
    base, statuses = health_endpoint
    container = driver_container(DS[kind])
    probes = {k: container[k]["httpGet"] for k in ("startupProbe", "livenessProbe", "readinessProbe")}
    assert all(p["port"] == "metrics" for p in probes.values())
    driver = registry.module(kind).NAME
    for serving, registered, live, ready in (
        (True, True, 200, 200),
        (True, None, 200, 503),  # not registered yet: alive, not ready
        (False, True, 503, 503),
    ):
        statuses[:] = [PluginStatus(driver, serving, registered)]
        assert _code(base + probes["livenessProbe"]["path"]) == live
        assert _code(base + probes["startupProbe"]["path"]) == live
        assert _code(base + probes["readinessProbe"]["path"]) == ready


def test_rbac_binds_each_daemonset_account() -> None:
    objs = by_key(load([base_file("rbac.yaml")]))
    for kind in KINDS:
        name = service_account(kind)
        assert ("v1", "ServiceAccount", DRIVER_NAMESPACE, name) in objs
        binding = objs[("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", None, name)]
        assert binding["roleRef"]["name"] == name
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": name, "namespace": DRIVER_NAMESPACE}
        ]
        assert ("rbac.authorization.k8s.io/v1", "ClusterRole", None, name) in objs


# ----- the node check (deploy/base/check.yaml) -------------------------------------------------


def test_check_daemonset_runs_the_watch_on_the_hosts_sysfs(monkeypatch: pytest.MonkeyPatch) -> None:
    assert CHECK_DS is not None
    pod = CHECK_DS["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = build_parser("check").parse_args(container["args"])  # topodra's own parser
    assert args.watch and args.slices is None and not args.no_events
    assert args.node is None  # from NODE_NAME, the downward API
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}
    assert env == {"NODE_NAME": "spec.nodeName"}
    mount, host = host_mount(container, pod, Path(args.sysfs_root) / "sys")
    assert host == "/sys" and mount["readOnly"] is True
    assert [m["mountPath"] for m in container["volumeMounts"]] == ["/sys"]  # nothing else of the host
    _, port = parse_address(args.metrics_address)
    (metrics,) = container["ports"]
    assert metrics == {"name": "metrics", "containerPort": port, "protocol": "TCP"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/metrics", "port": "metrics"}
    assert {"operator": "Exists"} in pod["tolerations"] and "priorityClassName" not in pod


def test_check_runs_unprivileged() -> None:
    assert CHECK_DS is not None
    pod = CHECK_DS["spec"]["template"]["spec"]
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        assert not pod.get(key), key
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    (container,) = pod["containers"]
    sc = container["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True


def test_check_rbac_is_read_only_apart_from_node_events() -> None:
    objs = by_key(load([base_file("check.yaml")]))
    name = "topodra-check"
    assert CHECK_DS is not None and CHECK_DS["spec"]["template"]["spec"]["serviceAccountName"] == name
    assert ("v1", "ServiceAccount", DRIVER_NAMESPACE, name) in objs
    role = objs[("rbac.authorization.k8s.io/v1", "ClusterRole", None, name)]
    assert role["rules"] == [
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"], "verbs": ["list", "watch"]}
    ]
    events = objs[("rbac.authorization.k8s.io/v1", "Role", "default", f"{name}-events")]
    assert events["rules"] == [{"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}]
    subject = [{"kind": "ServiceAccount", "name": name, "namespace": DRIVER_NAMESPACE}]
    for kind, namespace, bound in (
        ("ClusterRoleBinding", None, name),
        ("RoleBinding", "default", f"{name}-events"),
    ):
        binding = objs[("rbac.authorization.k8s.io/v1", kind, namespace, bound)]
        assert binding["roleRef"]["name"] == bound and binding["subjects"] == subject


def test_deviceclasses_select_each_driver() -> None:
    classes = {o["metadata"]["name"]: o for o in load([base_file("deviceclasses.yaml")])}
    assert sorted(classes) == sorted(registry.module(k).NAME for k in KINDS)
    for name, cls in classes.items():
        (sel,) = cls["spec"]["selectors"]
        assert sel["cel"]["expression"] == f'device.driver == "{name}"'


# ----- examples ----------------------------------------------------------------------------------

EXAMPLES = load(example_files())


def _published_attributes(root: Path) -> dict[str, set[str]]:
    """driver name -> attribute keys (qualified) that its devices carry on the machine at root."""
    out: dict[str, set[str]] = {}
    for kind in KINDS:
        args = build_parser("serve").parse_args(
            ["serve", kind, "--sysfs-root", str(root), "--node-name", "n"]
        )
        opts = registry.CommonOptions(sysfs_root=root, node_name="n", args=args)
        driver = registry.create(kind, opts)
        keys: set[str] = set()
        for dev in published_list(driver):
            api: dict[str, Any] = dev.to_api()
            keys |= {k if "/" in k else f"{driver.name}/{k}" for k in api.get("attributes", {})}
        out[driver.name] = keys
    return out


@pytest.fixture(scope="module")
def synthetic_attributes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, set[str]]:
    """What the drivers publish on the machine hack/kind-up.sh gives its first worker."""
    from topodra.common.synth import build, load_spec

    root = tmp_path_factory.mktemp("synth")
    build(load_spec("2s-8acc-8nic"), root)
    return _published_attributes(root)


BEST = ("best-locality-1", "best-locality-2", "best-locality-4", "best-locality-8")


def test_examples_cover_the_issue() -> None:
    templates = {o["metadata"]["name"]: o for o in EXAMPLES if o["kind"] == "ResourceClaimTemplate"}
    constraints = {
        name: [
            (c.get("matchAttribute"), c.get("distinctAttribute"))
            for c in t["spec"]["spec"]["devices"].get("constraints", [])
        ]
        for name, t in templates.items()
        if name not in BEST
    }
    assert constraints == {
        "numa-aligned": [("resource.kubernetes.io/numaNode", None)],
        "pcieroot-aligned": [("resource.kubernetes.io/pcieRoot", None)],
        "pcieswitch-aligned": [("topology.topodra.io/pcieSwitch", None)],
        "spread-distinct": [(None, "resource.kubernetes.io/pcieRoot")],
        "baseline-count-only": [],
    }

    def requests(name: str) -> list[Obj]:
        return [r["exactly"] for r in templates[name]["spec"]["spec"]["devices"]["requests"]]

    assert requests("baseline-count-only") == requests("numa-aligned")  # same asks, no constraint


def test_best_locality_examples_are_what_the_study_measures() -> None:
    """The fallback templates are the claims the placement study submits as scenario C
    (hack/bench/fallback.py), so its figures describe what is shipped."""
    from hack.bench.fallback import best_locality_spec

    templates = {o["metadata"]["name"]: o for o in EXAMPLES if o["kind"] == "ResourceClaimTemplate"}
    for name in BEST:
        k = int(name.rsplit("-", 1)[1])
        assert templates[name]["spec"]["spec"] == best_locality_spec(k), name


def _request_classes(devices: Obj) -> dict[str, str]:
    """request or request/subrequest name -> its device class (firstAvailable lists included)."""
    out: dict[str, str] = {}
    for req in devices["requests"]:
        if "exactly" in req:
            out[req["name"]] = req["exactly"]["deviceClassName"]
        for sub in req.get("firstAvailable", []):
            out[f"{req['name']}/{sub['name']}"] = sub["deviceClassName"]
    return out


def _subrequests(devices: Obj) -> list[Obj]:
    return [r["exactly"] for r in devices["requests"] if "exactly" in r] + [
        s for r in devices["requests"] for s in r.get("firstAvailable", [])
    ]


def test_examples_ask_for_what_the_drivers_publish(synthetic_attributes: dict[str, set[str]]) -> None:
    classes = {o["metadata"]["name"] for o in load([base_file("deviceclasses.yaml")])}
    templates = {o["metadata"]["name"]: o for o in EXAMPLES if o["kind"] == "ResourceClaimTemplate"}
    for name, tmpl in templates.items():
        devices = tmpl["spec"]["spec"]["devices"]
        drivers = _request_classes(devices)  # class name == driver name
        assert set(drivers.values()) <= classes, name
        for sub in _subrequests(devices):
            for cap in sub.get("capacity", {}).get("requests", {}):
                assert cap == cpu_devices.CAPACITY, (name, cap)
        for c in devices.get("constraints", []):
            attr = c.get("matchAttribute") or c.get("distinctAttribute")
            named = c["requests"] or [n for n in drivers if "/" not in n]
            for req in named:
                # a bare request name in a constraint covers all its subrequests
                covered = [v for n, v in drivers.items() if n == req or n.startswith(f"{req}/")]
                assert covered, f"{name}: constraint names unknown request {req}"
                for driver in covered:
                    assert attr in synthetic_attributes[driver], f"{name}: {driver} lacks {attr}"


def test_example_pods_use_their_claims() -> None:
    templates = {o["metadata"]["name"] for o in EXAMPLES if o["kind"] == "ResourceClaimTemplate"}
    pods = [o for o in EXAMPLES if o["kind"] == "Pod"]
    assert len(pods) == 5 and len(templates) == 5 + len(BEST)
    used: set[str] = set()
    for pod in pods:
        spec = pod["spec"]
        claims = {c["name"]: c["resourceClaimTemplateName"] for c in spec["resourceClaims"]}
        assert set(claims.values()) <= templates
        used |= set(claims.values())
        for container in spec["containers"]:
            assert {c["name"] for c in container["resources"]["claims"]} <= set(claims)
    # the fallback templates come without a Pod: the four together want 15 accelerators
    assert templates - used == set(BEST)


def test_examples_kustomization_lists_every_example() -> None:
    (kust,) = parse((DEPLOY / "examples" / "kustomization.yaml").read_text())
    assert sorted(kust["resources"]) == sorted(p.name for p in example_files())
    assert "namespace" not in kust  # applied into the namespace the user picks
    assert json.dumps(EXAMPLES).count('"namespace"') == 0


def test_namespace_admits_the_drivers_pods() -> None:
    """Every driver mounts host folders (Pod Security baseline forbids hostPath), the NIC driver
    is privileged with host namespaces: the namespace must be exempt from enforced levels."""
    (ns,) = [o for o in BASE if o["kind"] == "Namespace"]
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    assert all(any("hostPath" in v for v in ds["spec"]["template"]["spec"]["volumes"]) for ds in DS.values())
