"""Structured log lines and the shared metric objects, through the real formatter and registry."""

from __future__ import annotations

import io
import json
import logging

import pytest
from prometheus_client import REGISTRY, generate_latest
from topodra.common import logs
from topodra.common.runtime import metrics
from topodra.common.runtime.driver import ClaimRef
from topodra.common.runtime.observability import parse_address


def test_log_line_is_json_with_bound_and_call_fields() -> None:
    out = io.StringIO()
    logs.setup(logging.DEBUG, out)
    try:
        log = logs.get("topodra.test", driver="cpu.topodra.io", device="old")
        log.warning('claim "x" failed', **logs.claim(ClaimRef("ns", "name", "uid-1")), device="cpu-3")
        try:
            raise ValueError("bad field")
        except ValueError:
            log.exception("with traceback")
    finally:
        logging.getLogger().handlers.clear()
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert first["msg"] == 'claim "x" failed'
    assert first["level"] == "warning"
    assert (first["driver"], first["claim"], first["claim_uid"], first["device"]) == (
        "cpu.topodra.io",
        "ns/name",
        "uid-1",
        "cpu-3",
    )
    assert "ValueError: bad field" in second["exception"]


def test_metrics_are_exposed_with_driver_label() -> None:
    metrics.CLAIM_OPERATIONS.labels("metrics-test.topodra.io", "prepare").inc(3)
    metrics.GRPC_DURATION.labels("metrics-test.topodra.io", "NodePrepareResources", "v1").observe(0.002)
    text = generate_latest(REGISTRY).decode()
    assert 'topodra_claim_operations_total{driver="metrics-test.topodra.io",operation="prepare"} 3.0' in text
    assert "topodra_grpc_request_duration_seconds_bucket" in text
    assert "process_resident_memory_bytes" in text


def test_metrics_address_forms() -> None:
    assert parse_address(":9400") == ("0.0.0.0", 9400)
    assert parse_address("127.0.0.1:8080") == ("127.0.0.1", 8080)
    assert parse_address("[::1]:9400") == ("::1", 9400)
    for bad in ("9400", "host:", "host:http", "h:70000"):
        with pytest.raises(ValueError, match="not host:port"):
            parse_address(bad)
