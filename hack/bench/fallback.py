"""Claims that prefer the closest devices and fall back level by level ("best locality").

Pure functions: the placement study submits these claims (scenario C), and tests/deploy checks
that deploy/examples/best-locality-*.yaml and the Helm chart's optional templates are exactly
these specs, so the study measures what is shipped. docs/design/prioritized-placement.md says
how the upstream allocator searches them and why they have these two shapes:

- Pairs (k <= PAIR_LIMIT accelerators): one request per accelerator and one per NIC, each a
  prioritized list of the five levels (switch, root, numa, socket, any); per pair the two are
  tied to the same level by `matchAttribute` on `resource.kubernetes.io/pciBusID` over an
  accelerator level and every other NIC level (two single devices never share a bus ID, one
  device always matches itself), and each level's constraint lines them up. Exact per pair,
  portable to any driver that publishes pciBusID, but the allocator's search grows with the
  factorial of the number of pairs when a node lacks room, hence the limit.
- Groups (more accelerators): one request for the k accelerators and one for the k NICs, each
  a prioritized list of eight group levels; tied by `matchAttribute` on
  `topology.topodra.io/kind` (accelerators and NICs differ, each set agrees). "Rails" levels ask
  every accelerator and every NIC to sit on a switch of its own (`distinctAttribute`), which on
  rail-optimised machines (one NIC per accelerator switch) gives each accelerator its NIC.
"""

from __future__ import annotations

from typing import Any

ACCELERATOR_CLASS = "accelerator.topodra.io"
NIC_CLASS = "nic.topodra.io"
CPU_CLASS = "cpu.topodra.io"
CPU_CAPACITY = "cpu.topodra.io/cpu"

SWITCH = "topology.topodra.io/pcieSwitch"
ROOT = "resource.kubernetes.io/pcieRoot"
NUMA = "resource.kubernetes.io/numaNode"
SOCKET = "topology.topodra.io/socket"
BUS_ID = "resource.kubernetes.io/pciBusID"
KIND = "topology.topodra.io/kind"

PAIR_LEVELS = ("switch", "root", "numa", "socket", "any")
GROUP_LEVELS = ("switch", "root", "numa-rails", "numa", "socket-rails", "socket", "rails", "any")
PAIR_LIMIT = 2
LEVEL_ATTRIBUTE = {"switch": SWITCH, "root": ROOT, "numa": NUMA, "socket": SOCKET}


def _sub(name: str, device_class: str, count: int = 1, cpus: int | None = None) -> dict[str, Any]:
    sub: dict[str, Any] = {"name": name, "deviceClassName": device_class}
    if count != 1:
        sub["count"] = count
    if cpus is not None:
        sub["capacity"] = {"requests": {CPU_CAPACITY: str(cpus)}}
    return sub


def pair_spec(accelerators: int, cpus_per_accelerator: int = 4) -> dict[str, Any]:
    """k (accelerator, NIC, CPUs) triples, each at the best level the node still offers.

    Requests per pair i, in this order: accelerator-i, nic-i, cpus-i. The first subrequest of
    accelerator-i that can be satisfied decides the pair's level; nic-i can only take the
    subrequest of the same name (the bus-ID ties), so the allocator tries every accelerator and
    NIC at "switch" before any at "root". cpus-i takes its CPUs on the accelerator's NUMA node
    at every level but "any", and anywhere only when that node has no CPUs left.
    """
    if not 1 <= accelerators <= PAIR_LIMIT:
        raise ValueError(f"pairs take 1..{PAIR_LIMIT} accelerators, got {accelerators}")
    requests: list[dict[str, Any]] = []
    constraints: list[dict[str, Any]] = []
    bounded = [lv for lv in PAIR_LEVELS if lv != "any"]
    for i in range(accelerators):
        acc, nic, cpu = f"accelerator-{i}", f"nic-{i}", f"cpus-{i}"
        requests += [
            {"name": acc, "firstAvailable": [_sub(lv, ACCELERATOR_CLASS) for lv in PAIR_LEVELS]},
            {"name": nic, "firstAvailable": [_sub(lv, NIC_CLASS) for lv in PAIR_LEVELS]},
            {
                "name": cpu,
                "firstAvailable": [
                    _sub("numa", CPU_CLASS, cpus=cpus_per_accelerator),
                    _sub("any", CPU_CLASS, cpus=cpus_per_accelerator),
                ],
            },
        ]
        for lv in bounded:
            members = [f"{acc}/{lv}", f"{nic}/{lv}"]
            if lv == "numa":  # the CPUs follow the accelerator's NUMA node at every bounded level
                members = [f"{acc}/{b}" for b in bounded] + [f"{nic}/numa", f"{cpu}/numa"]
            constraints.append({"requests": members, "matchAttribute": LEVEL_ATTRIBUTE[lv]})
        for lv in PAIR_LEVELS:
            others = [f"{nic}/{o}" for o in PAIR_LEVELS if o != lv]
            constraints.append({"requests": [f"{acc}/{lv}", *others], "matchAttribute": BUS_ID})
    return {"devices": {"requests": requests, "constraints": constraints}}


