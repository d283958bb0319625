"""The only door through which discovery touches the filesystem.

All paths are relative to the discovery root (the folder that contains `sys/`), written with
forward slashes and no leading slash, e.g. "sys/devices/system/cpu/cpu0/online". Keeping every
access here lets `capture` record exactly what discovery looked at, and keeps warnings naming
paths the way a user sees them in a captured tree.
"""

from __future__ import annotations

import errno
import os

from topodra.common.topology.model import DiscoveryWarning

# sysfs attributes are at most a page; a few odd ones (distance rows on big machines) can be longer.
_MAX_READ = 1 << 16


def _name(entry: os.DirEntry[str]) -> str:
    return entry.name


class SysfsReader:
    """Reads small text files, links and listings under a root; optionally remembers them."""

    def __init__(self, root: str | os.PathLike[str], record: bool = False) -> None:
        self.root = os.path.abspath(os.fspath(root))
        self._prefix = self.root.rstrip("/") + "/"
        self.warnings: list[DiscoveryWarning] = []
        # parsed CPU masks by text, for this discovery only
        self.memo: dict[str, frozenset[int] | None] = {}
        self._record = record
        # what capture must reproduce: files read (with the bytes seen), links read, folders
        # listed or probed
        self.files: dict[str, bytes] = {}
        self.links: set[str] = set()
        self.listed: set[str] = set()  # folders whose entry names discovery used
        self.dirs: set[str] = set()  # folders whose existence discovery checked

    def warn(self, path: str, message: str) -> None:
        self.warnings.append(DiscoveryWarning(path, message))

    def abspath(self, rel: str) -> str:
        return self._prefix + rel

    def read(self, rel: str, *, quiet_errors: tuple[int, ...] = ()) -> str | None:
        """Text of a file with trailing NULs and whitespace removed; None when it cannot be read.

        A missing file is not a warning here (many files are optional); any other error is,
        except the errno values in `quiet_errors` (e.g. EINVAL from `speed` of a down link).
        """
        try:
            # O_NONBLOCK: a FIFO planted in a captured tree must not hang discovery
            fd = os.open(self._prefix + rel, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as e:
            if e.errno not in (errno.ENOENT, errno.ENOTDIR) and e.errno not in quiet_errors:
                self.warn(rel, f"unreadable: {e.strerror}")
            return None
        try:
            data = os.read(fd, _MAX_READ)
        except OSError as e:
            if e.errno not in quiet_errors:
                self.warn(rel, f"unreadable: {e.strerror}")
            return None
        finally:
            os.close(fd)
        if self._record:
            self.files[rel] = data
        # Some kernels pad values with NULs after the newline: padding, not content. A NUL inside
        # the text stays, so parsers reject it as garbage.
        return data.decode("utf-8", "replace").rstrip("\x00 \t\r\n")

    def readlink(self, rel: str) -> str | None:
        try:
            target = os.readlink(self._prefix + rel)
        except OSError:
            return None
        if self._record:
            self.links.add(rel)
        return target

    def resolve_link(self, rel: str) -> str | None:
        """Where a link points, as a clean root-relative path (trailing slashes dropped).

        Absolute targets are taken relative to the root: a captured tree has no other meaning for
        them. Targets escaping the root give None.
        """
        target = self.readlink(rel)
        if target is None:
            return None
        joined = target.lstrip("/") if target.startswith("/") else os.path.dirname(rel) + "/" + target
        clean = os.path.normpath(joined)
        if clean.startswith("..") or clean.startswith("/") or clean == ".":
            return None
        return clean

    def scandir(self, rel: str) -> list[os.DirEntry[str]]:
        """Entries of a folder by name (empty when it is absent); a listing counts as reading it.

        Sorted, so reads and warnings come in the same order on the machine and in its capture.
        """
        try:
            with os.scandir(self._prefix + rel) as it:
                entries = sorted(it, key=_name)
        except OSError as e:
            if e.errno not in (errno.ENOENT, errno.ENOTDIR):
                self.warn(rel, f"unlistable: {e.strerror}")
            return []
        if self._record:
            self.listed.add(rel)
        return entries

    def listdir(self, rel: str) -> list[str]:
        return [e.name for e in self.scandir(rel)]

    def is_dir(self, rel: str) -> bool:
        ok = os.path.isdir(self._prefix + rel)
        if ok and self._record:
            self.dirs.add(rel)
        return ok


def is_dir(entry: os.DirEntry[str], *, follow: bool = True) -> bool:
    """DirEntry.is_dir without its OSError (a racing or unreadable entry is simply not a folder)."""
    try:
        return entry.is_dir(follow_symlinks=follow)
    except OSError:
        return False


def is_link(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_symlink()
    except OSError:
        return False
