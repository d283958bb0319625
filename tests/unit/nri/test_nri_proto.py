"""The NRI and ttrpc messages match the upstream wire contract.

Field numbers and types below are the upstream facts (containerd/nri pkg/api/api.proto and
containerd/ttrpc request.proto; docs/design/nri.md lists the handshake ones). A drift in the
.proto or in the generated code fails here; the real-runtime test (tests/node/test_nri.py)
checks that containerd agrees.
"""

from __future__ import annotations

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from topodra.proto.nri.v1alpha1 import api_pb2 as api
from topodra.proto.ttrpc import request_pb2 as ttrpc

STR, BOOL, I32, I64, U32, U64, BYTES, MSG, ENUM = (
    FieldDescriptor.TYPE_STRING,
    FieldDescriptor.TYPE_BOOL,
    FieldDescriptor.TYPE_INT32,
    FieldDescriptor.TYPE_INT64,
    FieldDescriptor.TYPE_UINT32,
    FieldDescriptor.TYPE_UINT64,
    FieldDescriptor.TYPE_BYTES,
    FieldDescriptor.TYPE_MESSAGE,
    FieldDescriptor.TYPE_ENUM,
)
R = True  # repeated


def fields(message: Descriptor) -> dict[str, tuple[int, int, bool]]:
    return {f.name: (f.number, f.type, f.is_repeated) for f in message.fields}


def message(name: str) -> Descriptor:
    return api.DESCRIPTOR.message_types_by_name[name]


