"""The quality gate: the whole repository is ruff-clean (lint and format) and mypy-strict clean.

The same commands a developer runs, as subprocesses from the repository root, so the gate reads
the configuration in pyproject.toml and nothing else. mypy goes through hack/typecheck (the
topodra.* package view; plain `mypy common/` would see cross-module imports as Any) and keeps
its cache in .mypy_cache: a cold run takes ~10 s here, a warm one ~2 s.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import skip_or_fail

REPO = Path(__file__).resolve().parents[2]


def _run(cmd: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False)


def _needs(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        skip_or_fail(f"{module} is not installed (pip install -e '.[test]')")


@pytest.mark.parametrize(
    "args",
    [["check", "."], ["format", "--check", "."]],
    ids=["ruff-check", "ruff-format"],
)
def test_ruff_is_clean(args: list[str]) -> None:
    _needs("ruff")
    res = _run([sys.executable, "-m", "ruff", *args], timeout=120)
    assert res.returncode == 0, f"ruff {' '.join(args)} failed:\n{res.stdout}\n{res.stderr}"


def test_mypy_strict_is_clean() -> None:
    _needs("mypy")
    res = _run(["bash", str(REPO / "hack" / "typecheck")], timeout=600)
    assert res.returncode == 0, f"hack/typecheck failed:\n{res.stdout}\n{res.stderr}"
    assert "Success" in res.stdout, res.stdout
