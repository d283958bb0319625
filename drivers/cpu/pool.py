"""Who runs where when claimed CPUs are exclusive on the whole node: pure functions.

A container that uses CPU devices of ours runs on exactly the CPUs its claims hold; every other
container runs on the shared pool, which is the allowed CPUs minus every CPU a prepared claim
holds (whether or not its containers run yet: a prepared claim's CPUs are promised). The pool is
never empty: `--cpu-shared-min` and `--cpu-reserved-cpus` keep CPUs out of every device
(devices.withheld), so claims cannot take them; should a checkpoint from other options hold them
anyway, the pool falls back to those withheld CPUs rather than to nothing.

Which claims a container uses comes from what the kubelet asked the runtime to inject: the CDI
device names in CRI `ContainerConfig.CDI_devices` (NRI `Container.CDI_devices`), which the
kubelet fills from prepared claims and a pod's author cannot set. Runtimes that do not pass them
on are served by the other thing a pod cannot forge: our createRuntime hook in the container's
OCI hooks, whose arguments name the CPUs. A container's environment is never read (anyone can
put a TOPODRA_CPUS_ variable in a pod spec).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from topodra.common.topology.parse import parse_cpulist
from topodra.drivers.cpu.holdings import Holding
from topodra.drivers.cpu.pinning import HOOK_NAME
from topodra.drivers.cpu.policy import fmt
from topodra.proto.nri.v1alpha1 import api_pb2 as api

MAX_CDI_DEVICES = 1024  # per container; more is not a kubelet's doing
UID_LEN = 36


@dataclass(frozen=True, slots=True)
class Assignment:
    """Where one container should run."""

    cpus: frozenset[int]
    mems: frozenset[int] | None = None  # None: leave cpuset.mems alone
    claims: tuple[str, ...] = ()  # claim UIDs whose CPUs these are; empty: the shared pool

    @property
    def shared(self) -> bool:
        return not self.claims

    def cpus_text(self) -> str:
        return fmt(self.cpus)

    def mems_text(self) -> str:
        return fmt(self.mems) if self.mems else ""


def shared_pool(allowed: Iterable[int], held: Iterable[int], withheld: Iterable[int]) -> frozenset[int]:
    """Allowed CPUs minus held ones; never empty (module doc)."""
    allowed_set = frozenset(allowed)
    pool = allowed_set - frozenset(held)
    if pool:
        return pool
    fallback = frozenset(withheld) & allowed_set
    return fallback or allowed_set


def cdi_name(claim_uid: str, h: Holding) -> str:
    """The CDI device name (after `=`) of one allocation result, as the claim core names it."""
    return f"{claim_uid}-{h.device}" + (f"-{h.share_id}" if h.share_id else "")


@dataclass(frozen=True, slots=True)
class ClaimUse:
    """What a container says about our claims, fixed at its creation."""

    cdi_names: tuple[str, ...] = ()  # our CDI device names (after the kind's `=`)
    hook_cpus: tuple[frozenset[int], ...] = ()  # CPU lists of our hook's calls (fallback)

    @property
    def any(self) -> bool:
        return bool(self.cdi_names or self.hook_cpus)


def claim_use(container: api.Container, cdi_kind: str, hook_path: str | None) -> ClaimUse:
    """Our CDI devices among the container's, else our hook's CPU arguments (module doc)."""
    prefix = f"{cdi_kind}="
    names = tuple(
        d.name[len(prefix) :]
        for d in container.CDI_devices[:MAX_CDI_DEVICES]
        if d.name.startswith(prefix) and len(d.name) > len(prefix)
    )
    if names or container.CDI_devices or hook_path is None:
        return ClaimUse(cdi_names=names)
    lists = []
    for hook in container.hooks.create_runtime[:MAX_CDI_DEVICES]:
        if hook.path != hook_path or len(hook.args) < 2 or hook.args[0] != HOOK_NAME:
            continue
        cpus = parse_cpulist(hook.args[1])
        if cpus:
            lists.append(frozenset(cpus))
    return ClaimUse(hook_cpus=tuple(lists))


@dataclass(frozen=True, slots=True)
class Table:
    """Every prepared claim's holdings, indexed for containers to be matched against."""

    by_cdi: Mapping[str, Holding]
    by_cpu: Mapping[int, Holding]
    pool: frozenset[int]
    claims: frozenset[str] = frozenset()

    @classmethod
    def build(
        cls,
        holdings: Mapping[str, Sequence[Holding]],
        allowed: Iterable[int],
        withheld: Iterable[int],
    ) -> Table:
        by_cdi: dict[str, Holding] = {}
        by_cpu: dict[int, Holding] = {}
        for uid, held in holdings.items():
            for h in held:
                by_cdi[cdi_name(uid, h)] = h
                for c in h.cpus:
                    by_cpu[c] = h
        return cls(by_cdi, by_cpu, shared_pool(allowed, by_cpu, withheld), frozenset(holdings))


def assign(use: ClaimUse, table: Table, pin_memory: bool) -> tuple[Assignment, tuple[str, ...]]:
    """Where a container runs, and what of its claim use matched nothing held (for the log:
    a claim unprepared under a running container, or a checkpoint that lost it)."""
    matched: list[Holding] = []
    unknown: list[str] = []
    for name in use.cdi_names:
        h = table.by_cdi.get(name)
        if h is not None:
            matched.append(h)
        elif claim_of(name) not in table.claims:
            unknown.append(name)  # an admin-access result of a known claim holds no CPUs: fine
    for cpus in use.hook_cpus:
        owners = {table.by_cpu.get(c) for c in cpus}
        if None in owners or len({o.claim_uid for o in owners if o is not None}) != 1:
            unknown.append(f"hook CPUs {fmt(cpus)}")
            continue
        matched.extend(o for o in owners if o is not None)
    if not matched:
        return Assignment(table.pool), tuple(unknown)
    cpus = frozenset(c for h in matched for c in h.cpus)
    mems: frozenset[int] | None = None
    if pin_memory and all(h.mems for h in matched):
        mems = frozenset(m for h in matched for m in h.mems or ())
    claims = tuple(sorted({h.claim_uid for h in matched}))
    return Assignment(cpus, mems, claims), tuple(unknown)


def claim_of(name: str) -> str:
    """The claim UID a CDI device name starts with (UIDs are 36-character UUIDs)."""
    return name[:UID_LEN] if name[UID_LEN : UID_LEN + 1] == "-" else ""


def linux_cpu(a: Assignment) -> api.LinuxResources:
    cpu = api.LinuxCPU(cpus=a.cpus_text())
    if a.mems:
        cpu.mems = a.mems_text()
    return api.LinuxResources(cpu=cpu)


def current_cpus(container: api.Container) -> frozenset[int] | None:
    """The cpuset the runtime's spec gives the container now; None when unset or unreadable."""
    text = container.linux.resources.cpu.cpus
    parsed = parse_cpulist(text) if text else None
    return frozenset(parsed) if parsed else None
