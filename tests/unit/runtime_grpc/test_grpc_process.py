"""The plugin as a real child process: signals, leftovers of kill -9, HTTP health and metrics.

Stand-in kept (the Python kubelet client): kill -9 leftovers and socket races a real kubelet
cannot be made to produce on cue.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO
from tests.kubelet.client import KubeletClient, watch_registry

A, B = "cpu.test.topodra.io", "nic.test.topodra.io"


class Child:
    def __init__(self, root: Path, drivers: list[str], pod_uid: str | None = None) -> None:
        self.root = root
        self.started_file = root / f"started-{time.monotonic_ns()}.json"
        cmd = [sys.executable, "-m", "tests.kubelet.standin_plugin", "--kubelet-root", str(root)]
        for d in drivers:
            cmd += ["--driver", d]
        if pod_uid:
            cmd += ["--pod-uid", pod_uid]
        cmd += ["--started-file", str(self.started_file)]
        self.proc = subprocess.Popen(cmd, cwd=REPO, stderr=subprocess.PIPE, text=True)
        self.info = self._wait_started()

    def _wait_started(self, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.started_file.exists():
                info: dict[str, Any] = json.loads(self.started_file.read_text())
                return info
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"plugin exited early: {self.proc.stderr.read() if self.proc.stderr else ''}"
                )
            time.sleep(0.02)
        raise AssertionError("plugin did not start in time")

    def http(self, path: str) -> tuple[int, str]:
        url = f"http://127.0.0.1:{self.info['metrics_port']}{path}"
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def stop(self, sig: int = signal.SIGTERM) -> tuple[int, str]:
        self.proc.send_signal(sig)
        _, err = self.proc.communicate(timeout=30)
        return self.proc.returncode, err


@pytest.fixture
def children(kubelet_root: Path) -> Iterator[list[Child]]:
    made: list[Child] = []
    yield made
    for c in made:
        if c.proc.poll() is None:
            c.proc.kill()
            c.proc.wait()


def test_sigterm_removes_every_socket_and_exits_cleanly(kubelet_root: Path, children: list[Child]) -> None:
    child = Child(kubelet_root, [A, B])
    children.append(child)
    sockets = watch_registry(kubelet_root / "plugins_registry")
    assert sorted(s.name for s in sockets) == [f"{A}-reg.sock", f"{B}-reg.sock"]
    dra = [kubelet_root / "plugins" / d / "dra.sock" for d in (A, B)]
    assert all(p.is_socket() for p in dra)
    for reg in sockets:
        with KubeletClient() as kubelet:
            kubelet.register(reg)
            assert kubelet.prepare([("ns", "one", "uid-1")]).claims["uid-1"].error == ""
    code, err = child.stop(signal.SIGTERM)
    assert code == 0, err
    assert watch_registry(kubelet_root / "plugins_registry") == []
    assert not any(p.exists() for p in dra)
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert {ln.get("driver") for ln in lines if ln["msg"] == "plugin stopped"} == {A, B}


def test_sigint_cleans_up_too(kubelet_root: Path, children: list[Child]) -> None:
    child = Child(kubelet_root, [A], pod_uid="0a0b0c0d-1111-2222-3333-444455556666")
    children.append(child)
    (reg,) = watch_registry(kubelet_root / "plugins_registry")
    assert reg.name == f"{A}-0a0b0c0d-1111-2222-3333-444455556666-reg.sock"
    code, err = child.stop(signal.SIGINT)
    assert code == 0, err
    assert watch_registry(kubelet_root / "plugins_registry") == []


def test_kill_9_leaves_sockets_that_the_next_start_replaces(
    kubelet_root: Path, children: list[Child]
) -> None:
    first = Child(kubelet_root, [A])
    children.append(first)
    first.proc.kill()
    first.proc.wait()
    (left,) = watch_registry(kubelet_root / "plugins_registry")  # what the kubelet would still see
    with KubeletClient() as kubelet, pytest.raises(Exception):  # noqa: B017 - nobody listens any more
        kubelet.register(left)
    second = Child(kubelet_root, [A])
    children.append(second)
    with KubeletClient() as kubelet:
        kubelet.register(left)
        assert kubelet.prepare([("ns", "two", "uid-2")]).claims["uid-2"].error == ""
    code, err = second.stop()
    assert code == 0, err
    assert "removed stale socket" in err


def test_readiness_follows_registration_and_metrics_count_claims(
    kubelet_root: Path, children: list[Child]
) -> None:
    child = Child(kubelet_root, [A, B])
    children.append(child)
    assert child.http("/healthz")[0] == 200
    code, body = child.http("/readyz")
    assert code == 503
    assert {d["driver"]: d["registered"] for d in json.loads(body)["drivers"]} == {A: None, B: None}

    with KubeletClient() as kubelet:
        kubelet.register(kubelet_root / "plugins_registry" / f"{A}-reg.sock")
        kubelet.prepare([("ns", "one", "uid-1"), ("ns", "ghost", "uid-9")])
    assert child.http("/readyz")[0] == 503  # B is still unregistered
    with KubeletClient(supported_dra=("v2.DRAPlugin",)) as old, pytest.raises(Exception):  # noqa: B017
        old.register(kubelet_root / "plugins_registry" / f"{B}-reg.sock")
    code, body = child.http("/readyz")
    assert code == 503
    (b,) = [d for d in json.loads(body)["drivers"] if d["driver"] == B]
    assert b["registered"] is False and "none of the versions" in b["registration_error"]
    with KubeletClient() as kubelet:
        kubelet.register(kubelet_root / "plugins_registry" / f"{B}-reg.sock")
    assert child.http("/readyz")[0] == 200

    code, text = child.http("/metrics")
    assert code == 200
    assert f'topodra_claim_operations_total{{driver="{A}",operation="prepare"}} 2.0' in text
    assert f'topodra_claim_operation_errors_total{{driver="{A}",operation="prepare"}} 1.0' in text
    assert f'topodra_kubelet_registered{{driver="{B}"}} 1.0' in text
    assert "topodra_grpc_request_duration_seconds_bucket" in text
    assert child.http("/nope")[0] == 404
    assert child.stop()[0] == 0


def test_the_process_survives_a_client_that_disconnects_mid_stream(
    kubelet_root: Path, children: list[Child]
) -> None:
    child = Child(kubelet_root, [A])
    children.append(child)
    for _ in range(3):
        with KubeletClient() as kubelet:
            kubelet.register(kubelet_root / "plugins_registry" / f"{A}-reg.sock")
            stream = kubelet.watch_health()
            assert len(next(stream).devices) == 3
            stream.cancel()
    assert child.proc.poll() is None
    gauge = f'topodra_health_streams{{driver="{A}"}} 0.0'
    deadline = time.monotonic() + 10  # the server notices a cancelled stream asynchronously
    while gauge not in child.http("/metrics")[1] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gauge in child.http("/metrics")[1]
    assert child.stop()[0] == 0
    assert os.path.exists(kubelet_root / "plugins" / A)  # the folder stays; only sockets go
