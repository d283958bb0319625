"""The kubelet's DRAPlugin service, v1 and v1beta1, in front of a `ClaimProcessor`.

Translation only: wire messages become `ClaimRef`s, outcomes become wire messages. A claim
the processor cannot handle gets its own error string; a gRPC-level error would make the
kubelet drop the answers of every other claim of the pod, so none is ever raised for a claim,
not even when the processor itself fails.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from topodra.common import logs
from topodra.common.runtime import metrics
from topodra.common.runtime.driver import ClaimRef
from topodra.common.runtime.grpcserver.connection import Deferred, Method, gathered
from topodra.common.runtime.grpcserver.service import methods
from topodra.common.runtime.seams import AsyncClaimProcessor, ClaimOutcome, ClaimProcessor
from topodra.proto.dra.v1 import api_pb2 as v1
from topodra.proto.dra.v1beta1 import api_pb2 as v1beta1

VERSIONS: dict[str, ModuleType] = {"v1": v1, "v1beta1": v1beta1}


def claim_refs(claims: Sequence[Any]) -> tuple[list[ClaimRef], dict[str, str]]:
    """Split the request into claims to process and per-UID errors for malformed entries."""
    refs: list[ClaimRef] = []
    errors: dict[str, str] = {}
    seen: set[str] = set()
    for c in claims:
        missing = [f for f in ("namespace", "uid", "name") if not getattr(c, f)]
        if missing:
            errors[c.uid] = f"claim {c.namespace}/{c.name} (uid {c.uid!r}) lacks {', '.join(missing)}"
        elif c.uid not in seen:  # the kubelet never repeats a claim; a repeat is answered once
            seen.add(c.uid)
            refs.append(ClaimRef(namespace=c.namespace, name=c.name, uid=c.uid))
    return refs, errors


def prepare_response(pb: ModuleType, outcomes: dict[str, ClaimOutcome]) -> Any:
    response = pb.NodePrepareResourcesResponse()
    with_share_id = "share_id" in pb.Device.DESCRIPTOR.fields_by_name
    for uid, outcome in outcomes.items():
        entry = response.claims[uid]
        if outcome.error:
            entry.error = outcome.error
            continue
        for d in outcome.devices:
            device = entry.devices.add(
                request_names=d.request_names,
                pool_name=d.pool,
                device_name=d.device,
                cdi_device_ids=d.cdi_device_ids,
            )
            if with_share_id and d.share_id is not None:
                device.share_id = d.share_id
    return response


def unprepare_response(pb: ModuleType, errors: dict[str, str]) -> Any:
    response = pb.NodeUnprepareResourcesResponse()
    for uid, error in errors.items():
        response.claims[uid].error = error
    return response


class DRAServicer:
    """NodePrepareResources/NodeUnprepareResources for one driver, under both API versions."""

    def __init__(self, driver: str, processor: ClaimProcessor) -> None:
        self.driver = driver
        self.processor = processor
        # answered from the thread that serves the claims; no gRPC worker waits per call
        self._async: AsyncClaimProcessor | None = (
            processor if isinstance(processor, AsyncClaimProcessor) else None
        )
        if self._async is not None and hasattr(processor, "answering"):
            processor.answering = gathered  # a batch's answers leave in one write per connection
        self._log = logs.get(__name__, driver=driver)
        # each call's metric children, looked up on first use only (`labels()` takes a lock and
        # builds a key; made up front, series nobody called would be exported at zero)
        self._operations: dict[str, Any] = {}
        self._durations: dict[tuple[str, str], Any] = {}

    def methods(self) -> dict[str, Method]:
        out: dict[str, Method] = {}
        for version, pb in VERSIONS.items():
            impl = {
                "NodePrepareResources": self._bind(self.prepare, pb, version),
                "NodeUnprepareResources": self._bind(self.unprepare, pb, version),
            }
            out.update(methods(pb.DESCRIPTOR.services_by_name["DRAPlugin"], impl))
        return out

    @staticmethod
    def _bind(method: Any, pb: ModuleType, version: str) -> Any:
        return lambda request, context: method(request, pb, version)

    def prepare(self, request: Any, pb: ModuleType, version: str) -> Any:
        start = time.perf_counter()
        refs, outcomes_err = claim_refs(request.claims)
        outcomes = {uid: ClaimOutcome(error=e) for uid, e in outcomes_err.items()}
        n = len(request.claims)

        def answer(got: dict[str, ClaimOutcome]) -> Any:
            outcomes.update(self._prepared_all(refs, got))
            self._count("prepare", n, [o.error for o in outcomes.values()])
            response = prepare_response(pb, outcomes)
            self._observe("NodePrepareResources", version, start, len(refs))
            return response

        return self._run("prepare", refs, answer)

    def unprepare(self, request: Any, pb: ModuleType, version: str) -> Any:
        start = time.perf_counter()
        refs, errors = claim_refs(request.claims)
        n = len(request.claims)

        def answer(got: dict[str, str]) -> Any:
            errors.update(self._unprepared_all(refs, got))
            self._count("unprepare", n, list(errors.values()))
            response = unprepare_response(pb, errors)
            self._observe("NodeUnprepareResources", version, start, len(refs))
            return response

        return self._run("unprepare", refs, answer)

    def _run(self, operation: str, refs: list[ClaimRef], answer: Callable[[Any], Any]) -> Any:
        """The response now, or a Deferred that the thread serving the claims resolves."""
        prepare = operation == "prepare"
        if self._async is None or not refs:
            return answer(self._call(operation, refs, self._prepare_all if prepare else self._unprepare_all))
        deferred = Deferred()
        run = self._async.prepare_async if prepare else self._async.unprepare_async
        self._call_async(operation, refs, run, lambda got: deferred.resolve(answer(got)))
        return deferred

    def _prepare_all(self, refs: list[ClaimRef]) -> dict[str, ClaimOutcome]:
        return self.processor.prepare(refs) if refs else {}

    def _unprepare_all(self, refs: list[ClaimRef]) -> dict[str, str]:
        return self.processor.unprepare(refs) if refs else {}

    def _prepared_all(self, refs: list[ClaimRef], got: dict[str, ClaimOutcome]) -> dict[str, ClaimOutcome]:
        return {r.uid: got.get(r.uid) or ClaimOutcome(error=self._lost(r, "prepare")) for r in refs}

    def _unprepared_all(self, refs: list[ClaimRef], got: dict[str, str]) -> dict[str, str]:
        return {r.uid: got[r.uid] if r.uid in got else self._lost(r, "unprepare") for r in refs}

    def _lost(self, ref: ClaimRef, operation: str) -> str:
        self._log.error("claim processor gave no answer for a claim", operation=operation, **logs.claim(ref))
        return f"internal error: no {operation} result for claim {ref.namespace}/{ref.name}"

    def _call(self, operation: str, refs: list[ClaimRef], run: Any) -> Any:
        try:
            return run(refs)
        except Exception as e:  # a bug in the core must not become a gRPC error for the batch
            return self._failed(operation, refs, e)

    def _call_async(self, operation: str, refs: list[ClaimRef], run: Any, done: Any) -> None:
        """`run(refs, done)`; if it raises, `done` gets every claim failed (once: a call the
        core answered already keeps its answer). `list.pop` hands `done` to exactly one caller,
        whichever thread comes first, with no Event (a Condition and a lock) made per call."""
        pending = [done]

        def once(got: Any) -> None:
            try:
                answer = pending.pop()
            except IndexError:  # answered already
                return
            answer(got)

        try:
            run(refs, once)
        except Exception as e:
            once(self._failed(operation, refs, e))

    def _failed(self, operation: str, refs: list[ClaimRef], e: Exception) -> Any:
        self._log.exception("claim processor failed", operation=operation, claims=[r.uid for r in refs])
        message = f"internal error during {operation}: {type(e).__name__}: {e}"
        if operation == "prepare":
            return {r.uid: ClaimOutcome(error=message) for r in refs}
        return {r.uid: message for r in refs}

    def _count(self, operation: str, n: int, errors: list[str]) -> None:
        counter = self._operations.get(operation)
        if counter is None:
            counter = self._operations[operation] = metrics.CLAIM_OPERATIONS.labels(self.driver, operation)
        counter.inc(n)
        failed = sum(1 for e in errors if e)
        if failed:
            metrics.CLAIM_ERRORS.labels(self.driver, operation).inc(failed)

    def _observe(self, method: str, version: str, start: float, n: int) -> None:
        elapsed = time.perf_counter() - start
        histogram = self._durations.get((method, version))
        if histogram is None:
            histogram = self._durations[(method, version)] = metrics.GRPC_DURATION.labels(
                self.driver, method, version
            )
        histogram.observe(elapsed)
        self._log.debug("kubelet call answered", method=method, version=version, claims=n, seconds=elapsed)
