"""The real node itself: Pods run through the real scheduler, kubelet, containerd, runc and CNI.

These hold for every later test of the tier: a Pod starts from the registry-free images, its
network stays on the machine, its in-cluster configuration reaches the API server without
kube-proxy, and containerd serves NRI where the fixture says.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from tests.node.node import RealNode
from tests.node.pods import busybox_pod, delete_namespace, make_namespace, run_to_completion

pytestmark = pytest.mark.node


@pytest.fixture(scope="module")
def ns(real_node: RealNode) -> Iterator[str]:
    name = make_namespace(real_node, "node")
    yield name
    delete_namespace(real_node, name)


def test_a_pod_runs_and_prints(real_node: RealNode, ns: str) -> None:
    hello = busybox_pod(real_node, "hello", "echo hello from $(hostname)")
    pod, out = run_to_completion(real_node, ns, hello)
    assert pod.status.phase == "Succeeded", out
    assert out == "hello from hello\n"
    assert pod.spec.node_name == real_node.name


def test_pod_network_ends_at_the_node(real_node: RealNode, ns: str) -> None:
    """eth0 on the node's subnet, a route to that subnet only: nothing leaves the machine."""
    script = "ip -4 -o addr show dev eth0; echo ROUTES; ip -4 route"
    pod, out = run_to_completion(real_node, ns, busybox_pod(real_node, "net", script))
    assert pod.status.phase == "Succeeded", out
    addr, routes = out.split("ROUTES\n")
    ip = addr.split()[3].split("/")[0]
    assert pod.status.pod_ip == ip
    assert ip.startswith(str(real_node.network.subnet.network_address).rsplit(".", 1)[0] + ".")
    assert [r.split()[0] for r in routes.splitlines()] == [str(real_node.network.subnet)]


def test_in_cluster_configuration_reaches_the_api_server(real_node: RealNode, ns: str) -> None:
    """What the drivers' pods use: the `kubernetes` Service address from the Pod's environment,
    and the ServiceAccount token the kubelet projects, accepted by the API server."""
    sa = "/var/run/secrets/kubernetes.io/serviceaccount"
    script = (
        'echo "$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT"; '
        f"test -s {sa}/token && test -s {sa}/ca.crt && echo TOKEN; "
        # busybox has no TLS: a line of plain text makes the TLS server answer and hang up.
        'echo | nc -w 5 "$KUBERNETES_SERVICE_HOST" "$KUBERNETES_SERVICE_PORT" >/dev/null && echo CONNECTED'
    )
    pod, out = run_to_completion(real_node, ns, busybox_pod(real_node, "incluster", script))
    assert pod.status.phase == "Succeeded", out
    assert out.splitlines() == [f"{real_node.network.node_ip}:443", "TOKEN", "CONNECTED"]


def test_containerd_serves_nri_in_the_run_folder(real_node: RealNode) -> None:
    path = real_node.containerd.paths.nri_socket
    assert path.is_socket() and str(path).startswith(str(real_node.run_dir))
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(str(path))
