"""hack/local-up.sh as a user runs it: up prints how to reach the cluster, the node is Ready with
the three drivers publishing, and --down leaves nothing behind.

It brings up a node of its own, so it runs after every test that uses the session's node (the
tests.node.fixtures plugin orders it last and the session's node is down by then: one real node
per machine).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import kubernetes.client as k8s
import pytest
from kubernetes import config

from tests.conftest import REPO, skip_or_fail
from tests.controlplane.cluster import api_resource
from tests.node.fixtures import node_prerequisites

pytestmark = pytest.mark.node

LOCAL_UP = REPO / "hack" / "local-up.sh"


def test_local_up_brings_a_node_with_the_drivers_and_down_removes_it(tmp_path: Path) -> None:
    why = node_prerequisites()
    if why:
        skip_or_fail(why)
    env = {**os.environ, "TOPODRA_LOCAL_UP_DIR": str(tmp_path / "state")}
    began = time.monotonic()
    up = subprocess.run([str(LOCAL_UP)], env=env, capture_output=True, text=True, timeout=2400)
    took_up = time.monotonic() - began
    log = (
        (tmp_path / "state" / "local-up.log").read_text()
        if (tmp_path / "state" / "local-up.log").exists()
        else ""
    )
    try:
        assert up.returncode == 0, f"{up.stdout}\n{up.stderr}\n{log[-4000:]}"
        details = json.loads((tmp_path / "state" / "cluster.json").read_text())
        assert f"export KUBECONFIG={details['kubeconfig']}" in up.stdout
        assert "hack/local-up.sh --down" in up.stdout
        api = config.new_client_from_config(details["kubeconfig"])
        (node,) = k8s.CoreV1Api(api).list_node().items
        assert {c.type: c.status for c in node.status.conditions}["Ready"] == "True"
        slices = api_resource(api, "ResourceSlice").get().to_dict()["items"]
        assert {s["spec"]["driver"] for s in slices} >= {
            "cpu.topodra.io",
            "accelerator.topodra.io",
            "nic.topodra.io",
        }
        run_dir = Path(details["run_dir"])
    finally:
        began_down = time.monotonic()
        down = subprocess.run([str(LOCAL_UP), "--down"], env=env, capture_output=True, text=True, timeout=600)
        took_down = time.monotonic() - began_down
    sys.stderr.write(f"\nreal node figure: hack/local-up.sh up {took_up:.1f} s, --down {took_down:.1f} s\n")
    assert down.returncode == 0, down.stderr
    # checked by the supervisor itself while it still held the machine's lock (bridge, mounts,
    # cgroups, shims, folders): another session may take the lock and the names right after
    assert "left behind []" in down.stderr and "problems []" in down.stderr, down.stderr
    assert not run_dir.exists()
    assert not (tmp_path / "state" / "cluster.json").exists()
