"""The server's worker pool: real threads, no mocks."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from topodra.common import logs
from topodra.common.runtime.grpcserver.workers import Workers

LOGGER = "topodra.test.workers"


def pool(size: int, name: str) -> Workers:
    return Workers(size, name, logs.get(LOGGER))


def threads(name: str) -> list[threading.Thread]:
    """The pool's live threads, as the interpreter lists them (each test names its own pool)."""
    return [t for t in threading.enumerate() if t.name.startswith(f"{name}-")]


def settle(check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.005)


def test_calls_run_with_their_arguments_on_as_many_threads_as_run_at_once() -> None:
    w = pool(4, "grpc-four")
    barrier = threading.Barrier(4, timeout=5)
    seen: list[tuple[int, str]] = []
    done = threading.Semaphore(0)

    def call(i: int) -> None:
        barrier.wait()  # all four at once, or the barrier breaks: one thread each
        seen.append((i, threading.current_thread().name))
        done.release()

    for i in range(4):
        w.submit(call, i)
    for _ in range(4):
        assert done.acquire(timeout=5)
    assert sorted(i for i, _ in seen) == [0, 1, 2, 3]
    assert len({name for _, name in seen}) == 4
    assert all(name.startswith("grpc-four-") for _, name in seen)
    w.close()


def test_calls_one_after_another_reuse_one_thread() -> None:
    w = pool(16, "grpc-reuse")
    done = threading.Event()
    for _ in range(50):
        done.clear()
        w.submit(done.set)
        assert done.wait(5)
        settle(lambda: len(w._sleeping) == 1)  # the worker is back for the next call
    assert len(threads("grpc-reuse")) == 1
    w.close()


def _switches(tid: int) -> int:
    with open(f"/proc/self/task/{tid}/status") as status:
        line = next(x for x in status if x.startswith("voluntary_ctxt_switches:"))
    return int(line.split()[1])


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc per-thread status")
def test_a_call_wakes_only_the_thread_that_runs_it() -> None:
    """With all idle threads waiting on one queue, the thread that took a call woke another for
    nothing: threads that ran one of these 100 calls switched 64-73 times. A thread now sleeps
    between the calls it runs: one switch per call, a few more where the interpreter lock makes
    it wait (up to 3 per call seen with both cores busy)."""
    w = Workers(8, "grpc-wake", logs.get(LOGGER), keep=8)
    barrier = threading.Barrier(8, timeout=5)
    tids: list[int] = []

    def burst_call() -> None:
        tids.append(threading.get_native_id())
        barrier.wait()  # all eight at once: eight threads

    for _ in range(8):
        w.submit(burst_call)
    settle(lambda: len(w._sleeping) == 8)
    time.sleep(0.05)  # each is asleep by now
    before = {t: _switches(t) for t in tids}
    ran: list[int] = []
    done = threading.Event()

    def call() -> None:
        ran.append(threading.get_native_id())
        done.set()

    for _ in range(100):
        done.clear()
        w.submit(call)
        assert done.wait(5)
        time.sleep(0.002)  # the kubelet's next call comes after the worker went back to sleep
    settle(lambda: len(w._sleeping) == 8)
    after = {t: _switches(t) for t in tids}
    calls = {t: ran.count(t) for t in tids}
    assert sum(calls.values()) == 100
    woke_for_nothing = {
        t: (after[t] - before[t], calls[t]) for t in tids if after[t] - before[t] > 4 * calls[t] + 4
    }
    assert woke_for_nothing == {}  # tid: (switches, calls run)
    w.close()
    settle(lambda: threads("grpc-wake") == [])


def test_no_more_threads_than_the_size_and_the_rest_wait_their_turn() -> None:
    w = pool(2, "grpc-two")
    release = threading.Event()
    ran: list[int] = []

    def call(i: int) -> None:
        release.wait(5)
        ran.append(i)

    for i in range(6):
        w.submit(call, i)
    assert len(threads("grpc-two")) == 2
    time.sleep(0.05)
    assert ran == []  # both threads busy: the other four wait in the queue
    release.set()
    settle(lambda: len(ran) == 6)
    assert sorted(ran) == list(range(6))
    assert len(threads("grpc-two")) == 2
    w.close()


