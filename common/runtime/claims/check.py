"""What can be decided about a claim before anything is written: its reference, its allocation,
its devices on this node, conflicts with claims already held, and our opaque configs.

Pure functions over the API's JSON; every failure is a `ClaimFailure` whose text names the claim
and is what the kubelet gets for that claim alone (bounded: it may quote what a tenant sent).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from topodra.common import logs
from topodra.common.cdi.spec import SpecError
from topodra.common.device import Device
from topodra.common.kubeapi.types import ResourceClaim
from topodra.common.runtime.checkpoint import ClaimRecord
from topodra.common.runtime.driver import AllocatedDevice, ClaimRef, OpaqueConfig, PrepareError
from topodra.common.runtime.names import is_dns_label, is_dns_subdomain, is_request_name, is_uid, main_request

CONFIG_SOURCES = ("FromClass", "FromClaim")
MAX_ERROR_CHARS = 1000  # a claim's error goes to the kubelet, pod events and our logs


class Holders(Protocol):
    """The records held, asked by device (held.py keeps them so)."""

    def holding(self, pool: str, device: str) -> Iterable[ClaimRecord]:
        """Every record with an allocated device `device` of `pool`, whatever its phase."""
        ...


class ClaimFailure(Exception):
    """A per-claim failure before any side effect; its text is the kubelet's error string."""


