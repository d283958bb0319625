"""hack/kind-up.sh and hack/kind-e2e.sh, which need Docker and kind and so cannot run here.

Kept correct by: bash -n and shellcheck; the kind config parsed and checked against the overlay
it deploys and against the feature gates the real kube-apiserver knows; and a run of both scripts
with stand-ins for `docker`, `kind` and `kubectl` on PATH (the one boundary that cannot exist
here). The stand-ins record what they are asked, hand `docker run ... synth` to the real
`topodra synth`, and `kubectl apply -k` to the real kustomize, so the scripts' own logic (the
synthetic machine per worker, the rendered config, what is deployed, the version gate, the
alignment check's verdict) runs for real.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO, skip_or_fail
from tests.deploy.render import DEPLOY, Tools, check_daemonset, container_args, daemonsets, driver_container

KIND_UP = REPO / "hack" / "kind-up.sh"
KIND_E2E = REPO / "hack" / "kind-e2e.sh"
KIND_CONFIG = REPO / "hack" / "kind" / "cluster.yaml"
SCRIPTS = (KIND_UP, KIND_E2E, REPO / "hack" / "build-tools.sh")
# Gates the config may name: each must exist in every release from 1.34 (docs/design/resourceslices.md) or the
# components of an older node image refuse to start.
GATES_SINCE_134 = {
    "DRAConsumableCapacity",
    "DRADeviceTaints",
    "DRAPartitionableDevices",
    "ResourceHealthStatus",
}


def config() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(KIND_CONFIG.read_text())
    return doc


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_bash_syntax(script: Path) -> None:
    out = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert os.access(script, os.X_OK)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_shellcheck(script: Path) -> None:
    exe = shutil.which("shellcheck")
    if exe is None:
        skip_or_fail("shellcheck is not installed (Debian: apt-get install shellcheck)")
    out = subprocess.run([str(exe), "--severity=style", str(script)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout


def test_kind_config_matches_the_kind_overlay(tools: Tools) -> None:
    cfg = config()
    assert (cfg["kind"], cfg["apiVersion"]) == ("Cluster", "kind.x-k8s.io/v1alpha4")
    assert set(cfg["featureGates"]) <= GATES_SINCE_134 and all(cfg["featureGates"].values())
    assert any("enable_cdi = true" in p for p in cfg["containerdConfigPatches"])
    workers = [n for n in cfg["nodes"] if n["role"] == "worker"]
    assert [n["role"] for n in cfg["nodes"]].count("control-plane") == 1 and len(workers) == 2
    overlay = daemonsets(tools.kustomize_build(DEPLOY / "overlays" / "kind"))
    assert sorted(overlay) == ["accelerator", "cpu", "nic"]
    for kind, ds in overlay.items():
        pod = ds["spec"]["template"]["spec"]
        from topodra.drivers.cli.main import build_parser

        args = build_parser("serve").parse_args(container_args(driver_container(ds)))
        synth = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}["synth"]
        assert str(args.sysfs_root) == synth
        mounts = {m["mountPath"]: m for m in driver_container(ds)["volumeMounts"]}
        assert mounts[synth]["readOnly"] is True
        for worker in workers:
            # the drivers run exactly on the workers that have a synthetic machine mounted there
            synthetic = {k: v for k, v in pod["nodeSelector"].items() if k != "kubernetes.io/os"}
            assert synthetic and synthetic.items() <= worker["labels"].items()
            assert [m["containerPath"] for m in worker["extraMounts"]] == [synth]
        if kind == "cpu":
            assert args.cpu_pinning == "none"  # the synthetic CPUs are not the worker's
        if kind == "accelerator":
            assert (str(args.accelerator_dev_root), args.accelerator_node_check) == (synth, "exists")
    check = check_daemonset(tools.kustomize_build(DEPLOY / "overlays" / "kind"))
    assert check is not None  # compares the slices with the same synthetic machine as the drivers
    check_args = build_parser("check").parse_args(check["spec"]["template"]["spec"]["containers"][0]["args"])
    assert check_args.sysfs_root == synth
    assert check["spec"]["template"]["spec"]["nodeSelector"] == pod["nodeSelector"]
    control = next(n for n in cfg["nodes"] if n["role"] == "control-plane")
    assert not control.get("labels")  # no synthetic machine, so no drivers there


def test_feature_gates_exist_in_the_real_apiserver() -> None:
    """A gate a release does not know stops its components; the real kube-apiserver says which it
    knows when it parses --feature-gates (then stops for lack of etcd, which is all we need)."""
    from tests.controlplane.binaries import GoMissing, ensure_binaries

    try:
        binaries = ensure_binaries()
    except GoMissing as e:
        skip_or_fail(str(e))

    def complaint(gates: str) -> str:
        argv = [str(binaries.kube_apiserver), f"--feature-gates={gates}"]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert out.returncode != 0  # it never gets to serve here
        return out.stderr

    assert "unrecognized feature gate: NoSuchGate" in complaint("NoSuchGate=true")  # the check can fail
    gates = ",".join(f"{k}={str(v).lower()}" for k, v in config()["featureGates"].items())
    stderr = complaint(gates)
    assert "unrecognized feature gate" not in stderr and "--etcd-servers must be specified" in stderr, stderr


# ----- the scripts, run with stand-ins for docker, kind and kubectl ------------------------------

FAKE_DOCKER = r"""
import json, os, subprocess, sys
log = os.environ["FAKE_LOG"]
args = sys.argv[1:]
with open(log, "a") as f:
    f.write(json.dumps(["docker", *args]) + "\n")
