"""Optional product names from the system's pci.ids database.

Read only when somebody asks for a name, so discovery never pays for a 1 MB file, and searched
for the names asked, not parsed whole.
"""

from __future__ import annotations

import re
from functools import cache, lru_cache

DEFAULT_PATHS = ("/usr/share/misc/pci.ids", "/usr/share/hwdata/pci.ids")


# Looked up, not parsed: an inspect asks for a few names, and decoding and parsing the 35,000
# lines of the whole database cost ~20 ms of it. The file is kept as bytes and each vendor found
# with bytes.find once.


@lru_cache(maxsize=4)
def _database(path: str) -> bytes:
    """The file after a newline (so that every line, the first included, follows one); empty
    when it is unreadable or has no vendor before its device classes ("C xx" lines)."""
    try:
        with open(path, "rb") as f:
            data = b"\n" + f.read()
    except OSError:
        return b""
    first = _top_line().search(data)
    return b"" if first is None or data.startswith(b"C ", first.start() + 1) else data


@cache
def _top_line() -> re.Pattern[bytes]:
    """A line that is not a device or subsystem (tab-indented), a comment or empty: a vendor,
    or the first device class."""
    return re.compile(rb"\n[^\t#\n]")


def _name(data: bytes, at: int) -> str:
    """The name on the line that starts at `at` with a 4-digit id."""
    end = data.find(b"\n", at)
    return data[at + 4 : None if end < 0 else end].decode("utf-8", errors="replace").strip()


@lru_cache(maxsize=64)
def _vendor(path: str, vendor: int) -> tuple[str, bytes] | None:
    """The vendor's name ("vvvv  Name") and the lines under it, up to the next top line."""
    data = _database(path)
    at = data.find(b"\n%04x" % vendor)
    if at < 0:
        return None
    after = _top_line().search(data, at + 1)
    return _name(data, at + 1), data[at : None if after is None else after.start()]


def lookup(vendor: int, device: int, paths: tuple[str, ...] | None = None) -> str | None:
    """'Vendor Device' from the first pci.ids that exists, None when none knows it."""
    for path in paths or DEFAULT_PATHS:
        if not _database(path):
            continue
        found = _vendor(path, vendor)
        if found is None:
            return None
        name, lines = found
        at = lines.find(b"\n\t%04x" % device)  # a device; its subsystems have two tabs
        return name if at < 0 else " ".join(x for x in (name, _name(lines, at + 2)) if x)
    return None
