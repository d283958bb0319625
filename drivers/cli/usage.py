"""How every `topodra` command talks to people: help with examples and exit codes, errors as
one line plus a hint, `--version`.

argparse's own error prints the whole usage block before the message, which buries the one
line that matters (on `serve`, 40 lines of flags). `Parser.error` prints the message and
where to look instead; subcommand parsers inherit it through `add_subparsers(parser_class=...)`.

Standard library only: the inspect path imports this and must stay cheap.
"""

from __future__ import annotations

import argparse
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


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line plus a hint, and whose help keeps the
    layout of its description and epilog (examples are indented command lines)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
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


def fail(command: str, message: str) -> int:
    """One line on stderr naming the command, and the usage exit code."""
    sys.stderr.write(f"topodra {command}: {message}\n")
    return EXIT_USAGE
