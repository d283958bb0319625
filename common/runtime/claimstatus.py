"""Writing a driver's `ResourceClaim.status.devices[]` entries.

Several drivers may write entries into one claim (a claim can hold a CPU, an accelerator and a
NIC), so each write is read-modify-write of our entries only, sent as an update of the status
subresource carrying the resourceVersion that was read: the API server refuses it with 409 when
someone wrote in between, and we read again and retry. A JSON merge patch would replace the
whole list (other drivers' entries included); strategic merge cannot key a list on four fields.

RBAC: `resourceclaims` `get` and `resourceclaims/status` `update`; on 1.36+ with granular status
authorization also `resourceclaims/driver` `associated-node:update` for `resourceNames:
[<driver>]`.
"""

from __future__ import annotations

import copy
import datetime
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from topodra.common import logs
from topodra.common.kubeapi.claims import ClaimStatusApi
from topodra.common.kubeapi.errors import ApiError, Conflict, NotFound
from topodra.common.runtime.driver import AllocatedDeviceStatus, ClaimRef, ClaimStatusError

_log = logs.get("topodra.runtime.claimstatus")

Key = tuple[str, str, str | None]  # pool, device, shareID


def rfc3339(ts: float) -> str:
    return datetime.datetime.fromtimestamp(int(ts), datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def entry_key(entry: Mapping[str, Any]) -> Key:
    return (str(entry.get("pool", "")), str(entry.get("device", "")), entry.get("shareID") or None)


def to_api(
    driver: str,
    status: AllocatedDeviceStatus,
    previous: Mapping[str, Any] | None,
    now: str,
    generation: int | None,
) -> dict[str, Any]:
    """One API entry; a condition keeps its lastTransitionTime while its status is unchanged."""
    out: dict[str, Any] = {"driver": driver, "pool": status.pool, "device": status.device}
    if status.share_id:
        out["shareID"] = status.share_id
    old_conditions = {
        c.get("type"): c for c in (previous or {}).get("conditions") or () if isinstance(c, Mapping)
    }
    if status.conditions:
        conditions = []
        for c in status.conditions:
            old = old_conditions.get(c.type)
            since = old.get("lastTransitionTime") if old and old.get("status") == c.status else None
            cond: dict[str, Any] = {
                "type": c.type,
                "status": c.status,
                "reason": c.reason,
                "message": c.message,
                "lastTransitionTime": since or now,
            }
            if generation is not None:
                cond["observedGeneration"] = generation
            conditions.append(cond)
        out["conditions"] = conditions
    if status.network_data is not None:
        nd = status.network_data
        net: dict[str, Any] = {}
        if nd.interface_name:
            net["interfaceName"] = nd.interface_name
        if nd.hardware_address:
            net["hardwareAddress"] = nd.hardware_address
        if nd.ips:
            net["ips"] = list(nd.ips)
        out["networkData"] = net
    if status.data is not None:
        out["data"] = copy.deepcopy(dict(status.data))
    return out


def merge(
    current: Sequence[Mapping[str, Any]],
    driver: str,
    updates: Sequence[AllocatedDeviceStatus],
    removals: Sequence[Key],
    now: str,
    generation: int | None = None,
) -> list[dict[str, Any]]:
    """The new `status.devices`: other drivers' entries untouched and in place, ours replaced,
    new ones appended, removed ones dropped (pure)."""
    by_key = {(u.pool, u.device, u.share_id or None): u for u in updates}
    drop = set(removals)
    out: list[dict[str, Any]] = []
    done: set[Key] = set()
    for entry in current:
        if not isinstance(entry, Mapping):
            continue
        key = entry_key(entry)
        if entry.get("driver") != driver:
            out.append(dict(entry))
        elif key in by_key:
            out.append(to_api(driver, by_key[key], entry, now, generation))
            done.add(key)
        elif key in drop:
            continue
        else:
            out.append(dict(entry))
    for key, update in by_key.items():
        if key not in done:
            out.append(to_api(driver, update, None, now, generation))
    return out


def _same(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]) -> bool:
    return [dict(x) for x in a] == [dict(x) for x in b]


class KubeClaimStatusWriter:
    """`ClaimStatusWriter` over the API (kubeapi.claims: a GET and a PUT of the status)."""

    def __init__(
        self,
        api_client: Any,
        driver: str,
        *,
        retries: int = 8,
        timeout: float = 10.0,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._api = ClaimStatusApi(api_client, timeout)
        self.driver = driver
        self._retries = retries
        self._clock = clock
        self._sleep = sleep
        self._log = _log.bind(driver=driver)

    def set_devices(self, claim: ClaimRef, devices: Sequence[AllocatedDeviceStatus]) -> None:
        self._update(claim, devices, ())

    def remove_devices(self, claim: ClaimRef, keys: Sequence[Key]) -> None:
        self._update(claim, (), keys)

    def _update(
        self, claim: ClaimRef, updates: Sequence[AllocatedDeviceStatus], removals: Sequence[Key]
    ) -> None:
        label = f"ResourceClaim {claim.namespace}/{claim.name} (uid {claim.uid})"
        removing_only = not updates
        for attempt in range(self._retries):
            try:
                obj = self._api.read(claim.namespace, claim.name)
            except NotFound:
                if removing_only:
                    return
                raise ClaimStatusError(f"GET {label}: not found") from None
            except ApiError as e:
                raise ClaimStatusError(f"GET {label}: {e}") from e
            meta = obj.get("metadata") or {}
            if meta.get("uid") != claim.uid:
                if removing_only:
                    return
                raise ClaimStatusError(f"{label}: replaced, the API server has uid {meta.get('uid')!r}")
            status = obj.get("status") or {}
            current: Sequence[Mapping[str, Any]] = status.get("devices") or []
            new = merge(
                current, self.driver, updates, removals, rfc3339(self._clock()), meta.get("generation")
            )
            if _same(current, new):
                return
            body: dict[str, Any] = copy.deepcopy(dict(obj))
            body.setdefault("status", {})
            if new:
                body["status"]["devices"] = new
            else:
                body["status"].pop("devices", None)
            try:
                self._api.replace_status(claim.namespace, claim.name, body)
            except Conflict:
                self._sleep(min(0.05 * 2**attempt, 1.0))
                continue  # someone wrote in between: read again
            except NotFound:
                if removing_only:
                    return
                raise ClaimStatusError(f"update status of {label}: not found") from None
            except ApiError as e:
                raise ClaimStatusError(f"update status of {label}: {e}") from e
            self._log.info(
                f"wrote status.devices of {label}",
                claim_namespace=claim.namespace,
                claim_name=claim.name,
                claim_uid=claim.uid,
                devices=[u.device for u in updates],
                removed=[k[1] for k in removals],
            )
            return
        raise ClaimStatusError(f"update status of {label}: still conflicting after {self._retries} attempts")
