"""The methods of a service, derived from its descriptor in proto/.

We generate only message classes with protoc; paths, request types and streaming come from
each `ServiceDescriptor`, so the same Python handler can be served under two service names
(DRA v1 and v1beta1) and nothing is spelled twice.
"""

from __future__ import annotations

from collections.abc import Mapping

from google.protobuf import message_factory
from google.protobuf.descriptor import ServiceDescriptor
from topodra.common.runtime.grpcserver.connection import Handler, Method


def method_path(service: ServiceDescriptor, method: str) -> str:
    """The HTTP/2 path of a method, e.g. `/pluginregistration.Registration/GetInfo`."""
    return f"/{service.full_name}/{service.methods_by_name[method].name}"


def methods(service: ServiceDescriptor, impl: Mapping[str, Handler]) -> dict[str, Method]:
    """Every method of `service`, answered by `impl[method name](request, context)`.

    Unary handlers return a response message; server-streaming ones return an iterator.
    """
    missing = {m.name for m in service.methods} - set(impl)
    if missing:
        raise ValueError(f"{service.full_name}: no implementation for {sorted(missing)}")
    out: dict[str, Method] = {}
    for m in service.methods:
        if m.client_streaming:
            raise ValueError(f"{service.full_name}/{m.name}: client streaming is not supported")
        request = message_factory.GetMessageClass(m.input_type)
        out[method_path(service, m.name)] = Method(request.FromString, impl[m.name], m.server_streaming)
    return out
