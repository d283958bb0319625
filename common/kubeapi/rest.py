"""One raw JSON call through the official client's ApiClient, and watch streams.

The generated API classes (CustomObjectsApi, ResourceV1Api, ...) cost memory and time for
nothing we use: importing one builds pydantic validators for all of its methods (and imports
the model classes their signatures name), and every call is validated again. The ApiClient's
own `param_serialize` + `call_api` do everything that matters (host, auth including token
refresh, TLS, connection pool, timeouts), and the body stays the API's JSON.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from topodra.common.kubeapi import loader
from topodra.common.kubeapi.errors import ApiError, Conflict, NotFound


@dataclass(frozen=True, slots=True)
class Response:
    """An HTTP answer, whatever its status (HTTP errors are answers, not exceptions here)."""

    status: int
    reason: str
    headers: Mapping[str, str]
    data: bytes

    @property
    def ok(self) -> bool:
        return 200 <= self.status <= 299

    def json(self) -> Any:
        """The body as JSON (ValueError when it is not)."""
        return json.loads(self.data)

    def message(self) -> str:
        """The API's `Status.message` when the body is one, else the start of the body."""
        text = self.data.decode("utf-8", "replace")
        try:
            status = json.loads(text)
        except ValueError:
            return text[:500]
        if isinstance(status, dict) and status.get("message"):
            return str(status["message"])[:2000]
        return text[:500]


def _send(
    api_client: Any,
    method: str,
    path: str,
    query: Mapping[str, str] | None,
    body: Any,
    timeout: float | tuple[float, float] | None,
) -> Any:
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = "application/json"
    params = api_client.param_serialize(
        method=method,
        resource_path=path,
        query_params=list((query or {}).items()),
        header_params=headers,
        body=body,
        auth_settings=["BearerToken"],
    )
    return api_client.call_api(*params, _request_timeout=timeout)


def request(
    api_client: Any,
    method: str,
    path: str,
    *,
    query: Mapping[str, str] | None = None,
    body: Any = None,
    timeout: float | tuple[float, float] | None = None,
) -> Response:
    """One API call (`path` from `/api` or `/apis`, already quoted), the whole body read.
    Raises only for transport failures (unreachable, TLS, timeout)."""
    resp = _send(api_client, method, path, query, body, timeout)
    data = resp.read()
    return Response(resp.status, resp.reason or "", resp.headers, data or b"")


def open_stream(
    api_client: Any,
    path: str,
    *,
    query: Mapping[str, str] | None = None,
    timeout: float | tuple[float, float] | None = None,
) -> Any:
    """A GET whose body is left unread: the urllib3 response, as `kubernetes.watch.Watch`
    expects from a list function called with `_preload_content=False`."""
    return _send(api_client, "GET", path, query, None, timeout).response


def new_watch() -> Any:
    """A `kubernetes.watch.Watch` (streams the events of a list function such as one calling
    `open_stream`)."""
    loader.load()
    from kubernetes.watch import Watch

    return Watch()  # type: ignore[no-untyped-call]


# --- answers into errors --------------------------------------------------------------------


def is_not_found(status: int, body: bytes | str | None, plural: str, name: str, group: str = "") -> bool:
    """True only for the API server's own answer that object `name` of resource `plural` (in API
    group `group`, "" for the core group) does not exist: a 404 whose body is a `Status` with
    `reason: NotFound` naming that resource and name. A proxy's or load balancer's plain-text
    404, and the empty NotFound of an API server that does not serve the group, name nothing:
    they say nothing about whether the object exists."""
    if status != 404 or not body:
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
        and details.get("kind") == plural
        and details.get("group", "") == group
        and details.get("name") == name
    )


def status_message(data: Any) -> str:
    """The API's `Status.message` (or reason) when `data` is one, else the start of it."""
    if isinstance(data, bytes):
        data = data.decode("utf-8", "replace")
    if not data:
        return ""
    try:
        status = json.loads(data)
    except (TypeError, ValueError, RecursionError):
        return str(data)[:500]
    if isinstance(status, dict):
        return str(status.get("message") or status.get("reason") or data)[:2000]
    return str(data)[:500]


def retry_after(headers: Any) -> float | None:
    try:
        value = headers.get("Retry-After") if headers else None
        return float(value) if value is not None else None
    except (TypeError, ValueError, AttributeError):
        return None


def error_for(verb: str, resp: Response, named: tuple[str, str, str] | None = None) -> ApiError:
    """The error for an answer that is not 2xx. `named` (plural, name, group): the object the
    call was about, for `NotFound` (see `is_not_found`)."""
    message = status_message(resp.data) or resp.reason
    after = retry_after(resp.headers)
    if named is not None and is_not_found(resp.status, resp.data, named[0], named[1], named[2]):
        return NotFound(verb, resp.status, message, after)
    if resp.status == 409:
        return Conflict(verb, resp.status, message, after)
    return ApiError(verb, resp.status, message, after)


def as_api_error(verb: str, err: BaseException) -> ApiError:
    """A failure raised by the client (transport, or an HTTP error it raised itself)."""
    if isinstance(err, ApiError):
        return err
    status = getattr(err, "status", None)
    if isinstance(status, int) and status > 0:
        headers = getattr(err, "headers", None) or {}
        body = getattr(err, "body", None)
        return ApiError(verb, status, status_message(body) or str(err), retry_after(headers))
    return ApiError(verb, None, f"{type(err).__name__}: {err}")
