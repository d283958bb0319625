"""Synthetic machines built once per test session, for the driver tests that read them."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from topodra.common.synth import build, load_spec, load_spec_text


@dataclass(frozen=True)
class SynthTree:
    name: str
    root: Path

    @property
    def manifest(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.root / "synth-manifest.json").read_text())
        return data


def synth_builder(
    tmp_path_factory: pytest.TempPathFactory, prefix: str, custom: Mapping[str, Any] | None = None
) -> Callable[[str], SynthTree]:
    """`get(name)`: the machine of a shipped spec, or of `custom[name]` (a spec document), built
    on first use under a session temp folder named `<prefix>-<name>`."""
    cache: dict[str, SynthTree] = {}
    specs = custom or {}

    def get(name: str) -> SynthTree:
        if name not in cache:
            root = tmp_path_factory.mktemp(f"{prefix}-{name}")
            spec = load_spec_text(json.dumps(specs[name])) if name in specs else load_spec(name)
            build(spec, root, force=True)
            cache[name] = SynthTree(name, root)
        return cache[name]

    return get
