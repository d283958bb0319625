"""held.py: the index of who holds each device always names exactly the records that allocate it.

The conflict check trusts it to find every other holder of a device (a missed one would hand the
device out twice), so it is compared, after every change of a random sequence, with the walk over
every record it replaces.
"""

from __future__ import annotations

import random

import pytest
from topodra.common.runtime.checkpoint import ClaimRecord, Phase
from topodra.common.runtime.claims.held import Held
from topodra.common.runtime.driver import AllocatedDevice, ClaimRef

KEYS = [(pool, device) for pool in ("node-a", "node-b") for device in ("dev-0", "dev-1", "dev-2")]


def _record(rng: random.Random, uid: str) -> ClaimRecord:
    allocated = tuple(
        AllocatedDevice("r", pool, device, share_id=rng.choice([None, "s"]))
        for pool, device in rng.sample(KEYS + KEYS, rng.randint(1, 3))  # a device may come twice
    )
    return ClaimRecord(ClaimRef("ns", uid, uid), rng.choice(list(Phase)), allocated, f"{uid}.json")


def _walk(held: Held, pool: str, device: str) -> set[str]:
    return {
        uid for uid, rec in held.items() if any((a.pool, a.device) == (pool, device) for a in rec.allocated)
    }


@pytest.mark.parametrize("seed", range(20))
def test_the_index_names_exactly_the_holders_after_any_sequence_of_changes(seed: int) -> None:
    rng = random.Random(seed)
    uids = [f"c{i}" for i in range(8)]
    held = Held({u: _record(rng, u) for u in uids[:3]})
    for _ in range(200):
        op = rng.randrange(5)
        uid = rng.choice(uids)
        old = held.get(uid)
        if op == 0:
            held.put(uid, _record(rng, uid))  # a new reservation, maybe of other devices
        elif op == 1 and old is not None:
            # the same devices, another phase: what a prepare and an unprepare do
            held.put(uid, ClaimRecord(old.claim, rng.choice(list(Phase)), old.allocated, old.cdi_file))
        elif op == 2:
            assert held.pop(uid) is old
        elif op == 3:
            held.update({u: _record(rng, u) for u in rng.sample(uids, 2)})
        elif op == 4 and old is not None:  # equal devices in a new tuple (as a reload reads them)
            held.put(uid, ClaimRecord(old.claim, old.phase, tuple(old.allocated), old.cdi_file))
        for pool, device in KEYS:
            assert {r.claim.uid for r in held.holding(pool, device)} == _walk(held, pool, device)
        assert set(held) == set(held.keys()) and len(held) == len(list(held.values()))


def test_reading_is_the_records_mapping() -> None:
    rng = random.Random(1)
    records = {u: _record(rng, u) for u in ("a", "b")}
    held = Held(records)
    assert dict(held) == records and dict(held.items()) == records
    assert "a" in held and "z" not in held and held.get("z") is None
    assert held.pop("z") is None
