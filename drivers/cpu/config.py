"""`CpuConfig`, the CPU driver's opaque parameters (apiVersion cpu.topodra.io/v1alpha1).

    apiVersion: cpu.topodra.io/v1alpha1
    kind: CpuConfig
    fullCores: true        # only whole physical cores (no sibling shared with anyone)
    coreType: core         # hybrid parts: only "core" (performance) or "atom" (efficiency) CPUs
    cpus: "2-5"            # exactly these CPUs (validated: inside the device, free, right count)

Configs apply per request; class configs come first and a claim's config overrides them field by
field, so a class can default to fullCores and a claim can still name its CPUs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from topodra.common.runtime.config import applies_to, read_typed
from topodra.common.runtime.driver import ClaimRef, OpaqueConfig
from topodra.common.topology.parse import parse_cpulist

API_VERSIONS = ("cpu.topodra.io/v1alpha1",)
KIND = "CpuConfig"
CORE_TYPES = ("core", "atom")
_QUOTE = 64  # characters of a bad value quoted back in the error


@dataclass(frozen=True, slots=True)
class CpuConfig:
    full_cores: bool = False
    core_type: str | None = None
    cpus: frozenset[int] | None = None
    cpus_source: str = ""  # which config entry named the CPUs, for error messages


def for_request(
    claim: ClaimRef, configs: Sequence[OpaqueConfig], request: str, highest_cpu: int
) -> CpuConfig:
    """The merged config of one request; raises ConfigError naming the claim, entry and field.

    `highest_cpu` is the node's highest CPU number: a list naming anything above it, or more
    CPUs than the node has, is refused before it is expanded (a tenant's nine characters must
    not cost the driver a million-entry set).
    """
    full_cores = False
    core_type: str | None = None
    cpus: frozenset[int] | None = None
    source = ""
    for index, config in enumerate(configs):
        p = read_typed(claim, config, index, API_VERSIONS, KIND)
        fc = p.boolean("fullCores")
        ct = p.string("coreType", choices=CORE_TYPES)
        text = p.string("cpus", max_len=4096)
        parsed: frozenset[int] | None = None
        if text is not None:
            parsed = parse_cpulist(text, highest_cpu)
            if parsed is None or not parsed:
                shown = text if len(text) <= _QUOTE else text[:_QUOTE] + "..."
                raise p.error(
                    "cpus",
                    f"must be a non-empty CPU list such as '2-5,8' of CPUs 0-{highest_cpu} of this "
                    f"node, each named once, got {shown!r} ({len(text)} characters)",
                )
        p.finish()  # unknown fields fail even when this entry does not cover the request
        if not applies_to(config, request):
            continue
        if fc is not None:
            full_cores = fc
        if ct is not None:
            core_type = ct
        if parsed is not None:
            cpus = parsed
            source = f"config {config.source} #{index}, field 'cpus'"
    return CpuConfig(full_cores, core_type, cpus, source)
