"""hack/bench/file_reads.py: which of a discovery tool's opens count, and the Python program that
repeats them. strace's output is given as text here (its format, from `strace -y`); the program
runs for real on a real folder, and Python's audit hooks say what it opened."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from hack.bench import file_reads

STRACE = """\
openat(AT_FDCWD</tmp/t>, "/etc/ld.so.cache", O_RDONLY|O_CLOEXEC) = 3</etc/ld.so.cache>
openat(AT_FDCWD</tmp/t>, "/tmp/t/sys/devices/system/cpu", O_RDONLY|O_DIRECTORY) = 4</tmp/t/sys/cpu>
openat(3</tmp/t>, "sys/devices/system/cpu/online", O_RDONLY) = 5</tmp/t/sys/devices/system/cpu/online>
openat(3</tmp/t>, "sys/bus/pci/devices/../x", O_RDONLY) = -1 ENOENT (No such file or directory)
openat(AT_FDCWD</tmp/tx>, "a", O_RDONLY) = 6</tmp/tx/a>
--- SIGCHLD {si_signo=SIGCHLD} ---
"""

AUDIT = """\
import json, sys
seen = []
sys.addaudithook(lambda e, a: seen.append([e, str(a[0])]) if e in ("open", "os.listdir") else None)
"""


def test_only_opens_inside_the_tree_count_directories_apart_failures_too() -> None:
    assert file_reads.opens_in(STRACE.splitlines(), Path("/tmp/t")) == [
        "d /tmp/t/sys/devices/system/cpu",
        "f /tmp/t/sys/devices/system/cpu/online",
        "f /tmp/t/sys/bus/pci/devices/../x",  # failed, still a system call; ".." left to the kernel
    ]


def test_the_program_reads_what_is_listed_and_survives_what_is_gone(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_text("1\n")
    wanted = [("d", tmp_path / "d"), ("f", tmp_path / "d" / "f"), ("f", tmp_path / "gone")]
    wanted.append(("d", tmp_path / "no"))
    listed = tmp_path / "list"
    listed.write_text("".join(f"{kind} {path}\n" for kind, path in wanted))
    code = AUDIT + file_reads.READS + "\nprint(json.dumps(seen))"
    argv = [sys.executable, "-c", code, str(listed)]
    out = subprocess.run(argv, capture_output=True, text=True, check=True)
    seen = [(event, path) for event, path in json.loads(out.stdout) if path != str(listed)]
    assert seen == [("os.listdir" if kind == "d" else "open", str(path)) for kind, path in wanted]
