"""Synthetic trees built once per test session (see synth_cases for which).

Trees go to tmpfs (/dev/shm) when there is one: they hold tens of thousands of small files,
and on a busy shared disk writing them costs seconds that say nothing about the code.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from synth_cases import Built, spec_of
from topodra.common.synth import build

SHM = Path("/dev/shm")


@pytest.fixture(scope="session")
def synth_base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    if SHM.is_dir() and os.access(SHM, os.W_OK):
        base = Path(tempfile.mkdtemp(prefix="topodra-synth-", dir=SHM))
        yield base
        shutil.rmtree(base, ignore_errors=True)
    else:
        yield tmp_path_factory.mktemp("synth")


@pytest.fixture(scope="session")
def synth_tree(synth_base: Path) -> Callable[[str], Built]:
    cache: dict[str, Built] = {}

    def get(name: str) -> Built:
        if name not in cache:
            root = synth_base / name
            result = build(spec_of(name), root)
            cache[name] = Built(name=name, root=root, plan=result.plan)
        return cache[name]

    return get
