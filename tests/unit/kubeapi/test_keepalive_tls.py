"""topodra.common.kubeapi.keepalive over TLS: the server's certificate and name are checked, the
client certificate is presented, exactly as the official client's configuration says.

The server is a loopback TLS server with certificates from the control-plane tier's PKI helper
(tests/controlplane/pki.py: a fresh CA, a serving certificate for 127.0.0.1 and localhost, and a
client certificate), so that names and CAs can be got wrong on purpose; the real kube-apiserver
is in test_keepalive.py.
"""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from topodra.common.kubeapi import keepalive

from tests.conftest import skip_or_fail
from tests.controlplane.pki import ClusterPKI, make_cluster_pki

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> ClusterPKI:
    if shutil.which("openssl") is None:
        skip_or_fail("openssl is not installed (the PKI helper makes certificates with it)")
    return make_cluster_pki(tmp_path_factory.mktemp("pki"))


class TlsServer:
    """Answers every request with ANSWER over TLS on `address`; records client certificates'
    subjects (None: the client showed none)."""

    def __init__(
        self,
        pki: ClusterPKI,
        address: str,
        require_client_cert: bool,
        answer: bytes = ANSWER,
        delay: float = 0.0,
    ) -> None:
        self.answer = answer
        self.delay = delay  # seconds before each answer
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(pki.apiserver.cert, pki.apiserver.key)
        if require_client_cert:
            self.ctx.verify_mode = ssl.CERT_REQUIRED
            self.ctx.load_verify_locations(pki.ca.cert)
        self.clients: list[Any] = []
        self._sock = socket.create_server((address, 0))
        self.port = self._sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                raw, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(raw,), daemon=True).start()

    def _serve(self, raw: socket.socket) -> None:
        try:
            with self.ctx.wrap_socket(raw, server_side=True) as conn:
                peer = conn.getpeercert()
                self.clients.append(dict(x[0] for x in peer["subject"]) if peer else None)
                data = b""
                while True:
                    more = conn.recv(65536)
                    if not more:
                        return
                    data += more
                    while b"\r\n\r\n" in data:
                        _, _, data = data.partition(b"\r\n\r\n")
                        time.sleep(self.delay)
                        conn.sendall(self.answer)
        except (OSError, ssl.SSLError):
            raw.close()

    def close(self) -> None:
        self._sock.close()


@pytest.fixture
def tls(pki: ClusterPKI) -> Iterator[Callable[..., TlsServer]]:
    servers: list[TlsServer] = []

    def make(address: str = "127.0.0.1", require_client_cert: bool = False, **kw: Any) -> TlsServer:
        servers.append(TlsServer(pki, address, require_client_cert, **kw))
        return servers[-1]

    yield make
    for srv in servers:
        srv.close()


def configuration(url: str, ca: Path | None, **settings: Any) -> Any:
    cfg = client.Configuration(host=url)
    cfg.ssl_ca_cert = str(ca) if ca else None
    for key, value in settings.items():
        setattr(cfg, key, value)
    return cfg


def test_the_servers_certificate_is_checked_against_the_ca(
    pki: ClusterPKI, tls: Callable[..., TlsServer], tmp_path: Path
) -> None:
    srv = tls()
    url = f"https://127.0.0.1:{srv.port}"
    assert keepalive.Getter(configuration(url, pki.ca.cert)).get("/x", timeout=5).data == b"{}"
    other = make_cluster_pki(tmp_path / "other")
    with pytest.raises(ssl.SSLCertVerificationError, match="certificate"):
        keepalive.Getter(configuration(url, other.ca.cert)).get("/x", timeout=5)
    with pytest.raises(ssl.SSLCertVerificationError):  # the system's CAs do not know ours either
        keepalive.Getter(configuration(url, None)).get("/x", timeout=5)


def test_the_servers_name_is_checked(pki: ClusterPKI, tls: Callable[..., TlsServer]) -> None:
    """127.0.0.2 reaches loopback too, but the certificate names only 127.0.0.1 and localhost."""
    srv = tls("127.0.0.2")
    url = f"https://127.0.0.2:{srv.port}"
    with pytest.raises(ssl.SSLCertVerificationError, match=r"127\.0\.0\.2"):
        keepalive.Getter(configuration(url, pki.ca.cert)).get("/x", timeout=5)
    named = tls("127.0.0.1")
    by_name = f"https://localhost:{named.port}"
    assert keepalive.Getter(configuration(by_name, pki.ca.cert)).get("/x", timeout=5).status == 200
    # what the configuration allows explicitly: no name check, or no verification at all
    unchecked = configuration(url, pki.ca.cert, assert_hostname=False)
    assert keepalive.Getter(unchecked).get("/x", timeout=5).status == 200
    unverified = configuration(url, None, verify_ssl=False)
    assert keepalive.Getter(unverified).get("/x", timeout=5).status == 200


