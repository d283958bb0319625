"""The in-house gRPC server against two independent clients: grpcio's (C-core HTTP/2) for calls,
and raw HTTP/2 frames written here for what a well-behaved client never sends.

The Go client (the kubelet's grpc-go) talks to the same server in tests/node and in hack/bench.
Nothing is mocked: real unix sockets, real frames.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from topodra.common.runtime.grpcserver import frames as f
from topodra.common.runtime.grpcserver import hpack
from topodra.common.runtime.grpcserver.connection import CallContext, Deferred, Limits, Method, gathered
from topodra.common.runtime.grpcserver.server import GrpcServer
from topodra.proto.pluginregistration.v1 import api_pb2 as pb

ECHO = "/test.Echo/Echo"
FAIL = "/test.Echo/Fail"
SLOW = "/test.Echo/Slow"
WATCH = "/test.Echo/Watch"


class Served:
    def __init__(self) -> None:
        self.cancelled = threading.Event()
        self.release = threading.Event()
        self.started = threading.Event()

    def echo(self, request: pb.InfoRequest, context: CallContext) -> pb.PluginInfo:
        return pb.PluginInfo(name="echo")

    def big(self, request: pb.RegistrationStatus, context: CallContext) -> pb.PluginInfo:
        # the size of the answer is asked for in `error` (a string field we can fill freely)
        return pb.PluginInfo(name=request.error[:10], endpoint="y" * int(request.error or "0"))

    def fail(self, request: pb.InfoRequest, context: CallContext) -> pb.PluginInfo:
        raise KeyError("no such thing")

    def slow(self, request: pb.InfoRequest, context: CallContext) -> pb.PluginInfo:
        self.started.set()
        self.release.wait(10)
        return pb.PluginInfo(name="slow")

    def watch(self, request: pb.InfoRequest, context: CallContext) -> Iterator[pb.PluginInfo]:
        context.add_callback(self.cancelled.set)
        n = 0
        while not self.cancelled.is_set():
            n += 1
            yield pb.PluginInfo(name=f"tick-{n}")
            time.sleep(0.01)


@pytest.fixture
def served() -> Served:
    return Served()


def start(path: Path, served: Served, limits: Limits | None = None, workers: int = 8) -> GrpcServer:
    routes = {
        ECHO: Method(pb.InfoRequest.FromString, served.echo, False),
        "/test.Echo/Big": Method(pb.RegistrationStatus.FromString, served.big, False),
        FAIL: Method(pb.InfoRequest.FromString, served.fail, False),
        SLOW: Method(pb.InfoRequest.FromString, served.slow, False),
        WATCH: Method(pb.InfoRequest.FromString, served.watch, True),
    }
    server = (
        GrpcServer("t.sock", routes, workers, limits) if limits else GrpcServer("t.sock", routes, workers)
    )
    server.listen(path)
    server.start()
    return server


@pytest.fixture
def sock_path(tmp_path: Path) -> Path:
    return tmp_path / "t.sock"


@pytest.fixture
def server(sock_path: Path, served: Served) -> Iterator[GrpcServer]:
    s = start(sock_path, served)
    yield s
    served.release.set()
    s.stop(1.0)


def channel(path: Path) -> grpc.Channel:
    ch = grpc.insecure_channel(f"unix:{path}")
    grpc.channel_ready_future(ch).result(timeout=5)
    return ch


def unary(ch: grpc.Channel, path: str = ECHO, request: Any = pb.InfoRequest) -> Any:
    return ch.unary_unary(
        path, request_serializer=request.SerializeToString, response_deserializer=pb.PluginInfo.FromString
    )


# --- calls through grpcio's client ------------------------------------------------------------------
def test_unary_calls_answer_each_caller_with_its_own_answer(server: GrpcServer, sock_path: Path) -> None:
    with channel(sock_path) as ch:
        big = unary(ch, "/test.Echo/Big", pb.RegistrationStatus)
        results: dict[int, str] = {}

        def call(i: int) -> None:
            results[i] = big(pb.RegistrationStatus(error=str(i)), timeout=10).endpoint

        threads = [threading.Thread(target=call, args=(i,)) for i in range(64)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert results == {i: "y" * i for i in range(64)}


def test_an_answer_larger_than_every_window_arrives_whole(server: GrpcServer, sock_path: Path) -> None:
    # 3 MB: above the client's initial windows (64 KiB) and the 16 KiB frame size, so the
    # server must split it and wait for WINDOW_UPDATEs
    with channel(sock_path) as ch:
        got = unary(ch, "/test.Echo/Big", pb.RegistrationStatus)(
            pb.RegistrationStatus(error="3000000"), timeout=20
        )
    assert got.endpoint == "y" * 3_000_000


def test_a_request_larger_than_the_windows_is_read_whole(server: GrpcServer, sock_path: Path) -> None:
    # 3.5 MB of request: several of the server's 1 MiB windows, so it must send WINDOW_UPDATEs
    # (int() ignores the trailing blanks: the answer is 5 bytes)
    long = pb.RegistrationStatus(error="5" + " " * 3_500_000)
    assert len(long.SerializeToString()) > 3_000_000
    with channel(sock_path) as ch:
        big = unary(ch, "/test.Echo/Big", pb.RegistrationStatus)
        assert big(long, timeout=20).endpoint == "y" * 5
        assert big(pb.RegistrationStatus(error="7"), timeout=10).endpoint == "y" * 7


def test_a_request_above_the_message_limit_fails_alone(sock_path: Path, served: Served) -> None:
    server = start(sock_path, served, Limits(max_message=1000))
    try:
        with channel(sock_path) as ch:
            big = unary(ch, "/test.Echo/Big", pb.RegistrationStatus)
            with pytest.raises(grpc.RpcError) as e:
                big(pb.RegistrationStatus(error="1" + " " * 5000), timeout=10)
            assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "above 1000 bytes" in e.value.details()
            assert big(pb.RegistrationStatus(error="3"), timeout=10).endpoint == "yyy"  # same connection
    finally:
        server.stop(1.0)


def test_unknown_method_and_failing_handler_get_a_status_and_the_server_goes_on(
    server: GrpcServer, sock_path: Path
) -> None:
    with channel(sock_path) as ch:
        with pytest.raises(grpc.RpcError) as e:
            unary(ch, "/test.Echo/Nope")(pb.InfoRequest(), timeout=5)
        assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert "/test.Echo/Nope" in e.value.details()
        with pytest.raises(grpc.RpcError) as e:
            unary(ch, FAIL)(pb.InfoRequest(), timeout=5)
        assert e.value.code() == grpc.StatusCode.UNKNOWN
        assert "KeyError" in e.value.details()
        assert unary(ch)(pb.InfoRequest(), timeout=5).name == "echo"


def test_a_stream_sends_until_the_client_cancels_and_then_runs_the_callbacks(
    server: GrpcServer, sock_path: Path, served: Served
) -> None:
    with channel(sock_path) as ch:
        call = ch.unary_stream(
            WATCH,
            request_serializer=pb.InfoRequest.SerializeToString,
            response_deserializer=pb.PluginInfo.FromString,
        )(pb.InfoRequest(), timeout=30)
        names = [next(call).name for _ in range(5)]
        assert names == [f"tick-{i}" for i in range(1, 6)]
        assert not served.cancelled.is_set()
        call.cancel()
        assert served.cancelled.wait(5), "cancelling the stream did not reach the handler"


def test_a_closed_connection_ends_its_stream(sock_path: Path, server: GrpcServer, served: Served) -> None:
    ch = channel(sock_path)
    call = ch.unary_stream(
        WATCH,
        request_serializer=pb.InfoRequest.SerializeToString,
        response_deserializer=pb.PluginInfo.FromString,
    )(pb.InfoRequest(), timeout=30)
    next(call)
    ch.close()
    assert served.cancelled.wait(5)


def test_stop_lets_a_call_under_way_finish_and_refuses_new_connections(
    sock_path: Path, served: Served
) -> None:
    server = start(sock_path, served)
    ch = channel(sock_path)
    answer: list[Any] = []
    caller = threading.Thread(target=lambda: answer.append(unary(ch, SLOW)(pb.InfoRequest(), timeout=10)))
    caller.start()
    assert served.started.wait(5)
    stopper = threading.Thread(target=server.stop, args=(5.0,))
    stopper.start()
    time.sleep(0.2)
    served.release.set()
    caller.join(10)
    stopper.join(10)
    assert [a.name for a in answer] == ["slow"]
    ch.close()
    with socket.socket(socket.AF_UNIX) as s, pytest.raises(OSError):
        s.connect(str(sock_path))


def test_stop_after_the_grace_period_returns_even_with_a_call_stuck(sock_path: Path, served: Served) -> None:
    server = start(sock_path, served)
    ch = channel(sock_path)
    caller = threading.Thread(target=lambda: _swallow(lambda: unary(ch, SLOW)(pb.InfoRequest(), timeout=10)))
    caller.start()
    assert served.started.wait(5)
    t0 = time.monotonic()
    server.stop(0.3)
    assert time.monotonic() - t0 < 3
    served.release.set()
    caller.join(10)
    ch.close()


def _swallow(fn: Any) -> None:
    with contextlib.suppress(grpc.RpcError):  # the call may be cut off by the stop
        fn()


def test_a_108_byte_socket_path_is_served(tmp_path: Path, served: Served) -> None:
    # the kubelet dials paths of up to 108 bytes; grpcio's own server could bind only 107
    base = tmp_path / "d"
    base.mkdir()
    name = "s" * (108 - len(str(base).encode()) - 1)
    path = base / name
    assert len(str(path).encode()) == 108
    server = start(path, served)
    try:
        folder = os.open(base, os.O_PATH)
        with socket.socket(socket.AF_UNIX) as s:  # Python dials at most 107 bytes too
            s.connect(f"/proc/self/fd/{folder}/{name}")
            os.close(folder)
            conn = RawClient(s)
            conn.handshake()
            conn.request(1, ECHO, pb.InfoRequest().SerializeToString())
            assert conn.answer(1) == (0, pb.PluginInfo(name="echo").SerializeToString())
    finally:
        server.stop(1.0)


# --- raw frames -------------------------------------------------------------------------------------
class RawClient:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.sock.settimeout(5)
        self.buf = b""
        self.decoder = hpack.Decoder()
        self.messages: dict[int, bytes] = {}  # stream -> the DATA of an answer not complete yet
        self.answered: dict[int, tuple[int, bytes]] = {}  # stream -> complete, not asked for yet

    def handshake(self) -> None:
        self.sock.sendall(f.PREFACE + f.settings({}))

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def request(self, stream: int, path: str, message: bytes, end: bool = True) -> None:
        block = hpack.encode(
            [
                (":method", "POST"),
                (":scheme", "http"),
                (":path", path),
                (":authority", "x"),
                ("content-type", "application/grpc"),
                ("te", "trailers"),
            ]
        )
        body = struct.pack(">BI", 0, len(message)) + message
        self.send(
            f.frame(f.HEADERS, f.END_HEADERS, stream, block)
            + f.frame(f.DATA, f.END_STREAM if end else 0, stream, body)
        )

    def frame(self) -> tuple[int, int, int, bytes]:
        while True:
            if len(self.buf) >= 9:
                length, kind, flags, stream = f.parse_header(self.buf)
                if len(self.buf) >= 9 + length:
                    payload = self.buf[9 : 9 + length]
                    self.buf = self.buf[9 + length :]
                    return kind, flags, stream, payload
            data = self.sock.recv(65536)
            if not data:
                raise EOFError
            self.buf += data

    def until(self, kind: int, stream: int | None = None) -> tuple[int, bytes]:
        while True:
            k, flags, s, payload = self.frame()
            if k == f.HEADERS:
                headers = self.decoder.decode(payload)
                if k == kind and (stream is None or s == stream):
                    return flags, hpack.encode(headers)
                continue
            if k == kind and (stream is None or s == stream):
                return flags, payload

    def answer(self, stream: int) -> tuple[int, bytes]:
        """(grpc-status, message bytes) of a unary call. The answers of other calls that come
        first are kept for their own `answer`: a server answers calls in any order."""
        while stream not in self.answered:
            k, flags, s, payload = self.frame()
            if k == f.DATA:
                self.messages[s] = self.messages.get(s, b"") + payload
            if k == f.HEADERS:
                headers = dict(self.decoder.decode(payload))
                if flags & f.END_STREAM:
                    self.answered[s] = int(headers["grpc-status"]), self.messages.pop(s, b"")[5:]
        return self.answered.pop(stream)


def assert_served(path: Path) -> None:
    """A new connection gets an answer: the server (and a worker) is still there."""
    ok = raw(path)
    ok.handshake()
    ok.request(1, ECHO, b"")
    assert ok.answer(1)[0] == 0


def raw(path: Path) -> RawClient:
    s = socket.socket(socket.AF_UNIX)
    s.connect(str(path))
    return RawClient(s)


def goaway_code(client: RawClient) -> int:
    try:
        _, payload = client.until(f.GOAWAY)
    except EOFError:
        pytest.fail("the connection closed without GOAWAY")
    return int(struct.unpack(">II", payload[:8])[1])


def test_ping_is_answered_with_the_same_payload(server: GrpcServer, sock_path: Path) -> None:
    c = raw(sock_path)
    c.handshake()
    c.send(f.frame(f.PING, 0, 0, b"12345678"))
    flags, payload = c.until(f.PING)
    assert flags & f.ACK and payload == b"12345678"


def test_a_wrong_preface_closes_only_that_connection(server: GrpcServer, sock_path: Path) -> None:
    c = raw(sock_path)
    c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert goaway_code(c) == f.PROTOCOL_ERROR
    with pytest.raises(EOFError):
        while True:
            c.frame()
    assert_served(sock_path)


def test_a_header_block_that_does_not_decode_ends_the_connection(server: GrpcServer, sock_path: Path) -> None:
    c = raw(sock_path)
    c.handshake()
    c.send(f.frame(f.HEADERS, f.END_HEADERS | f.END_STREAM, 1, b"\xff\xff\xff\xff\xff\xff\xff"))
    assert goaway_code(c) == f.COMPRESSION_ERROR


def test_an_endless_header_block_is_cut_off(server: GrpcServer, sock_path: Path) -> None:
    c = raw(sock_path)
    c.handshake()
    c.send(f.frame(f.HEADERS, 0, 1, b"\x00" * 1000))
    for _ in range(100):  # 1.6 MB of CONTINUATION if nothing stopped it
        try:
            c.send(f.frame(f.CONTINUATION, 0, 1, b"\x00" * 16000))
        except OSError:
            break
    assert goaway_code(c) == f.ENHANCE_YOUR_CALM


def test_a_frame_above_the_maximum_size_ends_the_connection(server: GrpcServer, sock_path: Path) -> None:
    c = raw(sock_path)
    c.handshake()
    c.send(f.header(1 << 20, f.DATA, 0, 1))
    assert goaway_code(c) == f.FRAME_SIZE_ERROR


def test_streams_beyond_the_limit_are_refused(sock_path: Path, served: Served) -> None:
    server = start(sock_path, served, Limits(max_concurrent_streams=2))
    try:
        c = raw(sock_path)
        c.handshake()
        for stream in (1, 3, 5):
            c.request(stream, SLOW, b"", end=False)  # open, never finished by the client
        _, payload = c.until(f.RST_STREAM, 5)
        assert struct.unpack(">I", payload)[0] == f.REFUSED_STREAM
    finally:
        served.release.set()
        server.stop(1.0)


def test_a_message_that_does_not_parse_gets_internal(server: GrpcServer, sock_path: Path) -> None:
    c = raw(sock_path)
    c.handshake()
    c.request(1, ECHO, b"\xff\xff\xff")
    assert c.answer(1)[0] == 13
    c.request(3, ECHO, b"")
    assert c.answer(3)[0] == 0  # the connection goes on


def test_a_reset_call_is_not_answered_and_the_connection_goes_on(
    server: GrpcServer, sock_path: Path, served: Served
) -> None:
    c = raw(sock_path)
    c.handshake()
    c.request(1, SLOW, b"")
    assert served.started.wait(5)
    c.send(f.rst_stream(1, f.CANCEL))
    served.release.set()
    c.request(3, ECHO, b"")
    assert c.answer(3)[0] == 0


def test_deferred_answers_hold_no_worker(sock_path: Path) -> None:
    """One worker, 20 calls in flight, none answered before all 20 have arrived: only works if a
    call that returns a Deferred gives its worker back (as the DRA servicer's calls do)."""
    pending: list[tuple[Deferred, str]] = []
    lock = threading.Lock()

    def later(request: pb.RegistrationStatus, context: CallContext) -> Deferred:
        d = Deferred()
        with lock:
            pending.append((d, request.error))
            if len(pending) == 20:
                for deferred, text in pending:
                    threading.Thread(target=deferred.resolve, args=(pb.PluginInfo(name=text),)).start()
        return d

    def broken(request: pb.RegistrationStatus, context: CallContext) -> Deferred:
        d = Deferred()
        d.resolve(ValueError("no answer today"))
        return d

    routes = {
        "/t/Later": Method(pb.RegistrationStatus.FromString, later, False),
        "/t/Broken": Method(pb.RegistrationStatus.FromString, broken, False),
    }
    server = GrpcServer("t.sock", routes, workers=1)
    server.listen(sock_path)
    server.start()
    try:
        with channel(sock_path) as ch:
            call = unary(ch, "/t/Later", pb.RegistrationStatus)
            results: dict[int, str] = {}
            threads = [
                threading.Thread(
                    target=lambda i=i: results.update(
                        {i: call(pb.RegistrationStatus(error=str(i)), timeout=20).name}
                    )
                )
                for i in range(20)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
            assert results == {i: str(i) for i in range(20)}
            with pytest.raises(grpc.RpcError) as e:
                unary(ch, "/t/Broken", pb.RegistrationStatus)(pb.RegistrationStatus(), timeout=5)
            assert e.value.code() == grpc.StatusCode.UNKNOWN and "no answer today" in e.value.details()
    finally:
        server.stop(1.0)


def test_a_client_that_gives_no_window_loses_the_call_not_the_worker(sock_path: Path, served: Served) -> None:
    """Answers are written by whichever thread serves the claims: a client that never opens a
    window must not keep it. Here the only worker is free again after the send timeout."""
    server = start(sock_path, served, Limits(send_timeout=0.3), workers=1)
    try:
        stuck = raw(sock_path)
        stuck.send(f.PREFACE + f.settings({f.SETTINGS_INITIAL_WINDOW_SIZE: 0}))
        stuck.request(1, ECHO, b"")
        _, payload = stuck.until(f.RST_STREAM, 1)
        assert struct.unpack(">I", payload)[0] == f.CANCEL
        assert_served(sock_path)
    finally:
        server.stop(1.0)


def _write_failures(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    """The server's records about a write that failed."""
    out = [(r.levelno, r.getMessage()) for r in caplog.records if "grpcserver" in r.name]
    return [(level, msg) for level, msg in out if "write" in msg or "written" in msg]


def test_a_client_that_hangs_up_before_its_answer_is_not_warned_about(
    server: GrpcServer, sock_path: Path, served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    # the kubelet restarting, or a client that closes as soon as it has what it waited for:
    # the answer's write fails with EPIPE, which is no operator's business
    caplog.set_level(logging.DEBUG)
    gone = raw(sock_path)
    gone.handshake()
    gone.request(1, SLOW, b"")
    assert served.started.wait(5)
    # it reads no more: the answer's write fails with EPIPE, while the server's reading side
    # sees no end yet (as when the client closes while a frame of ours is under way)
    gone.sock.shutdown(socket.SHUT_RD)
    served.release.set()
    deadline = time.monotonic() + 5
    while not _write_failures(caplog) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert_served(sock_path)
    failures = _write_failures(caplog)
    assert failures, "the answer to a closed connection was written without failing"
    assert all(level == logging.DEBUG for level, _ in failures), failures


def test_a_client_that_stops_reading_loses_its_connection_not_the_worker(
    sock_path: Path, served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    server = start(sock_path, served, Limits(send_timeout=0.3), workers=1)
    try:
        stuck = raw(sock_path)
        stuck.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stuck.send(
            f.PREFACE + f.settings({f.SETTINGS_INITIAL_WINDOW_SIZE: 2**31 - 1}) + f.window_update(0, 2**30)
        )
        body = pb.RegistrationStatus(error="3000000").SerializeToString()
        block = hpack.encode(
            [
                (":method", "POST"),
                (":scheme", "http"),
                (":path", "/test.Echo/Big"),
                ("content-type", "application/grpc"),
            ]
        )
        stuck.send(
            f.frame(f.HEADERS, f.END_HEADERS, 1, block)
            + f.frame(f.DATA, f.END_STREAM, 1, struct.pack(">BI", 0, len(body)) + body)
        )
        time.sleep(1.0)  # the 3 MB answer fills the socket; the write gives up after 0.3 s
        assert_served(sock_path)
        with pytest.raises((EOFError, ConnectionError)):
            while True:
                stuck.frame()  # what was sent, then the end: the server closed it
        # unlike a client that hung up, one that stops reading is worth a warning
        assert (logging.WARNING, "gRPC connection cannot be written; closing it") in _write_failures(caplog)
    finally:
        server.stop(1.0)


def test_a_connection_that_cannot_be_set_up_leaves_the_listener_serving(
    sock_path: Path, served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the set-up failure is forced (a socket option refused by the kernel cannot be provoked
    # at will here); everything else is real
    from topodra.common.runtime.grpcserver import server as server_module

    real = server_module.Connection
    calls = []

    def flaky(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise OSError("setsockopt refused")
        return real(*args, **kwargs)

    monkeypatch.setattr(server_module, "Connection", flaky)
    server = start(sock_path, served)
    try:
        first = raw(sock_path)
        with pytest.raises((EOFError, ConnectionError)):
            first.handshake()
            first.frame()
        assert_served(sock_path)
    finally:
        server.stop(1.0)


def _later_routes(pending: list[tuple[Deferred, str]], arrived: threading.Event, n: int) -> dict[str, Method]:
    lock = threading.Lock()

    def later(request: pb.RegistrationStatus, context: CallContext) -> Deferred:
        d = Deferred()
        with lock:
            pending.append((d, request.error))
            if len(pending) == n:
                arrived.set()
        return d

    return {"/t/Later": Method(pb.RegistrationStatus.FromString, later, False)}


def test_answers_written_inside_gathered_leave_together_at_its_end(sock_path: Path) -> None:
    """The claim core answers a batch from one thread inside `gathered()`: no answer leaves
    before the block ends, then all of them do, each whole and on its own stream."""
    pending: list[tuple[Deferred, str]] = []
    arrived, inside, leave = threading.Event(), threading.Event(), threading.Event()
    server = GrpcServer("t.sock", _later_routes(pending, arrived, 5), workers=2)
    server.listen(sock_path)
    server.start()
    try:
        c = raw(sock_path)
        c.handshake()
        c.until(f.SETTINGS)  # the server's settings (and later its ACK) come before any answer
        streams = [1, 3, 5, 7, 9]
        for s in streams:
            c.request(s, "/t/Later", pb.RegistrationStatus(error=f"s{s}").SerializeToString())
        assert arrived.wait(10)

        def answer_all() -> None:
            with gathered():
                for d, text in pending:
                    d.resolve(pb.PluginInfo(name=text))
                inside.set()
                leave.wait(10)

        threading.Thread(target=answer_all).start()
        assert inside.wait(10)
        c.sock.settimeout(0.3)
        with pytest.raises(TimeoutError):  # everything is resolved, nothing has left
            while True:
                k, _, s, _ = c.frame()
                assert s == 0, f"frame {k} of stream {s} left inside the block"
        c.sock.settimeout(5)
        leave.set()
        got = {s: c.answer(s) for s in streams}
        assert got == {s: (0, pb.PluginInfo(name=f"s{s}").SerializeToString()) for s in streams}
    finally:
        leave.set()
        server.stop(1.0)


def test_a_gathered_answer_larger_than_the_window_is_sent_before_the_writer_waits(sock_path: Path) -> None:
    """An answer bigger than the client's window needs the client to read some of it before the
    rest may go: inside `gathered()` what was held back is sent before the writer waits for the
    window, else client and writer would wait for each other until the send timeout."""
    pending: list[tuple[Deferred, str]] = []
    arrived = threading.Event()
    server = GrpcServer(
        "t.sock", _later_routes(pending, arrived, 1), workers=2, limits=Limits(send_timeout=5)
    )
    server.listen(sock_path)
    server.start()
    answered = threading.Event()
    try:
        c = raw(sock_path)
        c.send(f.PREFACE + f.settings({f.SETTINGS_INITIAL_WINDOW_SIZE: 1000}))
        c.request(1, "/t/Later", pb.RegistrationStatus(error="big").SerializeToString())
        assert arrived.wait(10)
        answer = pb.PluginInfo(name="big", endpoint="y" * 5000)

        def resolve() -> None:
            with gathered():
                pending[0][0].resolve(answer)
            answered.set()

        threading.Thread(target=resolve).start()
        c.sock.settimeout(2)  # well inside the send timeout
        first = 0
        while first == 0:
            k, _, stream, payload = c.frame()
            if k == f.DATA and stream == 1:
                first = len(payload)
        assert first == 1000  # the window's worth, sent while the writer waits for more
        c.send(f.window_update(1, 1 << 20))
        c.sock.settimeout(5)
        status, rest = c.answer(1)  # the rest of the data, less 5 bytes (`answer` takes them as the prefix)
        assert (status, first + len(rest) + 5) == (0, 5 + len(answer.SerializeToString()))
        assert answered.wait(5)
    finally:
        server.stop(1.0)
