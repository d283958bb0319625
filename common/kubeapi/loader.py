"""The official `kubernetes` client, loaded with only the parts a driver uses.

Why the `sys.modules` work below stays: any `import kubernetes.<anything>` first runs
`kubernetes/__init__.py`, which imports every subpackage (config with yaml, oauthlib and
requests; dynamic with kubernetes_validate and jsonschema; stream with websocket; informer;
leaderelection; utils with its yaml loader). A driver needs only `Configuration`, the REST
layer (transport, TLS) and one config loader: `Connection` below. Measured on the benchmark
machine, an ordinary `import kubernetes.client` plus the in-cluster loader takes 47 MiB of RSS,
600 modules and 1.0 s; the deferred packages with an `ApiClient` 25 MiB and 250 modules; a
`Connection` 15 MiB and 160 modules, on every node, for every driver process. The
client's model classes are already loaded lazily by the client itself (kubernetes >= 33), and we
never use them: objects travel as the API's own JSON dicts (see `types`).

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
already imported normally, nothing is changed. tests/unit/kubeapi/test_loader.py compares the
deferred packages with the real ones.

It lives here, and only here, because every topodra process reaches the client through this
package: `loader.new_api_client`, then `rest` for raw JSON calls and watches.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import pkgutil
import sys
import threading
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
    """`kubernetes.client`, loaded without the rest of the package (the client's own
    `__init__` loads its classes on first access: `Configuration` costs its module only)."""
    with _lock:
        for name in DEFERRED_PACKAGES:
            _defer_init(name)
    return importlib.import_module("kubernetes.client")


class Connection:
    """What a driver uses of the client's `ApiClient`: its `Configuration` (host, TLS,
    credentials with their refresh hook) and its REST layer (`RESTClientObject`: urllib3's pool,
    timeouts). `rest` calls go through it exactly as through an `ApiClient`, which has the same
    two attributes and is accepted wherever a Connection is.

    Why not the `ApiClient` itself: importing it brings pydantic (with pydantic_core and
    annotated_types), dateutil, multiprocessing's thread pool and the generated `ApiResponse`
    model, for its (de)serialisation of model classes we never use: 10 MiB of every driver's
    RSS and 0.4 s of its start on the benchmark machine (hack/bench-peer compares the drivers'
    RSS with a Go peer's)."""

    def __init__(self, configuration: Any) -> None:
        from kubernetes.client.rest import RESTClientObject

        self.configuration = configuration
        self.rest_client = RESTClientObject(configuration)

    def close(self) -> None:
        self.rest_client.pool_manager.clear()


def new_api_client(kubeconfig: str | None = None) -> Connection:
    """A `Connection` from a kubeconfig file, or from the in-cluster service account when none
    is given (the loader refreshes the projected token as the kubelet rotates it)."""
    load()
    from kubernetes.client.configuration import Configuration

    cfg = Configuration()
    if kubeconfig:
        from topodra.common.kubeapi import kubeconfig as plain

        if not plain.apply(kubeconfig, cfg):
            # the official loader brings oauthlib, requests and the ApiClient (see `kubeconfig`)
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
    return Connection(cfg)
