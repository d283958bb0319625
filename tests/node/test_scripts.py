"""The node's shell scripts: valid bash, shellcheck-clean, executable (no root or Go needed)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO, skip_or_fail

SCRIPTS = (REPO / "hack" / "local-up.sh", REPO / "hack" / "node" / "build.sh")


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_script_is_valid_bash_and_shellcheck_clean(script: Path) -> None:
    assert os.access(script, os.X_OK)
    syntax = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, timeout=30)
    assert syntax.returncode == 0, syntax.stderr
    exe = shutil.which("shellcheck")
    if exe is None:
        skip_or_fail("shellcheck is not installed (Debian: apt-get install shellcheck)")
    out = subprocess.run(
        [str(exe), "--severity=style", str(script)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stdout


def test_local_up_refuses_unknown_arguments_and_prints_help() -> None:
    bad = subprocess.run([str(SCRIPTS[0]), "--bogus"], capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "unknown argument --bogus" in bad.stderr
    helped = subprocess.run([str(SCRIPTS[0]), "--help"], capture_output=True, text=True, timeout=30)
    assert helped.returncode == 0 and "--down" in helped.stdout
