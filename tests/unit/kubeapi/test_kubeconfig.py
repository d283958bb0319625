"""topodra.common.kubeapi.kubeconfig: a plain kubeconfig read as the official loader reads it,
anything else left to the official loader.

Each plain kubeconfig is loaded both ways, by `kubeconfig.apply` and by the official
`load_kube_config`, and what the two configurations make the client do is compared: the URL, the
CA it trusts (file or data, compared by content), the client certificate, the verify flag, the
TLS server name, the proxy and the credentials the client sends.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import certifi
import pytest
import yaml
from kubernetes.client import Configuration
from kubernetes.config.config_exception import ConfigException
from kubernetes.config.kube_config import load_kube_config
from topodra.common.kubeapi import kubeconfig, loader

CA_PEM = Path(certifi.where()).read_text()
HTTPS = "https://127.0.0.1:6443"


def write(folder: Path, cluster: dict[str, Any], user: dict[str, Any] | None, **extra: Any) -> Path:
    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "other", "cluster": {"server": "https://other:1"}},
            {"name": "c", "cluster": cluster},
        ],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    if user is not None:
        doc["users"] = [{"name": "u", "user": user}]
    doc |= extra
    path = folder / "config" / "kubeconfig"
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump(doc))
    return path


def effect(cfg: Configuration) -> dict[str, Any]:
    """What the configuration makes the client do, independent of how the CA was handed over."""
    ca = None
    if cfg.ssl_ca_cert:
        ca = Path(cfg.ssl_ca_cert).read_text()
    elif cfg.ca_cert_data:
        ca = cfg.ca_cert_data
    headers = {s["key"]: s["value"] for s in cfg.auth_settings().values() if s.get("value")}
    return {
        "host": cfg.host,
        "ca": ca,
        "cert_file": cfg.cert_file,
        "key_file": cfg.key_file,
        "verify_ssl": cfg.verify_ssl,
        "tls_server_name": cfg.tls_server_name,
        "proxy": cfg.proxy,
        "headers": headers,
    }


def both_ways(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    ours = Configuration()
    assert kubeconfig.apply(str(path), ours) is True
    official = Configuration()
    load_kube_config(config_file=str(path), client_configuration=official, persist_config=False)
    return effect(ours), effect(official)


def files(folder: Path) -> dict[str, Path]:
    (folder / "config").mkdir(exist_ok=True)
    out = {"ca": folder / "config" / "ca.crt", "cert": folder / "client.crt", "key": folder / "client.key"}
    out["ca"].write_text(CA_PEM)
    out["cert"].write_text("certificate\n")
    out["key"].write_text("key\n")
    (folder / "config" / "token").write_text("file-token")
    return out


PLAIN: dict[str, tuple[dict[str, Any], dict[str, Any] | None]] = {
    "token, CA file relative to the kubeconfig, server with a trailing slash": (
        {"server": "https://127.0.0.1:6443/", "certificate-authority": "ca.crt"},
        {"token": "abc"},
    ),
    "tokenFile relative to the kubeconfig": (
        {"server": "https://127.0.0.1:6443", "certificate-authority": "ca.crt"},
        {"tokenFile": "token"},
    ),
    "token beats tokenFile": (
        {"server": "https://127.0.0.1:6443", "certificate-authority": "ca.crt"},
        {"token": "abc", "tokenFile": "token"},
    ),
    "CA data, insecure, TLS server name, proxy": (
        {
            "server": "https://api.example:443",
            "certificate-authority-data": base64.b64encode(CA_PEM.encode()).decode(),
            "insecure-skip-tls-verify": True,
            "tls-server-name": "kubernetes.default",
            "proxy-url": "http://proxy:3128",
        },
        {"token": "abc"},
    ),
    "client certificate and key as files": (
        {"server": "https://127.0.0.1:6443", "certificate-authority": "ca.crt"},
        {"client-certificate": "../client.crt", "client-key": "../client.key"},
    ),
    "plain http, no user section": ({"server": "http://127.0.0.1:8080"}, None),
    "empty token: no credentials": ({"server": "http://127.0.0.1:8080"}, {"token": ""}),
}


@pytest.mark.parametrize("case", list(PLAIN))
def test_a_plain_kubeconfig_sets_what_the_official_loader_sets(tmp_path: Path, case: str) -> None:
    files(tmp_path)
    cluster, user = PLAIN[case]
    ours, official = both_ways(write(tmp_path, cluster, user))
    assert ours == official
    assert ours["host"] != Configuration().host


def test_a_context_whose_user_is_not_listed_has_no_credentials_either_way(tmp_path: Path) -> None:
    files(tmp_path)
    path = write(tmp_path, {"server": HTTPS, "certificate-authority": "ca.crt"}, {"token": "t"})
    doc = yaml.safe_load(path.read_text())
    doc["contexts"][0]["context"]["user"] = "nobody"
    path.write_text(yaml.safe_dump(doc))
    ours, official = both_ways(path)
    assert ours == official
    assert ours["headers"] == {}


OFFICIAL_ONLY: dict[str, tuple[dict[str, Any], dict[str, Any] | None]] = {
    "exec plugin": (
        {"server": "https://127.0.0.1:6443"},
        {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "true"}},
    ),
    "auth provider": ({"server": "https://127.0.0.1:6443"}, {"auth-provider": {"name": "oidc"}}),
    "username and password": ({"server": "https://127.0.0.1:6443"}, {"username": "a", "password": "b"}),
    "client certificate data": (
        {"server": "https://127.0.0.1:6443", "certificate-authority": "ca.crt"},
        {"client-certificate-data": "Y2VydA==", "client-key-data": "a2V5"},
    ),
    "impersonation (a field this reader does not know)": ({"server": HTTPS}, {"as": "admin"}),
    "a CA file that is not there": ({"server": HTTPS, "certificate-authority": "nope.crt"}, None),
    "CA data that is not base64 PEM": ({"server": HTTPS, "certificate-authority-data": "!!"}, None),
}


@pytest.mark.parametrize("case", list(OFFICIAL_ONLY))
def test_anything_else_is_left_to_the_official_loader_untouched(tmp_path: Path, case: str) -> None:
    files(tmp_path)
    cluster, user = OFFICIAL_ONLY[case]
    cfg = Configuration()
    before = dict(vars(cfg))
    assert kubeconfig.apply(str(write(tmp_path, cluster, user)), cfg) is False
    assert {k: v for k, v in vars(cfg).items() if k != "logger"} == {
        k: v for k, v in before.items() if k != "logger"
    }


@pytest.mark.parametrize(
    "text",
    [
        "not: [valid",
        json.dumps({"clusters": [], "contexts": []}),
        json.dumps({"current-context": "x", "contexts": [{"name": "x", "context": {"cluster": "c"}}] * 2}),
        "- a list",
    ],
)
def test_malformed_files_are_left_to_the_official_loader(tmp_path: Path, text: str) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(text)
    assert kubeconfig.apply(str(path), Configuration()) is False


def test_a_list_of_files_is_left_to_the_official_loader(tmp_path: Path) -> None:
    files(tmp_path)
    path = write(tmp_path, {"server": "http://127.0.0.1:8080"}, None)
    assert kubeconfig.apply(f"{path}:{path}", Configuration()) is False


def test_new_api_client_still_loads_what_only_the_official_loader_reads(tmp_path: Path) -> None:
    """Client certificate data: the official loader writes it to a file the client can load."""
    files(tmp_path)
    cluster, user = OFFICIAL_ONLY["client certificate data"]
    api = loader.new_api_client(str(write(tmp_path, cluster, user)))
    assert Path(api.configuration.cert_file).read_bytes() == b"cert"
    assert api.configuration.host == "https://127.0.0.1:6443"


def test_new_api_client_keeps_the_official_loaders_errors(tmp_path: Path) -> None:
    files(tmp_path)
    cluster, user = OFFICIAL_ONLY["a CA file that is not there"]
    with pytest.raises(ConfigException, match="File does not exist"):
        loader.new_api_client(str(write(tmp_path, cluster, user)))
