"""The kubelet's view of one in-process plugin: registration, prepare/unprepare, sockets.

Stand-in kept (the Python kubelet client): both API versions and malformed requests, which the
real kubelet (tests/node) never sends.
"""

from __future__ import annotations

import os
import socket
import stat
import time
from pathlib import Path

import grpc
import pytest
from topodra.common.runtime.registration import SUPPORTED_VERSIONS
from topodra.common.runtime.sockets import SocketPathError
from topodra.proto.dra.v1 import api_pb2 as dra_v1

from tests.kubelet.client import KubeletClient, RegistrationFailed, watch_registry
from tests.unit.runtime_grpc.conftest import DRIVER, NODE, PluginFactory


def test_kubelet_flow_registers_with_the_plugins_first_version(
    make_plugin: PluginFactory, kubelet: KubeletClient, kubelet_root: Path
) -> None:
    plugin, _, _ = make_plugin()
    (reg_socket,) = watch_registry(kubelet_root / "plugins_registry")
    assert reg_socket.name == f"{DRIVER}-reg.sock"
    assert plugin.status().registered is None and not plugin.status().ready

    registered = kubelet.register(reg_socket)

    assert registered.info.type == "DRAPlugin"
    assert registered.info.name == DRIVER
    assert registered.info.endpoint == str(kubelet_root / "plugins" / DRIVER / "dra.sock")
    assert list(registered.info.supported_versions) == [
        "v1.DRAPlugin",
        "v1beta1.DRAPlugin",
        "v1.DRAResourceHealth",
        "v1alpha1.DRAResourceHealth",
    ]
    # The kubelet lists v1beta1 first; the plugin's order wins.
    assert kubelet.supported_dra[0] == "v1beta1.DRAPlugin"
    assert registered.dra_version == "v1.DRAPlugin"
    assert registered.health_version == "v1.DRAResourceHealth"
    status = plugin.status()
    assert status.registered is True and status.ready


def test_get_info_answers_inside_the_kubelets_deadline_every_time(
    make_plugin: PluginFactory, kubelet: KubeletClient
) -> None:
    plugin, _, _ = make_plugin()
    for _ in range(20):  # each GetInfo carries the kubelet's 1 s deadline; one miss raises
        kubelet.register(plugin.registration_socket)


def test_prepare_and_unprepare_over_v1_and_v1beta1(
    make_plugin: PluginFactory, kubelet: KubeletClient
) -> None:
    plugin, _, processor = make_plugin()
    kubelet.register(plugin.registration_socket)
    claims = [("ns", "one", "uid-1"), ("ns", "two", "uid-2"), ("ns", "ghost", "uid-9")]

    v1 = kubelet.prepare(claims, version="v1.DRAPlugin")
    assert set(v1.claims) == {"uid-1", "uid-2", "uid-9"}
    (d,) = v1.claims["uid-1"].devices
    assert (list(d.request_names), d.pool_name, d.device_name, list(d.cdi_device_ids)) == (
        ["gpu"],
        NODE,
        "gpu-0",
        [f"{DRIVER}/claim=uid-1-gpu-0"],
    )
    assert d.HasField("share_id") and d.share_id == "share-7"
    assert v1.claims["uid-1"].error == ""
    second = v1.claims["uid-2"].devices
    assert [x.device_name for x in second] == ["gpu-1", "gpu-2"]
    assert list(second[0].request_names) == [] and not second[0].HasField("share_id")
    assert list(second[1].cdi_device_ids) == ["x/y=1", "x/y=2"]
    # One bad claim gets its own error; the others of the call are answered normally.
    assert "not allocated" in v1.claims["uid-9"].error
    assert list(v1.claims["uid-9"].devices) == []

    beta = kubelet.prepare(claims[:1], version="v1beta1.DRAPlugin")
    (bd,) = beta.claims["uid-1"].devices
    assert bd.device_name == "gpu-0"
    # v1beta1 has no share_id: read the same bytes with the v1 schema to see it was not sent.
    as_v1 = dra_v1.NodePrepareResourcesResponse.FromString(beta.SerializeToString())
    assert not as_v1.claims["uid-1"].devices[0].HasField("share_id")

    for version in ("v1.DRAPlugin", "v1beta1.DRAPlugin"):
        un = kubelet.unprepare(claims, version=version)
        assert {uid: r.error for uid, r in un.claims.items()} == {"uid-1": "", "uid-2": "", "uid-9": ""}
    assert processor.prepared == set()
    assert [op for op, _ in processor.calls] == ["prepare", "prepare", "unprepare", "unprepare"]


