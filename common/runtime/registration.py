"""The plugin registration service the kubelet's plugin watcher calls (docs/design/kubelet.md).

The kubelet finds our registration socket in `plugins_registry`, asks `GetInfo` (1 s deadline)
and reports the outcome with `NotifyRegistrationStatus`. The outcome is kept here because
readiness depends on it: a driver the kubelet rejected must not look healthy.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

from topodra.common import logs
from topodra.common.runtime import metrics
from topodra.common.runtime.grpcserver.connection import CallContext, Method
from topodra.common.runtime.grpcserver.service import methods
from topodra.proto.pluginregistration.v1 import api_pb2 as pb

PLUGIN_TYPE = "DRAPlugin"
# Order matters: the kubelet takes the first entry it supports (docs/design/kubelet.md).
SUPPORTED_VERSIONS = (
    "v1.DRAPlugin",
    "v1beta1.DRAPlugin",
    "v1.DRAResourceHealth",
    "v1alpha1.DRAResourceHealth",
)
SERVICE = pb.DESCRIPTOR.services_by_name["Registration"]


@dataclass(frozen=True, slots=True)
class RegistrationStatus:
    registered: bool
    error: str
    at: float  # time.time() of the notification


class RegistrationServicer:
    def __init__(self, driver: str, endpoint: Path, versions: tuple[str, ...] = SUPPORTED_VERSIONS) -> None:
        self.driver = driver
        self.endpoint = endpoint
        self.versions = versions
        self._status: RegistrationStatus | None = None
        self._changed = threading.Condition()
        self._log = logs.get(__name__, driver=driver)
        metrics.KUBELET_REGISTERED.labels(driver).set(0)

    @property
    def status(self) -> RegistrationStatus | None:
        """The kubelet's last word, None before it said anything."""
        return self._status

    def wait_registered(self, timeout: float) -> bool:
        """Block until the kubelet confirmed registration (True) or `timeout` passed (False)."""
        with self._changed:
            self._changed.wait_for(lambda: self._status is not None and self._status.registered, timeout)
            return self._status is not None and self._status.registered

    def methods(self) -> dict[str, Method]:
        return methods(SERVICE, {"GetInfo": self.get_info, "NotifyRegistrationStatus": self.notify})

    def get_info(self, request: pb.InfoRequest, context: CallContext) -> pb.PluginInfo:
        self._log.debug("kubelet asked for plugin info", endpoint=str(self.endpoint))
        return pb.PluginInfo(
            type=PLUGIN_TYPE, name=self.driver, endpoint=str(self.endpoint), supported_versions=self.versions
        )

    def notify(self, request: pb.RegistrationStatus, context: CallContext) -> pb.RegistrationStatusResponse:
        status = RegistrationStatus(request.plugin_registered, request.error, time.time())
        with self._changed:
            self._status = status
            self._changed.notify_all()
        metrics.KUBELET_REGISTERED.labels(self.driver).set(1 if status.registered else 0)
        if status.registered:
            self._log.info("kubelet registered the plugin", endpoint=str(self.endpoint))
        else:
            self._log.error("kubelet rejected the plugin", error=status.error, endpoint=str(self.endpoint))
        return pb.RegistrationStatusResponse()
