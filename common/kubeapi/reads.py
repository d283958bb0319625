"""The reads of the one-shot commands (`topodra check`, `topodra explain`): GET one object, and
LIST a collection page by page.

Errors are this package's family (errors.py): `ApiError` with status None when the server
cannot be reached (the client's transport errors are urllib3's, not OSErrors, and would
otherwise surface as a traceback), the HTTP status for an answer that is not 2xx, `Unusable`
for an answer that is not the JSON asked for.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from topodra.common.kubeapi import rest
from topodra.common.kubeapi.errors import Unusable

PAGE = 500  # items per LIST page
MAX_PAGES = 1000  # half a million objects is past any cluster these commands read


def get_object(api_client: Any, path: str, what: str) -> dict[str, Any]:
    """The object at `path`; `what` names it in errors ("ResourceClaim ml/train")."""
    body = _json(what, _call(api_client, what, path, None))
    if not isinstance(body, dict):
        raise Unusable(what, 200, "the answer is not an object")
    return body


def list_items(
    api_client: Any,
    path: str,
    query: Mapping[str, str],
    what: str,
    keep: Callable[[dict[str, Any]], bool] | None = None,
) -> list[dict[str, Any]]:
    """The items of a LIST (`what`: "list resourceclaims"), following `continue` tokens, holding
    only the items `keep` accepts: a cluster's claims need not all be in memory at once."""
    items: list[dict[str, Any]] = []
    token = ""
    for _ in range(MAX_PAGES):
        page = {**query, "limit": str(PAGE)}
        if token:
            page["continue"] = token
        body = _json(what, _call(api_client, what, path, page))
        got = body.get("items") if isinstance(body, dict) else None
        if not isinstance(got, list):
            raise Unusable(what, 200, "the answer is not a list")
        items.extend(i for i in got if isinstance(i, dict) and (keep is None or keep(i)))
        meta = body.get("metadata")
        token = str(meta.get("continue") or "") if isinstance(meta, dict) else ""
        if not token:
            return items
    raise Unusable(what, 200, f"more than {MAX_PAGES} pages of {PAGE}")


def _call(api_client: Any, what: str, path: str, query: Mapping[str, str] | None) -> rest.Response:
    import urllib3.exceptions  # the client's transport; loaded with it in any case

    try:
        resp = rest.request(api_client, "GET", path, query=query, timeout=30)
    except (OSError, urllib3.exceptions.HTTPError) as err:  # refused, TLS, timeout
        raise rest.as_api_error(what, err) from None
    if not resp.ok:
        raise rest.error_for(what, resp)
    return resp


def _json(what: str, resp: rest.Response) -> Any:
    try:
        return json.loads(resp.data)
    except ValueError:
        raise Unusable(what, resp.status, "the answer is not JSON") from None
    except RecursionError:
        raise Unusable(what, resp.status, "the answer is nested too deeply to read") from None
