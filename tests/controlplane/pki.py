"""Per-run certificates and keys for the test control plane, made with the openssl CLI.

Every run gets a fresh CA, serving certificate, client certificates and service-account signing
key, so tokens and certificates from an earlier run (or another helper's cluster) never validate.
ECDSA P-256 keeps generation to a few milliseconds; the apiserver accepts it for TLS and for
signing service-account tokens (ES256).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

_DAYS = "7"


class PKIError(RuntimeError):
    """openssl is missing or refused to make a key or certificate."""


@dataclass(frozen=True)
class KeyPair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class ClusterPKI:
    """Paths of everything the components and clients need."""

    ca: KeyPair
    apiserver: KeyPair
    admin: KeyPair
    scheduler: KeyPair
    controller_manager: KeyPair
    sa_private_key: Path
    sa_public_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    exe = shutil.which("openssl")
    if exe is None:
        raise PKIError("openssl is not installed: the control-plane tier makes its certificates with it")
    done = subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise PKIError(f"openssl {args[0]} failed: {done.stderr.strip()}")


def _ec_key(path: Path) -> None:
    _openssl(
        "genpkey",
        "-algorithm",
        "EC",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-out",
        str(path),
        cwd=path.parent,
    )


def _make_ca(folder: Path) -> KeyPair:
    pair = KeyPair(folder / "ca.crt", folder / "ca.key")
    _ec_key(pair.key)
    _openssl(
        "req", "-x509", "-new", "-key", str(pair.key), "-out", str(pair.cert), "-days", _DAYS,
        "-subj", "/CN=topodra-test-ca",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=folder,
    )  # fmt: skip
    return pair


def _make_leaf(folder: Path, ca: KeyPair, name: str, subject: str, extensions: list[str]) -> KeyPair:
    pair = KeyPair(folder / f"{name}.crt", folder / f"{name}.key")
    csr = folder / f"{name}.csr"
    ext = folder / f"{name}.ext"
    _ec_key(pair.key)
    _openssl("req", "-new", "-key", str(pair.key), "-out", str(csr), "-subj", subject, cwd=folder)
    ext.write_text("\n".join(["basicConstraints=critical,CA:FALSE", *extensions]) + "\n")
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(ca.cert), "-CAkey", str(ca.key),
        "-CAcreateserial", "-out", str(pair.cert), "-days", _DAYS, "-extfile", str(ext),
        cwd=folder,
    )  # fmt: skip
    csr.unlink()
    ext.unlink()
    return pair


def _client(folder: Path, ca: KeyPair, name: str, subject: str) -> KeyPair:
    usage = ["keyUsage=critical,digitalSignature", "extendedKeyUsage=clientAuth"]
    return _make_leaf(folder, ca, name, subject, usage)


def node_client_certificate(folder: Path, ca: KeyPair, node_name: str) -> KeyPair:
    """A kubelet's client certificate: the Node authorizer and NodeRestriction know it by its
    name `system:node:<node>` in group `system:nodes`."""
    folder.mkdir(parents=True, exist_ok=True)
    return _client(folder, ca, "kubelet-client", f"/O=system:nodes/CN=system:node:{node_name}")


def make_cluster_pki(folder: Path, extra_ips: Iterable[str] = ()) -> ClusterPKI:
    """Creates the CA, the apiserver's serving cert for loopback, and one client cert per user.

    The scheduler and controller-manager authenticate as the users the bootstrap RBAC policy
    binds (system:kube-scheduler, system:kube-controller-manager), so the stock roles are used.
    """
    folder.mkdir(parents=True, exist_ok=True)
    ca = _make_ca(folder)
    ips = [f"IP:{ip}" for ip in dict.fromkeys(["127.0.0.1", "10.0.0.1", *extra_ips])]
    names = ["DNS:localhost", "DNS:kubernetes", "DNS:kubernetes.default.svc"]
    sans = "subjectAltName=" + ",".join(ips + names)
    serving = ["keyUsage=critical,digitalSignature", "extendedKeyUsage=serverAuth", sans]
    apiserver = _make_leaf(folder, ca, "apiserver", "/CN=kube-apiserver", serving)
    admin = _client(folder, ca, "admin", "/O=system:masters/CN=topodra-admin")
    scheduler = _client(folder, ca, "scheduler", "/CN=system:kube-scheduler")
    kcm = _client(folder, ca, "controller-manager", "/CN=system:kube-controller-manager")
    sa_key = folder / "sa.key"
    sa_pub = folder / "sa.pub"
    _ec_key(sa_key)
    _openssl("pkey", "-in", str(sa_key), "-pubout", "-out", str(sa_pub), cwd=folder)
    return ClusterPKI(ca, apiserver, admin, scheduler, kcm, sa_key, sa_pub)
