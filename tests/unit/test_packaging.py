"""The package list in pyproject.toml must name every folder that holds Python code."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

from tests.conftest import REPO

ROOTS = {"common": "topodra.common", "drivers": "topodra.drivers", "proto": "topodra.proto"}


def test_every_package_folder_is_listed() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    listed = set(config["tool"]["setuptools"]["packages"])
    found = set()
    for folder, name in ROOTS.items():
        for init in (REPO / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(REPO / folder)
            found.add(".".join([name, *rel.parts]) if rel.parts else name)
    assert found - listed == set(), "add these to [tool.setuptools] packages"
    assert listed - found == set(), "these are listed but have no __init__.py"


def test_no_top_level_common_module(tmp_path: Path) -> None:
    """Run outside the checkout so only what is installed is importable."""
    code = "import importlib.util, topodra.common; print(importlib.util.find_spec('common') is None)"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "True"
