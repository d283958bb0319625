"""The harness's child processes (processes.Component): they start whole while the test process
has grpcio's threads running, and they die with the test process.

Real processes and a real grpcio server and channel in this process; nothing is mocked.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from concurrent import futures
from pathlib import Path

import grpc

from tests.controlplane.processes import Component

REPO = Path(__file__).resolve().parents[2]


def test_children_start_whole_while_grpc_threads_run(tmp_path: Path) -> None:
    # with a preexec_fn, grpcio's fork handlers ran in the child and it crashed before exec now
    # and then (7 of 300 here, by SIGSEGV or SIGABRT); every start must succeed
    server = grpc.server(futures.ThreadPoolExecutor(2))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        grpc.channel_ready_future(channel).result(timeout=10)
        codes = []
        for i in range(300):
            child = Component(f"true-{i}", ["true"], tmp_path / "true.log")
            child.start()
            assert child._proc is not None
            codes.append(child._proc.wait(10))
            child.stop()
        assert codes == [0] * 300, f"{300 - codes.count(0)} children died before exec: {set(codes)}"
    finally:
        channel.close()
        server.stop(None)


def test_a_child_dies_with_the_process_that_started_it(tmp_path: Path) -> None:
    # a test process that is killed leaves no component behind
    script = (
        "import sys, time; sys.path.insert(0, sys.argv[1]);"
        "from pathlib import Path;"
        "from tests.controlplane.processes import Component;"
        "c = Component('sleep', ['sleep', '60'], Path(sys.argv[2])); c.start();"
        "print(c.pid, flush=True); time.sleep(60)"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", script, str(REPO), str(tmp_path / "sleep.log")],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    try:
        # setpriv execs the command under the same pid (it may not have yet when the pid is printed)
        deadline = time.monotonic() + 10
        while _command(child) != b"sleep" and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _command(child) == b"sleep"
        parent.kill()
        parent.wait(10)
        deadline = time.monotonic() + 10
        while _state(child) not in DEAD and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _state(child) in DEAD, "the child outlived its parent"
    finally:
        parent.kill()
        if _state(child) not in DEAD:
            os.kill(child, signal.SIGKILL)


DEAD = ("Z", "gone")  # a zombie (its reaper, the killed parent, is gone too) or reaped


def _state(pid: int) -> str:
    """The process's state letter from /proc, "gone" once it is reaped."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return "gone"


def _command(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")[0]
    except FileNotFoundError:
        return b""