def group_spec(accelerators: int, cpus_per_accelerator: int = 4) -> dict[str, Any]:
    """k accelerators and k NICs as two requests that fall back together through GROUP_LEVELS.

    switch/root: all 2k devices behind one PCIe switch / root complex. numa-rails: one NUMA
    node, every accelerator and every NIC on a switch of its own. numa: one NUMA node.
    socket-rails, socket: the same for one socket. rails: anywhere, one switch each. any:
    anywhere. The 4k CPUs come from one CPU device on the devices' NUMA node (switch to numa)
    or socket (socket-rails, socket), anywhere otherwise.
    """
    if accelerators < 1:
        raise ValueError(f"a group needs at least one accelerator, got {accelerators}")
    k = accelerators
    acc, nic, cpu = "accelerators", "nics", "cpus"
    requests = [
        {"name": acc, "firstAvailable": [_sub(lv, ACCELERATOR_CLASS, k) for lv in GROUP_LEVELS]},
        {"name": nic, "firstAvailable": [_sub(lv, NIC_CLASS, k) for lv in GROUP_LEVELS]},
        {
            "name": cpu,
            "exactly": {
                "deviceClassName": CPU_CLASS,
                "capacity": {"requests": {CPU_CAPACITY: str(cpus_per_accelerator * k)}},
            },
        },
    ]
    numa_levels = ("numa-rails", "numa")
    socket_levels = ("socket-rails", "socket")
    rails = ("numa-rails", "socket-rails", "rails")
    constraints: list[dict[str, Any]] = [
        {"requests": [f"{acc}/switch", f"{nic}/switch"], "matchAttribute": SWITCH},
        {"requests": [f"{acc}/root", f"{nic}/root"], "matchAttribute": ROOT},
        {
            "requests": [f"{acc}/{lv}" for lv in ("switch", "root", *numa_levels)]
            + [f"{nic}/{lv}" for lv in numa_levels]
            + [cpu],
            "matchAttribute": NUMA,
        },
        {
            "requests": [f"{acc}/{lv}" for lv in socket_levels]
            + [f"{nic}/{lv}" for lv in socket_levels]
            + [cpu],
            "matchAttribute": SOCKET,
        },
        {"requests": [f"{acc}/{lv}" for lv in rails], "distinctAttribute": SWITCH},
        {"requests": [f"{nic}/{lv}" for lv in rails], "distinctAttribute": SWITCH},
    ]
    for lv in GROUP_LEVELS:
        others = [f"{nic}/{o}" for o in GROUP_LEVELS if o != lv]
        constraints.append({"requests": [f"{acc}/{lv}", *others], "matchAttribute": KIND})
    return {"devices": {"requests": requests, "constraints": constraints}}


def best_locality_spec(accelerators: int, cpus_per_accelerator: int = 4) -> dict[str, Any]:
    """The shipped "best locality, fall back" claim for k accelerators (pairs or a group)."""
    if accelerators <= PAIR_LIMIT:
        return pair_spec(accelerators, cpus_per_accelerator)
    return group_spec(accelerators, cpus_per_accelerator)


def level_of(request_name: str) -> str | None:
    """The fallback level an allocation result's request name records ("nic-0/root" -> "root")."""
    _, sep, sub = request_name.partition("/")
    return sub if sep and sub in (*PAIR_LEVELS, *GROUP_LEVELS) else None
