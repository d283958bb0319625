"""What the NIC driver writes into `ResourceClaim.status.devices`: the pod's view of its NIC.

Writes go through a queue on their own thread: the kubelet must not wait for the API server
during prepare, and a failed write is retried with backoff rather than failing the pod.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Sequence
from typing import Any

from topodra.common import logs
from topodra.common.runtime.config import describe_claim
from topodra.common.runtime.driver import (
    AllocatedDeviceStatus,
    ClaimRef,
    ClaimStatusError,
    ClaimStatusWriter,
    DeviceCondition,
    NetworkDeviceData,
)
from topodra.drivers.nic.attach import Attachment

_log = logs.get("topodra.nic")


def entry(
    att: Attachment, reason: str, message: str, ips: Sequence[str], ready: str = "True"
) -> AllocatedDeviceStatus:
    """Our `status.devices[]` entry for one attachment: condition Ready=<ready> with `reason`."""
    net = NetworkDeviceData(
        interface_name=att.container_name if att.mode != "none" else att.host_name,
        hardware_address=att.mac or "",
        ips=tuple(ips),
    )
    return AllocatedDeviceStatus(
        pool=att.pool,
        device=att.device,
        share_id=att.share_id,
        conditions=(DeviceCondition("Ready", ready, reason, message),),
        network_data=net,
    )


class StatusQueue:
    def __init__(self, writer: ClaimStatusWriter, *, max_attempts: int = 6) -> None:
        self._writer = writer
        self._q: queue.Queue[tuple[str, ClaimRef, Any, int] | None] = queue.Queue()
        self._max = max_attempts
        self._idle = threading.Condition()
        self._busy = 0
        self._thread = threading.Thread(target=self._run, name="nic-claim-status", daemon=True)
        self._thread.start()

    def set(self, claim: ClaimRef, devices: Sequence[AllocatedDeviceStatus]) -> None:
        self._put(("set", claim, tuple(devices), 0))

    def remove(self, claim: ClaimRef, keys: Sequence[tuple[str, str, str | None]]) -> None:
        self._put(("remove", claim, tuple(keys), 0))

    def _put(self, item: tuple[str, ClaimRef, Any, int]) -> None:
        with self._idle:
            self._busy += 1
        self._q.put(item)

    def flush(self, timeout: float) -> bool:
        with self._idle:
            return self._idle.wait_for(lambda: self._busy == 0, timeout)

    def _run(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            op, claim, payload, attempt = item
            retry = False
            try:
                if op == "set":
                    self._writer.set_devices(claim, payload)
                else:
                    self._writer.remove_devices(claim, payload)
            except ClaimStatusError as e:
                retry = attempt + 1 < self._max
                _log.warning(
                    f"cannot write status of {describe_claim(claim)}: {e}"
                    + ("; will retry" if retry else ""),
                    **logs.claim(claim),
                    error=str(e),
                )
            except Exception:
                _log.exception(f"status write of {describe_claim(claim)} crashed", **logs.claim(claim))
            if retry:
                time.sleep(min(0.2 * 2**attempt, 5.0))
                self._q.put((op, claim, payload, attempt + 1))
                continue
            with self._idle:
                self._busy -= 1
                self._idle.notify_all()

    def close(self) -> None:
        self._q.put(None)
