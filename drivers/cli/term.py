"""Colour on a terminal, none in a pipe or a file, none when NO_COLOR is set (no-color.org)
or TERM is dumb; `--color always|never` overrides. Plain ANSI SGR codes."""

from __future__ import annotations

import os

# for annotations only (strings here): importing typing costs milliseconds on the inspect path
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import TextIO

CHOICES = ("auto", "always", "never")
CODES = {
    "bold": "1",
    "dim": "2",
    "red": "31",
    "green": "32",
    "yellow": "33",
    "blue": "34",
    "magenta": "35",
    "cyan": "36",
    "bold-green": "1;32",
    "bold-cyan": "1;36",
}


def wanted(choice: str, stream: TextIO) -> bool:
    if choice == "always":
        return True
    if choice == "never" or os.environ.get("NO_COLOR", "") != "":
        return False
    if os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class Paint:
    """`paint(text, 'green')`: the text wrapped in SGR codes, or unchanged when colour is off."""

    def __init__(self, on: bool) -> None:
        self.on = on

    def __call__(self, text: str, style: str | None) -> str:
        if not self.on or not style or not text:
            return text
        return f"\033[{CODES[style]}m{text}\033[0m"
