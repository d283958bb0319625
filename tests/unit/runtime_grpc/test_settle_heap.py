"""`topodra serve` takes its start-up heap out of the cyclic collector once its plugins serve.

Why it matters is in `settle_heap`'s docstring; how much it saves is measured by a benchmark
(hack/bench-prepare with and without, docs/bench/latest.md), never here.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable, Iterator

import pytest
from topodra.common.runtime.plugin import settle_heap
from topodra.drivers.cli import serve
from topodra.drivers.cli.main import build_parser


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()  # the test process keeps collecting its own garbage


class Node:
    def __init__(self) -> None:
        self.me = self


def test_settle_heap_collects_start_up_garbage_then_freezes_the_rest(unfrozen: None) -> None:
    garbage = Node()  # a cycle: only the cyclic collector frees it
    gone = weakref.ref(garbage)
    del garbage
    kept = Node()
    settle_heap()
    assert gone() is None
    assert gc.get_freeze_count() > 0
    assert not any(o is kept for o in gc.get_objects())  # frozen: outside every generation


def test_serve_settles_the_heap_once_its_plugins_serve(monkeypatch: pytest.MonkeyPatch) -> None:
    # the seam: serve_all itself (sockets, signals) is tested elsewhere; here only what run()
    # hands it, with no services built
    seen: list[Callable[[], None] | None] = []
    monkeypatch.setattr(serve, "build", lambda args, kinds: ([], None))
    monkeypatch.setattr(serve, "serve_all", lambda services, on_started=None: seen.append(on_started))
    args = build_parser().parse_args(["serve", "cpu", "--node-name", "n1", "--sysfs-root", "/"])
    assert args.run(args) == 0
    assert seen == [settle_heap]
