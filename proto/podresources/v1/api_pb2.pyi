from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ListPodResourcesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListPodResourcesResponse(_message.Message):
    __slots__ = ("pod_resources",)
    POD_RESOURCES_FIELD_NUMBER: _ClassVar[int]
    pod_resources: _containers.RepeatedCompositeFieldContainer[PodResources]
    def __init__(self, pod_resources: _Optional[_Iterable[_Union[PodResources, _Mapping]]] = ...) -> None: ...

class PodResources(_message.Message):
    __slots__ = ("name", "namespace", "containers")
    NAME_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    CONTAINERS_FIELD_NUMBER: _ClassVar[int]
    name: str
    namespace: str
    containers: _containers.RepeatedCompositeFieldContainer[ContainerResources]
    def __init__(self, name: _Optional[str] = ..., namespace: _Optional[str] = ..., containers: _Optional[_Iterable[_Union[ContainerResources, _Mapping]]] = ...) -> None: ...

class ContainerResources(_message.Message):
    __slots__ = ("name", "dynamic_resources")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DYNAMIC_RESOURCES_FIELD_NUMBER: _ClassVar[int]
    name: str
    dynamic_resources: _containers.RepeatedCompositeFieldContainer[DynamicResource]
    def __init__(self, name: _Optional[str] = ..., dynamic_resources: _Optional[_Iterable[_Union[DynamicResource, _Mapping]]] = ...) -> None: ...

class DynamicResource(_message.Message):
    __slots__ = ("claim_name", "claim_namespace")
    CLAIM_NAME_FIELD_NUMBER: _ClassVar[int]
    CLAIM_NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    claim_name: str
    claim_namespace: str
    def __init__(self, claim_name: _Optional[str] = ..., claim_namespace: _Optional[str] = ...) -> None: ...
