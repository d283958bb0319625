"""The publisher's threads against an in-memory store (fake_api.py) for the failure modes the real
API server cannot produce on demand: 429 with Retry-After, 403, a conflict at a precise moment,
dropped fields, a 422 for list attributes, a long outage counted call by call. The same flows
without faults run against the real kube-apiserver in tests/controlplane/test_publisher.py.

Time is a ManualClock (tests/kit/clock.py): the tests step it forward and count what the
publisher did in the clock's seconds; nothing sleeps and no bound depends on this machine.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from topodra.common.device import Device, Taint
from topodra.common.kubeapi.errors import ApiError
from topodra.common.publisher.publisher import SlicePublisher

from tests.kit.clock import ManualClock
from tests.unit.publisher.fake_api import FakeSliceApi, fail_once, network_down

DRIVER = "nic.topodra.io"
NODE = "node-f"
THREADS = 2  # each publisher: its watch thread and its sync thread


def nics(n: int, speed: int = 100) -> list[Device]:
    return [Device(f"vf-{i}", {"nic.topodra.io/speedGbps": speed}) for i in range(n)]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def api(clock: ManualClock) -> FakeSliceApi:
    return FakeSliceApi(clock=clock)


@pytest.fixture
def publishers() -> Iterator[list[SlicePublisher]]:
    made: list[SlicePublisher] = []
    yield made
    for p in made:
        p.stop()


def start(api: FakeSliceApi, made: list[SlicePublisher], devices: list[Device], **kw: Any) -> SlicePublisher:
    kw.setdefault("resync_delay", 0.2)
    pub = SlicePublisher(api, DRIVER, NODE, clock=api.clock, **kw)
    made.append(pub)
    pub.set_devices(devices)
    pub.start()
    return pub


def synced(clock: ManualClock, pub: SlicePublisher) -> None:
    """The publisher caught up with everything so far, and waits for the clock again."""
    assert pub.wait_synced(30), pub.status()
    clock.settle(THREADS)


def test_publish_then_restart_adopts_without_writes(
    clock: ManualClock, api: FakeSliceApi, publishers: list[SlicePublisher]
) -> None:
    first = start(api, publishers, nics(300))
    synced(clock, first)
    assert api.writes == {"create": 3}
    first.stop()
    second = start(api, publishers, nics(300))
    synced(clock, second)
    clock.step(2.0, THREADS)  # past every resync delay its own events could have caused
    assert api.writes == {"create": 3}
    assert second.status().writes == {}
    assert second.status().generation == 1
    assert sorted(second.status().slices) == sorted(api.objects)


def test_an_outage_is_retried_with_capped_backoff_not_a_busy_loop(
    clock: ManualClock, api: FakeSliceApi, publishers: list[SlicePublisher]
) -> None:
    down = network_down()
    api.faults.append(down)
    pub = start(api, publishers, nics(3), backoff_initial=0.1, backoff_max=0.8)
    clock.settle(THREADS)
    clock.step(4.0, THREADS)
    attempts = api.calls["list"] + api.calls["get-node"]
    # the watch relists after 0.1, 0.2, 0.4, 0.8, 0.8 ... s (±20 %): 7 to 10 calls in 4 s of the
    # clock; the sync thread waits for a first list. A busy loop would make thousands.
    assert 6 <= attempts <= 11, api.calls
    assert not pub.status().synced and pub.status().last_error
    api.faults.remove(down)
    clock.step(1.0, THREADS)
    synced(clock, pub)
    assert pub.status().last_error is None
    assert api.writes == {"create": 1}


def test_throttling_honours_retry_after(
    clock: ManualClock, api: FakeSliceApi, publishers: list[SlicePublisher]
) -> None:
    api.faults.append(fail_once("create", ApiError("create", 429, "Too many requests", retry_after=1.5)))
    pub = start(api, publishers, nics(3), backoff_initial=0.05)
    clock.settle(THREADS)
    clock.step(1.4, THREADS)
    assert [verb for _, verb in api.call_times].count("create") == 1, "retried before Retry-After"
    clock.step(0.2, THREADS)
    synced(clock, pub)
    creates = [t for t, verb in api.call_times if verb == "create"]
    assert len(creates) == 2 and creates[1] - creates[0] >= 1.5


def test_forbidden_is_retried_until_rbac_allows(
    clock: ManualClock, api: FakeSliceApi, publishers: list[SlicePublisher]
) -> None:
    def forbidden(verb: str, body: Mapping[str, Any] | None) -> ApiError | None:
        return ApiError(verb, 403, "resourceslices is forbidden") if verb == "create" else None

    api.faults.append(forbidden)
    pub = start(api, publishers, nics(3), backoff_initial=0.05, backoff_max=0.4)
    clock.settle(THREADS)
    clock.step(1.5, THREADS)
    assert "403" in (pub.status().last_error or "")
    assert 4 <= api.calls["create"] <= 12
    api.faults.remove(forbidden)
    clock.step(0.5, THREADS)
    synced(clock, pub)


def test_a_conflict_relists_and_retries(
    clock: ManualClock, api: FakeSliceApi, publishers: list[SlicePublisher]
) -> None:
    pub = start(api, publishers, nics(3))
    synced(clock, pub)
    (name,) = api.objects
    # someone else updates between our read and our write: our resourceVersion is stale
    api.faults.append(fail_once("update", ApiError("update", 409, "the object has been modified")))
    pub.set_devices(nics(3, speed=25))
    clock.settle(THREADS)
    clock.step(0.5, THREADS)
    synced(clock, pub)
    assert api.objects[name]["spec"]["devices"][0]["attributes"]["nic.topodra.io/speedGbps"] == {"int": 25}
    assert api.calls["update"] == 2 and api.writes["update"] == 1
    assert api.calls["list"] >= 2  # the relist after the conflict


def test_drift_is_repaired_after_the_resync_delay_and_own_writes_cause_no_resync(
    clock: ManualClock, api: FakeSliceApi, publishers: list[SlicePublisher]
) -> None:
    pub = start(api, publishers, nics(200), resync_delay=0.5)
    synced(clock, pub)
    clock.step(1.0, THREADS)
    assert api.writes == {"create": 2}  # our own ADDED events did not trigger writes
    victim = sorted(api.objects)[1]
    api.remove(victim)
    clock.settle(THREADS)
    clock.step(0.45, THREADS)
    assert len(api.objects) == 1, "repaired before the resync delay"
    clock.step(0.1, THREADS)
    synced(clock, pub)
    assert len(api.objects) == 2, "deleted slice not restored after the resync delay"
    name = sorted(api.objects)[0]
    api.edit(name, lambda o: o["spec"]["devices"].pop())
    clock.settle(THREADS)
    clock.step(1.5, THREADS)  # a second foreign change within a minute waits twice as long
    synced(clock, pub)
    assert len(api.objects[name]["spec"]["devices"]) == 128


def test_dropped_fields_are_reported_once_and_not_rewritten(
    clock: ManualClock, api: FakeSliceApi, publishers: list[SlicePublisher]
) -> None:
    def drop_taints(obj: dict[str, Any]) -> dict[str, Any]:
        for device in obj["spec"].get("devices", []):
            device.pop("taints", None)
        return obj

    api.transform = drop_taints
    devices = [*nics(2), Device("vf-t", taints=(Taint("nic.topodra.io/link", "down"),))]
    pub = start(api, publishers, devices)
    synced(clock, pub)
    clock.step(1.0, THREADS)
    assert pub.status().dropped_features == ("DRADeviceTaints",)
    assert api.writes == {"create": 1}


def test_list_attributes_rejected_by_the_server_are_left_out(
    clock: ManualClock, api: FakeSliceApi, publishers: list[SlicePublisher]
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
    clock.settle(THREADS)
    clock.step(0.5, THREADS)  # the relist after the 422, then a sync with nothing to write
    synced(clock, pub)
    assert pub.status().dropped_features == ("DRAListTypeAttributes",)
    (obj,) = api.objects.values()
    assert obj["spec"]["devices"][0]["attributes"] == {"nic.topodra.io/x": {"int": 1}}


def test_watch_410_relists(clock: ManualClock, api: FakeSliceApi, publishers: list[SlicePublisher]) -> None:
    pub = start(api, publishers, nics(3), watch_timeout=1)
    synced(clock, pub)
    lists = api.calls["list"]
    api.oldest_watchable = 10**9  # every resume is now "too old", even from a fresh list
    clock.step(1.6, THREADS)
    assert api.calls["list"] > lists
    assert api.calls["list"] - lists <= 8, "410 after a fresh list must back off, not spin"
    api.oldest_watchable = 0
    assert api.writes == {"create": 1}


def test_stop_keeps_slices_unless_asked_to_delete(
    clock: ManualClock, api: FakeSliceApi, publishers: list[SlicePublisher]
) -> None:
    pub = start(api, publishers, nics(200))
    synced(clock, pub)
    pub.stop()
    assert len(api.objects) == 2
    pub = start(api, publishers, nics(200))
    synced(clock, pub)
    pub.stop(delete_slices=True)
    assert api.objects == {}


def test_delete_slices_on_stop_is_a_constructor_option(
    clock: ManualClock, api: FakeSliceApi, publishers: list[SlicePublisher]
) -> None:
    """`serve --delete-slices-on-exit` sets it; the runtime then calls plain stop()."""
    pub = start(api, publishers, nics(3), delete_slices_on_stop=True)
    synced(clock, pub)
    pub.stop()
    assert api.objects == {}


def test_metrics_count_writes_errors_and_the_last_success(
    clock: ManualClock, api: FakeSliceApi, publishers: list[SlicePublisher]
) -> None:
    from prometheus_client import REGISTRY

    def sample(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, {"driver": "metrics.topodra.io", **labels}) or 0.0

    creates = sample("topodra_resourceslice_writes_total", verb="create")
    conflicts = sample("topodra_resourceslice_errors_total", verb="update", code="409")
    pub = SlicePublisher(api, "metrics.topodra.io", NODE, resync_delay=0.1, clock=clock)
    publishers.append(pub)
    pub.set_devices(nics(130))
    pub.start()
    synced(clock, pub)
    api.faults.append(fail_once("update", ApiError("update", 409, "conflict")))
    pub.set_devices(nics(130, speed=1))
    clock.settle(THREADS)
    clock.step(0.5, THREADS)
    synced(clock, pub)
    assert sample("topodra_resourceslice_writes_total", verb="create") == creates + 2
    assert sample("topodra_resourceslice_errors_total", verb="update", code="409") == conflicts + 1
    last = pub.status().last_success
    assert last is not None and ManualClock.EPOCH < last <= clock.time()
    assert sample("topodra_resourceslice_last_sync_success_timestamp_seconds") == last
    assert sample("topodra_published_devices") == 130


def test_changes_by_someone_who_keeps_changing_them_back_are_repaired_ever_more_slowly(
    clock: ManualClock, api: FakeSliceApi, publishers: list[SlicePublisher]
) -> None:
    """Something outside keeps putting its own version back (an old driver without this rule,
    a misconfigured controller): the repair slows down instead of fighting twice a second."""
    pub = start(api, publishers, nics(4), resync_delay=0.5, foreign_max=60)
    synced(clock, pub)
    (name,) = api.objects

    def theirs(obj: dict[str, Any]) -> None:
        obj["spec"]["devices"][0]["attributes"]["nic.topodra.io/speedGbps"] = {"int": 1}
        obj["metadata"].get("annotations", {}).pop(f"{DRIVER}/publisher", None)

    for _ in range(120):  # they answer every repair at once, for 60 s of the clock
        if api.objects[name]["spec"]["devices"][0]["attributes"]["nic.topodra.io/speedGbps"] != {"int": 1}:
            api.edit(name, theirs)
        clock.settle(THREADS)
        clock.step(0.5, THREADS)
    ours = pub.status().writes.get("update", 0)
    assert 4 <= ours <= 9, ours  # 0.5, 1, 2, 4, 8, 16, 32 s (±20 %) apart; a fight would be 120


def test_a_newer_instance_of_the_driver_owns_the_pool(
    clock: ManualClock, api: FakeSliceApi, publishers: list[SlicePublisher]
) -> None:
    """A surge rollout: the old and the new driver publish different attributes for one node."""
    old = start(api, publishers, nics(4, speed=100), resync_delay=0.5, instance="0000000001000.aaaaaaaa")
    synced(clock, old)
    new = start(api, publishers, nics(4, speed=200), resync_delay=0.5, instance="0000000002000.bbbbbbbb")
    clock.settle(2 * THREADS)
    clock.step(120.0, 2 * THREADS, step=0.25)
    (obj,) = api.objects.values()
    assert obj["spec"]["devices"][0]["attributes"]["nic.topodra.io/speedGbps"] == {"int": 200}
    assert obj["metadata"]["annotations"][f"{DRIVER}/publisher"] == new.instance
    assert old.status().deferring_to == new.instance and not old.status().synced
    # the old one tried again after ~30 s and ~60 s more (±20 %: at 24-36 s and 72-108 s), the
    # new one put its own back each time; a backoff that started over after each answered retry
    # made it 4 tries in 120 s
    assert 1 <= old.status().writes.get("update", 0) <= 2, old.status().writes
    assert new.status().writes.get("update", 0) == old.status().writes.get("update", 0) + 1
