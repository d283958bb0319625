"""Where ResourceClaims come from: the API server, behind a one-method interface.

The kubelet sends only namespace/name/uid, so prepare must GET the claim. Plain dicts (the API's
own JSON, camelCase) keep the claim core independent of the client library's model classes and
let tests serve claims from a real kube-apiserver or a stand-in without changing the core.
"""

from __future__ import annotations

import json
from typing import Any, Protocol
from urllib.parse import quote

from topodra.common import kube, kubehttp

GROUP = "resource.k8s.io"
VERSION = "v1"
PLURAL = "resourceclaims"


class ClaimNotFound(Exception):
    """The API server said that this very claim does not exist (see `is_claim_not_found`)."""


class ClaimSourceError(Exception):
    """The API could not answer (unreachable, timeout, 5xx, forbidden, a 404 that is not the API
    server's word on this claim): retry later, drop nothing."""


class ClaimUnusable(ClaimSourceError):
    """The API answered, but with a body this driver cannot use (not JSON, nested deeper than a
    parser follows, not an object): an error of that claim alone, which no retry will fix."""


class ClaimSource(Protocol):
    def get(self, namespace: str, name: str, *, cached: bool = False) -> dict[str, Any]:
        """The ResourceClaim as the API returns it; raises ClaimNotFound or ClaimSourceError.

        `cached`: the API server may answer from its watch cache (`resourceVersion=0`: no etcd
        read, possibly a little behind). Prepare reads from etcd (a quorum read); reconcile reads
        the cache and confirms with a quorum read whatever would make it act."""
        ...


def is_claim_not_found(status: int, body: bytes, name: str) -> bool:
    """True only for the API server's own answer that ResourceClaim `name` does not exist: a 404
    whose body is a `Status` with `reason: NotFound` naming resource `resourceclaims` (group
    resource.k8s.io) and this name. A proxy's or load balancer's plain-text 404, and the empty
    NotFound of an API server that does not serve resource.k8s.io/v1, name no claim: they say
    nothing about whether it exists."""
    if status != 404:
        return False
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        return False
    if not isinstance(doc, dict) or doc.get("kind") != "Status" or doc.get("reason") != "NotFound":
        return False
    details = doc.get("details")
    return (
        isinstance(details, dict)
        and details.get("kind") == PLURAL
        and details.get("group", GROUP) == GROUP
        and details.get("name") == name
    )


def claim_path(namespace: str, name: str) -> str:
    return f"/apis/{GROUP}/{VERSION}/namespaces/{quote(namespace, safe='')}/{PLURAL}/{quote(name, safe='')}"


class KubeClaimSource:
    """GET `resource.k8s.io/v1` resourceclaims with the official client's configuration.

    A raw GET whose body is json.loads'ed: the claim core wants the API's JSON, and the
    client's generated API classes and model deserialization would cost more than the GET
    itself (see topodra.common.kube). The GET goes over kubehttp's kept-alive connections
    (half the CPU of the ApiClient's path, on every prepare), or through the ApiClient when the
    configuration needs what only the official client does (see kubehttp.for_configuration).
    """

    def __init__(self, api_client: Any, timeout: float = 10.0) -> None:
        self._api = api_client
        self._timeout = timeout
        self._getter = kubehttp.for_configuration(api_client.configuration)

    def get(self, namespace: str, name: str, *, cached: bool = False) -> dict[str, Any]:
        what = f"GET ResourceClaim {namespace}/{name}"
        path = claim_path(namespace, name) + ("?resourceVersion=0" if cached else "")
        try:
            if self._getter is not None:
                resp = self._getter.get(path, self._timeout)
            else:
                resp = kube.request(self._api, "GET", path, timeout=self._timeout)
        except Exception as e:  # urllib3 connection errors, timeouts, TLS: all mean "try later"
            raise ClaimSourceError(f"{what}: {type(e).__name__}: {e}") from e
        if is_claim_not_found(resp.status, resp.data, name):
            raise ClaimNotFound(f"ResourceClaim {namespace}/{name} not found")
        if not resp.ok:
            detail = " (not the API server's NotFound for this claim)" if resp.status == 404 else ""
            raise ClaimSourceError(f"{what}: HTTP {resp.status} {resp.reason}{detail}".rstrip())
        try:
            obj: Any = resp.json()
        except ValueError as e:
            raise ClaimUnusable(f"{what}: answer is not JSON: {str(e)[:200]}") from e
        except RecursionError as e:  # the API server accepts deeper nesting than json.loads follows
            raise ClaimUnusable(f"{what}: answer is nested too deeply to read") from e
        if not isinstance(obj, dict):
            raise ClaimUnusable(f"{what}: answer is not an object")
        return obj


def kube_claim_source(kubeconfig: str | None, timeout: float = 10.0) -> KubeClaimSource:
    """From a kubeconfig path, or the in-cluster service account when none is given (with a
    connection pool big enough that concurrent GETs never pay a fresh TLS handshake)."""
    return KubeClaimSource(kube.new_api_client(kubeconfig), timeout)