if args[0] == "info":
    sys.exit(0)
if args[0] == "build":
    sys.exit(0 if os.path.isfile(os.path.join(args[-1], "Dockerfile")) else 1)
if args[0] == "run":
    vol = args[args.index("-v") + 1]
    host, inside = vol.split(":")
    rest = args[args.index(os.environ["FAKE_IMAGE"]) + 1:]
    rest = [a.replace(inside, host, 1) if a.startswith(inside) else a for a in rest]
    if "--dev-nodes" in rest and os.environ.get("FAKE_NO_MKNOD"):
        sys.exit(1)  # a rootless engine
    sys.exit(subprocess.call([sys.executable, "-m", "topodra.drivers.cli.main", *rest]))
sys.exit(2)
"""

FAKE_KIND = r"""
import json, os, shutil, sys
log = os.environ["FAKE_LOG"]
args = sys.argv[1:]
with open(log, "a") as f:
    f.write(json.dumps(["kind", *args]) + "\n")
if args[:2] == ["get", "clusters"]:
    print(os.environ.get("FAKE_CLUSTERS", ""))
elif args[:2] == ["create", "cluster"]:
    shutil.copy(args[args.index("--config") + 1], os.environ["FAKE_CONFIG_COPY"])
"""

FAKE_KUBECTL = r"""
import json, os, subprocess, sys
log = os.environ["FAKE_LOG"]
args = sys.argv[1:]
with open(log, "a") as f:
    f.write(json.dumps(["kubectl", *args]) + "\n")
if args[:1] == ["version"]:
    version = {"major": "1", "minor": os.environ.get("FAKE_MINOR", "34")}
    # laid out as kubectl does; the client's minor comes first and must not be taken
    print(json.dumps({"clientVersion": {"major": "1", "minor": "99"}, "serverVersion": version}, indent=2))
elif "-k" in args:
    out = subprocess.run([os.environ["FAKE_KUSTOMIZE"], "build", args[args.index("-k") + 1]],
                         capture_output=True, text=True)
    sys.stderr.write(out.stderr)
    sys.exit(out.returncode)
elif args[:1] == ["create"]:
    print("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: x")
elif args[:3] == ["apply", "-f", "-"]:
    sys.stdin.read()  # as kubectl does: the writer must not see a closed pipe
elif args[:2] == ["get", "resourceclaims"] and "json" in args:
    print(open(os.environ["FAKE_CLAIMS"]).read())
elif args[:2] == ["get", "resourceclaims"]:
    claims = json.load(open(os.environ["FAKE_CLAIMS"]))["items"]
    print("\n".join(c["metadata"]["name"] for c in claims if (c.get("status") or {}).get("allocation")))
elif args[:2] == ["get", "resourceslices"] and "json" in args:
    print(open(os.environ["FAKE_SLICES"]).read())
