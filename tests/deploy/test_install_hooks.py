"""`topodra install-hooks`, what the DaemonSets' init container runs: the hooks land on the host
folder byte-identical to what the drivers ship, executable, valid sh, and repeat runs (every pod
restart) leave them intact. Goes through the CLI's own entry point (`topodra.drivers.cli.main`),
the one the container's `topodra` command calls."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from topodra.drivers.cli.main import main
from topodra.drivers.cpu import pinning
from topodra.drivers.nic import hookfiles


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


def topodra(*args: str) -> Result:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return Result(code, out.getvalue(), err.getvalue())


def test_installs_every_hook_identical_and_executable(tmp_path: Path) -> None:
    dest = tmp_path / "opt" / "topodra" / "hooks"  # missing parents are created, as on a fresh node
    out = topodra("install-hooks", "--dest", str(dest))
    assert out.returncode == 0, out.stderr
    assert sorted(p.name for p in dest.iterdir()) == ["cpuset.sh", "netdev.sh"]
    assert (dest / "cpuset.sh").read_bytes() == pinning.hook_source()
    assert (dest / "netdev.sh").read_bytes() == hookfiles.hook_source()
    for hook in dest.iterdir():
        assert os.access(hook, os.X_OK), hook
        assert hook.stat().st_mode & 0o777 == 0o755, hook
        syntax = subprocess.run(["sh", "-n", str(hook)], capture_output=True, text=True, check=False)
        assert syntax.returncode == 0, syntax.stderr
    assert pinning.hook_problem(dest / "cpuset.sh") is None  # what the CPU driver checks at prepare


def test_rerun_replaces_a_stale_hook(tmp_path: Path) -> None:
    """An upgraded image's init container must overwrite the previous version's hook."""
    stale = tmp_path / "cpuset.sh"
    stale.write_text("#!/bin/sh\nexit 0\n")
    stale.chmod(0o644)
    for _ in range(2):
        out = topodra("install-hooks", "--dest", str(tmp_path), "--driver", "cpu")
        assert out.returncode == 0, out.stderr
    assert stale.read_bytes() == pinning.hook_source()
    assert os.access(stale, os.X_OK)
    assert not (tmp_path / "netdev.sh").exists()  # only the driver asked for
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp files left


def test_accelerator_has_no_hooks(tmp_path: Path) -> None:
    out = topodra("install-hooks", "--dest", str(tmp_path), "--driver", "accelerator")
    assert out.returncode == 0, out.stderr
    assert "nothing to install" in out.stdout
    assert list(tmp_path.iterdir()) == []


def test_relative_dest_is_refused(tmp_path: Path) -> None:
    out = topodra("install-hooks", "--dest", "hooks")
    assert out.returncode == 2
    assert "absolute" in out.stderr


def test_unwritable_dest_names_the_folder(tmp_path: Path) -> None:
    blocker = tmp_path / "hooks"
    blocker.write_text("a file where the folder should be")
    out = topodra("install-hooks", "--dest", str(blocker))
    assert out.returncode == 1
    assert str(blocker) in out.stderr and "cpu" in out.stderr
