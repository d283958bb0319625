"""Specs: the shipped ones describe what their names promise; bad specs fail naming the field."""

from __future__ import annotations

import copy
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from topodra.common.synth import (
    SpecError,
    load_spec,
    load_spec_text,
    make_plan,
    parse_spec,
    shipped_spec_names,
)
from topodra.common.synth.plan import Function, Plan

BASE: dict[str, Any] = {
    "name": "base",
    "cpu": {"sockets": 2, "cores_per_socket": 8, "threads_per_core": 2},
    "pci": {
        "roots": [
            {"numa_node": 0, "ports": [{"device": "cx7", "uplink": True}]},
            {"numa_node": 1, "ports": [{"switch": {"ports": [{"device": "h100-sxm"}, {"device": "cx7"}]}}]},
        ]
    },
}


def endpoints(plan: Plan, kind: str) -> list[Function]:
    return [f for f in plan.functions if f.kind == kind and f.role != "vf"]


def test_shipped_names() -> None:
    assert {"2s-8acc-8nic", "1s-4acc", "2s-snc2", "256cpu", "64acc-300vf", "2s-8acc-8nic-snc2"} <= set(
        shipped_spec_names()
    )


def test_2s_8acc_8nic_pairs_each_accelerator_with_one_nic_on_a_switch() -> None:
    plan = make_plan(load_spec("2s-8acc-8nic"))
    assert plan.spec.cpu.sockets == 2
    assert len(plan.cpus) == 224 and all(c.online for c in plan.cpus)
    assert {len(k.cpus) for k in plan.cores} == {2}  # SMT on
    accs = endpoints(plan, "accelerator")
    assert len(accs) == 8
    nics_on_switches = [f for f in endpoints(plan, "nic") if f.pcie_switch is not None]
    assert len(nics_on_switches) == 8
    by_switch: dict[str | None, Counter[str]] = {}
    for f in accs + nics_on_switches:
        by_switch.setdefault(f.pcie_switch, Counter())[f.kind] += 1
    assert None not in by_switch
    assert all(c == Counter({"accelerator": 1, "nic": 1}) for c in by_switch.values())
    sockets = Counter(plan.nodes[f.numa_node].socket for f in accs if f.numa_node is not None)
    assert sockets == {0: 4, 1: 4}
    uplink = plan.uplink
    assert uplink is not None and uplink.function is not None
    assert plan.function(uplink.function).pcie_switch is None


def test_2s_8acc_8nic_snc2_keeps_the_pairs_two_switches_per_node() -> None:
    plan = make_plan(load_spec("2s-8acc-8nic-snc2"))
    assert len(plan.nodes) == 4 and len(plan.cpus) == 224
    accs = endpoints(plan, "accelerator")
    nics = [f for f in endpoints(plan, "nic") if f.pcie_switch is not None]
    assert (
        Counter(f.numa_node for f in accs) == Counter(f.numa_node for f in nics) == {0: 2, 1: 2, 2: 2, 3: 2}
    )
    assert {f.pcie_switch for f in accs} == {f.pcie_switch for f in nics} and len(
        {f.pcie_switch for f in accs}
    ) == 8


def test_1s_4acc() -> None:
    plan = make_plan(load_spec("1s-4acc"))
    assert plan.spec.cpu.sockets == 1 and len(plan.nodes) == 1
    accs = endpoints(plan, "accelerator")
    assert len(accs) == 4
    assert all(f.pcie_switch is None for f in accs)
    assert len({f.root for f in accs}) == 4
    assert all(f.drm_render is not None for f in accs)


def test_2s_snc2() -> None:
    plan = make_plan(load_spec("2s-snc2"))
    assert len(plan.nodes) == 4
    assert [n.socket for n in plan.nodes] == [0, 0, 1, 1]
    assert [list(n.distances) for n in plan.nodes] == [
        [10, 12, 21, 21],
        [12, 10, 21, 21],
        [21, 21, 10, 12],
        [21, 21, 12, 10],
    ]
    cpus_per_node = {n.id: len(n.cpus) for n in plan.nodes}
    assert set(cpus_per_node.values()) == {48}
    accs = endpoints(plan, "accelerator")
    nics = [f for f in endpoints(plan, "nic") if f.pcie_switch is not None]
    assert {f.numa_node for f in accs} == {0, 1, 2, 3}
    assert {f.numa_node for f in nics} == {0, 1, 2, 3}
    assert all(f.accel is not None for f in accs)
    assert sum(1 for f in plan.functions if f.role == "vf") == 16


def test_256cpu() -> None:
    plan = make_plan(load_spec("256cpu"))
    assert len(plan.cpus) == 256 and plan.spec.cpu.sockets == 2
    assert len([k for k in plan.caches if k.level == 3]) == 16


