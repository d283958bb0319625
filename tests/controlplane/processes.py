"""One control-plane process: started with its log in a file, stopped gently, then firmly.

Each child runs in its own session (so a Ctrl-C in pytest does not race our shutdown) and gets
SIGTERM from the kernel if the Python process dies, so a killed test run leaves no apiserver
holding memory and ports (tests/kit/children.py says how).
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from tests.kit.children import dying_with_parent


def free_port() -> int:
    """A loopback port nothing listens on right now (the OS picks it; tiny race accepted)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_until(what: str, check: Callable[[], bool], timeout: float, *, alive: Callable[[], None]) -> None:
    """Polls check() until true; alive() raises as soon as the process behind it has died."""
    deadline = time.monotonic() + timeout
    while True:
        alive()
        with contextlib.suppress(Exception):
            if check():
                return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not ready after {timeout:.0f} s")
        time.sleep(0.2)


class ProcessDied(RuntimeError):
    """A component exited while we waited for it; the message ends with its log."""


@dataclass
class Component:
    """A named process with fixed arguments, restartable (the apiserver outage tests need that)."""

    name: str
    argv: list[str]
    log_path: Path
    _proc: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _log: IO[bytes] | None = field(default=None, init=False, repr=False)

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self) -> None:
        if self.running:
            return
        self._log = self.log_path.open("ab")
        self._log.write(f"\n===== starting {self.name}: {' '.join(self.argv)}\n".encode())
        self._log.flush()
        self._proc = subprocess.Popen(
            dying_with_parent(self.argv),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def check_alive(self) -> None:
        if self._proc is not None and self._proc.poll() is not None:
            raise ProcessDied(f"{self.name} exited with {self._proc.returncode}\n{self.tail(40)}")

    def stop(self, grace: float = 15.0) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM if grace > 0 else signal.SIGKILL)
            try:
                proc.wait(grace if grace > 0 else None)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def tail(self, lines: int = 60) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return f"--- {self.name}: no log yet"
        return "\n".join([f"--- {self.name} ({self.log_path}), last {lines} lines:", *text[-lines:]])
