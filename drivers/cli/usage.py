"""How every `topodra` command talks to people: help with examples and exit codes, errors as
one line plus a hint, `--version`.

argparse's own error prints the whole usage block before the message, which buries the one
line that matters (on `serve`, 40 lines of flags). `Parser.error` prints the message and
where to look instead; subcommand parsers inherit it through `add_subparsers(parser_class=...)`.

Standard library only: the inspect path imports this and must stay cheap.
"""

from __future__ import annotations

import argparse
import os
import sys

# for annotations only (strings here): importing typing costs milliseconds on the inspect path
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any, NoReturn

EXIT_OK = 0
EXIT_FAILED = 1  # the command ran and failed (a write, a plugin that could not start)
EXIT_USAGE = 2  # a flag, a value or the configuration is wrong: nothing was done

# the exit codes every command shares; a command adds its own (slices: 3)
COMMON_EXITS = {
    EXIT_OK: "success",
    EXIT_USAGE: "a flag or its value is wrong (one line on stderr says which); nothing was done",
}


def version() -> str:
    """The installed distribution's version (pyproject.toml); read only when asked for."""
    from importlib import metadata

    try:
        return metadata.version("topodra")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


class VersionAction(argparse.Action):
    """`--version`, computed when used: importlib.metadata is not free."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kw: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kw)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any, **__: Any) -> NoReturn:
        sys.stdout.write(f"topodra {version()}\n")
        parser.exit(EXIT_OK)


def terminal_columns() -> int:
    """The width help is wrapped to, found as `shutil.get_terminal_size` finds it ($COLUMNS,
    else the terminal on stdout, else 80) without importing shutil: it imports zlib, bz2 and
    lzma, and argparse asks for the width at every `add_argument`, not only for --help."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns if sys.__stdout__ else 0
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the layout of descriptions and epilogs; the width comes from `terminal_columns`."""

    def __init__(
        self, prog: str, indent_increment: int = 2, max_help_position: int = 24, width: int | None = None
    ) -> None:
        super().__init__(
            prog, indent_increment, max_help_position, terminal_columns() - 2 if width is None else width
        )


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line plus a hint, and whose help keeps the
    layout of its description and epilog (examples are indented command lines)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(
            EXIT_USAGE, f"{self.prog}: {message}\nTry '{self.prog} --help' for the flags and examples.\n"
        )


def epilog(examples: Sequence[tuple[str, str]], exits: dict[int, str] | None = None) -> str:
    """The end of a --help: examples (command, what it does) and the exit codes."""
    lines = ["examples:"]
    for command, what in examples:
        lines.append(f"  {command}")
        lines.append(f"      {what}")
    lines.append("")
    lines.append("exit status:")
    for code, meaning in sorted({**COMMON_EXITS, **(exits or {})}.items()):
        lines.append(f"  {code}  {meaning}")
    return "\n".join(lines)


def command(
    subparsers: Any,
    name: str,
    doc: str | None,
    *,
    help: str,
    examples: Sequence[tuple[str, str]],
    exits: dict[int, str] | None = None,
) -> argparse.ArgumentParser:
    """A subcommand's parser whose --help starts with the first paragraph of its module's
    docstring and ends with its examples and exit codes, the same layout on every command.
    Under -OO (the DaemonSets set PYTHONOPTIMIZE=2) there are no docstrings: the one-line
    `help` stands in."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name, help=help, description=(doc or help).split("\n\n")[0], epilog=epilog(examples, exits)
    )
    return parser


def fail(command: str, message: str) -> int:
    """One line on stderr naming the command, and the usage exit code."""
    sys.stderr.write(f"topodra {command}: {message}\n")
    return EXIT_USAGE
