"""Synthetic machines: a sysfs (and a little procfs) tree for a declared machine.

The drivers' tests, the examples and the benchmarks run on these trees, and a user can run the
drivers on a laptop or on kind with them. The tree is laid out the way the kernel lays out a
real machine (relative symlinks, kernel mask and list formats, PCI config space that agrees with
the attributes), so any reader of a real /sys, hwloc included, reads it as the declared machine.
`topodra synth --spec FILE|NAME --dest DIR` writes one; `topodra synth --list` names the
shipped ones. Generation is deterministic: the same spec (and hostname) gives a byte-identical
tree. Beside `sys/` and `proc/` the build writes `synth-manifest.json`, the machine as a correct
reader must find it (CPUs, cores, caches, NUMA, PCI addresses, bridges, interfaces, RDMA).

Spec format (JSON, version 1). Every key is optional unless marked; unknown keys are errors.

    {
      "version": 1,
      "name": "my-box",                  # default: the file name
      "description": "...",
      "hostname": "my-box",              # default: name; seeds MACs, GUIDs and GPU UUIDs
      "dmi": {"sys_vendor": "...", "product_name": "..."},
      "cpu": {                           # required
        "vendor": "GenuineIntel", "model_name": "...", "family": 6, "model": 143,
        "stepping": 8, "mhz": 2000,      # for /proc/cpuinfo
        "sockets": 2,
        "dies_per_socket": 1,
        "numa_nodes_per_socket": 1,      # 2 for SNC-2 / NPS2, 4 for SNC-4 / NPS4
        "cores_per_socket": 56,
        "threads_per_core": 2,
        "core_types": [                  # hybrid parts, instead of the two keys above
          {"type": "core", "cores": 6, "threads": 2, "caches": {"l2": {"size_kib": 1280}}},
          {"type": "atom", "cores": 8, "threads": 1, "caches": {"l2": {"size_kib": 2048, "cores": 4}}}
        ],
        "smt_numbering": "spread",       # siblings at +N like x86 servers; "adjacent": 0,1 are siblings
        "caches": {                      # per core; l2 "cores" shares one L2 between N cores
          "l1d": {"size_kib": 48, "ways": 12}, "l1i": {"size_kib": 32, "ways": 8},
          "l2": {"size_kib": 2048, "ways": 16},
          "l3": {"size_kib": 107520, "ways": 15, "scope": "socket"}   # or "die", "numa_node",
        },                                                            # or "cores": 8 (AMD CCX)
        "offline_cpus": [5],
        "possible_cpus": 256,            # more possible than present (hot-plug slots)
        "cpu0_hotpluggable": false       # x86 cpu0 has no `online` file unless true
      },
      "memory": {
        "per_node_mib": 262144,          # or one value per node
        "distances": {"local": 10, "same_socket": 12, "remote": 21}   # or a full matrix
      },
      "pci": {
        "defaults": {"root_port": {"vendor": "0x8086", "device": "0x352a"},
                     "switch": {"vendor": "0x1000", "device": "0xc030"}},
        "profiles": {                    # card types; the built-in ones (profiles.json) are
          "my-nic": {"extends": "cx7", "net": {"speed_mbps": 200000}}   # h100-sxm, mi210,
        },                               # gaudi2, cx7, cx7-ib, cx6dx, e810, ast2600, nvme,
        "roots": [                       # spr-iio, amd-rc
          {"numa_node": 0,               # null: numa_node -1 (no affinity)
           "domain": 0, "bus": 0,        # default: the next free bus of the domain
           "repeat": 1,
           "integrated": [{"device": "spr-iio"}],     # functions on the root bus itself
           "ports": [                                  # one root port each
             {"device": "cx6dx", "name": ["eno1", "eno2"], "uplink": true},
             {"switch": {"ports": [{"device": "h100-sxm"}, {"device": "cx7", "num_vfs": 4}],
                         "link": {"gen": 5, "width": 16}}},
             {"device": "nvme", "repeat": 2},
             {"empty": true}
           ]}
        ]
      },
      "network": {
        "uplink_ipv4": "10.0.0.11/24", "gateway_ipv4": "10.0.0.1", "gateway_ipv6": "fe80::1",
        "virtual": [{"name": "cni0", "kind": "bridge", "ipv4": "10.244.0.1/24", "up": true}]
      }
    }

A port item is one of `device` (with optional `name`, `uplink`, `num_vfs`, `link_up`, and
`driver` to bind another driver, e.g. "vfio-pci", which removes the vendor driver's netdevs,
RDMA and DRM/accel nodes and adds `vfio-dev/vfioN`), `switch`
(upstream port + one downstream port per item of its `ports`, nesting allowed) or `empty`. A
profile holds `kind` (accelerator, nic, storage, display, other), `class` (24-bit, "0x030200"),
`vendor`, `device`, `subsystem_vendor`, `subsystem_device`, `revision`, `driver`, `model`,
`link` {gen, width}, `functions` (ports of a multi-port NIC), `drm` {card, render}, `accel`,
`vram_bytes`, `net` {speed_mbps, mtu, link_layer ethernet|infiniband, mac_oui}, `rdma`
{name_prefix, hca_type, fw_ver, board_id}, `sriov` {total_vfs, num_vfs, vf_device, offset,
stride, vf_driver, vf_rdma, vf_net}, `behind_bridge` {vendor, device} (a PCIe-to-PCI bridge in
front, as BMC display adapters have), `conventional_pci` (no PCIe capability) and `files`
{relative path: content} for any other attribute.

Bus numbers are assigned depth-first like firmware does; IOMMU groups, DRM/accel minors,
interface indexes and RDMA names follow address order (PFs before VFs). Interfaces without a
`name` get systemd-style path names (`enp24s0f0`, VFs `enp24s0f0v3`, InfiniBand `ibp...`).
The uplink's default route is written to `proc/net/route` and `proc/net/ipv6_route`.
`--dev-nodes` (root) also writes DIR/dev: every device node the machine would have (DRM, accel,
uverbs, VFIO, NVIDIA) as a character device with /dev/null's numbers, for real containers.
"""

from __future__ import annotations

from topodra.common.synth.builder import BuildResult, OutputError, build, render
from topodra.common.synth.catalog import load_spec, shipped_spec_names, shipped_spec_text
from topodra.common.synth.manifest import MANIFEST, manifest
from topodra.common.synth.plan import Plan, make_plan
from topodra.common.synth.reader import SpecError
from topodra.common.synth.spec import MachineSpec, load_spec_text, parse_spec

__all__ = [
    "MANIFEST",
    "BuildResult",
    "MachineSpec",
    "OutputError",
    "Plan",
    "SpecError",
    "build",
    "load_spec",
    "load_spec_text",
    "make_plan",
    "manifest",
    "parse_spec",
    "render",
    "shipped_spec_names",
    "shipped_spec_text",
]
