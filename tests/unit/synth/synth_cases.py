"""The machines the synth tests run on: every shipped spec plus two made for the traps."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from topodra.common.synth import MachineSpec, Plan, load_spec, parse_spec, shipped_spec_names

# Everything the shipped specs do not exercise: hybrid core types with per-type frequencies,
# offline CPUs (cpu0 too), two dies per socket with a die-wide L3, NPS-style nodes with a full
# distance matrix and unequal memory, more possible than present CPUs, a root with no NUMA
# affinity, an empty root port, nested switches, a non-zero PCI domain, a display adapter behind
# a PCIe-to-PCI bridge inside a switch, a GPU bound to vfio-pci, and VFs (stride 8) that spill
# onto the next bus.
EDGE: dict[str, Any] = {
    "name": "edge",
    "cpu": {
        "sockets": 2,
        "dies_per_socket": 2,
        "numa_nodes_per_socket": 2,
        "smt_numbering": "adjacent",
        "core_types": [
            {
                "type": "core",
                "cores": 4,
                "threads": 2,
                "base_mhz": 2100,
                "max_mhz": 5000,
                "caches": {"l2": {"size_kib": 1280, "ways": 10}},
            },
            {
                "type": "atom",
                "cores": 4,
                "threads": 1,
                "base_mhz": 1500,
                "max_mhz": 3800,
                "caches": {
                    "l1d": {"size_kib": 32, "ways": 8},
                    "l1i": {"size_kib": 64, "ways": 8},
                    "l2": {"size_kib": 2048, "ways": 16, "cores": 4},
                },
            },
        ],
        "caches": {"l3": {"size_kib": 30720, "ways": 12, "scope": "die"}},
        "offline_cpus": [0, 5, 17],
        "possible_cpus": 64,
    },
    "memory": {
        "per_node_mib": [1024, 2048, 4096, 8192],
        "distances": [[10, 11, 20, 22], [11, 10, 22, 20], [20, 22, 10, 11], [22, 20, 11, 10]],
    },
    "pci": {
        "profiles": {
            "bignic": {
                "extends": "cx6dx",
                "functions": 1,
                "sriov": {"total_vfs": 64, "num_vfs": 40, "stride": 8},
            }
        },
        "roots": [
            {"numa_node": None, "ports": [{"device": "bignic", "uplink": True}, {"empty": True}]},
            {
                "domain": "0x0001",
                "numa_node": 3,
                "ports": [
                    {
                        "switch": {
                            "ports": [
                                {
                                    "switch": {
                                        "ports": [
                                            {"device": "h100-sxm"},
                                            {"device": "cx7", "num_vfs": 2, "link_up": False},
                                            {"device": "h100-sxm", "driver": "vfio-pci"},
                                        ]
                                    }
                                },
                                {"device": "ast2600"},
                            ]
                        }
                    }
                ],
            },
        ],
    },
    "network": {
        "virtual": [
            {"name": "br0", "kind": "bridge", "ipv4": "172.16.0.1/16"},
            {"name": "dummy0", "kind": "dummy", "up": False},
        ]
    },
}

# Nothing but the defaults: one socket of four cores, no PCI at all.
MINIMAL: dict[str, Any] = {"name": "minimal", "cpu": {}}

MADE = {"edge": EDGE, "minimal": MINIMAL}
ALL = [*shipped_spec_names(), *MADE]


def spec_of(name: str) -> MachineSpec:
    if name in MADE:
        return parse_spec(copy.deepcopy(MADE[name]))
    return load_spec(name)


@dataclass(frozen=True)
class Built:
    name: str
    root: Path
    plan: Plan

    @property
    def spec(self) -> MachineSpec:
        return self.plan.spec
