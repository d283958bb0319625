"""What a (re)start holds: the checkpoint's records, checked against the CDI specs on disk, or,
when the checkpoint is damaged, rebuilt from the specs (docs/design/claim-lifecycle.md)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from topodra.common import logs
from topodra.common.cdi.spec import CdiWriter
from topodra.common.runtime.checkpoint import ClaimRecord, Loaded, Phase
from topodra.common.runtime.claims import spec
from topodra.common.runtime.claims.check import label
from topodra.common.runtime.driver import ClaimRef, Preparation, PreparedDevice
from topodra.common.runtime.names import is_uid


def adopt(
    loaded: Loaded, cdi: CdiWriter, driver: str, pools: frozenset[str], log: Any
) -> dict[str, ClaimRecord]:
    """The records to hold after a load, with the CDI specs on disk.

    A usable checkpoint is the truth for what it says is completed. A spec of a claim it does not
    know is an interrupted prepare (the spec is written before the driver acts, the checkpoint
    only once it answered): rolled back with what the spec says the claim holds, or removed when
    it says nothing. A spec of a claim the checkpoint says is "started" (an unprepare, maybe of an
    earlier preparation of the same claim) is newer than that record and names what the driver
    may hold now: the rollback uses it. A damaged checkpoint is rebuilt from the specs, which
    name every device the driver may hold for a claim, over the previous good file's records
    (`Loaded.fallback`): fail closed, a device named anywhere stays held until its claim is
    unprepared."""
    records = dict(loaded.records) if loaded.damage is None else dict(loaded.fallback)
    kind = cdi.kind
    for spec_id in cdi.list_ids():
        known = records.get(spec_id) if loaded.damage is None else None
        if known is not None and known.phase is Phase.COMPLETED:
            continue
        file_name = cdi.file_name(spec_id)
        try:
            raw = cdi.path(spec_id).read_bytes()
        except OSError:
            continue
        try:
            doc: Any = json.loads(raw)
        except (ValueError, RecursionError):
            doc = None
        rec = spec.record_from_spec(kind, driver, spec_id, file_name, doc) if is_uid(spec_id) else None
        if known is not None:
            if rec is not None:
                records[spec_id] = replace(rec, phase=Phase.STARTED)
            continue
        if loaded.damage is None:
            if rec is None:
                cdi.remove(spec_id)
                log.info(f"removed CDI spec of unknown claim uid {spec_id}", claim_uid=spec_id)
            else:
                log.warning(
                    f"{label(rec.claim)}: CDI spec of a claim the checkpoint does not know; rolling it back",
                    **logs.claim(rec.claim),
                )
                records[spec_id] = replace(rec, phase=Phase.STARTED)
            continue
        if rec is None:
            if spec_id in records or not is_uid(spec_id):
                continue  # the previous file knows it, or not a claim's spec: left as it is
            named = spec.devices_named(spec_id, raw.decode("utf-8", "replace"), sorted(pools))
            rec = ClaimRecord(
                claim=ClaimRef("", "", spec_id),
                phase=Phase.COMPLETED,
                allocated=named,
                cdi_file=file_name,
                preparation=Preparation(
                    tuple(PreparedDevice(a.request, a.pool, a.device, share_id=a.share_id) for a in named)
                ),
            )
            log.error(
                f"CDI spec {file_name} carries no readable record; holding the devices it names "
                f"({', '.join(sorted({a.device for a in named})) or 'none'}) until claim uid {spec_id} "
                "is unprepared",
                claim_uid=spec_id,
            )
        records[spec_id] = rec
    if loaded.damage is not None:
        log.warning(
            f"rebuilt {len(records)} claims after a damaged checkpoint: "
            f"{sum(r.phase is Phase.COMPLETED for r in records.values())} prepared, "
            f"{sum(r.phase is Phase.STARTED for r in records.values())} interrupted"
        )
    return records
