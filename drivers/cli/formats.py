"""`-o/--output FORMAT`, the same flag on every command that prints something in more than one
way (as kubectl's), and the JSON/YAML writers behind it.

`--output` names a format and nothing else: commands that write a file or a folder take it
under their own flag (`capture --file`, `synth --dest`). A path given to `--output` there (how
those commands took it before) gets an error that names the new flag, not a bare "invalid
choice".
"""

from __future__ import annotations

import argparse

# for annotations only (strings here): importing typing costs milliseconds on the inspect path
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any


def output_type(choices: Sequence[str], moved: str | None = None) -> Any:
    """argparse type for -o: one of `choices`; `moved` names the flag a path belongs to now."""

    def parse(text: str) -> str:
        value = text.strip().lower()
        if value in choices:
            return value
        formats = ", ".join(choices)
        if moved is not None and ("/" in text or "." in text):
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a format ({formats}); a path goes to {moved} (--output names a format)"
            )
        raise argparse.ArgumentTypeError(f"{text!r} is not one of {formats}")

    return parse


def add_output_argument(
    parser: argparse.ArgumentParser,
    choices: Sequence[str],
    default: str,
    *,
    what: str = "the result",
    moved: str | None = None,
) -> None:
    parser.add_argument(
        "-o",
        "--output",
        type=output_type(choices, moved),
        default=default,
        metavar="FORMAT",
        help=f"how to print {what}: {' | '.join(choices)} (default {default})",
    )


def dump(data: Any, fmt: str) -> str:
    """`data` as JSON (indented, one trailing newline) or YAML (keys in their given order)."""
    if fmt == "json":
        import json

        return json.dumps(data, indent=2) + "\n"
    if fmt == "yaml":
        import yaml

        text: str = yaml.safe_dump(data, sort_keys=False, default_flow_style=False)
        return text
    raise ValueError(f"not a data format: {fmt}")


def write_report(output: str, data: Callable[[], Any], text: Callable[[bool], str]) -> None:
    """A report on stdout as -o asks: json/yaml write `data()`, text and wide the rendering for
    people (`text(wide)`); each side is built only when it is the one printed."""
    import sys

    sys.stdout.write(dump(data(), output) if output in ("json", "yaml") else text(output == "wide"))
