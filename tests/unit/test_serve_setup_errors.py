"""`topodra serve` and a bug of ours while it sets up: the process must die with the traceback.

Only a wrong flag, kubeconfig or file is a configuration error (exit 2, one line). Anything else
while the services are composed is a bug in this project or a broken install, and catching it
would hide it: a driver that came up without its publisher would serve claims for devices the
scheduler never sees, and a bug reported as "configuration failed" sends the operator to check
flags that are fine. The bug is injected in a real `topodra serve` process; each case gets a
kubelet folder of its own, so that serving (the wrong outcome) would really serve until killed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.kit.kubeconfig import write_kubeconfig

# Runs `topodra serve` after `bug` (Python source) broke something of ours in that process.
WRAPPER = """
import sys
{bug}
from topodra.drivers.cli.main import main
sys.exit(main(sys.argv[1:]))
"""

BUGS = {
    # the project's own publisher cannot be imported (a packaging mistake): it used to be
    # caught, and the driver served without publishing anything
    "publisher-import": (
        "sys.modules['topodra.common.publisher.publisher'] = None",
        "topodra.common.publisher.publisher",
    ),
    # a driver's constructor has a bug
    "driver-bug": (
        "from topodra.drivers import registry\n"
        "def create(kind, common):\n"
        "    raise TypeError('bug in create: ' + kind)\n"
        "registry.create = create",
        "TypeError: bug in create: cpu",
    ),
    # the client's loader has a bug that is not about the kubeconfig
    "loader-bug": (
        "from topodra.common.kubeapi import loader\n"
        "def new_api_client(path):\n"
        "    raise KeyError('bug in the loader')\n"
        "loader.new_api_client = new_api_client",
        "KeyError: 'bug in the loader'",
    ),
}


@pytest.fixture(scope="module")
def machine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.kit.machines import synth_builder

    return synth_builder(tmp_path_factory, "serve-bugs")("1s-4acc").root


@pytest.fixture
def kubelet_dir() -> Iterator[Path]:
    """Short enough for the sockets' 108-byte limit (pytest's tmp_path is not): on the code
    that swallowed the bug, serve really comes up and serves."""
    path = Path(tempfile.mkdtemp(prefix="tsb-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("case", sorted(BUGS))
def test_a_setup_bug_ends_serve_with_its_traceback(
    tmp_path: Path, kubelet_dir: Path, machine: Path, case: str
) -> None:
    bug, names = BUGS[case]
    argv = [
        "serve",
        "cpu",
        "--node-name",
        "n1",
        "--sysfs-root",
        str(machine),
        "--kubeconfig",
        str(write_kubeconfig(tmp_path)),
        "--kubelet-root-dir",
        str(kubelet_dir),
        "--cdi-root",
        str(tmp_path / "cdi"),
        "--cpu-hook-dir",
        str(tmp_path / "hooks"),
    ]
    environ = {k: v for k, v in os.environ.items() if k not in ("NODE_NAME", "POD_UID", "NODE_IP")}
    try:
        done = subprocess.run(
            [sys.executable, "-c", WRAPPER.format(bug=bug), *argv],
            capture_output=True,
            text=True,
            env=environ,
            timeout=45,
            cwd=REPO,
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"serve kept running past its setup bug ({case}):\n{e.stderr!r}")
    assert done.returncode == 1, done.stderr
    assert "Traceback (most recent call last)" in done.stderr, done.stderr
    assert names in done.stderr, done.stderr
    assert '"configuration failed"' not in done.stderr, done.stderr
    registry = kubelet_dir / "plugins_registry"
    assert not registry.exists() or not any(registry.iterdir()), "the plugin registered"
