"""The publisher's threads against an in-memory store (fake_api.py) for the failure modes the real
API server cannot produce on demand: 429 with Retry-After, 403, a conflict at a precise moment,
dropped fields, a 422 for list attributes, a long outage counted call by call. The same flows
without faults run against the real kube-apiserver in tests/controlplane/test_publisher.py.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from topodra.common.device import Device, Taint
from topodra.common.kubeapi.errors import ApiError
from topodra.common.publisher.publisher import SlicePublisher

from tests.unit.publisher.fake_api import FakeSliceApi, fail_once, network_down

DRIVER = "nic.topodra.io"
NODE = "node-f"


def nics(n: int, speed: int = 100) -> list[Device]:
    return [Device(f"vf-{i}", {"nic.topodra.io/speedGbps": speed}) for i in range(n)]


@pytest.fixture
def api() -> FakeSliceApi:
    return FakeSliceApi()


@pytest.fixture
def publishers() -> Iterator[list[SlicePublisher]]:
    made: list[SlicePublisher] = []
    yield made
    for p in made:
        p.stop()


def start(api: FakeSliceApi, made: list[SlicePublisher], devices: list[Device], **kw: Any) -> SlicePublisher:
    kw.setdefault("resync_delay", 0.2)
    pub = SlicePublisher(api, DRIVER, NODE, **kw)
    made.append(pub)
    pub.set_devices(devices)
    pub.start()
    return pub


def test_publish_then_restart_adopts_without_writes(
    api: FakeSliceApi, publishers: list[SlicePublisher]
) -> None:
    first = start(api, publishers, nics(300))
    assert first.wait_synced(5)
    assert api.writes == {"create": 3}
    first.stop()
    second = start(api, publishers, nics(300))
    assert second.wait_synced(5)
    time.sleep(0.5)
    assert api.writes == {"create": 3}
    assert second.status().writes == {}
    assert second.status().generation == 1
    assert sorted(second.status().slices) == sorted(api.objects)


def test_an_outage_is_retried_with_capped_backoff_not_a_busy_loop(
    api: FakeSliceApi, publishers: list[SlicePublisher]
) -> None:
    down = network_down()
    api.faults.append(down)
    pub = start(api, publishers, nics(3), backoff_initial=0.1, backoff_max=0.8)
    time.sleep(4.0)
    attempts = api.calls["list"] + api.calls["get-node"]
    # 0.1, 0.2, 0.4, 0.8, 0.8 ... (±20 %) over 4 s for each thread: well under 20 calls
    assert 4 <= attempts <= 20, api.calls
    assert not pub.status().synced and pub.status().last_error
    api.faults.remove(down)
    assert pub.wait_synced(3)
    assert pub.status().last_error is None
    assert api.writes == {"create": 1}


def test_throttling_honours_retry_after(api: FakeSliceApi, publishers: list[SlicePublisher]) -> None:
    api.faults.append(fail_once("create", ApiError("create", 429, "Too many requests", retry_after=1.5)))
    pub = start(api, publishers, nics(3), backoff_initial=0.05)
    assert pub.wait_synced(5)
    creates = [t for t, verb in api.call_times if verb == "create"]
    assert len(creates) == 2
    assert creates[1] - creates[0] >= 1.4


def test_forbidden_is_retried_until_rbac_allows(api: FakeSliceApi, publishers: list[SlicePublisher]) -> None:
    def forbidden(verb: str, body: Mapping[str, Any] | None) -> ApiError | None:
        return ApiError(verb, 403, "resourceslices is forbidden") if verb == "create" else None

    api.faults.append(forbidden)
    pub = start(api, publishers, nics(3), backoff_initial=0.05, backoff_max=0.4)
    time.sleep(1.5)
    assert "403" in (pub.status().last_error or "")
    assert 3 <= api.calls["create"] <= 12
    api.faults.remove(forbidden)
    assert pub.wait_synced(3)


def test_a_conflict_relists_and_retries(api: FakeSliceApi, publishers: list[SlicePublisher]) -> None:
    pub = start(api, publishers, nics(3))
    assert pub.wait_synced(5)
    (name,) = api.objects
    # someone else updates between our read and our write: our resourceVersion is stale
    api.faults.append(fail_once("update", ApiError("update", 409, "the object has been modified")))
    pub.set_devices(nics(3, speed=25))
    assert pub.wait_synced(5)
    assert api.objects[name]["spec"]["devices"][0]["attributes"]["nic.topodra.io/speedGbps"] == {"int": 25}
    assert api.calls["update"] == 2 and api.writes["update"] == 1
    assert api.calls["list"] >= 2  # the relist after the conflict


def test_drift_is_repaired_quickly_and_own_writes_cause_no_resync(
    api: FakeSliceApi, publishers: list[SlicePublisher]
) -> None:
    pub = start(api, publishers, nics(200), resync_delay=0.5)
    assert pub.wait_synced(5)
    time.sleep(1.0)
    assert api.writes == {"create": 2}  # our own ADDED events did not trigger writes
    victim = sorted(api.objects)[1]
    began = time.monotonic()
    api.remove(victim)
    while len(api.objects) < 2 and time.monotonic() - began < 5:
        time.sleep(0.05)
    assert len(api.objects) == 2, "deleted slice not restored"
    assert time.monotonic() - began < 2.0
    name = sorted(api.objects)[0]
    api.edit(name, lambda o: o["spec"]["devices"].pop())
    time.sleep(1.5)
    assert len(api.objects[name]["spec"]["devices"]) == 128


def test_dropped_fields_are_reported_once_and_not_rewritten(
    api: FakeSliceApi, publishers: list[SlicePublisher]
) -> None:
    def drop_taints(obj: dict[str, Any]) -> dict[str, Any]:
        for device in obj["spec"].get("devices", []):
            device.pop("taints", None)
        return obj

    api.transform = drop_taints
    devices = [*nics(2), Device("vf-t", taints=(Taint("nic.topodra.io/link", "down"),))]
    pub = start(api, publishers, devices)
    assert pub.wait_synced(5)
    time.sleep(1.0)
    assert pub.status().dropped_features == ("DRADeviceTaints",)
    assert api.writes == {"create": 1}


def test_list_attributes_rejected_by_the_server_are_left_out(
    api: FakeSliceApi, publishers: list[SlicePublisher]
) -> None:
    def no_lists(verb: str, body: Mapping[str, Any] | None) -> ApiError | None:
        for device in (body or {}).get("spec", {}).get("devices", []):
            for value in (device.get("attributes") or {}).values():
                if "ints" in value:
                    msg = "spec.devices[0].attributes[x]: Required value: exactly one value must be specified"
                    return ApiError(verb, 422, msg)
        return None

    api.faults.append(no_lists)
    devices = [Device("vf-0", {"resource.kubernetes.io/numaNode": (0, 1), "nic.topodra.io/x": 1})]
    pub = start(api, publishers, devices)
    assert pub.wait_synced(5)
    assert pub.status().dropped_features == ("DRAListTypeAttributes",)
    (obj,) = api.objects.values()
    assert obj["spec"]["devices"][0]["attributes"] == {"nic.topodra.io/x": {"int": 1}}


def test_watch_410_relists(api: FakeSliceApi, publishers: list[SlicePublisher]) -> None:
    pub = start(api, publishers, nics(3), watch_timeout=1)
    assert pub.wait_synced(5)
    lists = api.calls["list"]
    api.oldest_watchable = 10**9  # every resume is now "too old"
    time.sleep(1.6)
    assert api.calls["list"] > lists
    api.oldest_watchable = 0
    assert api.writes == {"create": 1}


def test_stop_keeps_slices_unless_asked_to_delete(
    api: FakeSliceApi, publishers: list[SlicePublisher]
) -> None:
    pub = start(api, publishers, nics(200))
    assert pub.wait_synced(5)
    pub.stop()
    assert len(api.objects) == 2
    pub = start(api, publishers, nics(200))
    assert pub.wait_synced(5)
    pub.stop(delete_slices=True)
    assert api.objects == {}


def test_delete_slices_on_stop_is_a_constructor_option(
    api: FakeSliceApi, publishers: list[SlicePublisher]
) -> None:
    """`serve --delete-slices-on-exit` sets it; the runtime then calls plain stop()."""
    pub = start(api, publishers, nics(3), delete_slices_on_stop=True)
    assert pub.wait_synced(5)
    pub.stop()
    assert api.objects == {}


def test_metrics_count_writes_errors_and_the_last_success(
    api: FakeSliceApi, publishers: list[SlicePublisher]
) -> None:
    from prometheus_client import REGISTRY

    def sample(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, {"driver": "metrics.topodra.io", **labels}) or 0.0

    creates = sample("topodra_resourceslice_writes_total", verb="create")
    conflicts = sample("topodra_resourceslice_errors_total", verb="update", code="409")
    pub = SlicePublisher(api, "metrics.topodra.io", NODE, resync_delay=0.1)
    publishers.append(pub)
    pub.set_devices(nics(130))
    pub.start()
    assert pub.wait_synced(5)
    api.faults.append(fail_once("update", ApiError("update", 409, "conflict")))
    pub.set_devices(nics(130, speed=1))
    assert pub.wait_synced(5)
    assert sample("topodra_resourceslice_writes_total", verb="create") == creates + 2
    assert sample("topodra_resourceslice_errors_total", verb="update", code="409") == conflicts + 1
    assert abs(sample("topodra_resourceslice_last_sync_success_timestamp_seconds") - time.time()) < 5
    assert sample("topodra_published_devices") == 130