"""


def fake_bin(tmp: Path) -> Path:
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    for name, body in (("docker", FAKE_DOCKER), ("kind", FAKE_KIND), ("kubectl", FAKE_KUBECTL)):
        path = bin_dir / name
        path.write_text(f"#!{sys.executable}\n{body}")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return bin_dir


def run_script(
    script: Path, tmp: Path, tools: Tools, **env: str
) -> tuple[subprocess.CompletedProcess[str], list[list[str]]]:
    bin_dir = tmp / "bin" if (tmp / "bin").exists() else fake_bin(tmp)
    log = tmp / "calls.jsonl"
    log.write_text("")
    full = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "HOME": str(tmp),
        "FAKE_LOG": str(log),
        "FAKE_IMAGE": "topodra:0.1.0",
        "FAKE_CONFIG_COPY": str(tmp / "kind-config.yaml"),
        "FAKE_KUSTOMIZE": str(tools.kustomize),
        "SYNTH_DIR": str(tmp / "synth"),
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        **env,
    }
    out = subprocess.run(
        ["bash", str(script)], capture_output=True, text=True, env=full, timeout=300, cwd=tmp
    )
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    return out, calls


@pytest.mark.slow
def test_kind_up_builds_synthesizes_creates_loads_deploys(tmp_path: Path, tools: Tools) -> None:
    out, calls = run_script(KIND_UP, tmp_path, tools)
    assert out.returncode == 0, out.stderr
    commands = [c[:3] for c in calls]
    assert ["docker", "build", "-t"] in commands
    # the rendered config: every mount is a synthetic machine written for that worker
    rendered = yaml.safe_load((tmp_path / "kind-config.yaml").read_text())
    assert "@SYNTH_DIR@" not in (tmp_path / "kind-config.yaml").read_text()
    workers = [n for n in rendered["nodes"] if n["role"] == "worker"]
    hostnames = []
    for worker in workers:
        (mount,) = worker["extraMounts"]
        tree = Path(mount["hostPath"])
        assert (tree / "sys" / "devices" / "system" / "cpu").is_dir(), tree
        assert (tree / "dev").is_dir()  # device-node stand-ins for the accelerator driver
        hostnames.append(json.loads((tree / "synth-manifest.json").read_text())["hostname"])
    assert hostnames == ["topodra-worker", "topodra-worker2"]  # kind's node names: MACs differ per node
    assert ["kind", "load", "docker-image", "topodra:0.1.0", "--name", "topodra"] in calls
    (apply,) = [c for c in calls if c[:2] == ["kubectl", "apply"]]
    assert Path(apply[apply.index("-k") + 1]) == DEPLOY / "overlays" / "kind"
    rollouts = sorted(
        c[5] for c in calls if c[:5] == ["kubectl", "-n", "topodra-system", "rollout", "status"]
    )
    assert rollouts == [f"daemonset/topodra-{k}-driver" for k in ("accelerator", "cpu", "nic")]


@pytest.mark.slow
def test_kind_up_without_mknod_and_with_an_old_cluster(tmp_path: Path, tools: Tools) -> None:
    out, calls = run_script(KIND_UP, tmp_path, tools, FAKE_NO_MKNOD="1", FAKE_MINOR="33")
    assert out.returncode == 1
    assert "needs 1.34 or newer" in out.stderr
    assert "could not create device-node stand-ins" in out.stderr
    assert (tmp_path / "synth" / "worker1" / "sys").is_dir()  # written without the nodes
    assert not any(c[:2] == ["kubectl", "apply"] for c in calls)  # nothing deployed on 1.33


def _claim(
    name: str, constraint: dict[str, Any] | None, results: list[tuple[str, str, str]]
) -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": [{"name": r} for r in sorted({r for r, _, _ in results})]}
    if constraint:
        devices["constraints"] = [constraint]
    return {
        "metadata": {"namespace": "topodra-examples", "name": name},
        "spec": {"devices": devices},
        "status": {"allocation": {"devices": {"results": [
            {"request": r, "driver": d, "pool": "topodra-worker", "device": dev} for r, d, dev in results
        ]}}},
    }  # fmt: skip


def _slices() -> dict[str, Any]:
    def dev(name: str, root: str) -> dict[str, Any]:
        return {"name": name, "attributes": {"resource.kubernetes.io/pcieRoot": {"string": root}}}

    spec = {"driver": "accelerator.topodra.io", "pool": {"name": "topodra-worker"}}
    devs = [dev("pci-0000-08-00-0", "pci0000:05"), dev("pci-0000-0d-00-0", "pci0000:0a")]
    return {"items": [{"spec": {**spec, "devices": devs}}]}


@pytest.mark.slow
@pytest.mark.parametrize("aligned", [True, False])
def test_kind_e2e_reports_the_alignment_verdict(tmp_path: Path, tools: Tools, aligned: bool) -> None:
    """The script applies the examples, waits for allocation and exits with the checker's verdict
    (the checker itself is tested against the real scheduler in test_cluster.py)."""
    second = "pci-0000-0d-00-0" if aligned else "pci-0000-08-00-0"
    claims = {
        "items": [
            _claim(
                f"spread-{i}",
                {"requests": ["accelerators"], "distinctAttribute": "resource.kubernetes.io/pcieRoot"},
                [
                    ("accelerators", "accelerator.topodra.io", "pci-0000-08-00-0"),
                    ("accelerators", "accelerator.topodra.io", second),
                ],
            )
            for i in range(5)
        ]
    }
    (tmp_path / "claims.json").write_text(json.dumps(claims))
    (tmp_path / "slices.json").write_text(json.dumps(_slices()))
    out, calls = run_script(
        KIND_E2E, tmp_path, tools, FAKE_CLUSTERS="topodra",
        FAKE_CLAIMS=str(tmp_path / "claims.json"), FAKE_SLICES=str(tmp_path / "slices.json"),
    )  # fmt: skip
    assert out.returncode == (0 if aligned else 1), out.stdout + out.stderr
    assert ("FAIL" in out.stdout) is not aligned
    (apply,) = [c for c in calls if c[:2] == ["kubectl", "apply"] and "-k" in c]
    assert Path(apply[apply.index("-k") + 1]) == DEPLOY / "examples"
    assert next(c[:4] for c in calls if c[:2] == ["kubectl", "delete"]) == [
        "kubectl",
        "delete",
        "namespace",
        "topodra-examples",
    ]
    assert not any(c[0] == "docker" for c in calls)  # the cluster existed: kind-up.sh not rerun
