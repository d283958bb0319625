"""topodra's quantity values are the real kube-apiserver's: what it stores for a text is what
`quantity.parse` says that text is worth (rounding to 1n, the exponent's 32 bits, the binary cap).

Each text goes into a ResourceSlice's capacity and comes back in the server's canonical form;
both must parse to the same value, so the publisher never sees a difference that is not there.
"""

from __future__ import annotations

import pytest
from topodra.common.publisher.quantity import parse

from tests.controlplane.cluster import ControlPlane, api_resource, unique_name
from tests.controlplane.objects import slice_body

pytestmark = pytest.mark.controlplane

TEXTS = [
    "1",
    "1500m",
    "1.5Gi",
    "0.1234567891",
    "1.0000000000000000000000000000000000000000000000000000000000000000000001",
    "1e-999",  # (1e-99999999 times out in the server itself: it computes 10**99999990 to round)
    "1e4294967296",
    "1e4294967299",
    "9Ei",
    "0.0000000001Ki",
    "12e-12",
    "123456789012345678901234567890",
]


def test_parse_agrees_with_what_the_server_stores(control_plane: ControlPlane) -> None:
    node = unique_name("qty")
    capacity = {f"example.com/q{i}": {"value": text} for i, text in enumerate(TEXTS)}
    body = slice_body("quantity.example.com", node, [{"name": "d0", "capacity": capacity}])
    slices = api_resource(control_plane.dynamic, "ResourceSlice")
    created = slices.create(body=body).to_dict()
    try:
        back = created["spec"]["devices"][0]["capacity"]
        for i, text in enumerate(TEXTS):
            stored = back[f"example.com/q{i}"]["value"]
            assert parse(stored) == parse(text), (text, stored)
    finally:
        slices.delete(name=created["metadata"]["name"])
