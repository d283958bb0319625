"""Asking the kubelet's pod resources socket which containers use a claim.

The kubelet here is a stand-in: grpcio's server (a real gRPC implementation, as the kubelet's Go
one is) on a unix socket, serving v1.PodResourcesLister/List with the answers a test sets. The
real kubelet answers the same call in the node tier (tests/node/test_lifecycle.py).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from topodra.common.runtime import grpcclient
from topodra.common.runtime.driver import ClaimRef
from topodra.common.runtime.grpcserver import frames, hpack
from topodra.common.runtime.podresources import LIST, KubeletPods, claim_users
from topodra.proto.podresources.v1 import api_pb2 as pb


def pod(namespace: str, name: str, **containers: list[tuple[str, str]]) -> pb.PodResources:
    """A pod whose containers (name -> [(claim namespace, claim name)]) were given those claims."""
    return pb.PodResources(
        name=name,
        namespace=namespace,
        containers=[
            pb.ContainerResources(
                name=c,
                dynamic_resources=[pb.DynamicResource(claim_namespace=ns, claim_name=n) for ns, n in claims],
            )
            for c, claims in containers.items()
        ],
    )


class Kubelet:
    def __init__(self, folder: Path) -> None:
        self.socket = folder / "kubelet.sock"
        self.pods: list[pb.PodResources] = []
        self.fail: grpc.StatusCode | None = None
        self.calls = 0
        self._lock = threading.Lock()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        handler = grpc.unary_unary_rpc_method_handler(
            self._list,
            request_deserializer=pb.ListPodResourcesRequest.FromString,
            response_serializer=pb.ListPodResourcesResponse.SerializeToString,
        )
        self.server.add_generic_rpc_handlers(
            [grpc.method_handlers_generic_handler("v1.PodResourcesLister", {"List": handler})]
        )
        self.server.add_insecure_port(f"unix://{self.socket}")

    def _list(
        self, request: pb.ListPodResourcesRequest, context: grpc.ServicerContext
    ) -> pb.ListPodResourcesResponse:
        with self._lock:
            self.calls += 1
        if self.fail is not None:
            context.abort(self.fail, "kubelet says no")
        return pb.ListPodResourcesResponse(pod_resources=self.pods)


@pytest.fixture
def kubelet(tmp_path: Path) -> Iterator[Kubelet]:
    folder = tmp_path / "pod-resources"
    folder.mkdir()
    k = Kubelet(folder)
    k.server.start()
    try:
        yield k
    finally:
        k.server.stop(0)


CLAIM = ClaimRef("tenant-a", "gpu", "uid-1")


def test_the_kubelet_names_the_containers_that_use_a_claim(kubelet: Kubelet) -> None:
    kubelet.pods = [
        pod("tenant-a", "train-0", main=[("tenant-a", "gpu")], side=[("tenant-a", "other")]),
        pod("tenant-a", "train-1", main=[("tenant-a", "gpu")]),
        pod("tenant-b", "web", main=[("tenant-b", "gpu")]),  # same claim name, another namespace
    ]
    others = [ClaimRef("tenant-a", "gone", "uid-2"), ClaimRef("tenant-c", "gpu", "uid-3")]
    assert KubeletPods(kubelet.socket).in_use([CLAIM, *others]) == {
        CLAIM.uid: "the kubelet lists container tenant-a/train-0/main, tenant-a/train-1/main with it",
        "uid-2": "",
        "uid-3": "",
    }
    assert kubelet.calls == 1  # one question for all


def test_a_long_list_arrives_whole(kubelet: Kubelet) -> None:
    # far above HTTP/2's 64 KiB default window and 16 KiB frames
    kubelet.pods = [pod("ns", f"pod-{i:05d}", **{f"c{j}": [("ns", f"claim-{i}-{j}")] for j in range(4)})
                    for i in range(3000)]  # fmt: skip
    raw = grpcclient.call(str(kubelet.socket), LIST, b"", timeout=30)
    assert len(raw) > 256 * 1024
    users = claim_users(pb.ListPodResourcesResponse.FromString(raw))
    assert len(users) == 12000 and users[("ns", "claim-2999-3")] == ["ns/pod-02999/c3"]


def test_an_answer_above_the_limit_is_refused(kubelet: Kubelet) -> None:
    kubelet.pods = [pod("ns", f"pod-{i}", main=[("ns", f"claim-{i}")]) for i in range(2000)]
    with pytest.raises(grpcclient.CallError, match="larger than 10000 bytes"):
        grpcclient.call(str(kubelet.socket), LIST, b"", timeout=30, limit=10000)


def test_when_the_kubelet_cannot_be_asked_the_claim_counts_as_used(kubelet: Kubelet, tmp_path: Path) -> None:
    """Reconcile keeps a claim while this answer is not empty: an error must never read as
    "nobody uses it"."""
    kubelet.fail = grpc.StatusCode.UNAVAILABLE
    (answer,) = KubeletPods(kubelet.socket).in_use([CLAIM]).values()
    assert answer.startswith("the kubelet cannot be asked") and "kubelet says no" in answer
    # the folder is mounted but the socket is missing (the kubelet is restarting)
    (missing,) = KubeletPods(kubelet.socket.parent / "gone.sock").in_use([CLAIM]).values()
    assert missing.startswith("the kubelet cannot be asked") and "missing" in missing
    # a socket that takes the connection and never answers
    silent_path = tmp_path / "pod-resources" / "silent.sock"
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    silent.bind(str(silent_path))
    silent.listen(1)
    try:
        (answer,) = KubeletPods(silent_path, timeout=0.5).in_use([CLAIM]).values()
        assert answer.startswith("the kubelet cannot be asked") and "in time" in answer
    finally:
        silent.close()


def test_without_the_kubelets_folder_nothing_is_known(tmp_path: Path) -> None:
    """A deployment that does not mount the folder: the driver's own look is all there is."""
    assert KubeletPods(tmp_path / "absent" / "kubelet.sock").in_use([CLAIM]) == {CLAIM.uid: ""}


