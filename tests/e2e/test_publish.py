"""Every driver publishes its slices for several simulated nodes, each node with
its own sysfs root and its own node-bound driver tokens; the API server accepts all of them
(what is stored equals what `topodra slices` computes for that root), and an idle fleet makes
zero writes (counted by an independent admin watch, not by the drivers)."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import kubernetes.client as k8s
import pytest

from tests.controlplane.objects import eventually
from tests.e2e.conftest import Fleet
from tests.e2e.slicewatch import SliceEvent, SliceWatch

pytestmark = pytest.mark.controlplane

IDLE_SECONDS = 60.0


def manifest(root: Any) -> dict[str, Any] | None:
    path = root / "synth-manifest.json"
    return json.loads(path.read_text()) if path.exists() else None


def test_each_node_publishes_what_topodra_slices_computes(fleet: Fleet, record_property: Any) -> None:
    table = []
    for role, node in fleet.nodes.items():
        expected = node.expected_devices()
        published = node.published_devices()
        assert published == expected, f"{role} ({node.name}): stored slices differ from `topodra slices`"
        counts = {kind: len(names) for kind, names in published.items()}
        table.append(
            f"{role:6} {node.spec.description:32} " + " ".join(f"{k}={v}" for k, v in counts.items())
        )
        record_property(f"devices_{role}", json.dumps(counts))
        # every driver found something on every machine of the fleet (a silent empty pool
        # would pass the equality above if both sides broke the same way)
        assert all(counts.values()), f"{role}: a driver published no devices: {counts}"
        for s in node.slices():
            owners = s["metadata"].get("ownerReferences") or []
            assert [(o["kind"], o["name"], o["uid"]) for o in owners] == [("Node", node.name, node.uid)]
            assert s["spec"]["pool"]["name"] == node.name
        # the written state came from the drivers themselves: no error was logged on the way
        for kind, proc in node.drivers.items():
            errors = [r for r in proc.log_records() if r.get("level") in ("error", "critical")]
            assert not errors, f"{role} {kind} logged errors: {errors[:3]}"

    # independent of the driver code: the synthetic machines' manifests say what is in them
    for role in ("hgx", "snc", "small"):
        node = fleet.nodes[role]
        truth = manifest(node.root)
        assert truth is not None
        accelerators = [p for p in truth["pci"] if p["kind"] == "accelerator"]
        assert len(node.published_devices()["accelerator"]) == len(accelerators), role
        numa_with_cpus = [n for n in truth["numa"] if n["cpus"]]
        assert len(node.published_devices()["cpu"]) == len(numa_with_cpus), role
    assert len(fleet.nodes["ve8"].published_devices()["accelerator"]) == 8  # 8 NEC vector engines

    sys.stdout.write("\nper node, devices per driver (= `topodra slices` for that root):\n")
    sys.stdout.write("\n".join(table) + f"\nfleet up in {fleet.startup_seconds:.1f} s\n")


@pytest.mark.slow
def test_an_idle_fleet_writes_nothing_for_a_minute(fleet: Fleet, record_property: Any) -> None:
    names = {n.name for n in fleet.nodes.values()}
    for node in fleet.nodes.values():
        node.wait_published()
    with SliceWatch(fleet.nodes["hgx"].cp.api_client()) as watch:
        began = time.monotonic()
        while time.monotonic() - began < IDLE_SECONDS:
            for node in fleet.nodes.values():
                node.check_alive()
            time.sleep(1.0)
        writes = watch.events(nodes=names, since=began)
        gaps = list(watch.gaps)
        # positive control: the observer does see writes (the kubelet-style wipe and the repair)
        small = fleet.nodes["small"]
        control = time.monotonic()
        k8s.ResourceV1Api(small.cp.admin).delete_collection_resource_slice(
            field_selector=f"spec.nodeName={small.name}"
        )

        def wipe_seen() -> list[SliceEvent] | None:
            ev = watch.events(nodes={small.name}, since=control)
            return ev if {"DELETED", "ADDED"} <= {e.type for e in ev} else None

        seen = eventually("the watch to see the wipe and the republish", wipe_seen)
        small.wait_published()
    by_node: dict[str, int] = {}
    for e in writes:
        by_node[f"{e.node}/{e.driver}"] = by_node.get(f"{e.node}/{e.driver}", 0) + 1
    record_property("idle_writes", len(writes))
    sys.stdout.write(
        f"\nidle {IDLE_SECONDS:.0f} s, {len(names)} nodes: {len(writes)} slice writes {by_node}\n"
    )
    assert not gaps, f"the observing watch broke, so the count is not proof: {gaps}"
    assert writes == [], [f"{e.type} {e.name} ({e.node}, {e.driver})" for e in writes]
    # and the slices still equal what `topodra slices` computes
    for node in fleet.nodes.values():
        assert node.published_devices() == node.expected_devices()
    assert {e.node for e in seen} == {small.name}
