"""The claim core: prepare and unprepare ResourceClaims for one driver.

    manager    ClaimManager: the lifecycle (start, prepare, unprepare, reconcile, close)
    check      what is decided before anything is written: reference, allocation, conflicts
    queue      group commit: calls that wait are served together, in a safe order
    spec       a claim's CDI spec, which also carries the claim's record
    recovery   what a (re)start holds: the checkpoint, checked against or rebuilt from the specs
    reconcile  which prepared claims the API server says are gone from this node

The checkpoint itself is ../checkpoint.py; what is written when, and what a restart does after a
crash at any point or with a damaged file: docs/design/claim-lifecycle.md.
"""

from topodra.common.runtime.claims.check import CONFIG_SOURCES, MAX_ERROR_CHARS, ClaimFailure, bounded
from topodra.common.runtime.claims.manager import CDI_CLASS, ClaimManager, cdi_kind
from topodra.common.runtime.claims.reconcile import DELETED_AFTER_ROUNDS, ReconcileReport

__all__ = [
    "CDI_CLASS",
    "CONFIG_SOURCES",
    "DELETED_AFTER_ROUNDS",
    "MAX_ERROR_CHARS",
    "ClaimFailure",
    "ClaimManager",
    "ReconcileReport",
    "bounded",
    "cdi_kind",
]
