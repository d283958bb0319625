"""The runtime asks a driver what it can do in one place (common/runtime/capabilities.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from topodra.common.runtime import capabilities


class _Plain:
    name = "plain.example.com"


class _Serving(_Plain):
    def start(self) -> None: ...

    def stop(self) -> None: ...

    def status_detail(self) -> Mapping[str, Any]:
        return {"pinning": "nri"}


class _OnlyStops(_Plain):
    def stop(self) -> None: ...


def test_a_driver_that_serves_is_found_once_and_a_partial_one_is_not() -> None:
    serving = _Serving()
    assert capabilities.of(serving).serves is serving  # type: ignore[arg-type]
    # start/stop/status_detail come together: half of them is not the capability
    assert capabilities.of(_OnlyStops()).serves is None  # type: ignore[arg-type]
    assert capabilities.of(_Plain()).serves is None  # type: ignore[arg-type]


class _InMemory(_Plain):
    holds_in_memory = True


class _SaysSo(_Plain):
    holds_in_memory = "yes"  # not the declaration: only True is


def test_holds_in_memory_is_read_from_the_class_and_only_true_counts() -> None:
    assert capabilities.of(_InMemory()).holds_in_memory is True  # type: ignore[arg-type]
    assert capabilities.of(_Plain()).holds_in_memory is False  # type: ignore[arg-type]
    assert capabilities.of(_SaysSo()).holds_in_memory is False  # type: ignore[arg-type]
