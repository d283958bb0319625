"""`topodra serve` flags and its configuration errors, run as the real command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from topodra.drivers.cli.main import build_parser


def serve(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k not in ("NODE_NAME", "POD_UID")}
    environ.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "topodra.drivers.cli.main", "serve", *args],
        capture_output=True,
        text=True,
        env=environ,
        timeout=60,
    )


def test_flags_and_their_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    args = build_parser().parse_args(["serve", "all"])
    assert args.kind == "all"
    assert args.kubelet_root_dir == Path("/var/lib/kubelet")
    assert args.cdi_root == Path("/var/run/cdi")
    assert args.sysfs_root == "/"  # the folder that contains sys/, as for inspect and slices
    assert args.state_dir is None and args.kubeconfig is None and args.metrics_address == ""
    args = build_parser().parse_args(
        ["serve", "nic", "--kubelet-root-dir", "/k", "--node-name", "n1", "--pod-uid", "u-1"]
    )
    assert (args.kind, args.kubelet_root_dir, args.node_name, args.pod_uid) == (
        "nic",
        Path("/k"),
        "n1",
        "u-1",
    )


def test_node_name_and_pod_uid_come_from_the_environment() -> None:
    code = (
        "from topodra.drivers.cli.main import build_parser;"
        "a = build_parser().parse_args(['serve', 'cpu']); print(a.node_name, a.pod_uid)"
    )
    env = {**os.environ, "NODE_NAME": "node-7", "POD_UID": "abc-123"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split() == ["node-7", "abc-123"]


def test_missing_node_name_is_a_configuration_error() -> None:
    result = serve("cpu")
    assert result.returncode == 2
    (line,) = [json.loads(x) for x in result.stderr.splitlines() if x.startswith("{")]
    assert "--node-name" in line["msg"] and line["level"] == "error"


def test_unreadable_kubeconfig_is_a_configuration_error(tmp_path: Path) -> None:
    result = serve("cpu", "--node-name", "n1", "--kubeconfig", str(tmp_path / "absent"))
    assert result.returncode == 2
    assert (
        result.stderr.splitlines()[0]
        == f"topodra serve: argument --kubeconfig: '{tmp_path / 'absent'}': no such file"
    )


def test_unknown_kind_is_refused_by_the_parser() -> None:
    result = serve("gpu", "--node-name", "n1")
    assert result.returncode == 2 and "invalid choice" in result.stderr