def test_an_unprepare_costs_no_inventory_scan(make_plugin: PluginFactory, kubelet: KubeletClient) -> None:
    """Only a driver whose unprepare gives a device back to the host asks for a scan (the NIC
    driver does, itself); for the others a scan per unprepare was pure cost on every call."""
    plugin, _, _ = make_plugin()
    kubelet.register(plugin.registration_socket)
    for _ in range(3):
        kubelet.prepare([("ns", "one", "uid-1")])
        assert kubelet.unprepare([("ns", "one", "uid-1")]).claims["uid-1"].error == ""
    time.sleep(1.0)  # a requested scan runs within the inventory's 0.2 s debounce
    assert plugin.inventory.scans["request"] == 0
    plugin.inventory.request_rescan()  # what the NIC driver asks for: counted when it runs
    deadline = time.monotonic() + 10
    while plugin.inventory.scans["request"] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert plugin.inventory.scans["request"] == 1


def test_a_failing_processor_becomes_per_claim_errors_not_a_grpc_error(
    make_plugin: PluginFactory, kubelet: KubeletClient
) -> None:
    plugin, _, processor = make_plugin()
    kubelet.register(plugin.registration_socket)
    processor.fail_with = RuntimeError("checkpoint disk full")
    prep = kubelet.prepare([("ns", "one", "uid-1"), ("ns", "two", "uid-2")])
    assert all("checkpoint disk full" in prep.claims[u].error for u in ("uid-1", "uid-2"))
    un = kubelet.unprepare([("ns", "one", "uid-1")])
    assert "checkpoint disk full" in un.claims["uid-1"].error


def test_malformed_claims_get_their_own_error(make_plugin: PluginFactory, kubelet: KubeletClient) -> None:
    plugin, _, processor = make_plugin()
    kubelet.register(plugin.registration_socket)
    prep = kubelet.prepare([("ns", "", "uid-x"), ("ns", "one", "uid-1")])
    assert "lacks name" in prep.claims["uid-x"].error
    assert prep.claims["uid-1"].error == ""
    assert [c.uid for c in processor.calls[0][1]] == ["uid-1"]  # the bad one never reached the core


def test_kubelet_without_a_common_version_rejects_and_readiness_says_why(
    make_plugin: PluginFactory,
) -> None:
    plugin, _, _ = make_plugin()
    with KubeletClient(supported_dra=("v2.DRAPlugin",)) as old, pytest.raises(RegistrationFailed):
        old.register(plugin.registration_socket)
    status = plugin.status()
    assert status.registered is False and not status.ready
    assert "none of the versions" in status.registration_error
    # A later successful registration makes it ready again.
    with KubeletClient() as kubelet:
        kubelet.register(plugin.registration_socket)
    assert plugin.status().ready


def test_plugin_advertising_only_unknown_versions_is_rejected(make_plugin: PluginFactory) -> None:
    plugin, _, _ = make_plugin(start=False)
    plugin.registration.versions = ("v9.DRAPlugin", "v1alpha1.DRAResourceHealth")
    plugin.start()
    try:
        with KubeletClient() as kubelet, pytest.raises(RegistrationFailed, match="none of the versions"):
            kubelet.register(plugin.registration_socket)
        assert plugin.status().registered is False
    finally:
        plugin.stop()
    assert SUPPORTED_VERSIONS[0] == "v1.DRAPlugin"


def test_sockets_are_owner_only(make_plugin: PluginFactory, kubelet_root: Path) -> None:
    plugin, _, _ = make_plugin()
    for path in (plugin.dra_socket, plugin.registration_socket):
        st = path.lstat()
        assert stat.S_ISSOCK(st.st_mode)
        assert stat.S_IMODE(st.st_mode) == 0o600, oct(st.st_mode)
    assert stat.S_IMODE(plugin.dra_socket.parent.stat().st_mode) & 0o077 == 0