def test_64acc_300vf() -> None:
    plan = make_plan(load_spec("64acc-300vf"))
    assert len(endpoints(plan, "accelerator")) == 64
    vfs = [f for f in plan.functions if f.role == "vf"]
    assert len(vfs) == 300
    assert all(f.kind == "nic" for f in vfs)
    vf_addresses = {v.bdf for v in vfs}
    assert len([n for n in plan.netdevs if n.function in vf_addresses]) == 300


def mutate(path: str, value: object) -> dict[str, Any]:
    """BASE with the value at a dotted path (list indexes as numbers) replaced; `...` deletes."""
    spec = copy.deepcopy(BASE)
    keys: list[Any] = [int(k) if k.isdigit() else k for k in path.split(".")]
    node: Any = spec
    for key in keys[:-1]:
        node = node[key]
    if value is ...:
        del node[keys[-1]]
    else:
        node[keys[-1]] = value
    return spec


BAD = [
    ("cpu.sockts", 2, "cpu: unknown key 'sockts'"),
    ("cpu.sockets", "2", "cpu.sockets: must be a whole number"),
    ("cpu.sockets", 0, "cpu.sockets: must be at least 1"),
    (
        "cpu.numa_nodes_per_socket",
        3,
        "cpu.numa_nodes_per_socket: 8 cores per socket do not split evenly into 3",
    ),
    ("cpu.caches", {"l2": {"size_kib": 1000, "ways": 12}}, "cpu.caches.l2: 1000 KiB is not a whole number"),
    ("cpu.caches", {"l3": {"size_kib": 1024, "cores": 3}}, "split into L3 groups of 3"),
    ("cpu.caches", {"l3": {"size_kib": 1024, "scope": "ccx"}}, "cpu.caches.l3.scope: must be one of"),
    ("cpu.offline_cpus", [32], "cpu.offline_cpus: cpu32 does not exist"),
    ("cpu.smt_numbering", "zigzag", "cpu.smt_numbering: must be one of spread, adjacent"),
    ("version", 2, "version: this topodra reads spec version 1"),
    ("memory", {"distances": [[10, 21]]}, "memory.distances: must have 2 rows, one per NUMA node"),
    ("memory", {"distances": [[10], [10]]}, "memory.distances[0]: must be a list of 2 numbers"),
    (
        "memory",
        {"distances": [[10, 21], [21, 11]]},
        "memory.distances[1][1]: a node's distance to itself is 10",
    ),
    ("memory", {"per_node_mib": [1, 2, 3]}, "memory.per_node_mib: lists 3 nodes but the machine has 2"),
    ("pci.roots.0.ports.0.device", "h200", "pci.roots[0].ports[0].device: no profile named 'h200'"),
    ("pci.roots.0.numa_node", 2, "pci.roots[0].numa_node: node 2 does not exist"),
    ("pci.roots.0.ports.0.num_vfs", 17, "pci.roots[0].ports[0].num_vfs: more than the 16 VFs"),
    (
        "pci.roots.0.ports.0",
        {"device": "nvme", "name": "eth0"},
        "profile nvme has no network interface to name",
    ),
    ("pci.roots.0.ports.0", {"device": "cx7", "name": "a-very-long-ifname"}, "is not a valid interface name"),
    (
        "pci.roots.0.ports.0",
        {"device": "nvme", "uplink": True},
        "pci.roots[0].ports[0].uplink: profile nvme is not a NIC",
    ),
    (
        "pci.roots.0.ports.0",
        {"switch": {"ports": []}},
        "pci.roots[0].ports[0].switch.ports: a switch needs at least one",
    ),
    ("pci.roots.0.ports.0", {"repeat": 2}, "pci.roots[0].ports[0]: needs one of device, switch or empty"),
    (
        "pci.roots.0.ports.0",
        {"device": "cx7", "uplink": True, "repeat": 2},
        "cannot carry fixed names or the uplink",
    ),
    ("pci.roots.0.ports.0", {"device": "spr-iio"}, "profile spr-iio is conventional PCI"),
    ("pci.roots.1.bus", 1, "pci.roots[1].bus: 0x01 overlaps"),
    ("pci.roots.1.ports.0", {"device": "cx7", "uplink": True}, "network: more than one uplink"),
    ("pci.roots.1.ports.0", {"device": "cx7", "name": "lo"}, "network: two interfaces named 'lo'"),
    ("pci.profiles", {"loop": {"extends": "loop2"}, "loop2": {"extends": "loop"}}, "extends itself"),
    ("pci.profiles", {"bad": {"class": "0x0604", "vendor": "0x1", "device": "0x2"}}, None),
    (
        "pci.profiles",
        {"cx7": {"extends": "cx7", "vendor": "zz"}},
        "pci.profiles.cx7.vendor: must be a hex number",
    ),
    (
        "pci.profiles",
        {"cx7": {"extends": "cx7", "sriov": {"num_vfs": 99}}},
        "pci.profiles.cx7.sriov.num_vfs: must be at most 16",
    ),
    ("pci.profiles", {"cx7": {"extends": "cx7", "netx": {}}}, "pci.profiles.cx7: unknown key 'netx'"),
    ("network", {"uplink_ipv4": "10.0.0.1"}, "network.uplink_ipv4: needs a prefix length"),
    (
        "network",
        {"uplink_ipv4": "10.0.0.5/24", "gateway_ipv4": "10.1.0.1"},
        "network.gateway_ipv4: 10.1.0.1 is not in",
    ),
    ("network", {"virtual": [{"name": "lo"}]}, "network.virtual[0].name: lo is always present"),
    (
        "pci.roots.0.ports.0.driver",
        "vfio-pci",
        "pci.roots[0].ports[0].driver: with driver vfio-pci the cx7 has no",
    ),
    ("cpu", ..., "cpu: is required"),
]


