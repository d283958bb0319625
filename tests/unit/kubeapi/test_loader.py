"""topodra.common.kubeapi.loader: the official client loaded without the rest of the `kubernetes` package.

Every check runs in a fresh interpreter (the test process has long imported the full package),
and compares the deferred packages with the real ones imported the ordinary way.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import certifi
from topodra.common.kubeapi import loader

from tests.conftest import REPO
from tests.kit.imports import forget_first
from tests.kit.kubeconfig import write_kubeconfig

# what a driver process must not carry (heavy, and never used by topodra at runtime)
NEVER_ON_THE_DRIVER_PATH = (
    "kubernetes.dynamic",
    "kubernetes.stream",
    "kubernetes.informer",
    "kubernetes.leaderelection",
    "kubernetes_validate",
    "jsonschema",
    "websocket",
    "kubernetes.client.api.custom_objects_api",
    "kubernetes.client.api.resource_v1_api",
    "hypothesis",
    "pytest",
    "kubernetes.watch",
)
# ...and what only the kubeconfig loader needs (in-cluster, the deployed way, has none of it)
KUBECONFIG_ONLY = (
    "yaml",
    "requests",
    "oauthlib",
    "requests_oauthlib",
    # the ApiClient, which the kubeconfig loader imports: model (de)serialisation that no topodra
    # call uses (loader.Connection), 10 MiB of RSS
    "kubernetes.client.api_client",
    "pydantic",
    "pydantic_core",
    "dateutil",
    "multiprocessing.pool",
)


def run_python(code: str) -> Any:
    """Run `code` in a fresh interpreter; it prints one JSON document as its last line."""
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


DESCRIBE = """
import inspect, json, sys, types
def describe(value):
    if isinstance(value, types.ModuleType):
        return ["module", value.__name__]
    if inspect.isclass(value) or inspect.isfunction(value):
        return [type(value).__name__, value.__module__, value.__qualname__]
    return [type(value).__name__, repr(value)[:80]]
"""


def test_deferred_packages_expose_exactly_what_the_real_ones_do() -> None:
    real = run_python(
        DESCRIBE
        + """
import importlib
out = {}
for name in ("kubernetes", "kubernetes.config", "kubernetes.utils"):
    mod = importlib.import_module(name)
    out[name] = {a: describe(getattr(mod, a)) for a in dir(mod) if not a.startswith("_")}
out["kubernetes"]["__version__"] = describe(importlib.import_module("kubernetes").__version__)
print(json.dumps(out))
"""
    )
    names = {pkg: sorted(attrs) for pkg, attrs in real.items()}
    deferred = run_python(
        DESCRIBE
        + f"""
import importlib
from topodra.common.kubeapi import loader, rest
loader.load()
import kubernetes.client.rest  # imports kubernetes.utils.retry: the usual partial state
names = {json.dumps(names)}
out = {{}}
for name, attrs in names.items():
    mod = sys.modules[name]
    out[name] = {{a: describe(getattr(mod, a)) for a in attrs}}
print(json.dumps(out))
"""
    )
    assert deferred == real


def test_importing_a_shadowed_submodule_still_gives_the_real_binding() -> None:
    """kubernetes.utils.create_from_yaml is a function in the real package, though a submodule of
    that name exists: importing the submodule first must not leave the module in its place."""
    got = run_python(
        """
import inspect, json, sys
from topodra.common.kubeapi import loader, rest
loader.load()
import kubernetes.client.rest
before = type(sys.modules["kubernetes.utils"]).__name__
import kubernetes.utils.create_from_yaml
import kubernetes.utils
print(json.dumps([before, inspect.isfunction(kubernetes.utils.create_from_yaml)]))
"""
    )
    assert got == ["_DeferredPackage", True]


def test_already_imported_package_is_left_alone() -> None:
    got = run_python(
        """
import json, sys
import kubernetes
from topodra.common.kubeapi import loader, rest
loader.load()
print(json.dumps([type(sys.modules[n]).__name__ for n in loader.DEFERRED_PACKAGES]))
"""
    )
    assert got == ["module", "module", "module"]


def test_a_driver_process_loads_only_what_it_uses(tmp_path: Path) -> None:
    kubeconfig = write_kubeconfig(tmp_path)
    token = tmp_path / "token"
    token.write_text("t")
    ca = certifi.where()  # any real PEM bundle: nothing gets as far as a TLS handshake
    probe = json.dumps(NEVER_ON_THE_DRIVER_PATH + KUBECONFIG_ONLY)
    in_cluster = run_python(
        f"""
import json, sys
from topodra.common.kubeapi import loader, rest
client = loader.load()
from kubernetes.config.incluster_config import InClusterConfigLoader
cfg = client.Configuration()
env = {{"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": "1"}}
InClusterConfigLoader("{token}", "{ca}", environ=env).load_and_set(cfg)
api = loader.Connection(cfg)
watch = rest.WatchEvents(api, "/apis/resource.k8s.io/v1/resourceslices", {{}}, 2)
try:
    rest.request(api, "GET", "/version", timeout=2)
except Exception as e:
    failure = type(e).__name__
print(json.dumps([failure, [m for m in {probe} if m in sys.modules]]))
"""
    )
    assert in_cluster == ["MaxRetryError", []]
    # a plain kubeconfig (server, token) is read without the official loader (kubeapi.kubeconfig):
    # of the loader's imports only yaml, to parse the file
    probe_roots = {m.split(".")[0] for m in NEVER_ON_THE_DRIVER_PATH + KUBECONFIG_ONLY}
    with_kubeconfig = run_python(
        forget_first(*probe_roots)
        + f"""
import json, sys
from topodra.common.kubeapi import loader, rest
api = loader.new_api_client("{kubeconfig}")
rest.WatchEvents(api, "/apis/resource.k8s.io/v1/resourceslices", {{}}, 2)
print(json.dumps([api.configuration.host, api.configuration.connection_pool_maxsize,
                  api.configuration.auth_settings()["BearerToken"]["value"],
                  [m for m in {probe} if m in sys.modules]]))
"""
    )
    assert with_kubeconfig == ["https://127.0.0.1:1", loader.CONNECTION_POOL_SIZE, "Bearer t", ["yaml"]]


def test_the_serve_command_imports_no_test_or_unused_client_code() -> None:
    """Everything `topodra serve` imports before it talks to anybody (parser, drivers, runtime,
    publisher, metrics): no test libraries, no unused parts of the client."""
    probe = json.dumps(NEVER_ON_THE_DRIVER_PATH + KUBECONFIG_ONLY + ("pyudev",))
    got = run_python(
        f"""
import json, sys
from topodra.drivers.cli import main
main.build_parser("serve")
import topodra.drivers.cli.serve, topodra.common.runtime.service, topodra.common.runtime.observability
import topodra.common.kubeapi.claims, topodra.common.runtime.claimstatus
import topodra.common.publisher.publisher, topodra.common.kubeapi.slices
from topodra.drivers import registry
import importlib
for kind, package in registry.KINDS.items():
    registry.module(kind)
    importlib.import_module(package + ".driver")
from topodra.common.kubeapi import loader, rest
loader.load()
print(json.dumps([m for m in {probe} if m in sys.modules]))
"""
    )
    assert got == []
