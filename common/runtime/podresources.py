"""The kubelet's word on which containers use which ResourceClaims on this node.

Reconcile releases a claim the API server dropped, unless something still uses it: a tenant can
remove their claim's finalizer and delete it under a running pod, and releasing its devices then
would let the scheduler give them to another claim while the pod holds them. A driver sees some
use itself (driver.SeesUse: the CPU driver's NRI containers, the NIC driver's namespaces); the
kubelet sees it for every driver: its pod resources API (`<kubelet root>/pod-resources/
kubelet.sock`, proto/podresources/v1) lists each container with the claims it was given, from
the kubelet's own record, which outlives the claim's API object. That list is filled while the
kubelet's KubeletPodResourcesDynamicResources gate is on (beta, on by default since 1.34). It
holds a pod's containers (newer kubelets add its sidecars), not its ordinary init containers: a
claim only an init container uses is not seen while that runs.

A claim is matched by namespace and name (the list has no UID): a new claim under the old name,
used by a running pod, keeps the old one's devices too, until that pod ends. That strands, it
never hands out twice.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from google.protobuf.message import DecodeError
from topodra.common.runtime import grpcclient
from topodra.common.runtime.driver import ClaimRef

if TYPE_CHECKING:
    from topodra.proto.podresources.v1 import api_pb2 as pb

SOCKET = "pod-resources/kubelet.sock"  # under the kubelet's root folder
LIST = "/v1.PodResourcesLister/List"


def claim_users(answer: pb.ListPodResourcesResponse) -> dict[tuple[str, str], list[str]]:
    """(claim namespace, claim name) -> "namespace/pod/container" of each container given it."""
    out: dict[tuple[str, str], list[str]] = {}
    for pod in answer.pod_resources:
        for c in pod.containers:
            for d in c.dynamic_resources:
                key = (d.claim_namespace or pod.namespace, d.claim_name)
                out.setdefault(key, []).append(f"{pod.namespace}/{pod.name}/{c.name}")
    return out


class KubeletPods:
    """Asks the kubelet's pod resources socket, one List per question."""

    def __init__(self, socket_path: Path, timeout: float = 5.0) -> None:
        self.path = socket_path
        self._timeout = timeout

    def users(self) -> Mapping[tuple[str, str], list[str]] | None:
        """The kubelet's answer; None when this driver cannot reach the socket's folder (not
        mounted: nothing is known, as before the kubelet had this list). Raises
        grpcclient.CallError or OSError when the kubelet could not be asked."""
        if not os.path.isdir(self.path.parent):
            return None
        try:
            raw = grpcclient.call(str(self.path), LIST, b"", timeout=self._timeout)
        except FileNotFoundError:
            raise OSError(f"{self.path} is missing (is the kubelet restarting?)") from None
        # loaded on the first question (a claim reconcile would release), not by every driver
        from topodra.proto.podresources.v1 import api_pb2 as pb

        try:
            return claim_users(pb.ListPodResourcesResponse.FromString(raw))
        except DecodeError as e:
            raise grpcclient.CallError(f"cannot read the kubelet's list: {e}") from e

    def in_use(self, claims: Sequence[ClaimRef]) -> dict[str, str]:
        """Claim UID -> who the kubelet says uses that claim, for the log; "" when nobody or
        nothing is known. One question for all of them (reconcile asks once a round, outside
        its lock). When the kubelet cannot be asked each answer says so: reconcile keeps the
        claims (fail closed)."""
        try:
            users = self.users()
        except (OSError, grpcclient.CallError) as e:
            return {c.uid: f"the kubelet cannot be asked which containers use it ({e})" for c in claims}
        out = {}
        for claim in claims:
            found = (users or {}).get((claim.namespace, claim.name))
            more = f" and {len(found) - 3} more" if found and len(found) > 3 else ""
            out[claim.uid] = (
                f"the kubelet lists container {', '.join(found[:3])}{more} with it" if found else ""
            )
        return out
