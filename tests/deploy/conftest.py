"""Fixtures of the deploy tests: the real helm and kustomize (built once, cached)."""

from __future__ import annotations

import pytest

from tests.conftest import skip_or_fail
from tests.deploy.render import Tools, ToolsUnavailable, ensure_tools


@pytest.fixture(scope="session")
def tools() -> Tools:
    try:
        return ensure_tools()
    except ToolsUnavailable as e:
        skip_or_fail(str(e))
        raise
