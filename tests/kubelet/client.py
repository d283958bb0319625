"""A kubelet stand-in that talks to a plugin exactly the way the kubelet does (docs/design/kubelet.md).

Registration: find sockets in `plugins_registry` like the plugin watcher (skip dot files and
non-sockets), dial, `GetInfo` with a 1 s deadline, check the type, pick the first entry of the
plugin's own list that this kubelet supports, then `NotifyRegistrationStatus`. After that:
NodePrepareResources/NodeUnprepareResources over the picked (or a forced) DRA version, and the
NodeWatchResources health stream. Real gRPC over real unix sockets; nothing is mocked.
"""

from __future__ import annotations

import stat
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import ServiceDescriptor
from topodra.common.runtime.grpcserver.service import method_path
from topodra.proto.dra.v1 import api_pb2 as dra_v1
from topodra.proto.dra.v1beta1 import api_pb2 as dra_v1beta1
from topodra.proto.dra_health.v1 import api_pb2 as health_v1
from topodra.proto.dra_health.v1alpha1 import api_pb2 as health_v1alpha1
from topodra.proto.pluginregistration.v1 import api_pb2 as reg_pb

DRA = {"v1.DRAPlugin": dra_v1, "v1beta1.DRAPlugin": dra_v1beta1}
HEALTH = {"v1.DRAResourceHealth": health_v1, "v1alpha1.DRAResourceHealth": health_v1alpha1}
# What a 1.37 kubelet supports, in no particular order: the plugin's order decides.
KUBELET_DRA_VERSIONS = ("v1beta1.DRAPlugin", "v1.DRAPlugin")
GET_INFO_TIMEOUT = 1.0
NOTIFY_TIMEOUT = 5.0
DIAL_TIMEOUT = 10.0
CALL_TIMEOUT = 45.0


def _codec(service: ServiceDescriptor, method: str) -> dict[str, Any]:
    m = service.methods_by_name[method]
    return {
        "request_serializer": message_factory.GetMessageClass(m.input_type).SerializeToString,
        "response_deserializer": message_factory.GetMessageClass(m.output_type).FromString,
    }


def unary_call(
    channel: grpc.Channel, service: ServiceDescriptor, method: str
) -> grpc.UnaryUnaryMultiCallable[Any, Any]:
    """A grpcio client callable for a method of `service` (grpcio is the independent client here)."""
    return channel.unary_unary(method_path(service, method), **_codec(service, method))


def stream_call(
    channel: grpc.Channel, service: ServiceDescriptor, method: str
) -> grpc.UnaryStreamMultiCallable[Any, Any]:
    return channel.unary_stream(method_path(service, method), **_codec(service, method))


class RegistrationFailed(Exception):
    pass


def watch_registry(registry_dir: Path) -> list[Path]:
    """Sockets the plugin watcher would pick up (recursively; dot files ignored)."""
    found = []
    for path in sorted(registry_dir.rglob("*")):
        if path.name.startswith(".") or not stat.S_ISSOCK(path.lstat().st_mode):
            continue
        found.append(path)
    return found


class _Dialer:
    """Python's gRPC cannot dial a 108-byte path (Go's can): go through a short symlink."""

    def __init__(self) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="kubelet-")
        self._n = 0

    def target(self, path: Path) -> str:
        if len(str(path).encode()) <= 107:
            return f"unix:{path}"
        self._n += 1
        link = Path(self._tmp.name) / str(self._n)
        link.symlink_to(path.parent)
        return f"unix:{link / path.name}"

    def close(self) -> None:
        self._tmp.cleanup()


def dial(dialer: _Dialer, path: Path, timeout: float = DIAL_TIMEOUT) -> grpc.Channel:
    channel = grpc.insecure_channel(dialer.target(path))
    grpc.channel_ready_future(channel).result(timeout=timeout)
    return channel


@dataclass
class Registered:
    info: Any  # PluginInfo
    dra_version: str  # e.g. "v1.DRAPlugin"
    health_version: str | None
    get_info_seconds: float


