"""Small host files read outside `discover()`, at a driver's edge: sysfs attributes, `dev`
numbers, `proc/devices`. Relative to the discovery root like discovery, so a captured or
synthetic tree answers as the machine would; an unreadable or odd file gives None (or an empty
answer), never an error.

`topodra capture` runs a driver's edge reads inside `recording()`, so the archive holds these files
too and a driver on the unpacked capture sees what it saw on the machine.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

_MAX_READ = 1 << 16
_DEV = re.compile(r"(\d+):(\d+)\Z")
_touched: ContextVar[set[str] | None] = ContextVar("topodra_hostfiles_touched", default=None)


def is_this_host(root: str | os.PathLike[str]) -> bool:
    """The root is this machine's own "/" (however spelled), not a captured or synthetic tree:
    only then do netlink and the kernel describe the same devices as the files."""
    return os.path.realpath(root) == "/"


@contextmanager
def recording() -> Iterator[set[str]]:
    """The paths the helpers below read or list meanwhile (in this context), present or not."""
    seen: set[str] = set()
    token = _touched.set(seen)
    try:
        yield seen
    finally:
        _touched.reset(token)


def _note(path: Path) -> None:
    seen = _touched.get()
    if seen is not None:
        seen.add(os.fspath(path))


def names(folder: Path) -> list[str]:
    """Entry names of a folder, sorted; empty when it cannot be listed."""
    _note(folder)
    try:
        with os.scandir(folder) as it:
            return sorted(e.name for e in it)
    except OSError:
        return []


def read_text(path: Path) -> str | None:
    """At most 64 KiB, without the trailing NULs and white space sysfs files end with."""
    _note(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO in a captured tree must not hang
    except OSError:
        return None
    try:
        data = os.read(fd, _MAX_READ)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data.decode("utf-8", "replace").rstrip("\x00 \t\r\n")


def read_count(path: Path) -> int | None:
    text = read_text(path)
    if text is None or not text.isdigit():
        return None
    return int(text)


def dev_numbers(path: Path) -> tuple[int, int] | None:
    text = read_text(path)
    m = _DEV.match(text or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def char_majors(root: Path) -> dict[str, int]:
    """Character-device majors by driver name from `proc/devices`."""
    text = read_text(root / "proc/devices") or ""
    out: dict[str, int] = {}
    in_char = False
    for line in text.splitlines():
        if line.startswith("Character devices"):
            in_char = True
            continue
        if line.startswith("Block devices"):
            break
        parts = line.split()
        if in_char and len(parts) == 2 and parts[0].isdigit():
            out.setdefault(parts[1], int(parts[0]))
    return out


def devname(class_dir: Path, name: str) -> str:
    """/dev path of a class device: the kernel's DEVNAME from its uevent, else /dev/<name>."""
    for line in (read_text(class_dir / "uevent") or "").splitlines():
        key, _, value = line.partition("=")
        if key == "DEVNAME" and value and ".." not in value.split("/"):
            return "/dev/" + value.lstrip("/")
    return f"/dev/{name}"
