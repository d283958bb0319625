"""hack/node/build.sh: the node's binaries come out at the versions the repository pins.

The kubelet must be the control plane's release (one k8s.io/kubernetes module builds both) and
containerd the one hack/node/containerd/go.mod requires; both report it through their version
stamps, so a wrong module or a lost -ldflags shows here.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.conftest import REPO, skip_or_fail
from tests.controlplane.binaries import BuildFailed, GoMissing, ensure_binaries
from tests.node.binaries import HostToolMissing, NodeBinaries, ensure_node_binaries

pytestmark = pytest.mark.node


def _pinned(gomod: str, module: str) -> str:
    text = (REPO / gomod).read_text()
    found = re.search(rf"^\s*(?:require\s+)?{re.escape(module)} (v\S+)", text, re.MULTILINE)
    assert found, f"{module} not required in {gomod}"
    return found.group(1)


@pytest.fixture(scope="module")
def binaries() -> NodeBinaries:
    try:
        return ensure_node_binaries()
    except (GoMissing, HostToolMissing) as e:
        skip_or_fail(str(e))
    except BuildFailed as e:
        pytest.fail(f"building the node failed: {e}")
    raise AssertionError("unreachable")


def _version(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True).stdout.strip()


def test_kubelet_is_the_control_planes_release(binaries: NodeBinaries) -> None:
    cp = ensure_binaries()
    want = _pinned("hack/controlplane/kubernetes/go.mod", "k8s.io/kubernetes")
    assert binaries.k8s_version == cp.k8s_version == want
    assert _version(str(binaries.kubelet), "--version") == f"Kubernetes {want}"
    assert _version(str(cp.kube_apiserver), "--version") == f"Kubernetes {want}"


def test_containerd_and_ctr_are_the_pinned_release(binaries: NodeBinaries) -> None:
    want = _pinned("hack/node/containerd/go.mod", "github.com/containerd/containerd/v2")
    assert binaries.containerd_version == want
    assert _version(str(binaries.containerd), "--version").split()[-1] == want
    assert _version(str(binaries.ctr), "--version").split()[-1] == want
    assert binaries.shim.is_file() and binaries.pause.is_file()


def test_a_second_run_reuses_the_cache(binaries: NodeBinaries) -> None:
    again = ensure_node_binaries()
    assert again == binaries
