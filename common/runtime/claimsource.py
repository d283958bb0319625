"""Where ResourceClaims come from: the API server, behind a one-method interface.

The kubelet sends only namespace/name/uid, so prepare must GET the claim. Plain dicts (the API's
own JSON, camelCase) keep the claim core independent of the client library's model classes and
let tests serve claims from a real kube-apiserver or a stand-in without changing the core.
"""

from __future__ import annotations

from typing import Any, Protocol
from urllib.parse import quote

from topodra.common import kube, kubehttp

GROUP = "resource.k8s.io"
VERSION = "v1"
PLURAL = "resourceclaims"


class ClaimNotFound(Exception):
    """The claim does not exist (HTTP 404): it was deleted."""


class ClaimSourceError(Exception):
    """The API could not answer (unreachable, timeout, 5xx, forbidden): retry later, drop nothing."""


class ClaimSource(Protocol):
    def get(self, namespace: str, name: str) -> dict[str, Any]:
        """The ResourceClaim as the API returns it; raises ClaimNotFound or ClaimSourceError."""
        ...


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

    def get(self, namespace: str, name: str) -> dict[str, Any]:
        what = f"GET ResourceClaim {namespace}/{name}"
        path = claim_path(namespace, name)
        try:
            if self._getter is not None:
                resp = self._getter.get(path, self._timeout)
            else:
                resp = kube.request(self._api, "GET", path, timeout=self._timeout)
        except Exception as e:  # urllib3 connection errors, timeouts, TLS: all mean "try later"
            raise ClaimSourceError(f"{what}: {type(e).__name__}: {e}") from e
        if resp.status == 404:
            raise ClaimNotFound(f"ResourceClaim {namespace}/{name} not found")
        if not resp.ok:
            raise ClaimSourceError(f"{what}: HTTP {resp.status} {resp.reason}".rstrip())
        try:
            obj: Any = resp.json()
        except ValueError as e:
            raise ClaimSourceError(f"{what}: answer is not JSON: {e}") from e
        if not isinstance(obj, dict):
            raise ClaimSourceError(f"{what}: answer is not an object")
        return obj


def kube_claim_source(kubeconfig: str | None, timeout: float = 10.0) -> KubeClaimSource:
    """From a kubeconfig path, or the in-cluster service account when none is given (with a
    connection pool big enough that concurrent GETs never pay a fresh TLS handshake)."""
    return KubeClaimSource(kube.new_api_client(kubeconfig), timeout)