UPSTREAM: dict[str, dict[str, tuple[int, int, bool]]] = {
    "RegisterPluginRequest": {
        "plugin_name": (1, STR, False),
        "plugin_idx": (2, STR, False),
        "NRI_version": (3, STR, False),
    },
    "UpdateContainersRequest": {"update": (1, MSG, R), "evict": (2, MSG, R)},
    "UpdateContainersResponse": {"failed": (1, MSG, R)},
    "ConfigureRequest": {
        "config": (1, STR, False),
        "runtime_name": (2, STR, False),
        "runtime_version": (3, STR, False),
        "registration_timeout": (4, I64, False),
        "request_timeout": (5, I64, False),
        "NRI_version": (6, STR, False),
    },
    "ConfigureResponse": {"events": (2, I32, False)},
    "SynchronizeRequest": {"pods": (1, MSG, R), "containers": (2, MSG, R), "more": (3, BOOL, False)},
    "SynchronizeResponse": {"update": (1, MSG, R), "more": (2, BOOL, False)},
    "CreateContainerRequest": {"pod": (1, MSG, False), "container": (2, MSG, False)},
    "CreateContainerResponse": {"adjust": (1, MSG, False), "update": (2, MSG, R), "evict": (3, MSG, R)},
    "UpdateContainerRequest": {
        "pod": (1, MSG, False),
        "container": (2, MSG, False),
        "linux_resources": (3, MSG, False),
    },
    "UpdateContainerResponse": {"update": (1, MSG, R), "evict": (2, MSG, R)},
    "StopContainerRequest": {"pod": (1, MSG, False), "container": (2, MSG, False)},
    "StopContainerResponse": {"update": (1, MSG, R)},
    "StateChangeEvent": {"event": (1, ENUM, False), "pod": (2, MSG, False), "container": (3, MSG, False)},
    "ValidateContainerAdjustmentResponse": {"reject": (1, BOOL, False), "reason": (2, STR, False)},
    "PodSandbox": {
        "id": (1, STR, False),
        "name": (2, STR, False),
        "uid": (3, STR, False),
        "namespace": (4, STR, False),
        "labels": (5, MSG, R),
        "annotations": (6, MSG, R),
        "runtime_handler": (7, STR, False),
        "linux": (8, MSG, False),
        "pid": (9, U32, False),
        "ips": (10, STR, R),
    },
    "LinuxPodSandbox": {
        "pod_overhead": (1, MSG, False),
        "pod_resources": (2, MSG, False),
        "cgroup_parent": (3, STR, False),
        "cgroups_path": (4, STR, False),
        "namespaces": (5, MSG, R),
        "resources": (6, MSG, False),
    },
    "Container": {
        "id": (1, STR, False),
        "pod_sandbox_id": (2, STR, False),
        "name": (3, STR, False),
        "state": (4, ENUM, False),
        "labels": (5, MSG, R),
        "annotations": (6, MSG, R),
        "args": (7, STR, R),
        "env": (8, STR, R),
        "mounts": (9, MSG, R),
        "hooks": (10, MSG, False),
        "linux": (11, MSG, False),
        "pid": (12, U32, False),
        "CDI_devices": (20, MSG, R),
    },
    "Hooks": {
        "prestart": (1, MSG, R),
        "create_runtime": (2, MSG, R),
        "create_container": (3, MSG, R),
        "start_container": (4, MSG, R),
        "poststart": (5, MSG, R),
        "poststop": (6, MSG, R),
    },
    "Hook": {"path": (1, STR, False), "args": (2, STR, R), "env": (3, STR, R), "timeout": (4, MSG, False)},
    "LinuxContainer": {
        "namespaces": (1, MSG, R),
        "devices": (2, MSG, R),
        "resources": (3, MSG, False),
        "oom_score_adj": (4, MSG, False),
        "cgroups_path": (5, STR, False),
    },
    "LinuxNamespace": {"type": (1, STR, False), "path": (2, STR, False)},
    "CDIDevice": {"name": (1, STR, False)},
    "LinuxResources": {"memory": (1, MSG, False), "cpu": (2, MSG, False), "unified": (6, MSG, R)},
    "LinuxCPU": {
        "shares": (1, MSG, False),
        "quota": (2, MSG, False),
        "period": (3, MSG, False),
        "realtime_runtime": (4, MSG, False),
        "realtime_period": (5, MSG, False),
        "cpus": (6, STR, False),
        "mems": (7, STR, False),
    },
    "ContainerAdjustment": {
        "annotations": (2, MSG, R),
        "mounts": (3, MSG, R),
        "env": (4, MSG, R),
        "hooks": (5, MSG, False),
        "linux": (6, MSG, False),
    },
    "LinuxContainerAdjustment": {
        "devices": (1, MSG, R),
        "resources": (2, MSG, False),
        "cgroups_path": (3, STR, False),
    },
    "ContainerUpdate": {
        "container_id": (1, STR, False),
        "linux": (2, MSG, False),
        "ignore_failure": (3, BOOL, False),
    },
    "LinuxContainerUpdate": {"resources": (1, MSG, False)},
    "ContainerEviction": {"container_id": (1, STR, False), "reason": (2, STR, False)},
    "OptionalInt64": {"value": (1, I64, False)},
    "OptionalUInt64": {"value": (1, U64, False)},
}


def test_messages_match_upstream() -> None:
    assert api.DESCRIPTOR.package == "nri.pkg.api.v1alpha1"
    for name, want in UPSTREAM.items():
        assert fields(message(name)) == want, name


def test_events_and_states_match_upstream() -> None:
    events = {v.name: v.number for v in api.DESCRIPTOR.enum_types_by_name["Event"].values}
    assert events == {
        "UNKNOWN": 0,
        "RUN_POD_SANDBOX": 1,
        "STOP_POD_SANDBOX": 2,
        "REMOVE_POD_SANDBOX": 3,
        "CREATE_CONTAINER": 4,
        "POST_CREATE_CONTAINER": 5,
        "START_CONTAINER": 6,
        "POST_START_CONTAINER": 7,
        "UPDATE_CONTAINER": 8,
        "POST_UPDATE_CONTAINER": 9,
        "STOP_CONTAINER": 10,
        "REMOVE_CONTAINER": 11,
        "UPDATE_POD_SANDBOX": 12,
        "POST_UPDATE_POD_SANDBOX": 13,
        "VALIDATE_CONTAINER_ADJUSTMENT": 14,
        "LAST": 15,
    }
    states = {v.name: v.number for v in api.DESCRIPTOR.enum_types_by_name["ContainerState"].values}
    assert states == {
        "CONTAINER_UNKNOWN": 0,
        "CONTAINER_CREATED": 1,
        "CONTAINER_PAUSED": 2,
        "CONTAINER_RUNNING": 3,
        "CONTAINER_STOPPED": 4,
    }


