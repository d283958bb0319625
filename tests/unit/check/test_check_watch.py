"""What the watch agent says: the disagreement lines, the Event's shape and size."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from topodra.common.check import build_report, node_devices
from topodra.common.check.watch import (
    EVENTS_NAMESPACE,
    MAX_MESSAGE,
    REASON_WRONG,
    digest,
    disagreement,
    event_body,
    summary_line,
)
from topodra.common.topology import discover

from tests.check_kit import NVIDIA, SRIOV, STALE_GPU, TOPODRA
from tests.unit.check.conftest import NODE


def test_disagreement_lists_each_wrong_value_once_sorted(
    root: Path, all_slices: list[dict[str, Any]]
) -> None:
    report = build_report(discover(root), node_devices(all_slices, NODE))
    lines = disagreement(report)
    assert lines == sorted(lines) and len(lines) == report.errors
    assert any(line.startswith(f"{NVIDIA} gpu-4 pciBusID") and STALE_GPU in line for line in lines)
    assert sum(line.startswith(f"{SRIOV} ") for line in lines) == 2
    ours = build_report(
        discover(root), node_devices([s for s in all_slices if s["spec"]["driver"] in TOPODRA], NODE)
    )
    assert disagreement(ours) == [] and digest([]) != digest(lines)


def test_the_event_is_on_the_node_as_kubectl_describe_finds_it(
    root: Path, all_slices: list[dict[str, Any]]
) -> None:
    report = build_report(discover(root), node_devices(all_slices, NODE))
    message = summary_line(report, disagreement(report))
    assert message.startswith(
        f"{report.errors} wrong or malformed topology attribute value(s) on node {NODE}"
    )
    body = event_body(NODE, REASON_WRONG, message, True, 1_700_000_000.25)
    assert body["metadata"]["namespace"] == EVENTS_NAMESPACE == "default"
    assert body["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": NODE}
    assert body["type"] == "Warning" and body["reason"] == REASON_WRONG
    assert body["eventTime"] == "2023-11-14T22:13:20.250000Z"
    assert body["firstTimestamp"] == body["lastTimestamp"] == "2023-11-14T22:13:20Z"


def test_the_message_stays_within_an_event_note(root: Path, all_slices: list[dict[str, Any]]) -> None:
    report = build_report(discover(root), node_devices(all_slices, NODE))
    many = [f"driver device numaNode: value {i} is wrong" for i in range(500)]
    text = summary_line(report, many)
    assert len(text) == MAX_MESSAGE and text.endswith("...")
