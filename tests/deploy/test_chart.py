"""The Helm chart as Helm users expect it, with the real helm binary (hack/build-tools.sh):
values.schema.json refuses bad values at `helm template`/`install`, objects land in the release's
namespace with the standard labels, image.tag follows appVersion, the metrics Service and
ServiceMonitor are there when asked for, values.yaml's defaults are the binary's, and the
chart README is what hack/gen-chart-readme writes.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from topodra.drivers.cli.main import build_parser

from tests.conftest import REPO
from tests.deploy.render import (
    CHART,
    RELEASE_LABELS,
    Tools,
    check_daemonset,
    container_args,
    daemonsets,
    driver_container,
)

BAD_VALUES = [
    (["--set", "cpu.deviceGranularity=socket"], "/cpu/deviceGranularity"),
    (["--set", "cpu.metricsPort=70000"], "/cpu/metricsPort"),
    (["--set", "cpu.reservedCpus=zero"], "/cpu/reservedCpus"),
    (["--set", "accelerator.rescanInterval=-1"], "/accelerator/rescanInterval"),
    (["--set", "accelerator.include={nvidia}"], "/accelerator/include/0"),
    (["--set", "nic.netdevMode=macvlan"], "/nic/netdevMode"),
    (["--set", "nic.stateDir=relative/dir"], "/nic/stateDir"),
    (["--set", "nic.nodeIPs={not an ip}"], "/nic/nodeIPs/0"),
    (["--set", "logLevel=loud"], "/logLevel"),
    (["--set", "check.interval=1"], "/check/interval"),
    (["--set", "kubeletRootDir=var/lib/kubelet"], "/kubeletRootDir"),
    (["--set", "image.pullPolicy=Sometimes"], "/image/pullPolicy"),
    (["--set", "cpu.granularity=core"], "additional properties 'granularity' not allowed"),
    (["--set", "metrics.serviceMonitor.interval=often"], "/metrics/serviceMonitor/interval"),
]


def helm(tools: Tools, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [str(tools.helm), "template", "topodra", str(CHART), "-n", "topodra-system", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(("args", "path"), BAD_VALUES, ids=[a[1] for a in BAD_VALUES])
def test_schema_refuses_bad_values_at_template_time(tools: Tools, args: list[str], path: str) -> None:
    done = helm(tools, *args)
    assert done.returncode != 0, f"accepted {args}"
    assert path in done.stderr, done.stderr


def test_schema_accepts_the_defaults_and_every_documented_value(tools: Tools) -> None:
    from tests.deploy.test_rendered import NON_DEFAULT_VALUES

    assert helm(tools).returncode == 0
    values = Path(tools.helm).parent / "non-default-values.yaml"
    values.write_text(yaml.safe_dump(NON_DEFAULT_VALUES))
    done = helm(tools, "-f", str(values), "--set", "metrics.serviceMonitor.enabled=true")
    assert done.returncode == 0, done.stderr


def test_objects_land_in_the_release_namespace_with_standard_labels(tools: Tools) -> None:
    objs = tools.helm_template("-n", "team-gpu", "--set", "namespace.create=true")
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    for obj in objs:
        if obj["kind"] == "ResourceClaimTemplate":
            continue
        labels = obj["metadata"].get("labels", {})
        assert labels["app.kubernetes.io/instance"] == "topodra", obj["metadata"]["name"]
        assert labels["app.kubernetes.io/version"] == chart["appVersion"]
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["helm.sh/chart"] == f"topodra-{chart['version']}"
        if obj["kind"] != "Namespace":
            assert (
                labels.get("app.kubernetes.io/name") or labels.get("app.kubernetes.io/part-of") == "topodra"
            )
        if obj["kind"] in ("ServiceAccount", "DaemonSet"):
            assert obj["metadata"]["namespace"] == "team-gpu"
        if obj["kind"] == "Namespace":
            assert obj["metadata"]["name"] == "team-gpu"
        if obj["kind"] == "ClusterRoleBinding":
            assert obj["subjects"][0]["namespace"] == "team-gpu"
    for ds in daemonsets(objs).values():
        pod_labels = ds["spec"]["template"]["metadata"]["labels"]
        assert set(RELEASE_LABELS) <= set(pod_labels)
        # the selector is unchanged from earlier releases (a DaemonSet's selector is immutable)
        assert set(ds["spec"]["selector"]["matchLabels"]) == {"app.kubernetes.io/name"}
    assert not [o for o in tools.helm_template() if o["kind"] == "Namespace"]  # off by default


def test_image_tag_defaults_to_app_version(tools: Tools) -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    for args, tag in (([], chart["appVersion"]), (["--set", "image.tag=1.2.3"], "1.2.3")):
        for ds in daemonsets(tools.helm_template(*args)).values():
            pod = ds["spec"]["template"]["spec"]
            for c in [*pod.get("initContainers", []), *pod["containers"]]:
                assert c["image"] == f"topodra:{tag}"


def test_metrics_service_and_service_monitor(tools: Tools) -> None:
    assert not [o for o in tools.helm_template() if o["kind"] in ("Service", "ServiceMonitor")]
    objs = tools.helm_template(
        "--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.serviceMonitor.labels.release=prom",
        "--set", "nic.enabled=false",
    )  # fmt: skip
    services = {o["metadata"]["name"]: o for o in objs if o["kind"] == "Service"}
    assert set(services) == {
        "topodra-cpu-driver-metrics",
        "topodra-accelerator-driver-metrics",
        "topodra-check-metrics",  # the node check's topodra_check_* series
    }
    dss = {f"topodra-{kind}-driver-metrics": ds for kind, ds in daemonsets(objs).items()}
    dss["topodra-check-metrics"] = check_daemonset(objs)
    for name, ds in dss.items():
        svc = services[name]
        pod_labels = ds["spec"]["template"]["metadata"]["labels"]
        assert svc["spec"]["selector"].items() <= pod_labels.items()
        (port,) = svc["spec"]["ports"]
        ports = {
            p["name"]: p["containerPort"] for p in ds["spec"]["template"]["spec"]["containers"][0]["ports"]
        }
        assert port["targetPort"] == "metrics" and port["port"] == ports["metrics"]
    (monitor,) = [o for o in objs if o["kind"] == "ServiceMonitor"]
    assert monitor["metadata"]["labels"]["release"] == "prom"
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert all(selector.items() <= s["metadata"]["labels"].items() for s in services.values())
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"


# Flags the chart sets on purpose to something other than the binary's default, and why.
CHART_CHOICES = {
    "metrics_address": "the chart serves health and metrics; the binary's default is off",
    "node_name": "from the downward API",
    "pod_uid": "from the downward API",
    "sysfs_root": "the binary's default",
    "kind": "the driver the DaemonSet runs",
}


def _defaults() -> argparse.Namespace:
    return build_parser("serve").parse_args(["serve", "all", "--node-name", "n"])


def test_values_defaults_are_the_binarys(tools: Tools) -> None:
    """Every flag the default chart passes parses to what the binary would use without it."""
    defaults = vars(_defaults())
    mismatched = []
    for kind, ds in daemonsets(tools.helm_template()).items():
        args = container_args(driver_container(ds))
        parsed = vars(build_parser("serve").parse_args([*args, "--node-name", "n"]))
        for key, value in parsed.items():
            if key in CHART_CHOICES or key == "run":
                continue
            if value != defaults[key]:
                mismatched.append(f"{kind}: {key} = {value!r}, binary default {defaults[key]!r}")
    assert not mismatched, "\n".join(mismatched)


def test_chart_readme_is_generated_from_the_values() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "hack" / "gen-chart-readme"), "--check"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    readme = (CHART / "README.md").read_text()
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def leaves(d: dict[str, object], prefix: str = "") -> list[str]:
        out: list[str] = []
        for k, v in d.items():
            if isinstance(v, dict) and v and k not in ("nodeSelector", "resources", "labels"):
                out += leaves(v, f"{prefix}{k}.")
            else:
                out.append(f"{prefix}{k}")
        return out

    for key in leaves(values):
        assert f"| `{key}` |" in readme, key
    assert "maxSurge: 0" in readme and "metricsPort" in readme  # the host-network rollout note
