"""One raw JSON call through the official client's REST layer, and watch streams.

The generated API classes (CustomObjectsApi, ResourceV1Api, ...) cost memory and time for
nothing we use: importing one builds pydantic validators for all of its methods (and imports
the model classes their signatures name), and every call is validated again. What matters is
the configuration (host, credentials with their refresh hook, TLS) and the REST layer
(urllib3's pool, timeouts): a `loader.Connection` holds both, as an `ApiClient` does, and either
serves here. The body stays the API's JSON, both ways.

Watch streams are read here too, not through `kubernetes.watch.Watch`: it builds an `ApiClient`
(pydantic and the model machinery, see `loader.Connection`) and imports `inspect` and `pydoc`
to guess return types from docstrings, all to split a stream into JSON lines.
"""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

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


USER_AGENT = "topodra"


def _send(
    api_client: Any,
    method: str,
    path: str,
    query: Mapping[str, str] | None,
    body: Any,
    timeout: float | tuple[float, float] | None,
) -> Any:
    """`api_client`: a `loader.Connection` or an `ApiClient` (both have `configuration` and
    `rest_client`). Answers the REST layer's response, its body unread."""
    cfg = api_client.configuration
    headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
    if body is not None:
        headers["Content-Type"] = "application/json"
    for setting in cfg.auth_settings().values():  # runs the refresh hook (rotated tokens)
        if setting.get("in") == "header" and setting.get("value"):
            headers[setting["key"]] = setting["value"]
    url = cfg.host + path
    if query:
        url += "?" + urlencode(query, quote_via=quote)
    return api_client.rest_client.request(method, url, headers=headers, body=body, _request_timeout=timeout)


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
    """A GET whose body is left unread: the urllib3 response (for `WatchEvents`, or
    `kubernetes.watch.Watch` from a list function called with `_preload_content=False`)."""
    return _send(api_client, "GET", path, query, None, timeout).response


MAX_EVENT_BYTES = 64 << 20  # one watch event: far above any object the API server stores


class WatchEvents:
    """The events of one watch request (`watch=true`), as the API's JSON dicts {"type",
    "object"}, until the server ends the stream or `stop` is called.

    An answer that is not 2xx, and an ERROR event (410 Gone when the resourceVersion is too
    old), raise `ApiError` with the status and the API's message: the caller lists again. A line
    that is not JSON is skipped (a stream cut mid-line); a line longer than `MAX_EVENT_BYTES`
    ends the watch with an error rather than growing without bound."""

    def __init__(
        self, api_client: Any, path: str, query: Mapping[str, str], timeout: float | tuple[float, float]
    ) -> None:
        self._client, self._path, self._timeout = api_client, path, timeout
        self._query = {**query, "watch": "true"}
        self._resp: Any = None
        self._stopped = False

    def __iter__(self) -> Iterator[dict[str, Any]]:
        resp = self._resp = open_stream(self._client, self._path, query=self._query, timeout=self._timeout)
        try:
            yield from self._events(resp)
        except Exception:
            if not self._stopped:  # a read cut by `stop` is the end asked for, not an error
                raise
        finally:
            resp.close()  # a stream left unread cannot go back to the pool as it is
            resp.release_conn()

    def _events(self, resp: Any) -> Iterator[dict[str, Any]]:
        if not 200 <= resp.status <= 299:
            data = resp.read()
            raise error_for("watch", Response(resp.status, resp.reason or "", resp.headers, data or b""))
        parts: list[bytes] = []  # the line being read, in pieces (an event may span many reads)
        size = 0
        for chunk in resp.stream(65536, decode_content=True):
            start = 0
            while (end := chunk.find(b"\n", start)) >= 0:
                parts.append(chunk[start:end])
                event = self._event(b"".join(parts))
                parts, size, start = [], 0, end + 1
                if event is not None:
                    yield event
                if self._stopped:
                    return
            if start < len(chunk):
                parts.append(chunk[start:])
                size += len(chunk) - start
                if size > MAX_EVENT_BYTES:
                    raise ApiError("watch", None, f"an event longer than {MAX_EVENT_BYTES} bytes")
        event = self._event(b"".join(parts))
        if event is not None and not self._stopped:
            yield event

    @staticmethod
    def _event(line: bytes) -> dict[str, Any] | None:
        if not line.strip():
            return None
        try:
            event = json.loads(line)
        except (ValueError, RecursionError):
            return None
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            return None
        obj = event.get("object")
        if event["type"] == "ERROR":
            status = obj if isinstance(obj, dict) else {}
            code = status.get("code")
            reason = f"{status.get('reason', '')}: {status.get('message', '')}"
            raise ApiError("watch", code if isinstance(code, int) else None, reason)
        return {"type": event["type"], "object": obj}

    def stop(self) -> None:
        """Ends the iteration, also from another thread blocked in a read (the socket is shut
        down under it)."""
        self._stopped = True
        resp = self._resp
        sock = getattr(getattr(resp, "connection", None), "sock", None) if resp is not None else None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


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
