"""Both halves together: the kubelet client, over gRPC, against DriverService (the real
ClaimManager, checkpoint and CDI writer) with the claim-core tests' HoldDriver and claim store
(the stand-in for the API server's claim GET, see claimkit's module doc).

Stand-in kept (the Python kubelet client and claim store): the service's answers field by field
for claims the API server would reject; tests/node runs real claims.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from topodra.common.runtime.grpcserver.connection import gathered
from topodra.common.runtime.plugin import PluginOptions
from topodra.common.runtime.service import DriverService

from tests.kubelet.client import KubeletClient
from tests.unit.runtime_claims.claimkit import (
    DRIVER,
    NODE,
    HoldDriver,
    MemoryClaimStore,
    Result,
    claim_object,
    new_uid,
)


@pytest.fixture
def store() -> MemoryClaimStore:
    return MemoryClaimStore()


@pytest.fixture
def services(kubelet_root: Path, store: MemoryClaimStore) -> Iterator[list[DriverService]]:
    made: list[DriverService] = []
    yield made
    for s in made:
        s.stop()


def start_service(
    root: Path, store: MemoryClaimStore, made: list[DriverService], devices: tuple[str, ...] | None = None
) -> DriverService:
    """`devices`: the driver's exclusive devices (HoldDriver's few by default)."""
    driver = HoldDriver(root / "hw") if devices is None else HoldDriver(root / "hw", exclusive=devices)
    service = DriverService.create(
        driver,
        store,
        PluginOptions(kubelet_root=root, node_name=NODE),
        cdi_root=root / "cdi",
        state_dir=root / "state",
    )
    service.start()
    made.append(service)
    return service


def test_the_dra_servicer_hands_the_claim_core_its_gathered_writes(
    kubelet_root: Path, store: MemoryClaimStore, services: list[DriverService]
) -> None:
    """The DRA servicer hands the claim core its gRPC server's `gathered`, which the thread
    serving a batch enters around the batch's answers (test_server.py: what it does)."""
    service = start_service(kubelet_root, store, services)
    assert service.claims.answering is gathered


def test_prepare_writes_cdi_and_answers_over_both_versions(
    kubelet_root: Path, store: MemoryClaimStore, services: list[DriverService]
) -> None:
    service = start_service(kubelet_root, store, services)
    one = store.put(claim_object("ns", "one", new_uid(), [Result("gpu", "dev-0")]))
    share_id = new_uid()
    shared = store.put(claim_object("ns", "two", new_uid(), [Result("gpu", "shared-0", share_id=share_id)]))
    ghost = ("ns", "ghost", new_uid())
    with KubeletClient() as kubelet:
        kubelet.register(service.plugin.registration_socket)
        answer = kubelet.prepare([(one.namespace, one.name, one.uid), ghost])
        assert "not found" in answer.claims[ghost[2]].error
        (device,) = answer.claims[one.uid].devices
        assert (device.pool_name, device.device_name, list(device.request_names)) == (NODE, "dev-0", ["gpu"])
        (cdi_id,) = device.cdi_device_ids
        kind, _, cdi_name = cdi_id.partition("=")
        assert kind == f"{DRIVER}/claim" and one.uid in cdi_name
        (spec_file,) = (kubelet_root / "cdi").glob(f"*{one.uid}*")
        spec = json.loads(spec_file.read_text())
        assert cdi_name in [d["name"] for d in spec["devices"]]

        # Idempotent: the same answer again, from the checkpoint.
        again = kubelet.prepare([(one.namespace, one.name, one.uid)], version="v1beta1.DRAPlugin")
        assert list(again.claims[one.uid].devices[0].cdi_device_ids) == [cdi_id]

        v1 = kubelet.prepare([(shared.namespace, shared.name, shared.uid)], version="v1.DRAPlugin")
        assert v1.claims[shared.uid].devices[0].share_id == share_id
        beta = kubelet.prepare([(shared.namespace, shared.name, shared.uid)], version="v1beta1.DRAPlugin")
        assert beta.claims[shared.uid].devices[0].device_name == "shared-0"

        # The claim is deleted before the pod is done: unprepare works from the checkpoint.
        store.delete("ns", "one")
        un = kubelet.unprepare(
            [(one.namespace, one.name, one.uid), (shared.namespace, shared.name, shared.uid)]
        )
        assert {u: r.error for u, r in un.claims.items()} == {one.uid: "", shared.uid: ""}
        assert list((kubelet_root / "cdi").glob(f"*{one.uid}*")) == []


def test_a_restarted_service_knows_its_claims(
    kubelet_root: Path, store: MemoryClaimStore, services: list[DriverService]
) -> None:
    first = start_service(kubelet_root, store, services)
    claim = store.put(claim_object("ns", "one", new_uid(), [Result("gpu", "dev-3")]))
    with KubeletClient() as kubelet:
        kubelet.register(first.plugin.registration_socket)
        before = kubelet.prepare([(claim.namespace, claim.name, claim.uid)])
    first.stop()
    services.remove(first)
    for spec in (kubelet_root / "cdi").glob("*.json"):  # a reboot empties /var/run/cdi
        spec.unlink()

    second = start_service(kubelet_root, store, services)
    assert list((kubelet_root / "cdi").glob(f"*{claim.uid}*")), "CDI spec rewritten at start"
    with KubeletClient() as kubelet:
        kubelet.register(second.plugin.registration_socket)
        after = kubelet.prepare([(claim.namespace, claim.name, claim.uid)])
        assert after.claims[claim.uid] == before.claims[claim.uid]
        assert kubelet.unprepare([(claim.namespace, claim.name, claim.uid)]).claims[claim.uid].error == ""


class MeetingStore(MemoryClaimStore):
    """Each GET waits until `n` GETs are in flight together (or `wait` seconds pass): `most`
    says how many the service ran at once."""

    def __init__(self, n: int, wait: float) -> None:
        super().__init__()
        self._meet = threading.Barrier(n, timeout=wait)
        self._lock = threading.Lock()
        self._now = 0
        self.most = 0

    def get(self, namespace: str, name: str, *, cached: bool = False) -> dict[str, object]:
        with self._lock:
            self._now += 1
            self.most = max(self.most, self._now)
        try:
            self._meet.wait()
        except threading.BrokenBarrierError:
            pass  # fewer came: the count already says so
        finally:
            with self._lock:
                self._now -= 1
        return super().get(namespace, name, cached=cached)


def test_the_kubelets_calls_in_flight_get_their_claims_together(
    kubelet_root: Path, services: list[DriverService]
) -> None:
    """64 calls at once (the kubelet starting pods) send their 64 GETs at once (docs/bench/latest.md
    measured less API server and etcd CPU per claim that way than 16 at a time)."""
    n = 64
    store = MeetingStore(n, wait=5.0)
    devices = tuple(f"dev-{i}" for i in range(n))
    service = start_service(kubelet_root, store, services, devices)
    refs = [
        store.put(claim_object("ns", f"c{i}", new_uid(), [Result("gpu", d)])) for i, d in enumerate(devices)
    ]
    with KubeletClient() as kubelet:
        kubelet.register(service.plugin.registration_socket)
        with ThreadPoolExecutor(n) as pool:
            answers = list(pool.map(lambda r: kubelet.prepare([(r.namespace, r.name, r.uid)]), refs))
    assert [a.claims[r.uid].error for a, r in zip(answers, refs, strict=True)] == [""] * n
    assert store.most == n
