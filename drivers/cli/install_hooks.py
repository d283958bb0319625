"""`topodra install-hooks --dest DIR`: copy the drivers' host-side CDI hooks into a host folder.

CDI hooks are run by the container runtime on the host, by absolute host path, and the host may
have no Python; so the POSIX sh hooks shipped in the wheel are copied out of the image. The
DaemonSets' init container runs this against a hostPath mounted at the same path on both sides,
so the path the driver writes into CDI specs is the path the runtime finds.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

DEFAULT_DEST = Path("/opt/topodra/hooks")


def _install_cpu(dest: Path) -> Path:
    from topodra.drivers.cpu import pinning

    return pinning.install_hook(dest)


def _install_nic(dest: Path) -> Path:
    from topodra.drivers.nic import hookfiles

    return hookfiles.install(dest)


# Drivers with host-side hooks; the accelerator driver has none (its CDI edits are device nodes).
INSTALLERS: dict[str, Callable[[Path], Path]] = {"cpu": _install_cpu, "nic": _install_nic}


SUMMARY = "copy the drivers' CDI hooks to a host folder"
EXAMPLES = (
    ("topodra install-hooks", f"every driver's hooks into {DEFAULT_DEST}"),
    ("topodra install-hooks --driver cpu --dest /var/lib/topodra/hooks", "where /opt is read-only"),
)
EXITS = {1: "a hook could not be written into --dest"}


def register(subparsers: Any) -> None:
    from topodra.drivers.cli.usage import command

    p = command(subparsers, "install-hooks", __doc__, help=SUMMARY, examples=EXAMPLES, exits=EXITS)
    p.add_argument(
        "--dest",
        type=Path,
        default=DEFAULT_DEST,
        help=f"host folder the runtime runs hooks from (default {DEFAULT_DEST})",
    )
    p.add_argument(
        "--driver",
        action="append",
        choices=[*INSTALLERS, "accelerator", "all"],
        help="whose hooks (repeatable; default all). accelerator has none and installs nothing",
    )
    p.set_defaults(run=run)


def selected(choices: list[str] | None) -> list[str]:
    """The drivers whose hooks to install, in a fixed order."""
    wanted = set(choices or ["all"])
    if "all" in wanted:
        return list(INSTALLERS)
    return [kind for kind in INSTALLERS if kind in wanted]


def run(args: argparse.Namespace) -> int:
    dest: Path = args.dest
    if not dest.is_absolute():
        print(
            f"install-hooks: --dest must be an absolute path (CDI hook paths are), got {dest}",
            file=sys.stderr,
        )
        return 2
    kinds = selected(args.driver)
    if not kinds:
        print("install-hooks: the selected drivers have no host-side hooks; nothing to install")
    for kind in kinds:
        try:
            path = INSTALLERS[kind](dest)
        except OSError as e:
            print(f"install-hooks: cannot install the {kind} hook into {dest}: {e}", file=sys.stderr)
            return 1
        print(f"installed {kind} hook {path}")
    return 0
