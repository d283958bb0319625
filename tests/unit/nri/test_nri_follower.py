"""`follower.covers`: when a container already has what a policy wants, no update is sent."""

from __future__ import annotations

from topodra.common.nri.follower import covers
from topodra.proto.nri.v1alpha1 import api_pb2 as api


def _res(cpus: str = "", mems: str = "") -> api.LinuxResources:
    return api.LinuxResources(cpu=api.LinuxCPU(cpus=cpus, mems=mems))


def test_fields_the_policy_leaves_unset_are_the_runtimes() -> None:
    assert covers(_res("0-3", "1"), _res("0-3"))  # mems not restricted: whatever it has is fine
    assert not covers(_res("0-3", "1"), _res("0-3", "0"))
    assert not covers(_res("0-1"), _res("0-3"))
    assert not covers(api.LinuxResources(), _res("0-3"))  # unknown cpuset: update it


def test_what_an_update_leaves_follows_the_policy() -> None:
    """The reconciler merges what it sent into what it knew; the result covers the wish."""
    have = _res("0-7", "0")
    want = _res("2-3")
    have.MergeFrom(want)
    assert covers(have, want) and have.cpu.mems == "0"