# what a peer sends before the answer's message: its settings and the answer's headers
OPENING = frames.settings({}) + frames.frame(
    frames.HEADERS, frames.END_HEADERS, 1, hpack.encode([(":status", "200")])
)


def _raw_server(path: Path, answer: bytes) -> threading.Thread:
    """One connection of a peer that sends `answer` (frames written here, byte by byte as a Go
    server may split them) after reading the request."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    srv.listen(1)

    def serve() -> None:
        conn, _ = srv.accept()
        with conn, srv:
            conn.recv(65536)
            conn.sendall(answer)
            conn.recv(65536)  # our SETTINGS ACK, then the close

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return t


def test_trailers_split_over_a_continuation_frame_are_read_whole(tmp_path: Path) -> None:
    """HTTP/2 lets a peer end the stream on a HEADERS frame whose block goes on in CONTINUATION
    frames: the end counts once the block is whole, and the status in its second half is read."""
    trailers = hpack.encode([("grpc-status", "0"), ("grpc-message", "")])
    answer = (
        OPENING
        + frames.frame(frames.DATA, 0, 1, b"\x00\x00\x00\x00\x02hi")
        + frames.frame(frames.HEADERS, frames.END_STREAM, 1, trailers[:1])
        + frames.frame(frames.CONTINUATION, frames.END_HEADERS, 1, trailers[1:])
    )
    t = _raw_server(tmp_path / "split.sock", answer)
    assert grpcclient.call(str(tmp_path / "split.sock"), LIST, b"", timeout=10) == b"hi"
    t.join(10)


def test_a_header_block_cut_off_by_another_frame_is_an_error(tmp_path: Path) -> None:
    trailers = hpack.encode([("grpc-status", "0")])
    answer = (
        OPENING
        + frames.frame(frames.HEADERS, frames.END_STREAM, 1, trailers[:1])
        + frames.frame(frames.DATA, frames.END_STREAM, 1, b"\x00\x00\x00\x00\x00")
    )
    t = _raw_server(tmp_path / "cut.sock", answer)
    with pytest.raises(grpcclient.CallError, match="cut off"):
        grpcclient.call(str(tmp_path / "cut.sock"), LIST, b"", timeout=10)
    t.join(10)


def test_a_header_block_may_start_empty_and_nothing_may_come_between_its_frames(tmp_path: Path) -> None:
    trailers = hpack.encode([("grpc-status", "0")])
    start = (
        OPENING
        + frames.frame(frames.DATA, 0, 1, b"\x00\x00\x00\x00\x02ok")
        + frames.frame(frames.HEADERS, frames.END_STREAM, 1, b"")  # an empty first fragment
    )
    t = _raw_server(
        tmp_path / "empty.sock", start + frames.frame(frames.CONTINUATION, frames.END_HEADERS, 1, trailers)
    )
    assert grpcclient.call(str(tmp_path / "empty.sock"), LIST, b"", timeout=10) == b"ok"
    t.join(10)
    ping = frames.frame(frames.PING, 0, 0, b"\x00" * 8)
    t = _raw_server(
        tmp_path / "ping.sock",
        start + ping + frames.frame(frames.CONTINUATION, frames.END_HEADERS, 1, trailers),
    )
    with pytest.raises(grpcclient.CallError, match="cut off"):
        grpcclient.call(str(tmp_path / "ping.sock"), LIST, b"", timeout=10)
    t.join(10)
