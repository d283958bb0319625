"""`topodra check --watch`: the check as a node agent, with a metric and Events on the Node.

Where it runs, and why there: in its own DaemonSet (deploy/base/check.yaml), one pod per node,
reading the node's /sys read-only and the node's ResourceSlices of every driver. Not inside a
topodra driver: the check is about all drivers on the node (vendors' included), so it must run
whichever of topodra's drivers are deployed (or none), must not give a driver's ServiceAccount
Event-writing rights it does not need, and three drivers would report the same disagreement
three times. It is read-only apart from Events: `resourceslices` list/watch, `events` create in
the `default` namespace, where Node events live.

Loop: LIST the node's slices, then WATCH them; every change re-checks (at most every `MIN_GAP`
seconds, so a driver republishing 64 slices costs one check), and sysfs is re-read every
`interval` (hot-plug, SR-IOV VFs created). Each check updates the metrics; an Event is written
when the set of wrong values changes (Warning `TopologyAttributesWrong`, or Normal
`TopologyAttributesAgree` once they are fixed), and again every `EVENT_REPEAT` seconds while
they stay wrong (the API server drops Events after an hour).

The pieces that decide (`disagreement`, `event_body`) are pure and tested without a cluster.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

from topodra.common import logs
from topodra.common.check.devices import node_devices
from topodra.common.check.report import Report, build_report
from topodra.common.check.verdicts import ERROR, SHORT, WARNING

EVENTS_NAMESPACE = "default"  # where the kubelet and controllers put Node events
REASON_WRONG = "TopologyAttributesWrong"
REASON_AGREE = "TopologyAttributesAgree"
COMPONENT = "topodra-check"
MIN_GAP = 5.0
EVENT_REPEAT = 3000.0
WATCH_TIMEOUT = 300  # seconds per watch request; the server may end it sooner
MAX_MESSAGE = 1000  # events.k8s.io caps a note at 1 kB; keep core Events within it too
SLICES_PATH = "/apis/resource.k8s.io/v1/resourceslices"

_log = logs.get(__name__)


def parse_address(address: str) -> tuple[str, int]:
    """`host:port`, `:port` or `[v6]:port` (as the drivers' --metrics-address; not imported from
    the runtime, which would bring grpc into this small process)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"--metrics-address {address!r} is not host:port")
    return host.strip("[]") or "0.0.0.0", int(port)


def node_selector(node: str) -> str:
    return f"spec.nodeName={node}"


def list_node_slices(api_client: Any, node: str) -> list[dict[str, Any]]:
    """Every ResourceSlice of `node`, all drivers (kubeapi.reads: ApiError when it cannot)."""
    from topodra.common.kubeapi import reads

    query = {"fieldSelector": node_selector(node)}
    return reads.list_items(api_client, SLICES_PATH, query, "list resourceslices")


def slice_nodes(api_client: Any) -> set[str]:
    """The nodes that have ResourceSlices, of any driver (only their names are held)."""
    from topodra.common.kubeapi import reads

    nodes: set[str] = set()

    def note(item: dict[str, Any]) -> bool:
        spec = item.get("spec")
        name = spec.get("nodeName") if isinstance(spec, dict) else None
        if isinstance(name, str) and name:
            nodes.add(name)
        return False

    reads.list_items(api_client, SLICES_PATH, {}, "list resourceslices", keep=note)
    return nodes


# --- pure: what to say ----------------------------------------------------------------------


def disagreement(report: Report) -> list[str]:
    """One line per wrong or malformed value, sorted: equal lists mean nothing changed."""
    lines = []
    for driver, device, f in report.findings():
        if f.severity == ERROR:
            lines.append(f"{driver} {device} {SHORT.get(f.attribute, f.attribute) or 'device'}: {f.message}")
    return sorted(lines)


def summary_line(report: Report, lines: list[str]) -> str:
    """ "3 wrong topology attribute values on node n1 (gpu.nvidia.com 2, dra.net 1): ..."."""
    per: dict[str, int] = {}
    for driver, _, f in report.findings():
        if f.severity == ERROR:
            per[driver] = per.get(driver, 0) + 1
    drivers = ", ".join(f"{d} {n}" for d, n in sorted(per.items()))
    head = f"{len(lines)} wrong or malformed topology attribute value(s) on node {report.node} ({drivers})"
    body = "; ".join(lines)
    text = f"{head}: {body}. Run `topodra check` on the node for the full report."
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 3] + "..."


