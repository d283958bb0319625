"""The package list in pyproject.toml must name every folder that holds Python code."""

from __future__ import annotations

import tomllib

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


def test_no_top_level_common_module() -> None:
    import importlib.util

    assert importlib.util.find_spec("common") is None
