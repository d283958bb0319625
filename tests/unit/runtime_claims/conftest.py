"""Fixtures for the claim core: one node's driver, a claim store, and a manager factory.

`claim_store` is the stand-in (MemoryClaimStore) until the control-plane tier lands; the tests
only use put/delete/source, so a store backed by the real kube-apiserver slots in here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from topodra.common.cdi.spec import CdiWriter
from topodra.common.runtime.checkpoint import Checkpoint
from topodra.common.runtime.claims import ClaimManager, cdi_kind

from tests.unit.runtime_claims.claimkit import DRIVER, NODE, HoldDriver, MemoryClaimStore


@pytest.fixture
def claim_store() -> MemoryClaimStore:
    return MemoryClaimStore()


@pytest.fixture
def dirs(tmp_path: Path) -> dict[str, Path]:
    return {"state": tmp_path / "state", "cdi": tmp_path / "cdi", "hw": tmp_path / "hw"}


@pytest.fixture
def driver(dirs: dict[str, Path]) -> HoldDriver:
    return HoldDriver(dirs["hw"])


ManagerFactory = Callable[..., ClaimManager]


@pytest.fixture
def make_manager(dirs: dict[str, Path], claim_store: MemoryClaimStore) -> Iterator[ManagerFactory]:
    """Builds a started manager; call again for "the process restarted" (fresh driver object)."""
    made: list[ClaimManager] = []

    def make(driver: HoldDriver | None = None, start: bool = True, **kwargs: Any) -> ClaimManager:
        m = ClaimManager(
            driver or HoldDriver(dirs["hw"]),
            NODE,
            claim_store.source,
            Checkpoint(dirs["state"], DRIVER),
            CdiWriter(dirs["cdi"], cdi_kind(DRIVER)),
            **kwargs,
        )
        if start:
            m.start()
        made.append(m)
        return m

    yield make
    for m in made:
        m.close()
