"""A driver's kubeconfig, read without the official client's kubeconfig loader when it can be.

Why: `kubernetes.config.kube_config` imports the client's whole `ApiClient` (pydantic,
dateutil, a multiprocessing pool), requests, oauthlib and google-auth hooks for auth providers
and exec plugins: 13 MiB of RSS and ~250 modules in every driver process started with
--kubeconfig, measured on the benchmark machine (hack/bench-peer compares the drivers' RSS with
a Go peer's). A driver's kubeconfig is nearly always plain: one context, a server, a CA and a
token or a client certificate.

`apply` sets exactly what the official loader (`KubeConfigLoader.load_and_set`) sets on the
client's `Configuration` for such a file: the host without its trailing '/', for https the CA
file (or its PEM data), the client certificate and key files, the verify flag from
insecure-skip-tls-verify, the TLS server name, the proxy URL and `Bearer <token>` (token, or the
content of tokenFile). Relative paths are taken from the kubeconfig's folder, as that loader
does. Anything else (an auth provider, an exec plugin, a username and password, certificate or
key data, a list of files, a field this reader does not know, any structural problem) makes
`apply` answer False without touching the configuration: the caller then hands the file to the
official loader, which does all of it and words the errors, so no kubeconfig that worked before
stops working or gets other errors.
"""

from __future__ import annotations

import base64
import binascii
import os
from typing import Any

# the fields read here; any other field of the current cluster or user goes to the official loader
CLUSTER_FIELDS = frozenset(
    {"server", "certificate-authority", "certificate-authority-data", "insecure-skip-tls-verify"}
    | {"tls-server-name", "proxy-url"}
)
USER_FIELDS = frozenset({"token", "tokenFile", "client-certificate", "client-key"})


def apply(path: str, configuration: Any) -> bool:
    """Set `configuration` from the kubeconfig at `path` as the official loader would; False
    (the configuration untouched) when the file needs the official loader (see the docstring)."""
    if os.pathsep in path:
        return False  # a list of files to merge
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    settings = _settings(doc, os.path.dirname(os.path.abspath(path)))
    if settings is None:
        return False
    token = settings.pop("token", None)
    for key, value in settings.items():
        setattr(configuration, key, value)
    if token is not None:
        configuration.api_key["BearerToken"] = token
    return True


def _entries(doc: dict[str, Any], section: str, name: Any) -> list[dict[str, Any]] | None:
    """The entries of `section` called `name`; None when the section is not a list of named
    mappings (the official loader refuses such a file)."""
    entries = doc.get(section)
    if not isinstance(entries, list) or not all(isinstance(e, dict) and "name" in e for e in entries):
        return None
    return [e for e in entries if e["name"] == name]


def _one(doc: dict[str, Any], section: str, name: Any, field: str) -> dict[str, Any] | None:
    """The `field` mapping of the one entry of `section` called `name`; None unless exactly one."""
    found = _entries(doc, section, name)
    if found is None or len(found) != 1 or not isinstance(found[0].get(field), dict):
        return None
    value: dict[str, Any] = found[0][field]
    return value


def _settings(doc: Any, base: str) -> dict[str, Any] | None:
    """Configuration attribute -> value for a plain kubeconfig, plus "token"; None otherwise."""
    if not isinstance(doc, dict):
        return None
    context = _one(doc, "contexts", doc.get("current-context"), "context")
    if context is None:
        return None
    cluster = _one(doc, "clusters", context.get("cluster"), "cluster")
    user: dict[str, Any] | None = {}  # no user (or none of that name): no credentials, as there
    if context.get("user") and doc.get("users"):
        users = _entries(doc, "users", context["user"])
        if users is None or len(users) > 1:
            return None
        if users:
            user = _one(doc, "users", context["user"], "user")
    if cluster is None or user is None:
        return None
    if not set(cluster) <= CLUSTER_FIELDS or not set(user) <= USER_FIELDS:
        return None
    if not all(isinstance(v, str) for v in user.values()):
        return None
    out: dict[str, Any] = {}
    if user.get("token"):
        out["token"] = f"Bearer {user['token']}"
    elif "token" not in user and user.get("tokenFile"):
        try:
            with open(os.path.normpath(os.path.join(base, user["tokenFile"])), encoding="utf-8") as f:
                content = f.read()
        except (OSError, UnicodeDecodeError):
            return None
        if content:
            out["token"] = f"Bearer {content}"
    server = cluster.get("server")
    if server is not None:
        if not isinstance(server, str):
            return None
        out["host"] = server.rstrip("/")
        if out["host"].startswith("https"):
            tls = _tls_files(cluster, user, base)
            if tls is None:
                return None
            out |= tls
    for field, attr in (("tls-server-name", "tls_server_name"), ("proxy-url", "proxy")):
        if field in cluster:
            out[attr] = cluster[field]
    if "insecure-skip-tls-verify" in cluster:
        out["verify_ssl"] = not cluster["insecure-skip-tls-verify"]
    return out


def _tls_files(cluster: dict[str, Any], user: dict[str, Any], base: str) -> dict[str, Any] | None:
    """ssl_ca_cert / ca_cert_data, cert_file and key_file of an https cluster; None when a named
    file is missing or the CA data is not base64 PEM (the official loader words those errors)."""
    out: dict[str, Any] = {}
    if "certificate-authority-data" in cluster:
        data = cluster["certificate-authority-data"]
        try:
            pem = base64.standard_b64decode(data).decode("ascii") if isinstance(data, str) else ""
        except (binascii.Error, UnicodeDecodeError):
            return None
        if "-----BEGIN" not in pem:
            return None
        out["ca_cert_data"] = pem
    elif "certificate-authority" in cluster:
        out["ssl_ca_cert"] = _existing(cluster["certificate-authority"], base)
    for field, attr in (("client-certificate", "cert_file"), ("client-key", "key_file")):
        if field in user:
            out[attr] = _existing(user[field], base)
    if any(v is None for v in out.values()):
        return None
    return out


def _existing(name: Any, base: str) -> str | None:
    if not isinstance(name, str):
        return None
    path = os.path.normpath(os.path.join(base, name))
    return path if os.path.isfile(path) else None
