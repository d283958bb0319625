"""The Prometheus metrics of the kubelet plugin runtime, defined once so every part increments
the same objects (they live in prometheus-client's default registry, next to its process
metrics such as `process_resident_memory_bytes`).

Who updates what, so nothing is counted twice:
- the gRPC servicer (`draserver`): `CLAIM_OPERATIONS`, `CLAIM_ERRORS` (one per claim in a call)
  and `GRPC_DURATION` (one per call);
- the claim core (`claims.ClaimManager`): `CLAIM_DURATION` (time spent on one claim) and
  `PREPARED_CLAIMS` (claims held now, counted when the gauge is read);
- the publisher (`common/publisher`): `PUBLISHED_DEVICES`, `SLICE_WRITES`, `SLICE_ERRORS`,
  `SLICE_LAST_SUCCESS`;
- registration and health: `KUBELET_REGISTERED`, `HEALTH_STREAMS`.
Every metric carries the DRA driver name as label `driver` (`serve all` runs several).
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

# Prepare is expected in the low milliseconds; the tail reaches the kubelet's 45 s deadline.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 45.0)

CLAIM_OPERATIONS = Counter(
    "topodra_claim_operations",
    "Claims received in NodePrepareResources/NodeUnprepareResources calls.",
    ["driver", "operation"],  # operation: prepare | unprepare
)
CLAIM_ERRORS = Counter(
    "topodra_claim_operation_errors",
    "Claims answered with a per-claim error.",
    ["driver", "operation"],
)
GRPC_DURATION = Histogram(
    "topodra_grpc_request_duration_seconds",
    "Duration of one kubelet gRPC call on the DRA socket.",
    ["driver", "method", "version"],  # method: NodePrepareResources | ...; version: v1 | v1beta1
    buckets=LATENCY_BUCKETS,
)
CLAIM_DURATION = Histogram(
    "topodra_claim_operation_duration_seconds",
    "Time spent preparing or unpreparing one claim, claim GET included.",
    ["driver", "operation"],
    buckets=LATENCY_BUCKETS,
)
PREPARED_CLAIMS = Gauge("topodra_prepared_claims", "Claims currently prepared on this node.", ["driver"])
PUBLISHED_DEVICES = Gauge(
    "topodra_published_devices", "Devices in this driver's ResourceSlices for this node.", ["driver"]
)
KUBELET_REGISTERED = Gauge(
    "topodra_kubelet_registered", "1 once the kubelet confirmed registration, 0 otherwise.", ["driver"]
)
HEALTH_STREAMS = Gauge("topodra_health_streams", "Open NodeWatchResources streams.", ["driver"])
SLICE_WRITES = Counter(
    "topodra_resourceslice_writes",
    "ResourceSlice writes accepted by the API server.",
    ["driver", "verb"],  # verb: create | update | delete
)
SLICE_ERRORS = Counter(
    "topodra_resourceslice_errors",
    "Failed ResourceSlice API calls (writes, list, watch, node lookup).",
    ["driver", "verb", "code"],  # code: HTTP status or "network"
)
SLICE_LAST_SUCCESS = Gauge(
    "topodra_resourceslice_last_sync_success_timestamp_seconds",
    "Unix time of the last sync that left the API server matching the desired slices.",
    ["driver"],
)
