"""`topodra serve cpu|accelerator|nic|all`: run DRA kubelet plugins until SIGTERM/SIGINT.

One process can serve several drivers (`all`); each still gets its own sockets, checkpoint,
CDI kind and ResourceSlices. Exit status: 0 after a signal, 2 for bad flags or configuration,
1 when a plugin could not start.
"""

from __future__ import annotations

import argparse
import faulthandler
import os
from pathlib import Path
from typing import Any

from topodra.common import logs
from topodra.common.kubeapi.claims import KubeClaimSource
from topodra.common.runtime import capabilities
from topodra.common.runtime.claimstatus import KubeClaimStatusWriter
from topodra.common.runtime.observability import Observability
from topodra.common.runtime.plugin import PluginOptions, serve_all, settle_heap
from topodra.common.runtime.service import DriverService
from topodra.common.runtime.statusqueue import QueuedStatusWriter
from topodra.drivers import flags, registry
from topodra.drivers.cli.apiclient import api_client
from topodra.drivers.cli.arguments import add_folder_argument, add_kubeconfig_argument, add_log_level_argument
from topodra.drivers.cli.inspect import add_root_argument, root_problem

EXIT_CONFIG = 2
EXIT_START = 1
SUMMARY = "run DRA kubelet plugins"
EXAMPLES = (
    (
        'topodra serve cpu --node-name "$NODE_NAME" --metrics-address :9400',
        "the CPU driver, as deploy/ runs it",
    ),
    ("topodra serve all --kubeconfig ~/.kube/config --node-name lab-1", "all three in one process (a lab)"),
    (
        "topodra serve nic --node-name n1 --nic-node-ip 192.0.2.10 --no-publish",
        "try the NIC driver, no slices",
    ),
)
EXITS = {
    0: "stopped by SIGTERM or SIGINT",
    1: "a plugin could not start (sockets, registration)",
    2: "a flag, the kubeconfig or the sysfs root is wrong (one line says which)",
}


def register(subparsers: Any) -> None:
    from topodra.drivers.cli.usage import command

    p = command(subparsers, "serve", __doc__, help=SUMMARY, examples=EXAMPLES, exits=EXITS)
    p.add_argument(
        "kind", choices=[*registry.KINDS, "all"], help="which driver, or all of them in one process"
    )
    add_folder_argument(
        p, "--kubelet-root-dir", Path("/var/lib/kubelet"), "the kubelet's root folder (default %(default)s)"
    )
    p.add_argument(
        "--node-name",
        type=flags.node_name,
        default=os.environ.get("NODE_NAME", ""),
        help="this node's name (default: $NODE_NAME)",
    )
    add_root_argument(p)
    add_folder_argument(
        p, "--cdi-root", Path("/var/run/cdi"), "folder the runtime reads CDI specs from (default %(default)s)"
    )
    add_folder_argument(p, "--state-dir", None, "checkpoints; default: each driver's plugin folder")
    add_kubeconfig_argument(p, as_kubectl=False)
    p.add_argument(
        "--metrics-address",
        type=flags.host_port,
        default="",
        help="host:port for /metrics, /healthz and /readyz (e.g. :9400); empty: off",
    )
    p.add_argument(
        "--pod-uid",
        type=flags.uid,
        default=os.environ.get("POD_UID", ""),
        help="this pod's UID (default: $POD_UID); set, sockets get rolling-update names",
    )
    add_log_level_argument(p)
    p.add_argument("--no-publish", action="store_true", help="do not write ResourceSlices (testing)")
    p.add_argument(
        "--delete-slices-on-exit",
        action="store_true",
        help="delete our ResourceSlices when stopping (uninstall); default: keep them, the kubelet "
        "and Node GC clean up and a restart adopts them without writes",
    )
    registry.add_arguments(p, list(registry.KINDS))  # every driver's flags: `all` takes them all
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    # A crash below Python (a C extension, the allocator's "double free", SIGSEGV, SIGABRT) would
    # otherwise end a privileged node agent with no line saying where: with this, stderr (the
    # container's log, `kubectl logs --previous`) gets every thread's stack first.
    faulthandler.enable()
    logs.setup(args.log_level.upper())
    log = logs.get(__name__)
    if not args.node_name:
        log.error("no node name: pass --node-name or set NODE_NAME")
        return EXIT_CONFIG
    problem = root_problem(args.sysfs_root)
    if problem is not None:
        log.error(problem)
        return EXIT_CONFIG
    kinds = list(registry.KINDS) if args.kind == "all" else [args.kind]
    try:
        services, observability = build(args, kinds)
    except (ValueError, OSError) as e:  # bad flags, a driver refusing its options, an unreadable file
        # a ValueError is ours and already says what is wrong; an OSError needs its type
        log.error(
            "configuration failed", error=str(e) if isinstance(e, ValueError) else f"{type(e).__name__}: {e}"
        )
        return EXIT_CONFIG

    try:
        if observability is not None:
            observability.start()
        serve_all(services, on_started=settle_heap)
    except Exception as e:
        log.exception("plugin failed", error=f"{type(e).__name__}: {e}")
        return EXIT_START
    finally:
        if observability is not None:
            observability.stop()
    return 0


def _no_sleep(_seconds: float) -> None:
    pass


def build(args: argparse.Namespace, kinds: list[str]) -> tuple[list[DriverService], Observability | None]:
    """The services for `kinds` and the HTTP endpoint, nothing started yet. A driver's optional
    capabilities are looked up once, here (common/runtime/capabilities.py)."""
    api = api_client(args.kubeconfig)
    options = PluginOptions(
        kubelet_root=args.kubelet_root_dir, node_name=args.node_name, pod_uid=args.pod_uid or None
    )
    common = registry.CommonOptions(sysfs_root=Path(args.sysfs_root), node_name=args.node_name, args=args)
    services = []
    for kind in kinds:
        driver = registry.create(kind, common)
        caps = capabilities.of(driver)
        if caps.set_status_writer is not None:
            # three re-reads on 409 in the call, without sleeping on the queue's one thread; the
            # backoff waits in the claim's lane (statusqueue.py)
            writer = KubeClaimStatusWriter(api, driver.name, retries=3, sleep=_no_sleep)
            caps.set_status_writer(QueuedStatusWriter(writer))
        publisher = None
        if not args.no_publish:
            # loaded only when publishing: --no-publish drivers never pay for its modules
            from topodra.common.publisher.publisher import SlicePublisher

            publisher = SlicePublisher(
                api,
                driver.name,
                args.node_name,
                delete_slices_on_stop=args.delete_slices_on_exit,
                on_status=caps.on_publisher_status,
            )
        services.append(
            DriverService.create(
                driver,
                KubeClaimSource(api),
                options,
                cdi_root=args.cdi_root,
                state_dir=args.state_dir,
                publisher=publisher,
            )
        )
    observability = None
    if args.metrics_address:
        observability = Observability(args.metrics_address, lambda: [s.status() for s in services])
    return services, observability