def _leave_stale_socket(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.close()  # the file stays, like after a kill -9


def test_stale_sockets_are_replaced(make_plugin: PluginFactory, kubelet: KubeletClient) -> None:
    plugin, _, _ = make_plugin(start=False)
    _leave_stale_socket(plugin.dra_socket)
    _leave_stale_socket(plugin.registration_socket)
    plugin.start()
    try:
        kubelet.register(plugin.registration_socket)
        assert kubelet.prepare([("ns", "one", "uid-1")]).claims["uid-1"].error == ""
    finally:
        plugin.stop()


def test_something_else_in_the_way_is_a_clear_error(make_plugin: PluginFactory) -> None:
    plugin, _, _ = make_plugin(start=False)
    plugin.dra_socket.parent.mkdir(parents=True)
    plugin.dra_socket.write_text("not a socket")
    with pytest.raises(SocketPathError, match="is not a socket"):
        plugin.start()
    assert plugin.dra_socket.read_text() == "not a socket"
    assert not plugin.registration_socket.exists()


def test_stop_removes_own_sockets_only(make_plugin: PluginFactory, kubelet_root: Path) -> None:
    plugin, _, _ = make_plugin(start=False)
    plugin.start()
    assert plugin.dra_socket.exists() and plugin.registration_socket.exists()
    plugin.stop()
    assert not plugin.dra_socket.exists()
    assert watch_registry(kubelet_root / "plugins_registry") == []
    # A socket that another instance created at the same path meanwhile is left alone.
    plugin.start()
    os.unlink(plugin.dra_socket)
    _leave_stale_socket(plugin.dra_socket)
    plugin.stop()
    assert plugin.dra_socket.exists()


def test_rolling_update_instances_serve_side_by_side(make_plugin: PluginFactory, kubelet_root: Path) -> None:
    old, _, _ = make_plugin(pod_uid="11111111-aaaa-bbbb-cccc-000000000001")
    new, _, _ = make_plugin(pod_uid="22222222-aaaa-bbbb-cccc-000000000002")
    assert old.dra_socket.name == "dra-11111111-aaaa-bbbb-cccc-000000000001.sock"
    assert new.registration_socket.name == f"{DRIVER}-22222222-aaaa-bbbb-cccc-000000000002-reg.sock"
    assert len(watch_registry(kubelet_root / "plugins_registry")) == 2
    for plugin in (old, new):
        with KubeletClient() as kubelet:
            assert kubelet.register(plugin.registration_socket).info.endpoint == str(plugin.dra_socket)
            assert kubelet.prepare([("ns", "one", "uid-1")]).claims["uid-1"].error == ""
    old.stop()  # the old pod goes away; the new one keeps serving
    with KubeletClient() as kubelet:
        kubelet.register(new.registration_socket)
        assert kubelet.prepare([("ns", "one", "uid-1")]).claims["uid-1"].error == ""


def test_several_drivers_in_one_process(make_plugin: PluginFactory, kubelet_root: Path) -> None:
    a, _, _ = make_plugin("cpu.test.topodra.io")
    b, _, _ = make_plugin("nic.test.topodra.io")
    assert a.dra_socket != b.dra_socket
    names = sorted(s.name for s in watch_registry(kubelet_root / "plugins_registry"))
    assert names == ["cpu.test.topodra.io-reg.sock", "nic.test.topodra.io-reg.sock"]
    for plugin in (a, b):
        with KubeletClient() as kubelet:
            assert kubelet.register(plugin.registration_socket).info.name == plugin.driver.name


def test_a_108_byte_socket_path_is_served(make_plugin: PluginFactory, kubelet_root: Path) -> None:
    """gRPC binds at most 107 bytes, the kubelet dials 108: the runtime bridges the gap."""
    used = len(str(kubelet_root / "plugins" / DRIVER / "dra.sock").encode())
    deep = kubelet_root / ("d" * (108 - used - 1))
    plugin, _, _ = make_plugin(start=False, plugin_dir=deep / "plugins" / DRIVER)
    assert len(str(plugin.dra_socket).encode()) == 108
    plugin.start()
    try:
        assert plugin.dra_socket.is_socket() and stat.S_IMODE(plugin.dra_socket.lstat().st_mode) == 0o600
        with KubeletClient() as kubelet:
            kubelet.register(plugin.registration_socket)
            assert kubelet.prepare([("ns", "one", "uid-1")]).claims["uid-1"].error == ""
    finally:
        plugin.stop()
    assert not plugin.dra_socket.exists()


def test_a_path_over_108_bytes_is_refused_before_anything_is_created(
    make_plugin: PluginFactory, kubelet_root: Path
) -> None:
    deep = kubelet_root / ("d" * 120)
    with pytest.raises(SocketPathError, match="at most 108"):
        make_plugin(start=False, plugin_dir=deep / "plugins" / DRIVER)
    assert not deep.exists()


def test_calls_after_stop_fail_at_transport_level(make_plugin: PluginFactory) -> None:
    plugin, _, _ = make_plugin()
    with KubeletClient() as kubelet:
        kubelet.register(plugin.registration_socket)
        plugin.stop()
        with pytest.raises(grpc.RpcError):
            kubelet.prepare([("ns", "one", "uid-1")])