def test_services_route_as_upstream() -> None:
    """ttrpc routes by full service name and bare method name: both must be upstream's."""
    runtime = api.DESCRIPTOR.services_by_name["Runtime"]
    assert runtime.full_name == "nri.pkg.api.v1alpha1.Runtime"
    assert {m.name: (m.input_type.name, m.output_type.name) for m in runtime.methods} == {
        "RegisterPlugin": ("RegisterPluginRequest", "Empty"),
        "UpdateContainers": ("UpdateContainersRequest", "UpdateContainersResponse"),
    }
    plugin = api.DESCRIPTOR.services_by_name["Plugin"]
    assert plugin.full_name == "nri.pkg.api.v1alpha1.Plugin"
    methods = {m.name: (m.input_type.name, m.output_type.name) for m in plugin.methods}
    assert methods["Configure"] == ("ConfigureRequest", "ConfigureResponse")
    assert methods["Synchronize"] == ("SynchronizeRequest", "SynchronizeResponse")
    assert methods["Shutdown"] == ("Empty", "Empty")
    assert methods["StateChange"] == ("StateChangeEvent", "Empty")
    for event in (
        "RunPodSandbox",
        "UpdatePodSandbox",
        "PostUpdatePodSandbox",
        "StopPodSandbox",
        "RemovePodSandbox",
        "CreateContainer",
        "PostCreateContainer",
        "StartContainer",
        "PostStartContainer",
        "UpdateContainer",
        "PostUpdateContainer",
        "StopContainer",
        "RemoveContainer",
        "ValidateContainerAdjustment",
    ):
        assert methods[event] == (f"{event}Request", f"{event}Response"), event


def test_ttrpc_envelope_matches_upstream() -> None:
    assert ttrpc.DESCRIPTOR.package == "ttrpc"
    by_name = ttrpc.DESCRIPTOR.message_types_by_name
    assert fields(by_name["Request"]) == {
        "service": (1, STR, False),
        "method": (2, STR, False),
        "payload": (3, BYTES, False),
        "timeout_nano": (4, I64, False),
        "metadata": (5, MSG, R),
    }
    assert fields(by_name["Response"]) == {"status": (1, MSG, False), "payload": (2, BYTES, False)}
    # google.rpc.Status by number
    assert fields(by_name["Status"]) == {
        "code": (1, I32, False),
        "message": (2, STR, False),
        "details": (3, MSG, R),
    }
    assert fields(by_name["KeyValue"]) == {"key": (1, STR, False), "value": (2, STR, False)}


def test_an_update_encodes_to_the_bytes_upstream_expects() -> None:
    """Hand-assembled from the field numbers: ContainerUpdate{container_id=1: "c1",
    linux=2: {resources=1: {cpu=2: {cpus=6: "0-1", mems=7: "0"}}}}."""
    cpu = bytes([0x32, 3]) + b"0-1" + bytes([0x3A, 1]) + b"0"
    resources = bytes([0x12, len(cpu)]) + cpu
    linux = bytes([0x0A, len(resources)]) + resources
    want = bytes([0x0A, 2]) + b"c1" + bytes([0x12, len(linux)]) + linux
    update = api.ContainerUpdate(
        container_id="c1",
        linux=api.LinuxContainerUpdate(resources=api.LinuxResources(cpu=api.LinuxCPU(cpus="0-1", mems="0"))),
    )
    assert update.SerializeToString() == want
