"""What deploy/base gives a driver's container, for the harnesses that run a driver the way its
DaemonSet does (tests/e2e, hack/bench-peer): the literal env values (MALLOC_ARENA_MAX,
PYTHONOPTIMIZE, ...), read from the manifests so that a change there reaches them too."""

from __future__ import annotations

from pathlib import Path

import yaml

BASE = Path(__file__).resolve().parents[2] / "deploy" / "base"


def driver_env(kind: str) -> dict[str, str]:
    """The `value` entries of the `driver` container's env in deploy/base/<kind>-driver.yaml
    (those from a fieldRef, such as NODE_NAME, are the node's and left out)."""
    doc = yaml.safe_load((BASE / f"{kind}-driver.yaml").read_text())
    (driver,) = (c for c in doc["spec"]["template"]["spec"]["containers"] if c["name"] == "driver")
    return {e["name"]: str(e["value"]) for e in driver.get("env") or () if "value" in e}
