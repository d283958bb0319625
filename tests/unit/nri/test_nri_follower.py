"""`follower.covers`: when a container already has what a policy wants, no update is sent; the
`requested` hook: a policy sees what a request asked for next to its own answer."""

from __future__ import annotations

from collections.abc import Sequence

from topodra.common import logs
from topodra.common.nri.follower import Follower, Tracked, covers
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


class Recorder(Follower[str, None, str]):
    """A policy that puts every container on CPUs 0-1 and records what the requests asked."""

    def __init__(self, socket_path: str) -> None:
        super().__init__("recorder", socket_path, logs.get("test"), thread="t", retry_interval=1.0)
        self.asked: list[tuple[str, str, str, str, str]] = []

    def use(self, container: api.Container) -> str:
        return container.name

    def context(self) -> None:
        return None

    def want(self, use: str, context: None) -> tuple[str, Sequence[str]]:
        return f"answer-for-{use}", ()

    def resources(self, want: str) -> api.LinuxResources:
        return _res("0-1")

    def current(self, container: api.Container) -> api.LinuxResources:
        return _res(container.linux.resources.cpu.cpus)

    def requested(self, event: str, entry: Tracked[str], asked: api.LinuxResources, want: str) -> None:
        self.asked.append((event, entry.pod, entry.name, asked.cpu.cpus, want))


def test_requests_show_the_policy_what_they_asked_next_to_its_answer(tmp_path: object) -> None:
    f = Recorder(f"{tmp_path}/nri.sock")  # never started: the handlers are called directly
    pod = api.PodSandbox(id="p", name="pod", namespace="ns")
    created = api.Container(id="c1", name="main", pod_sandbox_id="p")
    created.linux.resources.cpu.cpus = "3"
    f.create_container(api.CreateContainerRequest(pod=pod, container=created))
    update = api.UpdateContainerRequest(pod=pod, container=api.Container(id="c1", name="main"))
    update.linux_resources.cpu.cpus = "0-15"
    assert f.update_container(update).update[0].linux.resources.cpu.cpus == "0-1"
    unknown = api.UpdateContainerRequest(pod=pod, container=api.Container(id="c2", name="other"))
    unknown.linux_resources.cpu.cpus = "5"
    assert not f.update_container(unknown).update  # not ours to answer: nothing to compare
    assert f.asked == [
        ("create", "ns/pod", "main", "3", "answer-for-main"),
        ("update", "ns/pod", "main", "0-15", "answer-for-main"),
    ]


def test_nothing_is_kept_of_containers_and_pods_that_are_gone(tmp_path: object) -> None:
    """Pods come and go by the thousand on a busy node: once their containers are removed, the
    follower keeps nothing of them (it ran for weeks between reconnects)."""
    f = Recorder(f"{tmp_path}/nri.sock")
    for i in range(100):
        pod = api.PodSandbox(id=f"p{i}", name=f"pod{i}", namespace="ns")
        c = api.Container(id=f"c{i}", name="main", pod_sandbox_id=pod.id)
        f.create_container(api.CreateContainerRequest(pod=pod, container=c))
        f.container_event(api.REMOVE_CONTAINER, pod, c)
    kept = {k: len(v) for k, v in vars(f).items() if isinstance(v, dict | list | set) and k != "asked"}
    assert f.tracked() == 0 and not any(kept.values()), kept