def test_the_client_certificate_is_presented(pki: ClusterPKI, tls: Callable[..., TlsServer]) -> None:
    srv = tls(require_client_cert=True)
    url = f"https://127.0.0.1:{srv.port}"
    cfg = configuration(url, pki.ca.cert, cert_file=str(pki.admin.cert), key_file=str(pki.admin.key))
    assert keepalive.Getter(cfg).get("/x", timeout=5).status == 200
    assert srv.clients == [{"organizationName": "system:masters", "commonName": "topodra-admin"}]
    with pytest.raises((ssl.SSLError, ConnectionError, keepalive.ProtocolError)):
        keepalive.Getter(configuration(url, pki.ca.cert)).get("/x", timeout=5)


def test_the_ca_may_come_as_data(pki: ClusterPKI, tls: Callable[..., TlsServer]) -> None:
    """kubeconfig's certificate-authority-data reaches the configuration as ca_cert_data."""
    srv = tls()
    cfg = configuration(f"https://127.0.0.1:{srv.port}", None, ca_cert_data=pki.ca.cert.read_text())
    assert keepalive.Getter(cfg).get("/x", timeout=5).status == 200


def test_a_kept_connection_gets_without_changing_its_socket(
    pki: ClusterPKI, tls: Callable[..., TlsServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each system call of a thread lets the others take the interpreter lock, so a GET makes
    none it does not need: the kept connection's socket is made non-blocking once, when it is
    made, and no GET sets its timeout (which was two ioctl calls per GET). The answers, 1 MiB
    each so that TLS hands them over in many reads, come whole on the one connection."""
    body = bytes(range(256)) * 4096
    srv = tls(answer=b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    changes: list[str] = []
    for name in ("settimeout", "setblocking"):
        real = getattr(ssl.SSLSocket, name)

        def spy(sock: ssl.SSLSocket, value: Any, real: Any = real, name: str = name) -> None:
            changes.append(f"{name}({value})")
            real(sock, value)

        monkeypatch.setattr(ssl.SSLSocket, name, spy)
    getter = keepalive.Getter(configuration(f"https://127.0.0.1:{srv.port}", pki.ca.cert))
    assert getter.get("/first", timeout=5).data == body
    at_connect = list(changes)
    for i in range(20):
        assert getter.get(f"/x{i}", timeout=5).data == body
    assert changes == at_connect, "a GET on the kept connection changed its socket"
    assert len(srv.clients) == 1  # one connection, kept


def test_a_tls_server_that_answers_late_times_out_at_the_deadline(
    pki: ClusterPKI, tls: Callable[..., TlsServer]
) -> None:
    """The whole exchange is bounded by the call's timeout, waits included, on a kept
    connection as on a new one."""
    srv = tls(delay=0.0)
    getter = keepalive.Getter(configuration(f"https://127.0.0.1:{srv.port}", pki.ca.cert))
    assert getter.get("/warm", timeout=5).status == 200  # the connection is kept
    srv.delay = 3.0
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        getter.get("/late", timeout=0.3)
    assert 0.25 <= time.monotonic() - started < 2.0


def test_an_ascii_host_is_reached_without_the_idna_codec(
    pki: ClusterPKI, tls: Callable[..., TlsServer]
) -> None:
    """getaddrinfo and TLS get an ASCII host (an IP address as in-cluster, or a plain name) as
    bytes: as text, both would run the "idna" codec, whose first use loads encodings.idna,
    stringprep and unicodedata for the life of every driver process (about 0.2 MiB resident,
    docs/bench/latest.md).
    The names are still checked against the certificate (the tests above). A fresh interpreter,
    since this one may have loaded the codec already."""
    srv = tls()
    code = (
        # the client as a driver loads it (the whole `kubernetes` package would load the codec)
        "import sys; from topodra.common.kubeapi import keepalive, loader\n"
        "for host in sys.argv[2:]:\n"
        "    cfg = loader.load().Configuration(host=f'https://{host}:' + sys.argv[1])\n"
        f"    cfg.ssl_ca_cert = {str(pki.ca.cert)!r}\n"
        "    assert keepalive.Getter(cfg).get('/x', timeout=5).status == 200\n"
        "print(sorted(m for m in ('encodings.idna', 'stringprep', 'unicodedata') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(srv.port), "127.0.0.1", "localhost"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"
