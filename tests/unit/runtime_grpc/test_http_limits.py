"""The metrics/health port under clients that never finish their request.

The real HTTP server (Observability, as `topodra serve` runs it) on loopback, with the
defaults the drivers run with: 400 connections that each send half a request must not keep
400 threads, the ones it serves are closed once their request is overdue, a client that
trickles one byte a second is closed too, and the port answers again afterwards.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from topodra.common.runtime.observability import Observability
from topodra.common.runtime.plugin import PluginStatus

WAIT = 60.0  # seconds: far past the server's 5 s request deadline
HALF = b"GET /healthz HTTP/1.1\r\nHost: node\r\nUser-Agent: slow\r\n"  # no blank line: never ends


@pytest.fixture
def server() -> Iterator[Observability]:
    status = PluginStatus(driver="cpu.topodra.io", serving=True, registered=True)
    obs = Observability("127.0.0.1:0", lambda: [status])
    obs.start()
    try:
        yield obs
    finally:
        obs.stop()


def _open_half_requests(port: int, count: int) -> list[socket.socket]:
    out = []
    for _ in range(count):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        with contextlib.suppress(OSError):  # refused at the cap: the server closed it already
            s.sendall(HALF)
        out.append(s)
    return out


def _closed_by_server(s: socket.socket) -> bool:
    s.setblocking(False)
    try:
        return s.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def _healthz(port: int) -> dict[str, object]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as r:
        body: dict[str, object] = json.loads(r.read())
        return body


def test_half_sent_requests_hold_neither_threads_nor_the_port(server: Observability) -> None:
    before = threading.active_count()
    socks = _open_half_requests(server.port, 400)
    try:
        time.sleep(0.5)  # let the server accept what it will
        held = threading.active_count() - before
        assert held <= 32, f"{held} threads for 400 half-sent requests"
        # the ones it serves are closed once their request is overdue (5 s, then the reaper's
        # next round); waited for generously, this is not a speed check
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline and not all(_closed_by_server(s) for s in socks):
            time.sleep(0.25)
        assert all(_closed_by_server(s) for s in socks), "the server kept half-sent requests open"
    finally:
        for s in socks:
            s.close()
    assert _healthz(server.port)["ok"] is True  # and the port answers again


def test_a_trickling_client_is_closed(server: Observability) -> None:
    """One byte a second stays under the per-read timeout; the whole request still has a deadline."""
    s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    try:
        sent = 0
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            try:
                s.sendall(HALF[sent % len(HALF) : sent % len(HALF) + 1] or b"x")
            except OSError:
                break  # closed by the server
            sent += 1
            if _closed_by_server(s):
                break
            s.setblocking(True)
            time.sleep(1.0)
        else:
            pytest.fail(f"still open after {sent} bytes over {WAIT:.0f} s")
    finally:
        s.close()
    assert _healthz(server.port)["ok"] is True


def test_requests_are_still_served(server: Observability) -> None:
    for path, code in (("/healthz", 200), ("/readyz", 200), ("/metrics", 200), ("/nope", 404)):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{server.port}{path}", timeout=10) as r:
                got = r.status
        except urllib.error.HTTPError as e:
            got = e.code
        assert got == code, path


def test_probes_get_through_while_half_sent_requests_hold_every_slot(server: Observability) -> None:
    """Anyone who reaches the port can take all its slots with half-sent requests and renew
    them before their deadline; the kubelet's probes must still be answered, or it restarts the
    driver over and over. A new connection takes the slot of the one waited for longest."""
    socks = _open_half_requests(server.port, 16)  # MAX_CONNECTIONS
    try:
        time.sleep(0.3)  # all 16 are in, each waiting for the rest of its request
        for _ in range(5):
            assert _healthz(server.port)["ok"] is True
            socks += _open_half_requests(server.port, 4)  # the attacker renews its hold
            time.sleep(0.1)
    finally:
        for s in socks:
            s.close()
