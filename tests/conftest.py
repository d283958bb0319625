"""Fixtures shared by every test tier.

The captured machines live in ../shared/fixtures/sysfs beside the checkout. A user's clone has no
../shared: those tests skip cleanly there. In CI (CI=true) a tier that cannot run is a failure.
"""

from __future__ import annotations

import os
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
FIXTURES = SHARED / "fixtures" / "sysfs"
IN_CI = os.environ.get("CI", "").lower() == "true"

# The session-wide `control_plane` (real kube-apiserver etc.) and `real_node` (a real kubelet and
# containerd on its own control plane) fixtures, usable from every folder.
pytest_plugins = ["tests.controlplane.fixtures", "tests.node.fixtures"]


def fixture_names() -> list[str]:
    """Names of the captured machines (`<source>--<name>`), empty when ../shared is absent."""
    if not FIXTURES.is_dir():
        return []
    return sorted(p.name.removesuffix(".tar.xz") for p in FIXTURES.glob("*.tar.xz"))


def skip_or_fail(reason: str) -> None:
    """Skip on a laptop; in CI a missing prerequisite must turn the run red."""
    if IN_CI:
        pytest.fail(f"required in CI: {reason}")
    pytest.skip(reason)


class FixtureTrees:
    """Unpacks captured trees on first use, once per test session."""

    def __init__(self, base: Path) -> None:
        self._base = base

    def root(self, name: str) -> Path:
        dest = self._base / name
        if not dest.exists():
            archive = FIXTURES / f"{name}.tar.xz"
            tmp = self._base / f".{name}.partial"
            tmp.mkdir(parents=True)
            with tarfile.open(archive) as tar:
                tar.extractall(tmp, filter="tar")
            tmp.rename(dest)
        return dest

    def expected(self, name: str) -> Path:
        return FIXTURES / f"{name}.expected.json"


@pytest.fixture(scope="session")
def fixture_trees(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FixtureTrees]:
    if not FIXTURES.is_dir():
        pytest.skip("../shared/fixtures/sysfs is absent (a user's clone has none)")
    yield FixtureTrees(tmp_path_factory.mktemp("fixture-trees"))
