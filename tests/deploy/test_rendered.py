"""What `kustomize build` and `helm template` produce: the right objects per overlay, the Helm
chart equal to kustomize for its defaults, every driver flag reachable from the chart's values,
and every object accepted by the strict 1.34 and 1.37 schemas (kubernetes-validate).

helm and kustomize are the real tools (hack/build-tools.sh builds them from their Go modules).
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import SchemaNotFoundError, ValidationError
from topodra.drivers.cli.main import build_parser

from tests.deploy.render import (
    CHART,
    DEPLOY,
    KINDS,
    OVERLAYS,
    Obj,
    Tools,
    by_key,
    check_daemonset,
    container_args,
    daemonsets,
    driver_container,
    example_files,
    is_check,
    load,
    without_release_labels,
)

SCHEMA_VERSIONS = ("1.34", "1.37")
SHARED = {"Namespace", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
PER_DRIVER = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "DaemonSet", "DeviceClass"}
# the node check (deploy/base/check.yaml) comes with every overlay, whichever drivers it deploys
CHECK_OBJECTS = {
    ("ServiceAccount", "topodra-check"),
    ("ClusterRole", "topodra-check"),
    ("ClusterRoleBinding", "topodra-check"),
    ("Role", "topodra-check-events"),
    ("RoleBinding", "topodra-check-events"),
    ("DaemonSet", "topodra-check"),
}


def owner(obj: Obj) -> str | None:
    """The driver an object belongs to, from its name (topodra-<kind>-driver, <kind>.topodra.io)."""
    name = obj["metadata"]["name"]
    for kind in KINDS:
        if name in (f"topodra-{kind}-driver", f"{kind}.topodra.io"):
            return kind
    return None


def diff(a: dict[Any, Obj], b: dict[Any, Obj]) -> str:
    lines = [f"only in kustomize: {sorted(set(a) - set(b))}", f"only in helm: {sorted(set(b) - set(a))}"]
    for k in sorted(set(a) & set(b), key=str):
        if a[k] != b[k]:
            x = json.dumps(a[k], indent=1, sort_keys=True).splitlines()
            y = json.dumps(b[k], indent=1, sort_keys=True).splitlines()
            lines += [str(k), *difflib.unified_diff(x, y, "kustomize", "helm", lineterm="", n=2)]
    return "\n".join(lines)


def helm_only(kind: str) -> list[str]:
    return [a for other in KINDS if other != kind for a in ("--set", f"{other}.enabled=false")]


@pytest.mark.parametrize("overlay", ["all", *KINDS])
def test_overlay_has_exactly_its_drivers(tools: Tools, overlay: str) -> None:
    objs = tools.kustomize_build(DEPLOY / "overlays" / overlay)
    wanted = set(KINDS) if overlay == "all" else {overlay}
    kinds = {o["kind"] for o in objs}
    assert kinds >= SHARED
    per_driver = {(owner(o), o["kind"]) for o in objs if o["kind"] in PER_DRIVER and not is_check(o)}
    assert per_driver == {(k, t) for k in wanted for t in PER_DRIVER}
    assert {(o["kind"], o["metadata"]["name"]) for o in objs if is_check(o)} == CHECK_OBJECTS
    assert all(o["kind"] in SHARED | PER_DRIVER for o in objs if not is_check(o))


def test_the_check_can_be_left_out(tools: Tools, tmp_path: Path) -> None:
    """components/without-check removes every object of the node check, and only those."""
    overlay = tmp_path / "no-check"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(DEPLOY / "overlays" / "all", overlay)],
                "components": [os.path.relpath(DEPLOY / "components" / "without-check", overlay)],
            }
        )
    )
    full = by_key(tools.kustomize_build(DEPLOY / "overlays" / "all"))
    without = by_key(tools.kustomize_build(overlay))
    assert {k: v for k, v in full.items() if not is_check(v)} == without
    helm = tools.helm_template("--set", "namespace.create=true", "--set", "check.enabled=false")
    assert by_key(without_release_labels(o) for o in helm) == without


@pytest.mark.parametrize("drivers", ["all", *KINDS])
def test_helm_defaults_equal_kustomize(tools: Tools, drivers: str) -> None:
    kustomized = by_key(tools.kustomize_build(DEPLOY / "overlays" / drivers))
    args = ["--set", "namespace.create=true", *([] if drivers == "all" else helm_only(drivers))]
    helmed = by_key(without_release_labels(o) for o in tools.helm_template(*args))
    assert kustomized == helmed, diff(kustomized, helmed)


def test_check_values_reach_its_flags(tools: Tools) -> None:
    objs = tools.helm_template(
        "--set", "check.metricsPort=9503", "--set", "check.interval=60", "--set", "check.events=false",
        "--set", "logLevel=debug", "--set", "check.extraArgs={--no-events}",
    )  # fmt: skip
    ds = check_daemonset(objs)
    assert ds is not None
    (container,) = ds["spec"]["template"]["spec"]["containers"]
    args = build_parser("check").parse_args(container["args"])
    assert (args.watch, args.interval, args.no_events, args.log_level) == (True, 60.0, True, "debug")
    assert args.metrics_address == ":9503" and container["ports"][0]["containerPort"] == 9503
    # no Events: no Role in `default` either
    assert not any(o["kind"] in ("Role", "RoleBinding") for o in objs)


def test_helm_lint(tools: Tools) -> None:
    out = tools.helm_template("--set", "cpu.enabled=false")  # renders with the chart's own checks
    assert out
    import subprocess

    done = subprocess.run([str(tools.helm), "lint", "--strict", str(CHART)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


# Every driver flag with a value that is not its default, as chart values.
NON_DEFAULT_VALUES: dict[str, Any] = {
    "kubeletRootDir": "/srv/kubelet",
    "cdiRoot": "/etc/cdi",
    "hookDir": "/usr/libexec/topodra",
    "logLevel": "debug",
    "cpu": {
        "metricsPort": 9500,
        "deviceGranularity": "core",
        "reservedCpus": "0-1",
        "listAttributes": True,
        "nodeAllocatable": True,
        "taintUnhealthy": True,
        "pinning": "none",
        "pinMemory": "off",
        "sharedMin": 2,
        "nriSocket": "/run/containerd/nri/nri.sock",
    },
    "accelerator": {
        "metricsPort": 9501,
        "include": ["10de:*", "1002:74a1"],
        "exclude": ["10de:1db6"],
        "nodeCheck": "exists",
        "listAttributes": True,
        "devRoot": "/opt/topodra/synth",
        "taintUnhealthy": True,
        "rescanInterval": 2.5,
        "pciIds": ["/usr/share/hwdata/pci.ids"],
    },
    "nic": {
        "metricsPort": 9502,
        "allowUplink": True,
        "allowStacked": True,
        "allowPFWithVFs": True,
        "listAttributes": True,
        "includeVirtual": True,
        "nodeIPs": ["192.0.2.10", "2001:db8::10"],
        "includeInterfaces": ["ens*", "ib*"],
        "excludeInterfaces": ["docker*"],
        "netdevMode": "cdi",
        "stateDir": "/run/topodra/nic",
        "taintUnhealthy": True,
        "rescanInterval": 7,
        "extraArgs": ["--delete-slices-on-exit"],
    },
}


@pytest.fixture(scope="module")
def non_default(tools: Tools, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Obj]:
    values = tmp_path_factory.mktemp("values") / "values.yaml"
    values.write_text(yaml.safe_dump(NON_DEFAULT_VALUES))
    return daemonsets(tools.helm_template("-f", str(values)))


def parsed(ds: Obj) -> argparse.Namespace:
    return build_parser("serve").parse_args(container_args(driver_container(ds)))


def test_chart_values_reach_every_driver_flag(non_default: dict[str, Obj]) -> None:
    cpu, acc, nic = (parsed(non_default[k]) for k in KINDS)
    assert (cpu.kubelet_root_dir, cpu.cdi_root, cpu.log_level) == (
        Path("/srv/kubelet"),
        Path("/etc/cdi"),
        "debug",
    )
    assert cpu.metrics_address == ":9500"
    assert cpu.cpu_hook_dir == Path("/usr/libexec/topodra")
    assert (cpu.cpu_device_granularity, cpu.cpu_pinning, cpu.cpu_pin_memory) == ("core", "none", "off")
    assert cpu.cpu_list_attributes is True and cpu.cpu_node_allocatable is True
    assert cpu.cpu_taint_unhealthy is True
    assert (cpu.cpu_shared_min, cpu.cpu_nri_socket) == (2, Path("/run/containerd/nri/nri.sock"))
    assert acc.accelerator_node_check == "exists" and acc.accelerator_taint_unhealthy is True
    assert acc.accelerator_rescan_interval == 2.5 and acc.accelerator_list_attributes is True
    assert acc.accelerator_dev_root == Path("/opt/topodra/synth")
    from topodra.drivers.accelerator import options as acc_options

    opts = acc_options.from_args(acc, Path("/"), "node-a")  # the driver's own parsing of the ids
    assert len(opts.include) == 2 and len(opts.exclude) == 1
    assert [str(p) for p in opts.pci_ids] == ["/usr/share/hwdata/pci.ids"]
    assert (nic.nic_allow_uplink, nic.nic_include_virtual, nic.nic_taint_unhealthy) == (True, True, True)
    assert nic.nic_allow_stacked is True and nic.nic_list_attributes is True
    assert nic.nic_allow_pf_with_vfs is True
    assert nic.nic_node_ip == ["192.0.2.10", "2001:db8::10"]
    assert tuple(nic.nic_include_interfaces) == ("ens*", "ib*")
    assert tuple(nic.nic_exclude_interfaces) == ("docker*",)
    assert (nic.nic_netdev_mode, nic.nic_rescan_interval) == ("cdi", 7.0)
    assert (nic.nic_state_dir, nic.nic_hook_dir) == (Path("/run/topodra/nic"), Path("/usr/libexec/topodra"))
    assert nic.delete_slices_on_exit is True  # extraArgs
    # and the mounts moved with the paths
    for kind, ds in non_default.items():
        pod = ds["spec"]["template"]["spec"]
        paths = {v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
        assert {
            "/srv/kubelet/plugins_registry",
            f"/srv/kubelet/plugins/{kind}.topodra.io",
            "/etc/cdi",
        } <= paths
        if kind != "accelerator":
            assert "/usr/libexec/topodra" in paths
        if kind == "cpu":
            assert "/run/containerd/nri" in paths  # the NRI socket's folder moved with it
    nic_mounts = {m["mountPath"]: m for m in driver_container(non_default["nic"])["volumeMounts"]}
    assert nic_mounts["/run/topodra/nic"]["mountPropagation"] == "Bidirectional"


def test_no_driver_flag_is_left_without_a_value(non_default: dict[str, Obj]) -> None:
    """A flag a driver adds later must get a chart value too (or be set by the chart itself)."""
    parser = build_parser("serve")
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    serve = sub.choices["serve"]
    flags = {
        s
        for action in serve._actions
        for s in action.option_strings
        if s.startswith(("--cpu-", "--accelerator-", "--nic-"))
    }
    rendered = {a.split("=", 1)[0] for ds in non_default.values() for a in driver_container(ds)["args"]}
    assert flags - rendered == set(), "driver flags the chart cannot set"


def test_chart_switches(tools: Tools) -> None:
    objs = tools.helm_template(
        "--namespace", "dra", "--set", "namespace.create=false",
        "--set", "deviceClasses=false", "--set", "validatingAdmissionPolicy=false",
        "--set", "image.repository=registry.example/topodra", "--set", "image.tag=1.2.3",
    )  # fmt: skip
    kinds = {o["kind"] for o in objs}
    assert not kinds & {
        "Namespace",
        "DeviceClass",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }
    for o in objs:
        if o["kind"] in ("ServiceAccount", "DaemonSet"):
            assert o["metadata"]["namespace"] == "dra"
        if o["kind"] in ("ClusterRoleBinding", "RoleBinding"):
            assert o["subjects"][0]["namespace"] == "dra"
    for ds in [*daemonsets(objs).values(), check_daemonset(objs)]:
        assert ds is not None
        pod = ds["spec"]["template"]["spec"]
        for c in [*pod.get("initContainers", []), *pod["containers"]]:
            assert c["image"] == "registry.example/topodra:1.2.3"


def _templates(objs: list[Obj]) -> dict[str, Obj]:
    return {o["metadata"]["name"]: o for o in objs if o["kind"] == "ResourceClaimTemplate"}


def test_chart_claim_templates_equal_the_examples(tools: Tools) -> None:
    """The chart's optional ResourceClaimTemplates are the examples' (kustomize build), field for
    field, in the namespace asked for; off by default."""
    assert _templates(tools.helm_template()) == {}
    examples = _templates(tools.kustomize_build(DEPLOY / "examples"))
    assert {"baseline-count-only", "numa-aligned", "best-locality-1", "best-locality-8"} <= set(examples)
    for args, namespace in (
        (["--set", "claimTemplates.enabled=true", "--namespace", "ml"], "ml"),
        (["--set", "claimTemplates.enabled=true", "--set", "claimTemplates.namespace=team-a"], "team-a"),
    ):
        rendered = _templates(tools.helm_template(*args))
        assert {o["metadata"].pop("namespace") for o in rendered.values()} == {namespace}
        assert rendered == examples, diff(examples, rendered)


# ----- schemas -----------------------------------------------------------------------------------


def everything(tools: Tools, tmp: Path) -> dict[str, list[Obj]]:
    out: dict[str, list[Obj]] = {
        f"kustomize {o}": tools.kustomize_build(DEPLOY / "overlays" / o) for o in OVERLAYS
    }
    out["helm defaults"] = tools.helm_template()
    out["helm claim templates"] = tools.helm_template("--set", "claimTemplates.enabled=true")
    values = tmp / "values.yaml"
    values.write_text(yaml.safe_dump(NON_DEFAULT_VALUES))
    out["helm non-default values"] = tools.helm_template("-f", str(values))
    for kind in KINDS:
        out[f"helm {kind} only"] = tools.helm_template(*helm_only(kind))
    out["examples"] = load(example_files())
    out["base files"] = load(sorted((DEPLOY / "base").glob("*.yaml")))
    return out


@pytest.mark.parametrize("version", SCHEMA_VERSIONS)
def test_strict_schemas(tools: Tools, tmp_path: Path, version: str) -> None:
    problems: list[str] = []
    checked = 0
    for source, objs in everything(tools, tmp_path).items():
        assert objs, source
        for obj in objs:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
                checked += 1
            except SchemaNotFoundError as e:
                # Every kind used is in the bundled 1.34 and 1.37 schemas (resource.k8s.io/v1,
                # admissionregistration v1 policies); should one disappear, say which.
                pytest.skip(f"kubernetes-validate has no {version} schema for {e.kind} {e.api_version}")
            except ValidationError as e:
                problems.append(f"{source}: {obj['kind']}/{obj['metadata']['name']}: {e.message}")
    assert not problems, "\n".join(problems)
    assert checked > 100


def test_strict_schema_rejects_a_misspelt_field() -> None:
    """The check above can fail: a typo the API server would drop silently is an error here."""
    (ds,) = [o for o in load([DEPLOY / "base" / "cpu-driver.yaml"])]
    bad = json.loads(json.dumps(ds))
    bad["spec"]["template"]["spec"]["volumes"][0]["hostPath"]["pth"] = "/var/lib/kubelet"
    for version in SCHEMA_VERSIONS:
        kubernetes_validate.validate(ds, version, strict=True)
        with pytest.raises(ValidationError):
            kubernetes_validate.validate(bad, version, strict=True)