def event_body(node: str, reason: str, message: str, warning: bool, now: float) -> dict[str, Any]:
    """A core/v1 Event on the Node, shaped like the kubelet's (`kubectl describe node` lists
    events whose involvedObject.uid is the node's name or its UID)."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
    micro = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1e6):06d}Z"
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{node}.topodra-check-", "namespace": EVENTS_NAMESPACE},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node},
        "reason": reason,
        "message": message[:MAX_MESSAGE],
        "type": "Warning" if warning else "Normal",
        "source": {"component": COMPONENT, "host": node},
        "reportingComponent": f"topodra.io/{COMPONENT}",
        "reportingInstance": node,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "eventTime": micro,
        "action": "Check",
        "count": 1,
    }


def digest(lines: list[str]) -> str:
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


# --- metrics --------------------------------------------------------------------------------


class _Metrics:
    def __init__(self) -> None:
        from prometheus_client import Counter, Gauge

        self.findings = Gauge(
            "topodra_check_findings",
            "Findings of the last check per driver and severity (error: a published value is wrong "
            "or malformed; warning: a standard attribute the machine knows is missing)",
            ["driver", "severity"],
        )
        self.disagrees = Gauge(
            "topodra_check_disagrees",
            "1 when a driver on this node publishes a topology value the machine contradicts",
        )
        self.devices = Gauge("topodra_check_devices", "Devices on this node per driver", ["driver"])
        self.last = Gauge("topodra_check_last_run_timestamp_seconds", "When the last check finished")
        self.runs = Counter("topodra_check_runs", "Checks run, by outcome", ["outcome"])

    def update(self, report: Report) -> None:
        self.findings.clear()
        self.devices.clear()
        for d in report.drivers:
            self.findings.labels(d.driver, ERROR).set(d.count(ERROR))
            self.findings.labels(d.driver, WARNING).set(d.count(WARNING))
            self.devices.labels(d.driver).set(len(d.devices))
        self.disagrees.set(1 if report.errors else 0)
        self.last.set(time.time())
        self.runs.labels("wrong" if report.errors else "gaps" if report.warnings else "clean").inc()


_METRICS: _Metrics | None = None


def metrics() -> _Metrics:
    global _METRICS
    if _METRICS is None:
        _METRICS = _Metrics()
    return _METRICS


# --- the loop -------------------------------------------------------------------------------


class Watcher:
    """Checks `node` until stopped (see the module docstring).

    Two threads: `run_watch` keeps the node's slices current (LIST, then WATCH, relist on
    errors) and marks them changed; `run_checks` waits for a change (at least `MIN_GAP` after the
    previous check, so a burst of slice writes costs one check) or for `interval` to pass since
    sysfs was read, then checks. The watch never waits on a check, and a check never waits for
    the next watch event."""

    def __init__(
        self,
        api_client: Any,
        node: str,
        sysfs_root: str,
        *,
        interval: float = 300.0,
        events: bool = True,
        metrics_address: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        from topodra.common.kubeapi.slices import KubeSliceApi

        self.node = node
        self.sysfs_root = sysfs_root
        self.interval = interval
        self.events = events
        self.metrics_address = metrics_address
        self._client = api_client
        self._api = KubeSliceApi(api_client)
        self._clock = clock
        self._stop = threading.Event()
        self._changed = threading.Condition()
        self._slices: dict[str, dict[str, Any]] = {}
        self._listed = False  # no check before the first LIST: an empty node would look clean
        self._dirty = False
        self._topo: Any = None
        self._discovered_at = -1e18
        self._checked_at = -1e18
        self._last_digest: str | None = None
        self._last_event_at = -1e18
        self._event_denied = False
        self.last_report: Report | None = None
        self.checks = 0
        self._log = logs.get(__name__, node=node)

    # public

    def serve_forever(self) -> None:
        """Runs both loops in daemon threads until SIGTERM/SIGINT (the pod's stop)."""
        import signal

        if self.metrics_address:
            from prometheus_client import start_http_server

            host, port = parse_address(self.metrics_address)
            start_http_server(port, addr=host)
        metrics()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.stop())
        threads = [
            threading.Thread(target=self.run_watch, name="topodra-check-watch", daemon=True),
            threading.Thread(target=self.run_checks, name="topodra-check", daemon=True),
        ]
        for t in threads:
            t.start()
        while not self._stop.wait(1.0):
            if not all(t.is_alive() for t in threads):
                raise RuntimeError("a check loop ended")
        self._log.info("stopping")

    def stop(self) -> None:
        self._stop.set()
        with self._changed:
            self._changed.notify_all()

    def run_watch(self) -> None:
        backoff = 1.0
        while not self._stop.is_set():
            try:
                rv = self._relist()
                backoff = 1.0
                while not self._stop.is_set() and rv:
                    rv = self._watch(rv)
            except Exception as err:
                metrics().runs.labels("failed").inc()
                self._log.warning(
                    "reading slices failed; retrying", error=f"{type(err).__name__}: {err}", retry_s=backoff
                )
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 60.0)

    def run_checks(self) -> None:
        while not self._stop.is_set():
            with self._changed:
                while not self._stop.is_set():
                    wait = self._due_in()
                    if wait <= 0:
                        break
                    self._changed.wait(min(wait, 60.0))
                if self._stop.is_set():
                    return
                slices = list(self._slices.values())
                self._dirty = False
            try:
                self._check(slices)
            except Exception as err:  # a check never takes the agent down; the next one retries
                metrics().runs.labels("failed").inc()
                self._log.warning("check failed", error=f"{type(err).__name__}: {err}")
                self._checked_at = self._clock()

    # steps

    def _due_in(self) -> float:
        """Seconds until the next check is due (called with the condition held)."""
        if not self._listed:
            return 60.0
        now = self._clock()
        rediscover = self._discovered_at + self.interval - now
        if self._dirty:
            return min(self._checked_at + MIN_GAP - now, rediscover)
        return rediscover

    def _apply(self, kind: str | None, obj: dict[str, Any]) -> None:
        with self._changed:
            if kind == "DELETED":
                self._slices.pop(_key(obj), None)
            else:
                self._slices[_key(obj)] = obj
            self._dirty = True
            self._changed.notify_all()

    def _relist(self) -> str:
        items, rv = self._api.list_slices(node_selector(self.node))
        with self._changed:
            self._slices = {_key(s): s for s in items}
            self._listed = True
            self._dirty = True
            self._changed.notify_all()
        return rv

    def _watch(self, rv: str) -> str:
        """One watch request; returns the resourceVersion to continue from ("" to relist)."""
        from topodra.common.kubeapi.errors import ApiError

        stream = self._api.watch_slices(node_selector(self.node), rv, WATCH_TIMEOUT)
        try:
            for event in stream:
                if self._stop.is_set():
                    break
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    return ""  # 410 Gone and friends: start from a fresh list
                rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
                if kind == "BOOKMARK":
                    continue
                self._apply(kind, obj)
        except ApiError as err:
            if err.status == 410:
                return ""
            raise
        finally:
            stream.stop()
        return rv

    def _check(self, slices: list[dict[str, Any]]) -> None:
        from topodra.common.topology import discover

        now = self._clock()
        if self._topo is None or now - self._discovered_at >= self.interval:
            self._topo = discover(self.sysfs_root)
            self._discovered_at = now
        report = build_report(self._topo, node_devices(slices, self.node))
        self._checked_at = now
        self.last_report = report
        self.checks += 1
        metrics().update(report)
        lines = disagreement(report)
        self._log.info(
            "checked",
            drivers=len(report.drivers),
            devices=sum(len(d.devices) for d in report.drivers),
            errors=report.errors,
            warnings=report.warnings,
        )
        for line in lines[:20]:
            self._log.warning("wrong topology attribute", finding=line)
        self._events(report, lines, now)

    def _events(self, report: Report, lines: list[str], now: float) -> None:
        if not self.events:
            return
        d = digest(lines)
        changed = d != self._last_digest
        if lines and (changed or now - self._last_event_at >= EVENT_REPEAT):
            self._post(event_body(self.node, REASON_WRONG, summary_line(report, lines), True, time.time()))
            self._last_event_at = now
        elif changed and not lines and self._last_digest is not None:
            msg = (
                f"every published topology attribute value on node {self.node} agrees with the machine again"
            )
            self._post(event_body(self.node, REASON_AGREE, msg, False, time.time()))
        self._last_digest = d

    def _post(self, body: Mapping[str, Any]) -> None:
        from topodra.common.kubeapi import rest

        path = f"/api/v1/namespaces/{quote(EVENTS_NAMESPACE, safe='')}/events"
        try:
            resp = rest.request(self._client, "POST", path, body=dict(body), timeout=20)
        except Exception as err:
            self._log.warning("event not written", error=f"{type(err).__name__}: {err}")
            return
        if resp.ok:
            self._log.info("event written", reason=body["reason"])
        elif resp.status == 403 and not self._event_denied:
            self._event_denied = True
            self._log.warning("may not write Events (RBAC: events create in default)", error=resp.message())
        elif resp.status != 403:
            self._log.warning("event not written", status=resp.status, error=resp.message())


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return str(meta.get("uid") or meta.get("name") or id(obj))
