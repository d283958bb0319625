"""Ask the benchmarks' kube-apiserver for a garbage collection, and wait until it is done.

Why: in the benchmarks the API server shares the machine's two cores with the plugins it serves.
Under a bench-peer run its Go collector ran every 1.5-6.7 s, each time for 41-252 ms of wall time
and 82-202 ms of CPU (GODEBUG=gctrace=1, three runs): its mark workers take both cores, and
whichever plugin is measured one call at a time meanwhile waits for one. In those three runs,
traced call by call (docs/bench/latest.md), the three latency phases (of 36) that overlapped such a
collection were the three with a p99 above 5 ms, and 8 of their 11 calls over 4 ms ran inside it.
Which side that hits depends on where the earlier phases left the collector's cycle, not on the
plugin; on a node the API server runs elsewhere. So each latency phase starts right after a
collection, when the next one is furthest off (the heap has to grow back to twice what survived).

The Go runtime collects on `GET /debug/pprof/heap?gc=1` before it writes the heap profile, and
the answer comes once that collection is finished. That needs `--profiling=true`
(tests/controlplane.cluster.ControlPlane's `profiling`), and the admin's TLS (its `admin_tls()`).
"""

from __future__ import annotations

import ssl
import time
import urllib.error
import urllib.request
from urllib.parse import urlsplit

PATH = "/debug/pprof/heap?gc=1"


def collect(server: str, context: ssl.SSLContext, timeout: float = 30.0) -> float:
    """One full collection in the API server at `server` (https URL); the seconds it took, the
    answer included. Raises RuntimeError for any answer but 200 (with profiling off: 404)."""
    if urlsplit(server).scheme != "https":
        raise ValueError(f"not an https URL of an API server: {server!r}")
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(server + PATH, context=context, timeout=timeout) as answer:
            answer.read()
    except urllib.error.HTTPError as e:
        text = e.read()[:200].decode("utf-8", "replace")
        raise RuntimeError(
            f"the API server at {server} did not collect its garbage on GET {PATH}: "
            f"HTTP {e.code} {text!r} (is it run with --profiling=true?)"
        ) from None
    return time.perf_counter() - started