@pytest.mark.parametrize(("path", "value", "message"), BAD, ids=[f"{p}={v!r}"[:60] for p, v, _ in BAD])
def test_bad_specs_name_the_field(path: str, value: object, message: str | None) -> None:
    spec = mutate(path, value)
    if message is None:  # accepted: the mutation is legal, the error comes elsewhere or not at all
        try:
            make_plan(parse_spec(spec))
        except SpecError:
            pytest.fail("a legal spec was refused")
        return
    with pytest.raises(SpecError) as info:
        make_plan(parse_spec(spec))
    assert message in str(info.value)


def test_profile_class_bridge_is_refused() -> None:
    spec = mutate("pci.profiles", {"br": {"class": "0x060400", "vendor": "0x1", "device": "0x2"}})
    spec["pci"]["roots"][0]["ports"].append({"device": "br"})
    with pytest.raises(SpecError, match=r"pci\.profiles\.br\.class: bridges are declared with switch"):
        parse_spec(spec)


def test_caches_crossing_a_die_are_refused() -> None:
    spec = mutate(
        "cpu",
        {
            "sockets": 2,
            "cores_per_socket": 12,
            "dies_per_socket": 2,
            "caches": {"l2": {"size_kib": 2048, "cores": 4}},
        },
    )
    with pytest.raises(SpecError, match="the die of cores 0-5 and the L2 of cores 4-7"):
        make_plan(parse_spec(spec))


def test_running_out_of_bus_numbers() -> None:
    spec = mutate("pci.roots", [{"ports": [{"empty": True, "repeat": 32}], "repeat": 9}])
    with pytest.raises(SpecError, match="ran out of bus numbers"):
        make_plan(parse_spec(spec))
    spec["pci"]["roots"].append({"domain": 1, "ports": [{"empty": True}]})
    spec["pci"]["roots"][0]["repeat"] = 7  # 7 * 33 buses fit in domain 0
    plan = make_plan(parse_spec(spec))
    assert plan.functions[-1].bdf == "0001:00:00.0"


def test_too_many_drm_devices() -> None:
    spec = mutate(
        "pci.roots", [{"ports": [{"switch": {"ports": [{"device": "h100-sxm", "repeat": 32}]}}], "repeat": 3}]
    )
    with pytest.raises(SpecError, match="at most 64"):
        make_plan(parse_spec(spec))


def test_extends_merges_nested_objects() -> None:
    spec = mutate(
        "pci.profiles", {"fast": {"extends": "cx7", "net": {"speed_mbps": 800000}, "sriov": {"num_vfs": 3}}}
    )
    spec["pci"]["roots"][1]["ports"][0]["switch"]["ports"][1]["device"] = "fast"
    plan = make_plan(parse_spec(spec))
    fast = next(
        f for f in plan.functions if f.profile is not None and f.profile.name == "fast" and f.role != "vf"
    )
    assert fast.profile is not None and fast.profile.net is not None
    assert fast.profile.net.speed_mbps == 800000
    assert fast.profile.net.mac_oui == "b8:3f:d2"  # kept from cx7
    assert len(fast.vfs) == 3


def test_json_errors_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "broken.json"
    bad.write_text("{")
    with pytest.raises(SpecError, match=r"broken\.json: not JSON"):
        load_spec(bad)
    with pytest.raises(SpecError, match=r"missing\.json: cannot read"):
        load_spec(tmp_path / "missing.json")
    with pytest.raises(SpecError, match=r"no shipped spec named 'no-such-box' \(shipped: 1s-4acc"):
        load_spec("no-such-box")


def test_file_name_is_the_default_name(tmp_path: Path) -> None:
    path = tmp_path / "lab-box.json"
    path.write_text(json.dumps({"cpu": {}}))
    assert load_spec(path).name == "lab-box"
    assert load_spec_text('{"cpu": {}}', default_name="x").hostname == "x"


def test_minimal_defaults() -> None:
    plan = make_plan(parse_spec({"name": "m", "cpu": {}}))
    assert [c.id for c in plan.cpus] == [0, 1, 2, 3]
    assert len(plan.nodes) == 1 and plan.functions == []
    assert [n.name for n in plan.netdevs] == ["lo"] and plan.uplink is None
