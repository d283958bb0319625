"""Entry point of the `topodra` command.

Subcommands are imported lazily so that `topodra inspect` never pays for grpc or the
kubernetes client: discovery must stay cheaper than lstopo on the same tree.
"""

from __future__ import annotations

import sys

from topodra.drivers.cli.usage import Parser, VersionAction, epilog

# for annotations only (strings here): importing typing costs milliseconds on the inspect path
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

# subcommand -> module under topodra.drivers.cli that defines register(subparsers) and run(args)
SUBCOMMANDS: dict[str, str] = {
    "serve": "serve",
    "inspect": "inspect",
    "capture": "capture",
    "slices": "slices",
    "synth": "synth",
    "install-hooks": "install_hooks",
    "check": "check",
    "explain": "explain",
}

EXAMPLES = (
    ("topodra inspect", "this machine's topology: what sits with what, which attribute aligns it"),
    ("topodra synth --spec 2s-8acc-8nic --dest /tmp/hgx", "a synthetic machine to try things on"),
    ("topodra slices --driver all --sysfs-root /tmp/hgx -o wide", "the devices the drivers would publish"),
    ("topodra <command> --help", "each command's flags, examples and exit codes"),
)


def build_parser(only: str | None = None) -> Parser:
    """All subcommands, or just `only`: `topodra inspect` must not import what `serve` needs."""
    parser = Parser(
        prog="topodra",
        description="topodra: DRA drivers for CPU, accelerator and NIC that describe every device in one "
        "topology language, and the tools to see that topology.",
        epilog=epilog(EXAMPLES, {1: "the command failed (its message says why)"}),
    )
    parser.add_argument("--version", action=VersionAction, help="print the version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)
    for name, module in SUBCOMMANDS.items():
        if only is None or name == only:
            _subcommand(module).register(sub)
    return parser


def _subcommand(module: str) -> Any:
    """topodra.drivers.cli.`module`. Not importlib.import_module: importing importlib costs
    about 0.2 ms of every `topodra inspect`."""
    name = f"topodra.drivers.cli.{module}"
    __import__(name)
    return sys.modules[name]


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    only = argv[0] if argv and argv[0] in SUBCOMMANDS else None
    args = build_parser(only).parse_args(argv)
    result: int = args.run(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
