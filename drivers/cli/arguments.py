"""Flags that several commands take, defined once so that their checks and help cannot drift
apart between `serve`, `check` and `explain`."""

from __future__ import annotations

import argparse
from pathlib import Path

from topodra.drivers import flags

LOG_LEVELS = ("debug", "info", "warning", "error")


def add_kubeconfig_argument(parser: argparse.ArgumentParser, *, as_kubectl: bool) -> None:
    """--kubeconfig. `as_kubectl`: a command run by a person, which falls back as kubectl does
    (drivers/cli/apiclient.py default_kubeconfig); else a driver, which reads only the file it
    is given or its in-cluster service account."""
    fallback = "$KUBECONFIG, else ~/.kube/config, else " if as_kubectl else ""
    parser.add_argument(
        "--kubeconfig",
        type=flags.readable_file,
        default=None,
        metavar="FILE",
        help=f"default: {fallback}the in-cluster service account",
    )


def add_folder_argument(parser: argparse.ArgumentParser, flag: str, default: Path | None, help: str) -> None:
    """A host folder the drivers hand to the kubelet or the runtime: it must be absolute."""
    parser.add_argument(flag, type=flags.absolute_path, default=default, metavar="DIR", help=help)


def add_log_level_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log-level", default="info", choices=LOG_LEVELS)
