"""Running a hack/*/build.sh that builds (or finds in its cache) the binaries of a test tier.

Each script owns its versions and its cache and prints `name=path` lines on stdout; the tiers
(tests/controlplane, tests/node) run it the same way and read those lines back.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


class GoMissing(RuntimeError):
    """No Go toolchain on PATH: the tier cannot build its binaries here."""


class BuildFailed(RuntimeError):
    """build.sh ran and failed; the message carries the end of its output."""


def run_build_script(script: Path, *, echo: bool, timeout: float) -> dict[str, str]:
    """The `name=path` lines `script` prints. echo=True streams its progress to stderr; else its
    stderr is shown after it succeeded, and the last 40 lines of it are in BuildFailed."""
    done = subprocess.run(
        ["bash", str(script)],
        stdout=subprocess.PIPE,
        stderr=None if echo else subprocess.PIPE,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        tail = "\n".join((done.stderr or "").splitlines()[-40:])
        raise BuildFailed(f"{script} exited {done.returncode}:\n{tail}")
    if done.stderr and not echo:
        sys.stderr.write(done.stderr)
    return dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
