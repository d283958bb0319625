"""`CpuDriver`: the cpu.topodra.io Driver (common/runtime/driver.py) over one machine's topology.

Prepare turns each allocation result into exclusive CPUs inside the allocated device (policy.py
chooses, holdings.py guarantees nobody else has them) and into CDI edits that pin the container
(pinning.py, hooks/cpuset.sh). The checkpointed `Preparation.state` lists the CPUs of every
result, which is all `restore()` needs after a restart.

With `--cpu-pinning auto` the driver is also an NRI plugin of the container runtime
(exclusive.py): every container without a CPU claim runs on the shared pool, so claimed CPUs are
exclusive on the node, not only among claim holders. Which mode is in force is logged, exported
as `topodra_cpu_pinning_mode` and shown in /readyz (`status_detail`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

from topodra.common import logs
from topodra.common.cdi.edits import ContainerEdits
from topodra.common.inventory import Policy
from topodra.common.publisher import quantity
from topodra.common.runtime.claims import cdi_kind
from topodra.common.runtime.config import describe_claim
from topodra.common.runtime.driver import (
    AllocatedDevice,
    ClaimRef,
    DeviceHealth,
    OpaqueConfig,
    Preparation,
    PreparedDevice,
    PrepareError,
    Scan,
)
from topodra.common.topology.model import Topology
from topodra.drivers.cpu import config as cpuconfig
from topodra.drivers.cpu import devices as layout
from topodra.drivers.cpu import health, pinning, policy
from topodra.drivers.cpu.holdings import Conflict, Holding, Holdings, StateError, from_state, to_state
from topodra.drivers.cpu.options import CpuOptions

if TYPE_CHECKING:
    from topodra.drivers.cpu.exclusive import Exclusivity

CONSUMABLE_FEATURE = "DRAConsumableCapacity"
LIST_FEATURE = "DRAListTypeAttributes"
LIST_ADVICE = (
    "the API server rejects list-typed attributes (feature gate DRAListTypeAttributes is off): "
    "the publisher leaves numaNode, pcieRoot and l3CacheID out of the slices; "
    "run the CPU driver without --cpu-list-attributes on this cluster"
)
CORE_ADVICE = (
    "the API server dropped allowMultipleAllocations/requestPolicy (feature gate DRAConsumableCapacity "
    "is off, the default before 1.36): each NUMA device is now handed to one claim as a whole; "
    "run the CPU driver with --cpu-device-granularity core on this cluster"
)
HOOK_ONLY_NOTE = f"no NRI connection: {pinning.HOOK_ONLY_WARNING}"
PREPARE_WAIT = 10.0  # seconds a prepare waits for the runtime to move other containers off its CPUs


class CpuDriver:
    name = layout.DRIVER
    # the CPUs held are in Holdings; the NRI plugin derives every cpuset from them again at
    # each connect (Synchronize), so a kill mid-prepare leaves nothing to roll back
    holds_in_memory = True

    def __init__(self, topology: Topology, options: CpuOptions, sysfs_root: Path) -> None:
        self.topology = topology
        self.options = options
        self.sysfs_root = sysfs_root
        self.groups = {g.name: g for g in layout.groups(topology, options) if g.cpus}
        self._devices = tuple(layout.build_devices(topology, options))
        self.withheld = layout.withheld(topology, options)
        self._holdings = Holdings()
        # every cpuN folder, online or not: a CPU above the highest cannot be handed out
        self._highest_cpu = max((c.id for c in topology.cpus), default=-1)
        self._lock = threading.Lock()
        self._advised = False
        self._advised_lists = False
        self._log = logs.get("topodra.drivers.cpu", driver=self.name)
        missing = sorted(options.reserved - set(topology.usable_cpus()))
        if missing:
            self._log.warning(f"reserved CPUs {policy.fmt(missing)} are not usable CPUs of this machine")
        for w in topology.warnings:
            self._log.warning(f"topology: {w}", path=w.path)
        self._log.info(
            f"{len(self._devices)} CPU devices ({options.granularity} granularity) over "
            f"{sum(len(g.cpus) for g in self.groups.values())} CPUs; CPUs "
            f"{policy.fmt(self.withheld) or 'none'} are in no device (reserved "
            f"{policy.fmt(options.reserved) or 'none'}, kept for the shared pool by --cpu-shared-min "
            f"{options.shared_min})",
            devices=[d.name for d in self._devices],
        )
        self.exclusive: Exclusivity | None = None
        if options.pinning == "auto":
            # NRI (its client, protocol and messages) is loaded only for the mode that uses it
            from topodra.drivers.cpu import exclusive

            self.exclusive = exclusive.Exclusivity(
                self.name,
                self.holdings,
                topology.usable_cpus(),
                self.withheld,
                cdi_kind=cdi_kind(self.name),
                socket_path=str(options.nri_socket),
                pin_memory=options.pin_memory == "auto",
                hook_path=str(options.hook_dir / pinning.HOOK_NAME),
            )

    # --- Driver protocol ------------------------------------------------------------------------

    def scan(self) -> Scan:
        """The devices are fixed when the driver starts: CPUs going offline show in health."""
        return Scan(self._devices)

    def prepare(
        self, claim: ClaimRef, results: Sequence[AllocatedDevice], config: Sequence[OpaqueConfig]
    ) -> Preparation:
        with self._lock:
            hook = self._hook(claim)
            plan = self._plan(claim, results, config)
            try:
                self._holdings.set_claim(claim.uid, plan)
            except Conflict as e:  # the plan avoided held CPUs, so this is a bug or a bad restore
                raise PrepareError(f"{describe_claim(claim)}: {e}") from e
        if plan and self.exclusive is not None and not self.exclusive.changed(PREPARE_WAIT):
            self._log.warning(
                f"{describe_claim(claim)}: the runtime has not moved every other container off CPUs "
                f"{policy.fmt(c for h in plan for c in h.cpus)} within {PREPARE_WAIT:g} s; "
                "it keeps trying",
                **logs.claim(claim),
            )
        prepared = []
        every: set[int] = set()
        logged = self._log.enabled(logging.INFO)  # no line text (CPU lists, names) made for nobody
        for h in plan:
            every.update(h.cpus)
            edits = pinning.device_edits(claim.uid, h.device, h.share_id, h.cpus, h.mems, hook)
            prepared.append(PreparedDevice(h.request, h.pool, h.device, edits, h.share_id))
            if logged:
                cpus = policy.fmt(h.cpus)
                self._log.info(
                    f"{describe_claim(claim)}: device {h.device} gets CPUs {cpus}",
                    **logs.claim(claim),
                    device=h.device,
                    cpus=cpus,
                    mems=policy.fmt(h.mems) if h.mems is not None else None,
                )
        # admin-access results hold no CPUs: they are listed without pinning
        for a in results:
            if a.admin_access:
                prepared.append(PreparedDevice(a.request, a.pool, a.device, share_id=a.share_id))
        claim_edits = (
            ContainerEdits(env=(pinning.claim_env(claim.uid, every),)) if every else ContainerEdits()
        )
        return Preparation(
            devices=tuple(prepared),
            claim_edits=claim_edits,
            state=to_state(plan),
        )

    def unprepare(self, claim: ClaimRef, preparation: Preparation) -> None:
        with self._lock:
            gone = self._holdings.release(claim.uid)
        if gone and self.exclusive is not None:
            self.exclusive.changed(0)  # the pool grows back; nothing to wait for
        if gone and self._log.enabled(logging.INFO):
            for h in gone:
                self._log.info(
                    f"{describe_claim(claim)}: released CPUs {policy.fmt(h.cpus)} of device {h.device}",
                    **logs.claim(claim),
                    device=h.device,
                )

    def in_use(self, claim: ClaimRef, preparation: Preparation) -> str:
        """driver.SeesUse: a live container the runtime told us about (NRI mode) uses the claim's
        CPUs; in hook mode nothing is seen."""
        if self.exclusive is None:
            return ""
        users = self.exclusive.using(claim.uid)
        if users is None:
            return "NRI is disconnected, so the containers that may use its CPUs are not known"
        return f"container {', '.join(sorted(users)[:3])} uses its CPUs" if users else ""

    def restore(self, prepared: Mapping[ClaimRef, Preparation]) -> None:
        with self._lock:
            self._holdings.clear()
            for claim in sorted(prepared, key=lambda c: c.uid):
                try:
                    held = from_state(claim.uid, prepared[claim].state)
                except StateError as e:
                    self._log.error(
                        f"{describe_claim(claim)}: checkpoint state unusable, its CPUs are not tracked: {e}",
                        **logs.claim(claim),
                    )
                    continue
                try:
                    self._holdings.set_claim(claim.uid, held)
                except Conflict as e:
                    self._log.error(
                        f"{describe_claim(claim)}: checkpoint gives it CPUs of another claim: {e}",
                        **logs.claim(claim),
                    )
                    continue
                for h in held:
                    if h.device not in self.groups or not set(h.cpus) <= set(self.groups[h.device].cpus):
                        self._log.warning(
                            f"{describe_claim(claim)}: holds CPUs {policy.fmt(h.cpus)} of device {h.device}, "
                            "which no longer has them all (CPUs offline or options changed); they stay held",
                            **logs.claim(claim),
                            device=h.device,
                        )
            count = len(self._holdings.claims())
        self._log.info(f"restored CPU holdings of {count} claims")
        if self.exclusive is not None:  # another instance changed the checkpoint (a surge)
            self.exclusive.changed(0)

    def inventory_policy(self) -> Policy:
        """The default (the devices are fixed, scan()), with the operator's taint choice."""
        return Policy(taint_unhealthy=self.options.taint_unhealthy)

    def check_health(self) -> Mapping[str, DeviceHealth]:
        return health.health(self.sysfs_root, {name: g.cpus for name, g in self.groups.items()})

    # --- capabilities.Serves: the NRI connection -----------------------------------------------

    def start(self) -> None:
        """After restore (the holdings are known), before the kubelet can call."""
        if self.exclusive is not None:
            self._log.info(
                f"CPU pinning mode auto: connecting to the runtime's NRI socket {self.options.nri_socket}; "
                f"until it answers, the CDI hook pins claim containers and {pinning.HOOK_ONLY_WARNING}"
            )
            self.exclusive.start()
        elif self.options.pinning == "hook":
            self._log.warning(f"CPU pinning mode hook (--cpu-pinning hook): {pinning.HOOK_ONLY_WARNING}")
        else:
            self._log.warning(
                "CPU pinning mode none (--cpu-pinning none): containers only get TOPODRA_CPUS_* "
                "variables; nothing is pinned"
            )

    def stop(self) -> None:
        if self.exclusive is not None:
            self.exclusive.stop()

    def pinning_mode(self) -> str:
        """nri: claimed CPUs exclusive on the node; hook: among claim holders only; none."""
        if self.options.pinning == "none":
            return "none"
        if self.exclusive is not None and self.exclusive.active:
            return "nri"
        return "hook"

    def status_detail(self) -> Mapping[str, Any]:
        mode = self.pinning_mode()
        out: dict[str, Any] = {"pinning": mode}
        if mode == "hook":
            out["pinning_note"] = HOOK_ONLY_NOTE
        if self.exclusive is not None:
            out.update(self.exclusive.detail())
        return out

    # --- extras for the runtime -----------------------------------------------------------------

    def holdings(self) -> dict[str, tuple[Holding, ...]]:
        """A snapshot: claim uid -> what it holds."""
        with self._lock:
            return self._holdings.claims()

    def on_publisher_status(self, status: Any) -> None:
        """Fits SlicePublisher(on_status=...): turns a dropped-field report into advice."""
        dropped = getattr(status, "dropped_features", ()) or ()
        if CONSUMABLE_FEATURE in dropped:
            self._advise()
        if LIST_FEATURE in dropped and self.options.list_attributes and not self._advised_lists:
            self._advised_lists = True
            self._log.warning(LIST_ADVICE, feature=LIST_FEATURE)

    # --- internals ------------------------------------------------------------------------------

    def _advise(self) -> None:
        if self.options.granularity == "core" or self._advised:
            return
        self._advised = True
        self._log.warning(CORE_ADVICE, feature=CONSUMABLE_FEATURE)

    def _hook(self, claim: ClaimRef) -> Path | None:
        """The hook for the claim's CDI edits. With NRI in force a missing hook is no error (NRI
        pins the container); the hook still goes in when present, so a container restarted
        while the driver is away is pinned all the same."""
        if self.options.pinning == "none":
            return None
        path = self.options.hook_dir / pinning.HOOK_NAME
        problem = pinning.hook_problem(path)
        if problem is None:
            return path
        if self.exclusive is not None and self.exclusive.active:
            return None
        raise PrepareError(f"{describe_claim(claim)}: {problem}")

    def _count(self, claim: ClaimRef, a: AllocatedDevice, g: layout.CpuGroup) -> int:
        if not g.multi:
            return len(g.cpus)
        raw = a.consumed_capacity.get(layout.CAPACITY)
        if raw is None:
            # Without DRAConsumableCapacity the scheduler allocates the device as a whole.
            self._advise()
            return len(g.cpus)
        where = f"{describe_claim(claim)}: request {a.request!r}"
        try:
            value: Fraction = quantity.parse(raw)
        except quantity.QuantityError as e:
            raise PrepareError(f"{where}: consumedCapacity {layout.CAPACITY} {raw!r}: {e}") from e
        if value.denominator != 1 or value < 1:
            raise PrepareError(
                f"{where}: consumedCapacity {layout.CAPACITY} is {raw!r}, not a whole number of CPUs"
            )
        if value > len(g.cpus):
            raise PrepareError(
                f"{where}: consumedCapacity {raw} exceeds the {len(g.cpus)} CPUs of device {g.name}"
            )
        return int(value)

    def _plan(
        self, claim: ClaimRef, results: Sequence[AllocatedDevice], configs: Sequence[OpaqueConfig]
    ) -> list[Holding]:
        """Every result's CPUs, decided before anything is recorded (all or nothing)."""
        earlier = {h.key(): h for h in self._holdings.of_claim(claim.uid)}
        owner = self._holdings.owner
        taken: set[int] = set()
        plan: list[Holding] = []
        per_request: dict[str, list[AllocatedDevice]] = {}
        for a in results:
            if not a.admin_access:
                per_request.setdefault(a.request, []).append(a)
        for request, allocated in per_request.items():
            cfg = cpuconfig.for_request(claim, configs, request, self._highest_cpu)
            named: set[int] = set()
            for a in allocated:
                g = self.groups.get(a.device)
                if g is None:
                    raise PrepareError(
                        f"{describe_claim(claim)}: device {a.device!r} is not a CPU device of this node"
                    )
                where = f"{describe_claim(claim)}: request {request!r}, device {g.name}"
                again = earlier.get((a.request, a.pool, a.device, a.share_id))
                if again is not None and not taken.intersection(again.cpus):
                    plan.append(again)  # prepared before: same answer, nothing redone
                    taken.update(again.cpus)
                    continue
                want = policy.Request(self._count(claim, a, g), cfg.full_cores, cfg.core_type)
                # only the device's own CPUs matter: no walk over every CPU held on the node
                free = {c for c in g.cpus if owner(c) in (None, claim.uid)} - taken
                try:
                    if cfg.cpus is not None:
                        mine = cfg.cpus if len(allocated) == 1 else cfg.cpus & set(g.cpus)
                        chosen = policy.check_explicit(g.cores, free, mine, want, g.name)
                        named.update(chosen)
                    else:
                        chosen = policy.choose(g.cores, free, want, g.name)
                except policy.PolicyError as e:
                    field = f" ({cfg.cpus_source})" if cfg.cpus is not None else ""
                    raise PrepareError(f"{where}{field}: {e}") from e
                taken.update(chosen)
                mems = (
                    pinning.memory_nodes(self.topology, chosen) if self.options.pin_memory == "auto" else None
                )
                plan.append(Holding(claim.uid, a.request, a.pool, a.device, a.share_id, chosen, mems))
            if cfg.cpus is not None and len(allocated) > 1 and named != cfg.cpus:
                raise PrepareError(
                    f"{describe_claim(claim)}: request {request!r} ({cfg.cpus_source}): CPUs "
                    f"{policy.fmt(cfg.cpus - named)} are in none of the allocated devices"
                )
        return plan
