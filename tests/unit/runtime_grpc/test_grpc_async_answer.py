"""DRAServicer with a processor that answers later: one answer per call, whoever gives it.

The processors here are small hand-written ones (no claim core): what is under test is the
servicer's contract with any AsyncClaimProcessor, including processors that misbehave."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from topodra.common.runtime.draserver import DRAServicer
from topodra.common.runtime.driver import ClaimRef
from topodra.common.runtime.grpcserver.connection import Deferred
from topodra.common.runtime.seams import ClaimOutcome
from topodra.proto.dra.v1 import api_pb2 as pb

Done = Callable[[dict[str, ClaimOutcome]], None]


class Processor:
    """Calls `behaviour(claims, done)` for prepare_async; the sync methods are never used."""

    def __init__(self, behaviour: Callable[[Sequence[ClaimRef], Done], None]) -> None:
        self.behaviour = behaviour

    def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, ClaimOutcome]:
        raise AssertionError("the servicer must use prepare_async")

    def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, str]:
        raise AssertionError("the servicer must use unprepare_async")

    def prepare_async(self, claims: Sequence[ClaimRef], done: Done) -> None:
        self.behaviour(claims, done)

    def unprepare_async(self, claims: Sequence[ClaimRef], done: Callable[[dict[str, str]], None]) -> None:
        done({c.uid: "" for c in claims})


def request(*uids: str) -> Any:
    r = pb.NodePrepareResourcesRequest()
    for uid in uids:
        r.claims.add(namespace="ns", name=f"claim-{uid}", uid=uid)
    return r


def answers(deferred: Any) -> list[Any]:
    assert isinstance(deferred, Deferred)
    got: list[Any] = []
    deferred.then(got.append)
    return got


def ok(claims: Sequence[ClaimRef]) -> dict[str, ClaimOutcome]:
    return {c.uid: ClaimOutcome() for c in claims}


def test_a_processor_that_raises_before_answering_fails_every_claim_of_the_call() -> None:
    def broken(claims: Sequence[ClaimRef], done: Done) -> None:
        raise RuntimeError("core bug")

    got = answers(DRAServicer("d.example.com", Processor(broken)).prepare(request("u1", "u2"), pb, "v1"))
    assert len(got) == 1
    errors = {uid: c.error for uid, c in got[0].claims.items()}
    assert errors == {uid: "internal error during prepare: RuntimeError: core bug" for uid in ("u1", "u2")}


def test_an_answer_given_before_the_processor_raises_is_the_one_kept() -> None:
    def answers_then_raises(claims: Sequence[ClaimRef], done: Done) -> None:
        done(ok(claims))
        raise RuntimeError("after the answer")

    got = answers(
        DRAServicer("d.example.com", Processor(answers_then_raises)).prepare(request("u1"), pb, "v1")
    )
    assert [dict(r.claims)["u1"].error for r in got] == [""]


def test_answers_racing_from_many_threads_reach_the_call_once() -> None:
    """Counted where the servicer builds the answer (its claims counter), not at the Deferred,
    which would drop a second answer on its own."""
    from prometheus_client import REGISTRY

    driver = "race.example.com"
    labels = {"driver": driver, "operation": "prepare"}
    start = threading.Barrier(8, timeout=5)

    def many(claims: Sequence[ClaimRef], done: Done) -> None:
        def answer() -> None:
            start.wait()
            done(ok(claims))

        threads = [threading.Thread(target=answer) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    servicer = DRAServicer(driver, Processor(many))
    for _ in range(50):
        assert len(answers(servicer.prepare(request("u1"), pb, "v1"))) == 1
    assert REGISTRY.get_sample_value("topodra_claim_operations_total", labels) == 50
