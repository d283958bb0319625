"""Entry point of the `topodra` command.

Subcommands are imported lazily so that `topodra inspect` never pays for grpc or the
kubernetes client: discovery must stay cheaper than lstopo on the same tree.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# subcommand -> module under topodra.drivers.cli that defines register(subparsers) and run(args)
SUBCOMMANDS: dict[str, str] = {
    "serve": "serve",
    "inspect": "inspect",
    "capture": "capture",
    "slices": "slices",
    "synth": "synth",
    "install-hooks": "install_hooks",
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """All subcommands, or just `only`: `topodra inspect` must not import what `serve` needs."""
    parser = argparse.ArgumentParser(prog="topodra", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, module in SUBCOMMANDS.items():
        if only is None or name == only:
            importlib.import_module(f"topodra.drivers.cli.{module}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    only = argv[0] if argv and argv[0] in SUBCOMMANDS else None
    args = build_parser(only).parse_args(argv)
    result: int = args.run(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
