"""Where ResourceClaims come from: the API server, behind a one-method interface.

The kubelet sends only namespace/name/uid, so prepare must GET the claim. Plain dicts (the API's
own JSON, camelCase) keep the claim core independent of the client library's model classes and
let tests serve claims from a real kube-apiserver or a stand-in without changing the core.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

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


class KubeClaimSource:
    """GET `resource.k8s.io/v1` resourceclaims with the official client.

    CustomObjectsApi returns the JSON as dicts, which is exactly what the core wants; the typed
    ResourceV1Api would only be converted back.
    """

    def __init__(self, api_client: Any, timeout: float = 10.0) -> None:
        from kubernetes import client

        self._api = client.CustomObjectsApi(api_client)
        self._timeout = timeout

    def get(self, namespace: str, name: str) -> dict[str, Any]:
        from kubernetes.client.exceptions import ApiException

        try:
            # raw body + json.loads: the client's own deserialization costs more than the GET
            resp: Any = self._api.get_namespaced_custom_object(
                GROUP,
                VERSION,
                namespace,
                PLURAL,
                name,
                _request_timeout=self._timeout,
                _preload_content=False,
            )
            obj: Any = json.loads(resp.data)
        except ApiException as e:
            if e.status == 404:
                raise ClaimNotFound(f"ResourceClaim {namespace}/{name} not found") from e
            raise ClaimSourceError(
                f"GET ResourceClaim {namespace}/{name}: HTTP {e.status} {e.reason or ''}".rstrip()
            ) from e
        except ValueError as e:
            raise ClaimSourceError(f"GET ResourceClaim {namespace}/{name}: answer is not JSON: {e}") from e
        except Exception as e:  # urllib3 connection errors, timeouts, TLS: all mean "try later"
            raise ClaimSourceError(f"GET ResourceClaim {namespace}/{name}: {type(e).__name__}: {e}") from e
        if not isinstance(obj, dict):
            raise ClaimSourceError(f"GET ResourceClaim {namespace}/{name}: answer is not an object")
        return obj


def kube_claim_source(kubeconfig: str | None, timeout: float = 10.0) -> KubeClaimSource:
    """From a kubeconfig path, or the in-cluster service account when none is given."""
    from kubernetes import client, config

    cfg = client.Configuration()
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)  # type: ignore[no-untyped-call]
    else:
        config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
    # concurrent prepares GET in parallel: keep enough kept-alive connections that none pays a
    # fresh TLS handshake (urllib3 drops connections beyond the pool size)
    cfg.connection_pool_maxsize = max(cfg.connection_pool_maxsize or 0, 64)
    return KubeClaimSource(client.ApiClient(cfg), timeout)