def test_a_call_that_raises_is_logged_by_name_and_the_worker_serves_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    w = pool(1, "grpc-raise")
    done = threading.Event()

    def broken_call() -> None:
        raise OSError("connection reset")

    with caplog.at_level("ERROR", logger=LOGGER):
        w.submit(broken_call)
        w.submit(done.set)
        assert done.wait(5)
    record = next(r for r in caplog.records if r.name == LOGGER)
    fields = getattr(record, "topodra_fields", {})
    assert "broken_call" in fields["call"]
    assert fields["error"] == "OSError: connection reset"
    assert record.exc_info is not None
    assert len(threads("grpc-raise")) == 1
    w.close()


def test_close_drops_calls_not_started_ends_the_threads_and_refuses_more() -> None:
    w = pool(1, "grpc-close")
    started, release = threading.Event(), threading.Event()
    ran: list[str] = []

    def first() -> None:
        started.set()
        release.wait(5)
        ran.append("first")

    w.submit(first)
    assert started.wait(5)
    (thread,) = threads("grpc-close")
    w.submit(ran.append, "queued")
    w.close()
    release.set()
    thread.join(5)
    assert not thread.is_alive()
    assert ran == ["first"]  # the one running finished; the queued one never ran
    with pytest.raises(RuntimeError, match="grpc-close is closed"):
        w.submit(ran.append, "late")


def test_a_pool_needs_a_thread() -> None:
    with pytest.raises(ValueError, match="at least one thread"):
        pool(0, "grpc-none")


def test_the_server_logs_what_a_call_raises_outside_its_handler(caplog: pytest.LogCaptureFixture) -> None:
    """What a connection's call raises past its own handling (say, writing to a connection that
    just broke) was kept in a Future nobody read, and so never seen."""
    from topodra.common.runtime.grpcserver.server import GrpcServer

    server = GrpcServer("test", {}, workers=1)
    done = threading.Event()

    def write_answer() -> None:
        raise BrokenPipeError("the kubelet hung up")

    with caplog.at_level("ERROR", logger="topodra.common.runtime.grpcserver.server"):
        server._submit(write_answer)
        server._submit(done.set)
        assert done.wait(5)
    fields = [getattr(r, "topodra_fields", {}) for r in caplog.records]
    assert any("write_answer" in f.get("call", "") and f.get("socket") == "test" for f in fields)
    server.stop(grace=0)


def test_calls_from_many_threads_each_run_once_while_threads_linger_out_and_start_again() -> None:
    """Submits from 8 threads at once, calls of 0-1 ms, and a linger short enough that threads
    end and start all through: every call runs exactly once (a wake lost between a sleeper's
    timeout and a submit would leave calls in the backlog; a promise counted twice, a call run
    by two threads)."""
    w = Workers(16, "grpc-stress", logs.get(LOGGER), keep=2, linger=0.002)
    ran: list[int] = []
    all_ran = threading.Semaphore(0)

    def call(i: int) -> None:
        if i % 7 == 0:
            time.sleep(0.001)
        ran.append(i)
        all_ran.release()

    def submitter(base: int) -> None:
        for i in range(base, base + 500):
            w.submit(call, i)
            if i % 50 == 0:
                time.sleep(0.005)  # a lull: sleepers beyond `keep` time out meanwhile

    subs = [threading.Thread(target=submitter, args=(k * 500,)) for k in range(8)]
    for t in subs:
        t.start()
    for t in subs:
        t.join(10)
    for _ in range(4000):
        assert all_ran.acquire(timeout=10), f"{len(ran)} of 4000 calls ran"
    assert sorted(ran) == list(range(4000))
    w.close()
    settle(lambda: threads("grpc-stress") == [])


def test_after_a_burst_the_threads_beyond_keep_end_and_a_new_burst_starts_them_again() -> None:
    w = Workers(6, "grpc-linger", logs.get(LOGGER), keep=2, linger=0.05)

    def burst() -> None:
        barrier = threading.Barrier(6, timeout=5)  # all six at once: six threads
        done = threading.Semaphore(0)

        def call() -> None:
            barrier.wait()
            done.release()

        for _ in range(6):
            w.submit(call)
        for _ in range(6):
            assert done.acquire(timeout=5)

    burst()
    settle(lambda: len(threads("grpc-linger")) == 2)
    time.sleep(0.3)  # several more lingers: the two kept do not end
    assert len(threads("grpc-linger")) == 2
    burst()  # the pool grows back to its size for the next burst
    names = [t.name for t in threads("grpc-linger")]
    assert len(names) == len(set(names))
    settle(lambda: len(threads("grpc-linger")) == 2)
    w.close()
    settle(lambda: threads("grpc-linger") == [])