class KubeletClient:
    def __init__(self, supported_dra: Sequence[str] = KUBELET_DRA_VERSIONS) -> None:
        self.supported_dra = tuple(supported_dra)
        self._dialer = _Dialer()
        self._channels: list[grpc.Channel] = []
        self.registered: Registered | None = None
        self._dra: grpc.Channel | None = None

    def close(self) -> None:
        for c in self._channels:
            c.close()
        self._dialer.close()

    def __enter__(self) -> KubeletClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _dial(self, path: Path) -> grpc.Channel:
        channel = dial(self._dialer, path)
        self._channels.append(channel)
        return channel

    # --- registration -------------------------------------------------------------------------
    def register(self, registration_socket: Path) -> Registered:
        channel = self._dial(registration_socket)
        service = reg_pb.DESCRIPTOR.services_by_name["Registration"]
        get_info = unary_call(channel, service, "GetInfo")
        notify = unary_call(channel, service, "NotifyRegistrationStatus")
        start = time.perf_counter()
        info = get_info(reg_pb.InfoRequest(), timeout=GET_INFO_TIMEOUT)
        elapsed = time.perf_counter() - start
        try:
            if info.type != "DRAPlugin":
                raise RegistrationFailed(f"no handler for plugin type {info.type!r}")
            version = self.validate_versions(list(info.supported_versions))
        except RegistrationFailed as e:
            notify(reg_pb.RegistrationStatus(plugin_registered=False, error=str(e)), timeout=NOTIFY_TIMEOUT)
            raise
        health = next(
            (
                v
                for v in ("v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth")
                if v in info.supported_versions
            ),
            None,
        )
        endpoint = Path(info.endpoint or str(registration_socket))
        self._dra = self._dial(endpoint)
        notify(reg_pb.RegistrationStatus(plugin_registered=True), timeout=NOTIFY_TIMEOUT)
        self.registered = Registered(info, version, health, elapsed)
        return self.registered

    def validate_versions(self, versions: list[str]) -> str:
        """The kubelet's rule: the first of the plugin's entries that the kubelet supports."""
        if not versions:
            raise RegistrationFailed("empty list of supported versions")
        for v in versions:
            if v in self.supported_dra:
                return v
        raise RegistrationFailed(f"none of the versions {versions} is supported")

    # --- DRA ----------------------------------------------------------------------------------
    def _call(self, method: str, version: str | None) -> tuple[Any, ModuleType]:
        if self._dra is None or self.registered is None:
            raise RuntimeError("register first")
        pb = DRA[version or self.registered.dra_version]
        return unary_call(self._dra, pb.DESCRIPTOR.services_by_name["DRAPlugin"], method), pb

    def prepare(self, claims: Sequence[tuple[str, str, str]], version: str | None = None) -> Any:
        """claims: (namespace, name, uid); returns NodePrepareResourcesResponse."""
        call, pb = self._call("NodePrepareResources", version)
        request = pb.NodePrepareResourcesRequest(
            claims=[pb.Claim(namespace=ns, name=n, uid=u) for ns, n, u in claims]
        )
        return call(request, timeout=CALL_TIMEOUT)

    def unprepare(self, claims: Sequence[tuple[str, str, str]], version: str | None = None) -> Any:
        call, pb = self._call("NodeUnprepareResources", version)
        request = pb.NodeUnprepareResourcesRequest(
            claims=[pb.Claim(namespace=ns, name=n, uid=u) for ns, n, u in claims]
        )
        return call(request, timeout=CALL_TIMEOUT)

    def watch_health(self, version: str | None = None, timeout: float | None = None) -> Any:
        """The health stream; cancel it with `.cancel()` on the returned iterator."""
        if self._dra is None or self.registered is None:
            raise RuntimeError("register first")
        chosen = version or self.registered.health_version
        if chosen is None:
            raise RuntimeError("plugin advertises no health service")
        pb = HEALTH[chosen]
        call = stream_call(
            self._dra, pb.DESCRIPTOR.services_by_name["DRAResourceHealth"], "NodeWatchResources"
        )
        stream: Any = call(pb.NodeWatchResourcesRequest(), timeout=timeout)
        return stream  # a grpc.Call as well: .cancel() ends it
