"""ResourceSlices (and the Node they belong to): the publisher's contact with the API server.

Objects travel as plain JSON dicts (the client's REST layer does transport, auth and TLS; we do
not round-trip through its generated models) so that what we compare and send is byte for byte
what the server returns and stores, including fields newer than the client's models. Every
failure becomes an `errors.ApiError` with the HTTP status (None for a network failure) and any
`Retry-After`, which is all the retry logic needs.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any, Protocol
from urllib.parse import quote

from topodra.common.kubeapi import rest
from topodra.common.kubeapi.errors import ApiError, NotFound

SLICES_PATH = "/apis/resource.k8s.io/v1/resourceslices"


class WatchStream(Protocol):
    def __iter__(self) -> Iterator[dict[str, Any]]: ...
    def stop(self) -> None: ...


class SliceApi(Protocol):
    """What the publisher needs from the API server; `KubeSliceApi` is the real one."""

    def get_node(self, name: str) -> dict[str, Any]: ...
    def list_slices(self, field_selector: str) -> tuple[list[dict[str, Any]], str]: ...
    def watch_slices(
        self, field_selector: str, resource_version: str, timeout_seconds: int
    ) -> WatchStream: ...
    def create_slice(self, body: Mapping[str, Any]) -> dict[str, Any]: ...
    def replace_slice(self, name: str, body: Mapping[str, Any]) -> dict[str, Any]: ...
    def delete_slice(self, name: str, uid: str, resource_version: str) -> None: ...


class KubeSliceApi:
    """SliceApi over a `loader.Connection` (or an `ApiClient`); counts accepted writes by verb."""

    def __init__(
        self, api_client: Any, *, field_manager: str = "topodra", request_timeout: float = 20.0
    ) -> None:
        self._client = api_client
        self._field_manager = field_manager
        self._timeout = request_timeout
        self._lock = threading.Lock()
        self.writes: Counter[str] = Counter()

    def get_node(self, name: str) -> dict[str, Any]:
        return self._call("get-node", "GET", f"/api/v1/nodes/{quote(name, safe='')}")

    def list_slices(self, field_selector: str) -> tuple[list[dict[str, Any]], str]:
        out = self._call("list", "GET", SLICES_PATH, query={"fieldSelector": field_selector})
        return list(out.get("items") or []), str((out.get("metadata") or {}).get("resourceVersion", ""))

    def watch_slices(self, field_selector: str, resource_version: str, timeout_seconds: int) -> WatchStream:
        return _KubeWatch(self._client, field_selector, resource_version, timeout_seconds)

    def create_slice(self, body: Mapping[str, Any]) -> dict[str, Any]:
        query = {"fieldManager": self._field_manager}
        out = self._call("create", "POST", SLICES_PATH, body=body, query=query)
        self._count("create")
        return out

    def replace_slice(self, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        path = f"{SLICES_PATH}/{quote(name, safe='')}"
        out = self._call("update", "PUT", path, body=body, query={"fieldManager": self._field_manager})
        self._count("update")
        return out

    def delete_slice(self, name: str, uid: str, resource_version: str) -> None:
        preconditions = {k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v}
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": preconditions}
        try:
            self._call("delete", "DELETE", f"{SLICES_PATH}/{quote(name, safe='')}", body=body, named=name)
        except NotFound:
            return  # already gone: the goal of a delete
        self._count("delete")

    def _count(self, verb: str) -> None:
        with self._lock:
            self.writes[verb] += 1

    def _call(
        self,
        verb: str,
        method: str,
        path: str,
        *,
        body: Mapping[str, Any] | None = None,
        query: Mapping[str, str] | None = None,
        named: str | None = None,
    ) -> dict[str, Any]:
        """One call; `named`: the slice the call is about (a NotFound naming it is `NotFound`)."""
        try:
            resp = rest.request(
                self._client,
                method,
                path,
                query=query,
                body=dict(body) if body is not None else None,
                timeout=self._timeout,
            )
        except Exception as err:
            raise rest.as_api_error(verb, err) from err
        if not resp.ok:
            raise rest.error_for(verb, resp, ("resourceslices", named, "resource.k8s.io") if named else None)
        result: dict[str, Any] = json.loads(resp.data) if resp.data else {}
        return result


class _KubeWatch:
    """One watch request for ResourceSlices, yielding raw event dicts (see `rest.WatchEvents`)."""

    def __init__(self, client: Any, field_selector: str, resource_version: str, timeout_seconds: int) -> None:
        # a raw GET, not ResourceV1Api.list_resource_slice: the generated API class imports ~60
        # model classes and builds validators for all its methods (~5 MiB of a driver's RSS)
        query = {
            "fieldSelector": field_selector,
            "resourceVersion": resource_version,
            "timeoutSeconds": str(timeout_seconds),
            "allowWatchBookmarks": "true",
        }
        self._events = rest.WatchEvents(client, SLICES_PATH, query, (10, timeout_seconds + 15))

    def __iter__(self) -> Iterator[dict[str, Any]]:
        try:
            yield from self._events
        except ApiError:
            raise
        except Exception as err:
            raise rest.as_api_error("watch", err) from err

    def stop(self) -> None:
        self._events.stop()
