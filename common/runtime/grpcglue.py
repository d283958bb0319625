"""gRPC method handlers and client callables built from the service descriptors in proto/.

We generate only message classes with protoc; the service side is derived here from each
`ServiceDescriptor`, so method paths, request and response types always come from the .proto
and the same Python handler can be served under two service names (DRA v1 and v1beta1).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor


def method_path(service: ServiceDescriptor, method: str) -> str:
    """The HTTP/2 path of a method, e.g. `/pluginregistration.Registration/GetInfo`."""
    return f"/{service.full_name}/{service.methods_by_name[method].name}"


def _codec(method: MethodDescriptor) -> tuple[Any, Any]:
    request = message_factory.GetMessageClass(method.input_type)
    response = message_factory.GetMessageClass(method.output_type)
    return request, response


def service_handler(
    service: ServiceDescriptor, impl: Mapping[str, Callable[..., Any]]
) -> grpc.GenericRpcHandler[Any, Any]:
    """A handler serving `impl[method name](request, context)` for every method of `service`.

    Unary methods return a response message; server-streaming ones return an iterator.
    """
    missing = {m.name for m in service.methods} - set(impl)
    if missing:
        raise ValueError(f"{service.full_name}: no implementation for {sorted(missing)}")
    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}
    for method in service.methods:
        request, response = _codec(method)
        if method.client_streaming:
            raise ValueError(f"{service.full_name}/{method.name}: client streaming is not supported")
        if method.server_streaming:
            make: Any = grpc.unary_stream_rpc_method_handler
        else:
            make = grpc.unary_unary_rpc_method_handler
        handlers[method.name] = make(
            impl[method.name],
            request_deserializer=request.FromString,
            response_serializer=response.SerializeToString,
        )
    return grpc.method_handlers_generic_handler(service.full_name, handlers)


def unary_call(
    channel: grpc.Channel, service: ServiceDescriptor, method: str
) -> grpc.UnaryUnaryMultiCallable[Any, Any]:
    request, response = _codec(service.methods_by_name[method])
    return channel.unary_unary(
        method_path(service, method),
        request_serializer=request.SerializeToString,
        response_deserializer=response.FromString,
    )


def stream_call(
    channel: grpc.Channel, service: ServiceDescriptor, method: str
) -> grpc.UnaryStreamMultiCallable[Any, Any]:
    request, response = _codec(service.methods_by_name[method])
    return channel.unary_stream(
        method_path(service, method),
        request_serializer=request.SerializeToString,
        response_deserializer=response.FromString,
    )
