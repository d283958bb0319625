"""The file reads a discovery tool makes on a sysfs tree, and a Python program that makes only
those: hack/bench-peer's floor under any Python `inspect` (not a test).

Why: `topodra inspect` is compared with lstopo (C) on the same trees. A bare interpreter start
(`python -c pass`) is one floor under any Python command; this is a higher, still strict one:
the interpreter start plus the opens, reads and directory listings lstopo itself makes on the
tree, in the plainest Python loop, with no parsing, no model and no output. Whatever lstopo
does besides (stat, readlink, its own parsing and the XML it writes) is left out, so no Python
program that learns what lstopo learns from the tree can take less.

The list comes from `strace -y` of one lstopo run: every `openat` whose resolved path lies in
the tree, a directory (O_DIRECTORY) as "d PATH", anything else as "f PATH", failed ones too
(a failed open is a system call all the same).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path

# openat(AT_FDCWD</base>, "path", FLAGS[, MODE]) = 3</resolved>  or  = -1 ENOENT (...)
_OPENAT = re.compile(r'openat\((?:AT_FDCWD|\d+)<([^>]*)>, "([^"]*)", ([A-Z0-9_|]+)')

# Run as `python -c READS LIST`: one open+read+close per file, one listing per directory.
READS = """\
import os, sys
for line in open(sys.argv[1]):
    kind, path = line[0], line[2:-1]
    try:
        if kind == "d":
            os.listdir(path)
        else:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.read(fd, 65536)
            finally:
                os.close(fd)
    except OSError:
        pass
"""


def opens_in(strace_lines: Iterable[str], root: Path) -> list[str]:
    """Lines "d PATH" / "f PATH" for each openat of `strace -y` output whose path lies under `root`,
    in call order (a path relative to a directory fd is joined to that fd's path)."""
    top = os.path.normpath(root)
    out = []
    for line in strace_lines:
        m = _OPENAT.search(line)
        if not m:
            continue
        base, name, flags = m.groups()
        # joined, not normalised: the kernel resolves ".." after symlinks, as it will again
        path = os.path.join(base, name)
        if path != top and not path.startswith(top + os.sep):
            continue
        out.append(f"{'d' if 'O_DIRECTORY' in flags.split('|') else 'f'} {path}")
    return out


def record(argv: Sequence[str], env: dict[str, str], root: Path, dest: Path) -> int | None:
    """Runs `argv` once under strace and writes the opens it made under `root` to `dest`: how
    many, or None without strace."""
    strace = shutil.which("strace")
    if strace is None:
        return None
    cmd = [strace, "-qq", "-y", "-e", "trace=openat", "-o", str(dest.with_suffix(".strace")), *argv]
    subprocess.run(cmd, env=env, capture_output=True, check=False)
    raw = dest.with_suffix(".strace")
    opens = opens_in(raw.read_text(errors="replace").splitlines(), root)
    raw.unlink()
    dest.write_text("".join(f"{o}\n" for o in opens))
    return len(opens)
