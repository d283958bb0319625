"""ResourceClaims (`resource.k8s.io/v1`): the GET of prepare and reconcile, and the status update.

The kubelet sends only namespace/name/uid, so prepare must GET the claim. The answer is the
API's own JSON (a dict described by `types.ResourceClaim`), which keeps the claim core free of
the client's model classes and lets tests serve claims from a real kube-apiserver or a stand-in.
The GET goes over keepalive's kept-alive connections (half the CPU of the official client's
path, on every prepare), or through `rest` when the configuration needs what only the official
client does (see `keepalive.for_configuration`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Protocol, cast
from urllib.parse import quote

from topodra.common.kubeapi import keepalive, loader, rest
from topodra.common.kubeapi.errors import ApiError, Unusable
from topodra.common.kubeapi.types import ResourceClaim

GROUP = "resource.k8s.io"
VERSION = "v1"
PLURAL = "resourceclaims"


def claim_path(namespace: str, name: str) -> str:
    return f"/apis/{GROUP}/{VERSION}/namespaces/{quote(namespace, safe='')}/{PLURAL}/{quote(name, safe='')}"


def is_claim_not_found(status: int, body: bytes, name: str) -> bool:
    """The API server's own NotFound for ResourceClaim `name` (see `rest.is_not_found`)."""
    return rest.is_not_found(status, body, PLURAL, name, GROUP)


def parse_claim(what: str, data: bytes) -> ResourceClaim:
    """The claim in an answer's body; `Unusable` when the body cannot be one."""
    try:
        obj: Any = json.loads(data)
    except ValueError as e:
        raise Unusable(what, 200, f"answer is not JSON: {str(e)[:200]}") from e
    except RecursionError as e:  # the API server accepts deeper nesting than json.loads follows
        raise Unusable(what, 200, "answer is nested too deeply to read") from e
    if not isinstance(obj, dict):
        raise Unusable(what, 200, "answer is not an object")
    return cast(ResourceClaim, obj)


class ClaimSource(Protocol):
    """Where the claim core gets claims from; `KubeClaimSource` is the real one, tests serve
    claims from memory or a file behind the same method."""

    def get(self, namespace: str, name: str, *, cached: bool = False) -> ResourceClaim:
        """The claim as the API returns it; raises `NotFound`, `Unusable` or `ApiError`.

        `cached`: the API server may answer from its watch cache (`resourceVersion=0`: no etcd
        read, possibly a little behind). Prepare reads from etcd (a quorum read); reconcile reads
        the cache and confirms with a quorum read whatever would make it act."""
        ...


class KubeClaimSource:
    """GET ResourceClaims with the official client's configuration (see the module docstring).

    Raises `NotFound` only on the API server's NotFound for that claim, `Unusable` for a body
    that cannot be a claim, and `ApiError` for everything else (retry later, drop nothing)."""

    def __init__(self, api_client: Any, timeout: float = 10.0) -> None:
        self._api = api_client
        self._timeout = timeout
        self._getter = keepalive.for_configuration(api_client.configuration)

    def get(self, namespace: str, name: str, *, cached: bool = False) -> ResourceClaim:
        """`cached`: the API server may answer from its watch cache (`resourceVersion=0`: no
        etcd read, possibly a little behind); else a quorum read."""
        what = f"GET ResourceClaim {namespace}/{name}"
        path = claim_path(namespace, name) + ("?resourceVersion=0" if cached else "")
        try:
            if self._getter is not None:
                resp = self._getter.get(path, self._timeout)
            else:
                resp = rest.request(self._api, "GET", path, timeout=self._timeout)
        except Exception as e:  # urllib3 connection errors, timeouts, TLS: all mean "try later"
            raise ApiError(what, None, f"{type(e).__name__}: {e}") from e
        if not resp.ok:
            raise rest.error_for(what, resp, (PLURAL, name, GROUP))
        return parse_claim(what, resp.data)


class ClaimStatusApi:
    """The two calls of a read-modify-write of `status` (resourceclaims/status: get, update)."""

    def __init__(self, api_client: Any, timeout: float = 10.0) -> None:
        self._api = api_client
        self._timeout = timeout

    def read(self, namespace: str, name: str) -> ResourceClaim:
        what = f"GET ResourceClaim {namespace}/{name}"
        try:
            resp = rest.request(self._api, "GET", claim_path(namespace, name), timeout=self._timeout)
        except Exception as e:
            raise ApiError(what, None, f"{type(e).__name__}: {e}") from e
        if not resp.ok:
            raise rest.error_for(what, resp, (PLURAL, name, GROUP))
        return parse_claim(what, resp.data)

    def replace_status(self, namespace: str, name: str, body: Mapping[str, Any]) -> None:
        """PUT the status subresource; `Conflict` when someone wrote in between (the body's
        resourceVersion is no longer the claim's), `NotFound` when the claim is gone."""
        what = f"update status of ResourceClaim {namespace}/{name}"
        path = f"{claim_path(namespace, name)}/status"
        try:
            resp = rest.request(self._api, "PUT", path, body=dict(body), timeout=self._timeout)
        except Exception as e:
            raise ApiError(what, None, f"{type(e).__name__}: {e}") from e
        if not resp.ok:
            raise rest.error_for(what, resp, (PLURAL, name, GROUP))


def kube_claim_source(kubeconfig: str | None, timeout: float = 10.0) -> KubeClaimSource:
    """From a kubeconfig path, or the in-cluster service account when none is given (with a
    connection pool big enough that concurrent GETs never pay a fresh TLS handshake)."""
    return KubeClaimSource(loader.new_api_client(kubeconfig), timeout)