def bounded(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """`text`, cut to `limit` characters with a note of how long it was: an error may quote what a
    tenant sent (a value, a list of unknown fields), and that must not cost kilobytes per retry."""
    if len(text) <= limit:
        return text
    return f"{text[: limit - 40]}... ({len(text)} characters in all)"


def label(claim: ClaimRef) -> str:
    return f"claim {claim.namespace}/{claim.name} (uid {claim.uid})"


@dataclass(frozen=True, slots=True)
class Checked:
    """A claim that passed every check, ready for the driver."""

    claim: ClaimRef
    allocated: tuple[AllocatedDevice, ...]
    configs: tuple[OpaqueConfig, ...]


def check_ref(claim: ClaimRef) -> None:
    """The kubelet's reference becomes file and CDI names: strict patterns before any I/O."""
    if not is_uid(claim.uid):
        raise ClaimFailure(f"{label(claim)}: refusing a claim uid that is not a lowercase RFC 4122 UUID")
    if not is_dns_label(claim.namespace):
        raise ClaimFailure(f"{label(claim)}: namespace is not a DNS label")
    if not is_dns_subdomain(claim.name):
        raise ClaimFailure(f"{label(claim)}: name is not a DNS subdomain")


def check_claim(
    claim: ClaimRef,
    obj: ResourceClaim,
    *,
    driver: str,
    node: str,
    pools: frozenset[str],
    here: Mapping[str, Device],
    held: Holders,
) -> Checked:
    """Everything that can be decided without side effects: it is this claim, allocated, with
    devices of `driver` from this node's `pools` that exist `here` and no other claim in `held`
    holds; and our configs."""
    meta = obj.get("metadata") or {}
    got_uid = meta.get("uid")
    if got_uid != claim.uid:
        raise ClaimFailure(f"{label(claim)}: got replaced, the API server has uid {got_uid!r}")
    allocation: Any = (obj.get("status") or {}).get("allocation")
    if not isinstance(allocation, Mapping):
        raise ClaimFailure(f"{label(claim)}: not allocated")
    devices = allocation.get("devices") or {}
    if not isinstance(devices, Mapping):
        raise ClaimFailure(f"{label(claim)}: status.allocation.devices is not an object")
    results = devices.get("results") or []
    if not isinstance(results, list):
        raise ClaimFailure(f"{label(claim)}: status.allocation.devices.results is not a list")
    allocated = tuple(
        parse_result(claim, i, r)
        for i, r in enumerate(results)
        if isinstance(r, Mapping) and r.get("driver") == driver
    )
    if not allocated:
        raise ClaimFailure(f"{label(claim)}: no device of driver {driver} is allocated")
    for a in allocated:
        if a.pool not in pools:
            raise ClaimFailure(
                f"{label(claim)}: device {a.device!r} is allocated from pool {a.pool!r}, which is "
                f"not this node's ({', '.join(sorted(pools))})"
            )
        if a.device not in here:
            raise ClaimFailure(f"{label(claim)}: device {a.device!r} does not exist on node {node}")
    check_conflicts(claim, allocated, here, held)
    configs = parse_configs(claim, driver, devices.get("config") or [], allocated)
    return Checked(claim, allocated, configs)


def check_conflicts(
    claim: ClaimRef,
    allocated: Sequence[AllocatedDevice],
    here: Mapping[str, Device],
    held: Holders,
) -> None:
    """The driver is the last line of defence: no device (or shared device and share id) of
    another claim, whatever that claim's phase. Asked per device (`held.holding`), not by walking
    every claim held."""
    for a in allocated:
        if a.admin_access:
            continue  # admin access is meant to coexist with other users of the device
        shareable = here[a.device].allow_multiple_allocations
        for other in held.holding(a.pool, a.device):
            if other.claim.uid == claim.uid:
                continue
            for b in other.allocated:
                if b.admin_access or (b.pool, b.device) != (a.pool, a.device):
                    continue
                if shareable and a.share_id and b.share_id and a.share_id != b.share_id:
                    continue
                raise ClaimFailure(
                    f"{label(claim)}: device {a.device!r} (pool {a.pool!r}) is already held by claim "
                    f"{other.claim.namespace}/{other.claim.name} (uid {other.claim.uid})"
                )


def parse_result(claim: ClaimRef, index: int, r: Mapping[str, Any]) -> AllocatedDevice:
    where = f"{label(claim)}: status.allocation.devices.results[{index}]"
    request, pool, device = r.get("request"), r.get("pool"), r.get("device")
    if not isinstance(request, str) or not is_request_name(request):
        raise ClaimFailure(f"{where}: request {request!r} is not a request name")
    if not isinstance(pool, str) or not pool:
        raise ClaimFailure(f"{where}: pool {pool!r} is not a pool name")
    if not isinstance(device, str) or not is_dns_label(device):
        raise ClaimFailure(f"{where}: device name {device!r} is not a DNS label; refusing")
    share_id = r.get("shareID")
    if share_id is not None and (not isinstance(share_id, str) or not is_uid(share_id)):
        raise ClaimFailure(f"{where}: shareID {share_id!r} is not a lowercase RFC 4122 UUID; refusing")
    consumed = r.get("consumedCapacity") or {}
    if not isinstance(consumed, Mapping):
        raise ClaimFailure(f"{where}: consumedCapacity is not an object")
    return AllocatedDevice(
        request=request,
        pool=pool,
        device=device,
        share_id=share_id,
        consumed_capacity={str(k): str(v) for k, v in consumed.items()},
        admin_access=r.get("adminAccess") is True,
    )


def parse_configs(
    claim: ClaimRef, driver: str, entries: Any, allocated: Sequence[AllocatedDevice]
) -> tuple[OpaqueConfig, ...]:
    """Our opaque configs that apply to at least one of our results, class ones first."""
    if not isinstance(entries, list):
        raise ClaimFailure(f"{label(claim)}: status.allocation.devices.config is not a list")
    ours: list[OpaqueConfig] = []
    for i, e in enumerate(entries):
        where = f"{label(claim)}: status.allocation.devices.config[{i}]"
        if not isinstance(e, Mapping):
            raise ClaimFailure(f"{where}: is not an object")
        opaque = e.get("opaque")
        if not isinstance(opaque, Mapping) or opaque.get("driver") != driver:
            continue
        source = e.get("source")
        if source not in CONFIG_SOURCES:
            raise ClaimFailure(f"{where}: source {source!r} is not one of {', '.join(CONFIG_SOURCES)}")
        requests = e.get("requests") or []
        if not isinstance(requests, list) or not all(isinstance(x, str) for x in requests):
            raise ClaimFailure(f"{where}: requests must be a list of request names")
        params = opaque.get("parameters")
        if not isinstance(params, Mapping):
            raise ClaimFailure(f"{where}: opaque.parameters must be a JSON object")
        cfg = OpaqueConfig(source=source, requests=tuple(requests), parameters=params)
        if not cfg.requests or any(
            r == a.request or r == main_request(a.request) for a in allocated for r in cfg.requests
        ):
            ours.append(cfg)
    ours.sort(key=lambda c: CONFIG_SOURCES.index(c.source))  # stable: class before claim
    return tuple(ours)


def driver_message(claim: ClaimRef, e: BaseException, log: Any) -> str:
    """The kubelet's error text for what the driver (or its spec) raised; a crash is logged
    with its traceback, as it is our bug or the driver's."""
    return bounded(driver_text(claim, e, log))


def driver_text(claim: ClaimRef, e: BaseException, log: Any) -> str:
    if isinstance(e, PrepareError):
        text = str(e)
        # drivers' ConfigErrors already name the claim; do not say it twice
        return text if text.startswith("claim ") else f"{label(claim)}: {text}"
    if isinstance(e, SpecError):
        return f"{label(claim)}: driver produced an invalid CDI spec: {e}"
    if isinstance(e, TypeError | ValueError) and "JSON" in str(e):
        return f"{label(claim)}: driver state is not JSON data: {e}"
    if isinstance(e, OSError):
        return f"{label(claim)}: cannot write CDI spec: {e}"
    log.exception(f"driver prepare crashed for {label(claim)}", **logs.claim(claim))
    return f"{label(claim)}: driver error: {type(e).__name__}: {e}"
