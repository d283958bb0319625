"""An in-memory file tree (files and relative symlinks) written to disk in one pass.

Rendering into memory first keeps every renderer a pure function, makes a clash between two
renderers an error instead of a silent overwrite, and lets the writer create folders once.
"""

from __future__ import annotations

import os
import posixpath
import stat
from pathlib import Path


class Tree:
    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.links: dict[str, str] = {}
        self.dirs: set[str] = set()
        self.chardevs: dict[str, tuple[int, int]] = {}

    def file(self, path: str, content: str | bytes) -> None:
        """A sysfs attribute; text gets the trailing newline the kernel prints."""
        if isinstance(content, str):
            content = (content + "\n").encode()
        self._claim(path)
        self.files[path] = content

    def raw(self, path: str, content: str) -> None:
        """Text written exactly as given (procfs tables, multi-line attributes)."""
        self._claim(path)
        self.files[path] = content.encode()

    def link(self, path: str, target: str) -> None:
        """A symlink at `path` to `target`, both relative to the output root; stored relative like sysfs."""
        self._claim(path)
        self.links[path] = relative(target, posixpath.dirname(path))

    def chardev(self, path: str, major: int, minor: int) -> None:
        self._claim(path)
        self.chardevs[path] = (major, minor)

    def mkdir(self, path: str) -> None:
        self.dirs.add(path)

    def _claim(self, path: str) -> None:
        if path in self.files or path in self.links or path in self.chardevs:
            raise AssertionError(f"synth: two renderers wrote {path}")

    def write(self, root: Path) -> int:
        """Create everything under `root` (which must exist); returns the number of entries."""
        folders = set(self.dirs)
        for path in (*self.files, *self.links, *self.chardevs):
            parent = posixpath.dirname(path)
            while parent and parent not in folders:
                folders.add(parent)
                parent = posixpath.dirname(parent)
        base = str(root)
        for folder in sorted(folders):
            os.mkdir(os.path.join(base, folder))
        for path, content in self.files.items():
            fd = os.open(os.path.join(base, path), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                os.write(fd, content)
            finally:
                os.close(fd)
        for path, target in self.links.items():
            os.symlink(target, os.path.join(base, path))
        for path, (major, minor) in self.chardevs.items():
            full = os.path.join(base, path)
            os.mknod(full, stat.S_IFCHR | 0o666, os.makedev(major, minor))
            os.chmod(full, 0o666)  # mknod's mode passes through the umask
        return len(folders) + len(self.files) + len(self.links) + len(self.chardevs)


def relative(target: str, start: str) -> str:
    """posixpath.relpath for clean root-relative paths, without its normalising (hot: thousands of links)."""
    t = target.split("/")
    b = start.split("/") if start else []
    i = 0
    while i < len(t) and i < len(b) and t[i] == b[i]:
        i += 1
    return "/".join([".."] * (len(b) - i) + t[i:]) or "."
