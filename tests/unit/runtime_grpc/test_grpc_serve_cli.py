"""`topodra serve` flags and its configuration errors, run as the real command."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from topodra.drivers.cli.main import build_parser

from tests.kit.kubeconfig import write_kubeconfig


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


def serve_cpu_command(tmp_path: Path, *extra: str) -> tuple[list[str], dict[str, str], Path, Path]:
    """`topodra serve cpu` on a synthetic machine with a kubeconfig for an API server that does
    not answer: (argv, environment, kubelet root folder, kubeconfig). The kubelet folder is made
    under /tmp (socket paths must stay short); the caller removes it."""
    from topodra.common.synth import build, load_spec

    root = tmp_path / "machine"
    build(load_spec("1s-4acc"), root, force=True)
    kubeconfig = write_kubeconfig(tmp_path, insecure=True)
    skip = ("NODE_NAME", "POD_UID", "PYTHONFAULTHANDLER")
    environ = {k: v for k, v in os.environ.items() if k not in skip}
    kubelet = Path(tempfile.mkdtemp(prefix="ux-", dir="/tmp"))
    argv = [sys.executable, "-m", "topodra.drivers.cli.main", "serve", "cpu", "--node-name", "n1"]
    argv += ["--sysfs-root", str(root), "--kubelet-root-dir", str(kubelet)]
    argv += ["--cdi-root", str(tmp_path / "cdi"), "--cpu-hook-dir", str(tmp_path / "hooks")]
    argv += ["--kubeconfig", str(kubeconfig), *extra]
    return argv, environ, kubelet, kubeconfig


def test_an_unreachable_api_server_is_logged_by_our_retry_layer_only(tmp_path: Path) -> None:
    """One retry layer: urllib3 neither retries under ours nor logs its own 'Retrying (Retry(...))'
    warnings, and `api_reachable` is not claimed true when no call was made."""
    argv, environ, kubelet, kubeconfig = serve_cpu_command(tmp_path)
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, env=environ)
    assert proc.stderr is not None
    seen: list[str] = []
    deadline = time.monotonic() + 60
    # until our layer has failed three times (urllib3's warnings came with each of them)
    while time.monotonic() < deadline and sum('"slice watch failed' in x for x in seen) < 3:
        line = proc.stderr.readline()
        if not line:
            break
        seen.append(line)
    proc.terminate()
    _, rest = proc.communicate(timeout=30)
    err = "".join(seen) + rest
    lines = [json.loads(x) for x in err.splitlines() if x.startswith("{")]
    assert not [x for x in lines if x["logger"].startswith("urllib3")], err
    failures = [x for x in lines if x["logger"].startswith("topodra") and x["level"] == "warning"]
    assert failures, f"our own layer says that the API server cannot be reached:\n{err[-3000:]}"
    (recovered,) = [x for x in lines if x["msg"] == "claims recovered"]
    assert recovered["api_reachable"] is None  # nothing was asked, so nothing is claimed

    from topodra.common.kubeapi import loader, rest

    assert loader.new_api_client(str(kubeconfig)).configuration.retries == 0
    shutil.rmtree(kubelet, ignore_errors=True)


def test_a_crash_below_python_leaves_every_threads_stack_in_the_log(tmp_path: Path) -> None:
    """A fatal signal (what glibc's abort on a double free, or a segfault in a C extension, ends
    the process with) prints the Python stack of every thread to stderr before the process dies,
    so the container's previous log says where it happened. Without faulthandler it dies silent
    (PYTHONFAULTHANDLER, which would enable it from outside, is not passed on)."""
    argv, environ, kubelet, _ = serve_cpu_command(tmp_path, "--no-publish", "--cpu-pinning", "none")
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, env=environ)
    try:
        registration = kubelet / "plugins_registry" / "cpu.topodra.io-reg.sock"
        deadline = time.monotonic() + 60
        while not registration.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert registration.exists(), "the plugin did not serve"
        proc.send_signal(signal.SIGABRT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        shutil.rmtree(kubelet, ignore_errors=True)
    assert proc.returncode == -signal.SIGABRT
    assert "Fatal Python error: Aborted" in err, err[-3000:]
    assert "Current thread" in err and "serve_all" in err, err[-3000:]  # the main thread, waiting
    assert err.count("Thread 0x") >= 2, err[-3000:]  # and the others: the gRPC server's at least
