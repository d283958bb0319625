"""The check's test node (tests/check_kit.py), built once per session, and its slices."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.check_kit import SPEC, foreign_slices, manifest, topodra_slices
from tests.kit.machines import SynthTree, synth_builder

NODE = "check-node"


@pytest.fixture(scope="session")
def check_tree(tmp_path_factory: pytest.TempPathFactory) -> SynthTree:
    get: Callable[[str], SynthTree] = synth_builder(tmp_path_factory, "check", {"check-node": SPEC})
    return get("check-node")


@pytest.fixture(scope="session")
def all_slices(check_tree: SynthTree) -> list[dict[str, Any]]:
    return topodra_slices(check_tree.root, NODE) + foreign_slices(manifest(check_tree.root), NODE)


@pytest.fixture(scope="session")
def root(check_tree: SynthTree) -> Path:
    return check_tree.root
