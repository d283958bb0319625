"""The committed protobuf modules match the .proto sources and the upstream wire contract.

Field numbers, types and full names below are the upstream facts, written out here
(docs/design/kubelet.md names the services); a drift in either the .proto or the generated code
fails here.
"""

from __future__ import annotations

import subprocess
import sys

from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor, FileDescriptor
from topodra.proto.dra.v1 import api_pb2 as dra_v1
from topodra.proto.dra.v1beta1 import api_pb2 as dra_v1beta1
from topodra.proto.dra_health.v1 import api_pb2 as health_v1
from topodra.proto.dra_health.v1alpha1 import api_pb2 as health_v1alpha1
from topodra.proto.pluginregistration.v1 import api_pb2 as registration

from tests.conftest import REPO

STR, BOOL, I64, MSG, ENUM = (
    FieldDescriptor.TYPE_STRING,
    FieldDescriptor.TYPE_BOOL,
    FieldDescriptor.TYPE_INT64,
    FieldDescriptor.TYPE_MESSAGE,
    FieldDescriptor.TYPE_ENUM,
)


def fields(message: Descriptor) -> dict[str, tuple[int, int, bool]]:
    """name -> (number, type, repeated)"""
    out = {}
    for f in message.fields:
        out[f.name] = (f.number, f.type, f.is_repeated)
    return out


def dra_messages(share_id: bool) -> dict[str, dict[str, tuple[int, int, bool]]]:
    device = {
        "request_names": (1, STR, True),
        "pool_name": (2, STR, False),
        "device_name": (3, STR, False),
        "cdi_device_ids": (4, STR, True),
    }
    if share_id:
        device["share_id"] = (5, STR, False)
    return {
        "NodePrepareResourcesRequest": {"claims": (1, MSG, True)},
        "NodePrepareResourcesResponse": {"claims": (1, MSG, True)},  # a map is a repeated entry
        "NodePrepareResourceResponse": {"devices": (1, MSG, True), "error": (2, STR, False)},
        "Device": device,
        "NodeUnprepareResourcesRequest": {"claims": (1, MSG, True)},
        "NodeUnprepareResourcesResponse": {"claims": (1, MSG, True)},
        "NodeUnprepareResourceResponse": {"error": (1, STR, False)},
        "Claim": {"namespace": (1, STR, False), "uid": (2, STR, False), "name": (3, STR, False)},
    }


def check_dra(file: FileDescriptor, package: str, share_id: bool) -> None:
    assert file.package == package
    as_proto = descriptor_pb2.FileDescriptorProto()
    file.CopyToProto(as_proto)
    assert as_proto.syntax == "proto3"
    expected = dra_messages(share_id)
    assert set(file.message_types_by_name) == set(expected)
    for name, want in expected.items():
        assert fields(file.message_types_by_name[name]) == want, name
    for name in ("NodePrepareResourcesResponse", "NodeUnprepareResourcesResponse"):
        entry = file.message_types_by_name[name].fields_by_name["claims"].message_type
        assert entry is not None
        assert entry.GetOptions().map_entry
        assert entry.fields_by_name["key"].type == STR
    service = file.services_by_name["DRAPlugin"]
    assert service.full_name == f"{package}.DRAPlugin"
    methods = {m.name: (m.input_type.name, m.output_type.name, m.server_streaming) for m in service.methods}
    assert methods == {
        "NodePrepareResources": ("NodePrepareResourcesRequest", "NodePrepareResourcesResponse", False),
        "NodeUnprepareResources": ("NodeUnprepareResourcesRequest", "NodeUnprepareResourcesResponse", False),
    }


def test_dra_v1_matches_upstream() -> None:
    check_dra(dra_v1.DESCRIPTOR, "k8s.io.kubelet.pkg.apis.dra.v1", share_id=True)
    share = dra_v1.DESCRIPTOR.message_types_by_name["Device"].fields_by_name["share_id"]
    assert share.has_presence, "share_id is `optional string` upstream: presence is tracked"


def test_dra_v1beta1_matches_upstream_without_share_id() -> None:
    check_dra(dra_v1beta1.DESCRIPTOR, "k8s.io.kubelet.pkg.apis.dra.v1beta1", share_id=False)


def test_registration_matches_upstream() -> None:
    file = registration.DESCRIPTOR
    assert file.package == "pluginregistration"
    expected = {
        "InfoRequest": {},
        "PluginInfo": {
            "type": (1, STR, False),
            "name": (2, STR, False),
            "endpoint": (3, STR, False),
            "supported_versions": (4, STR, True),
        },
        "RegistrationStatus": {"plugin_registered": (1, BOOL, False), "error": (2, STR, False)},
        "RegistrationStatusResponse": {},
    }
    assert {n: fields(m) for n, m in file.message_types_by_name.items()} == expected
    service = file.services_by_name["Registration"]
    assert service.full_name == "pluginregistration.Registration"
    assert [(m.name, m.input_type.name, m.output_type.name) for m in service.methods] == [
        ("GetInfo", "InfoRequest", "PluginInfo"),
        ("NotifyRegistrationStatus", "RegistrationStatus", "RegistrationStatusResponse"),
    ]


def test_health_matches_upstream_in_both_versions() -> None:
    for module, package in ((health_v1alpha1, "v1alpha1"), (health_v1, "v1")):
        file = module.DESCRIPTOR
        assert file.package == package
        status = file.enum_types_by_name["HealthStatus"]
        assert {v.name: v.number for v in status.values} == {"UNKNOWN": 0, "HEALTHY": 1, "UNHEALTHY": 2}
        expected = {
            "NodeWatchResourcesRequest": {},
            "NodeWatchResourcesResponse": {"devices": (1, MSG, True)},
            "DeviceIdentifier": {"pool_name": (1, STR, False), "device_name": (2, STR, False)},
            "DeviceHealth": {
                "device": (1, MSG, False),
                "health": (2, ENUM, False),
                "last_updated_time": (3, I64, False),
                "health_check_timeout_seconds": (4, I64, False),
                "message": (5, STR, False),
            },
        }
        assert {n: fields(m) for n, m in file.message_types_by_name.items()} == expected
        service = file.services_by_name["DRAResourceHealth"]
        assert service.full_name == f"{package}.DRAResourceHealth"
        (method,) = service.methods
        assert (method.name, method.server_streaming, method.client_streaming) == (
            "NodeWatchResources",
            True,
            False,
        )


def test_registered_file_names_are_unique() -> None:
    names = [m.DESCRIPTOR.name for m in (dra_v1, dra_v1beta1, health_v1, health_v1alpha1, registration)]
    assert len(set(names)) == len(names)
    assert all(n.startswith("topodra/proto/") for n in names)


def test_regenerating_changes_nothing() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "hack" / "gen-proto"), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
