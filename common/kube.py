"""The one way topodra loads the official `kubernetes` client: only the parts a driver uses.

Why this exists: any `import kubernetes.<anything>` first runs `kubernetes/__init__.py`, which
imports every subpackage (config with yaml, oauthlib and requests; dynamic with
kubernetes_validate and jsonschema; stream with websocket; informer; leaderelection; utils
with its yaml loader). A driver needs only `Configuration`, `ApiClient` (transport, auth, TLS),
`Watch` and one config loader, and every MiB counts against the issue-4 budget (60 MiB per
driver process). The client's model classes are already loaded lazily by the client itself
(kubernetes >= 33), and we never use them: objects travel as the API's own JSON dicts.

So, before the first `kubernetes` import, `kubernetes`, `kubernetes.config` and
`kubernetes.utils` are registered as packages whose `__init__` has not run yet. Submodule
imports work as usual (they only need the package's `__path__`). Whatever else the `__init__`
would have provided is served on first access by running the real `__init__` once, into the
same module object, so code that uses the full package (tests, `kubernetes.config.
load_kube_config`, `kubernetes.utils.create_from_yaml`, `kubernetes.dynamic`) gets exactly the
real objects. One case needs care: an `__init__` may bind a submodule's name to something else
(`kubernetes.utils.create_from_yaml` is a function, not the submodule). Such names are found in
the `__init__`'s source, and touching one, or importing that submodule, runs the real `__init__`
first, so no caller ever sees a value the real package would not have. If a package was
already imported normally, nothing is changed. tests/unit/test_kube.py compares the deferred
packages with the real ones.

All topodra code reaches the client through this module: `new_api_client`, then `request` /
`open_stream` + `new_watch` for raw JSON calls (why not the generated API classes: see below).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import pkgutil
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.abc import Loader
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType
from typing import Any

# packages whose __init__ pulls in far more than a driver needs (see the module docstring)
DEFERRED_PACKAGES = ("kubernetes", "kubernetes.config", "kubernetes.utils")

# concurrent prepares GET in parallel: enough kept-alive connections that none pays a fresh
# TLS handshake (urllib3 discards connections beyond the pool size)
CONNECTION_POOL_SIZE = 64

_lock = threading.RLock()
_pending: dict[str, tuple[Loader, frozenset[str]]] = {}  # deferred package -> its loader, shadowed


def _shadowed_submodules(spec: ModuleSpec) -> frozenset[str]:
    """Submodule names that the package's `__init__` may bind to something other than the
    submodule itself (an over-approximation is harmless: it only runs the `__init__` sooner)."""
    locations = list(spec.submodule_search_locations or ())
    submodules = {m.name for m in pkgutil.iter_modules(locations)}
    if spec.origin is None:
        return frozenset(submodules)
    bound: set[str] = set()
    for node in ast.walk(ast.parse(Path(spec.origin).read_bytes())):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name == "*":
                    return frozenset(submodules)
                if node.level == 1 and node.module is None and alias.asname in (None, alias.name):
                    continue  # `from . import x` binds the submodule itself
                bound.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            bound.update((alias.asname or alias.name).partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
    return frozenset(bound & submodules)


def _run_init(module: ModuleType) -> None:
    """Run a deferred package's real `__init__` (once) and make it a plain module again."""
    with _lock:
        entry = _pending.pop(module.__name__, None)
        if entry is None:
            return
        module.__class__ = ModuleType
        entry[0].exec_module(module)


class _DeferredPackage(ModuleType):
    """A package whose `__init__` has not run yet (see the module docstring)."""

    def __getattr__(self, attr: str) -> Any:
        entry = _pending.get(self.__name__)
        sub = f"{self.__name__}.{attr}"
        plain_submodule = entry is not None and attr not in entry[1] and not attr.startswith("__")
        if plain_submodule and importlib.util.find_spec(sub) is not None:
            return importlib.import_module(sub)
        _run_init(self)
        return getattr(self, attr)

    def __setattr__(self, attr: str, value: Any) -> None:
        super().__setattr__(attr, value)
        entry = _pending.get(self.__name__)
        if entry is not None and attr in entry[1]:
            _run_init(self)  # the import system bound a submodule whose name __init__ rebinds


def _defer_init(name: str) -> None:
    """Register package `name` without running its `__init__` (see the module docstring)."""
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        raise ImportError(f"{name} is not an installed package")
    module = importlib.util.module_from_spec(spec)
    _pending[name] = (spec.loader, _shadowed_submodules(spec))
    module.__class__ = _DeferredPackage
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)


def load() -> ModuleType:
    """`kubernetes.client`, loaded without the rest of the package."""
    with _lock:
        for name in DEFERRED_PACKAGES:
            _defer_init(name)
    return importlib.import_module("kubernetes.client")


def new_api_client(kubeconfig: str | None = None) -> Any:
    """An `ApiClient` from a kubeconfig file, or from the in-cluster service account when none
    is given (the loader refreshes the projected token as the kubelet rotates it)."""
    client = load()
    cfg = client.Configuration()
    if kubeconfig:
        # the kubeconfig loader brings yaml, oauthlib and requests; in-cluster needs none of them
        from kubernetes.config.kube_config import load_kube_config

        load_kube_config(config_file=kubeconfig, client_configuration=cfg)  # type: ignore[no-untyped-call]
    else:
        from kubernetes.config.incluster_config import load_incluster_config

        load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
    cfg.connection_pool_maxsize = max(cfg.connection_pool_maxsize or 0, CONNECTION_POOL_SIZE)
    # No urllib3 retries under ours: every caller (publisher, claim source, status writer) has
    # its own backoff and its own log line; urllib3's 3 silent extra tries only multiplied the
    # wait and the warnings of one unreachable API server.
    cfg.retries = 0
    return client.ApiClient(cfg)


# --- raw requests -------------------------------------------------------------------------------
#
# The generated API classes (CustomObjectsApi, ResourceV1Api, ...) cost memory and time for
# nothing we use: importing one builds pydantic validators for all of its methods (and imports
# the model classes their signatures name), and every call is validated again. The ApiClient's
# own `param_serialize` + `call_api` do everything that matters (host, auth including token
# refresh, TLS, connection pool, timeouts), and the body stays the API's JSON.


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
    load()
    from kubernetes.watch import Watch

    return Watch()  # type: ignore[no-untyped-call]
