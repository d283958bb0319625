"""How chosen CPUs reach the container: CDI env entries plus a createRuntime hook (hooks/cpuset.sh).

CDI cannot express a cpuset, so each prepared CDI device carries
- `TOPODRA_CPUS_<CLAIM UID>_<DEVICE>[_<SHARE ID>]=<cpu list>` (and `TOPODRA_MEMS_...=<nodes|none>`),
  one per allocation result, for the workload to read, and
- a `createRuntime` hook, `<hook dir>/cpuset.sh <cpus> <mems|none>`, run by the OCI runtime on the
  host once the container's cgroup exists (state JSON with its pid and bundle on stdin).
The claim-wide edits add `TOPODRA_CPUS_<CLAIM UID>=<every CPU of the claim>`.

The hook takes its CPUs from its own arguments only, never from the container's environment
(which the pod's author controls). A container given several CPU devices runs one hook per
device; each hook adds its CPUs to a record in the container's bundle folder and writes the
union so far, so the last one leaves the container on all of them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from importlib import resources
from pathlib import Path

from topodra.common.cdi.edits import ContainerEdits, Hook
from topodra.common.runtime.claims.spec import env_token
from topodra.common.topology.model import Topology
from topodra.drivers.cpu.policy import fmt

# what the hook alone cannot do (pinning modes hook and auto while NRI is away)
HOOK_ONLY_WARNING = (
    "claimed CPUs are exclusive only among claim holders: containers without a CPU claim may "
    "still run on them"
)

HOOK_NAME = "cpuset.sh"
HOOK_TIMEOUT = 10  # seconds; writing two cgroup files takes milliseconds
CPUS_PREFIX = "TOPODRA_CPUS_"
MEMS_PREFIX = "TOPODRA_MEMS_"


def suffix(claim_uid: str, device: str, share_id: str | None) -> str:
    out = f"{env_token(claim_uid)}_{env_token(device)}"
    return f"{out}_{env_token(share_id)}" if share_id else out


def claim_env(claim_uid: str, cpus: Iterable[int]) -> str:
    return f"{CPUS_PREFIX}{env_token(claim_uid)}={fmt(cpus)}"


def memory_nodes(topo: Topology, cpus: Iterable[int]) -> tuple[int, ...] | None:
    """NUMA nodes for cpuset.mems: the CPUs' nodes, when every one is known and has memory.

    A node without memory (or unknown size, or a CPU without a node) would make the container's
    allocations fail or land somewhere arbitrary: then memory is left unrestricted.
    """
    nodes = set()
    for c in cpus:
        node = topo.numa_of_cpu(c)
        if node is None:
            return None
        nodes.add(node)
    for node in nodes:
        info = topo.numa_node(node)
        if info is None or not info.memory_bytes:
            return None
    return tuple(sorted(nodes)) if nodes else None


def device_edits(
    claim_uid: str,
    device: str,
    share_id: str | None,
    cpus: Iterable[int],
    mems: Iterable[int] | None,
    hook_path: Path | None,
) -> ContainerEdits:
    """The CDI edits of one allocation result (hook_path None: env only, no pinning)."""
    cpu_list = fmt(cpus)
    mem_list = fmt(mems) if mems is not None else "none"
    tail = suffix(claim_uid, device, share_id)
    env = (f"{CPUS_PREFIX}{tail}={cpu_list}", f"{MEMS_PREFIX}{tail}={mem_list}")
    if hook_path is None:
        return ContainerEdits(env=env)
    hook = Hook(
        hook_name="createRuntime",
        path=str(hook_path),
        args=(HOOK_NAME, cpu_list, mem_list),
        timeout=HOOK_TIMEOUT,
    )
    return ContainerEdits(env=env, hooks=(hook,))


# --- the hook file ------------------------------------------------------------------------------


def hook_source() -> bytes:
    """The shipped hook script (package data)."""
    return resources.files("topodra.drivers.cpu").joinpath("hooks", HOOK_NAME).read_bytes()


def install_hook(directory: Path) -> Path:
    """Copy the hook into `directory` (atomically, mode 0755); what the init container does."""
    directory.mkdir(parents=True, exist_ok=True)
    dest = directory / HOOK_NAME
    tmp = directory / f".{HOOK_NAME}.{os.getpid()}.tmp"
    tmp.write_bytes(hook_source())
    tmp.chmod(0o755)
    os.replace(tmp, dest)
    return dest


def hook_problem(path: Path) -> str | None:
    """Why the hook at `path` cannot be used, or None. Checked at prepare: an unpinned container
    that believes it is pinned is worse than a clear error."""
    if not path.is_file():
        return (
            f"CPU pinning hook {path} is missing "
            "(the DaemonSet's init container installs it; or set --cpu-hook-dir)"
        )
    if not os.access(path, os.X_OK):
        return f"CPU pinning hook {path} is not executable"
    return None
