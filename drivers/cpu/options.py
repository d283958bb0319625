"""The CPU driver's settings, parsed once from its command-line flags.

Flags carry the `--cpu-` prefix so `serve all` can add every driver's flags to one parser; the
dataclass is what the pure functions take, so tests build it directly.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from topodra.common.topology.parse import compress, parse_cpulist
from topodra.drivers import flags

if TYPE_CHECKING:
    from topodra.common.topology.model import Topology

GRANULARITIES = ("numa", "core")
DEFAULT_HOOK_DIR = Path("/opt/topodra/hooks")
PINNING_MODES = ("auto", "hook", "none")
MEMORY_MODES = ("auto", "off")
DEFAULT_NRI_SOCKET = Path("/var/run/nri/nri.sock")
MAX_SHARED_MIN = 4096


@dataclass(frozen=True, slots=True)
class CpuOptions:
    granularity: str = "numa"  # numa: one multi-allocatable device per NUMA node; core: one per core
    reserved: frozenset[int] = frozenset()  # never published, never handed out
    list_attributes: bool = False  # numaNode/pcieRoot/l3 as lists (DRAListTypeAttributes)
    # each device says how many node-allocatable `cpu` an allocation of it takes (1.37
    # nodeAllocatableResources), so pods need not repeat claimed CPUs in their requests
    node_allocatable: bool = False
    # devices with an offline CPU carry cpu.topodra.io/unhealthy:NoSchedule in the slice, so the
    # scheduler stops choosing them (health is reported to the kubelet either way)
    taint_unhealthy: bool = False
    hook_dir: Path = DEFAULT_HOOK_DIR  # host folder holding hooks/cpuset.sh
    # auto: every other container on the shared pool through NRI when the runtime offers it, the
    # CDI hook pins claim containers either way; hook: the CDI hook only; none: env only
    pinning: str = "auto"
    pin_memory: str = "auto"  # auto: cpuset.mems = the CPUs' nodes when they all have memory
    # CPUs never published besides `reserved`, so the shared pool is never empty. The flag's
    # default is 1 (from_args, where 0 needs --cpu-reserved-cpus); 0 here lets tests and tools
    # lay devices out over a whole machine.
    shared_min: int = 0
    nri_socket: Path = DEFAULT_NRI_SOCKET

    def __post_init__(self) -> None:
        if self.granularity not in GRANULARITIES:
            raise ValueError(f"--cpu-device-granularity must be one of {', '.join(GRANULARITIES)}")
        if self.pinning not in PINNING_MODES:
            raise ValueError(f"--cpu-pinning must be one of {', '.join(PINNING_MODES)}")
        if self.pin_memory not in MEMORY_MODES:
            raise ValueError(f"--cpu-pin-memory must be one of {', '.join(MEMORY_MODES)}")
        if not 0 <= self.shared_min <= MAX_SHARED_MIN:
            raise ValueError(
                f"--cpu-shared-min must be between 0 and {MAX_SHARED_MIN}, got {self.shared_min}"
            )
        if not self.nri_socket.is_absolute():
            raise ValueError(f"--cpu-nri-socket must be an absolute path: {self.nri_socket}")
        if not self.hook_dir.is_absolute():
            raise ValueError(f"--cpu-hook-dir must be an absolute path (CDI hooks need one): {self.hook_dir}")


def reserved_problem(reserved: frozenset[int], topology: Topology) -> str | None:
    """Why `--cpu-reserved-cpus` cannot be right for this machine, or None.

    A CPU that has no cpuN folder at all is a typo or a list meant for another machine (the
    driver would silently publish a different split than intended); a list that covers every
    usable CPU leaves nothing to publish. An offline CPU is fine: it may come back.
    """
    if not reserved:
        return None
    text = compress(sorted(reserved))
    absent = sorted(reserved - {c.id for c in topology.cpus})
    if absent:
        have = compress([c.id for c in topology.cpus]) or "none"
        missing = compress(absent)
        return f"--cpu-reserved-cpus {text}: CPUs {missing} do not exist on this machine (it has {have})"
    usable = set(topology.usable_cpus())
    if usable and usable <= reserved:
        every = compress(sorted(usable))
        return f"--cpu-reserved-cpus {text} reserves every usable CPU ({every}): nothing left to publish"
    return None


def cpu_list(text: str) -> frozenset[int]:
    """argparse type for kernel CPU lists ('0-1,8')."""
    cpus = parse_cpulist(text)
    if cpus is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a CPU list such as '0-1,8'")
    return cpus


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("cpu driver (cpu.topodra.io)")
    group.add_argument(
        "--cpu-device-granularity",
        choices=GRANULARITIES,
        default="numa",
        help="numa: one device per NUMA node (per socket without NUMA) with consumable CPU capacity; "
        "core: one device per physical core (for clusters without DRAConsumableCapacity)",
    )
    group.add_argument(
        "--cpu-reserved-cpus",
        type=cpu_list,
        default=frozenset(),
        metavar="LIST",
        help="CPUs kept for the system, never published or handed out (e.g. 0-1)",
    )
    group.add_argument(
        "--cpu-node-allocatable",
        action="store_true",
        help="count claimed CPUs against the node's allocatable cpu (nodeAllocatableResources; "
        "Kubernetes 1.37+ with DRANodeAllocatableResources on the API server, scheduler and kubelet)",
    )
    group.add_argument(
        "--cpu-taint-unhealthy",
        action="store_true",
        help="taint CPU devices with an offline CPU cpu.topodra.io/unhealthy:NoSchedule in the "
        "ResourceSlice (needs DRADeviceTaints)",
    )
    group.add_argument(
        "--cpu-list-attributes",
        action="store_true",
        help="publish numaNode, pcieRoot and L3 ids as lists (needs DRAListTypeAttributes)",
    )
    group.add_argument(
        "--cpu-hook-dir",
        type=flags.absolute_path,
        default=DEFAULT_HOOK_DIR,
        help="host folder with the topodra hooks (cpuset.sh); default %(default)s",
    )
    group.add_argument(
        "--cpu-pinning",
        choices=PINNING_MODES,
        default="auto",
        help="auto: claimed CPUs exclusive on the node through NRI (every other container runs on the "
        "shared pool) when the runtime offers it, else as hook; hook: a CDI createRuntime hook pins "
        "claim containers only (other containers may still run on claimed CPUs); none: only pass "
        "TOPODRA_CPUS_* env",
    )
    group.add_argument(
        "--cpu-shared-min",
        type=int,
        default=1,
        metavar="N",
        help="CPUs kept out of every device besides --cpu-reserved-cpus (whole cores, at least N), "
        "so containers without a claim always have a shared pool; default %(default)s",
    )
    group.add_argument(
        "--cpu-nri-socket",
        type=Path,
        default=DEFAULT_NRI_SOCKET,
        help="the container runtime's NRI socket (--cpu-pinning auto); default %(default)s",
    )
    group.add_argument(
        "--cpu-pin-memory",
        choices=MEMORY_MODES,
        default="auto",
        help="auto: also restrict cpuset.mems to the CPUs' NUMA nodes when they all have memory",
    )


def from_args(args: argparse.Namespace) -> CpuOptions:
    """Options from a parsed namespace; flags that a caller did not add take their defaults."""
    shared_min = int(getattr(args, "cpu_shared_min", 1))
    reserved = frozenset(getattr(args, "cpu_reserved_cpus", frozenset()) or frozenset())
    if shared_min == 0 and not reserved:
        raise ValueError(
            "--cpu-shared-min 0 without --cpu-reserved-cpus would let claims take every CPU "
            "and leave containers without a claim no CPU to run on"
        )
    return CpuOptions(
        granularity=getattr(args, "cpu_device_granularity", "numa"),
        reserved=reserved,
        list_attributes=bool(getattr(args, "cpu_list_attributes", False)),
        node_allocatable=bool(getattr(args, "cpu_node_allocatable", False)),
        taint_unhealthy=bool(getattr(args, "cpu_taint_unhealthy", False)),
        hook_dir=Path(getattr(args, "cpu_hook_dir", DEFAULT_HOOK_DIR)),
        pinning=getattr(args, "cpu_pinning", "auto"),
        pin_memory=getattr(args, "cpu_pin_memory", "auto"),
        shared_min=shared_min,
        nri_socket=Path(getattr(args, "cpu_nri_socket", DEFAULT_NRI_SOCKET)),
    )
