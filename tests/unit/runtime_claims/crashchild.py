"""Child side of the kill -9 fault trials (test_claims_faults.py).

`python crashchild.py zygote` imports everything once and then forks one trial process per line
of JSON read from stdin, answering with the child's pid. Forking from a warm process keeps a
trial at milliseconds instead of a fresh interpreter each time, and each child is still a real,
separate process running the ClaimManager on real files, killed with SIGKILL by the test.

A trial child recovers (ClaimManager.start), writes `{"t": "ready"}` to its log, then runs random
prepare/unprepare calls until it is killed, logging `{"t": "B", ...}` before and `{"t": "A", ...}`
with the answers after each call. With `crash_io` set it SIGKILLs itself at that fsync, fdatasync,
pwrite, rename, unlink or link
(counted after ready, or from the start with `crash_in_recovery`), exactly before or after the
real call, to hit every write boundary.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from topodra.common.cdi.spec import CdiWriter
from topodra.common.runtime.checkpoint import Checkpoint
from topodra.common.runtime.claims import ClaimManager, cdi_kind
from topodra.common.runtime.driver import ClaimRef

from tests.unit.runtime_claims.claimkit import DRIVER, NODE, FileClaimStore, HoldDriver, MemoryHoldDriver


def build_manager(cfg: dict[str, Any]) -> ClaimManager:
    kind = MemoryHoldDriver if cfg.get("memory") else HoldDriver
    return ClaimManager(
        kind(Path(cfg["hw"])),
        NODE,
        FileClaimStore(Path(cfg["claims"])),
        Checkpoint(Path(cfg["state"]), DRIVER),
        CdiWriter(Path(cfg["cdi"]), cdi_kind(DRIVER)),
    )


def _install_io_crash(count: int, after: bool) -> Callable[[], None]:
    """Wrap os.fsync/fdatasync/pwrite/replace/unlink/link; the `count`-th call once armed kills
    this process."""
    seen = 0
    armed = False
    lock = threading.Lock()

    def wrap(real: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            nonlocal seen
            with lock:
                if armed:
                    seen += 1
                hit = armed and seen == count
            if hit and not after:
                os.kill(os.getpid(), signal.SIGKILL)
            try:
                return real(*args)
            finally:  # also after a call that failed (an unlink of a file already gone)
                if hit:
                    os.kill(os.getpid(), signal.SIGKILL)

        return call

    os.fsync = wrap(os.fsync)
    os.fdatasync = wrap(os.fdatasync)  # a checkpoint slot synced
    os.pwrite = wrap(os.pwrite)  # a checkpoint slot written in place (and the lock file's token)
    os.replace = wrap(os.replace)
    os.unlink = wrap(os.unlink)  # a spec removed: the last step of an unprepare
    os.link = wrap(os.link)  # the previous checkpoint kept

    def arm() -> None:
        nonlocal armed
        armed = True

    return arm


def run_trial(cfg: dict[str, Any]) -> NoReturn:
    err = os.open(cfg["stderr"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(err, 2)
    log = os.open(cfg["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def emit(obj: dict[str, Any]) -> None:
        os.write(log, (json.dumps(obj) + "\n").encode())  # one write; a kill may cut it (Model.read_log)

    arm = _install_io_crash(cfg["crash_io"], cfg.get("crash_after", False)) if cfg.get("crash_io") else None
    m = build_manager(cfg)
    if arm is not None and cfg.get("crash_in_recovery"):
        arm()  # count from the start: the kill lands inside recovery
    m.start()
    emit({"t": "ready", "pid": os.getpid()})
    if arm is not None:
        arm()
    refs = [ClaimRef(**r) for r in cfg["refs"]]
    threads = int(cfg.get("threads", 1))

    def work(part: list[ClaimRef], seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(int(cfg.get("max_ops", 10_000))):
            batch = rng.sample(part, rng.randint(1, min(3, len(part))))
            op = rng.choice(("prepare", "prepare", "unprepare"))
            uids = [r.uid for r in batch]
            emit({"t": "B", "op": op, "uids": uids})
            if op == "prepare":
                out = m.prepare(batch)
                res: dict[str, Any] = {
                    u: {"error": o.error, "ids": [list(d.cdi_device_ids) for d in o.devices]}
                    for u, o in out.items()
                }
            else:
                res = {u: {"error": e} for u, e in m.unprepare(batch).items()}
            emit({"t": "A", "op": op, "res": res})

    workers = [
        threading.Thread(target=work, args=(refs[i::threads], cfg["seed"] * 100 + i)) for i in range(threads)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    emit({"t": "done"})
    os._exit(0)


def zygote() -> None:
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    for line in sys.stdin:
        cfg = json.loads(line)
        pid = os.fork()
        if pid == 0:
            try:
                run_trial(cfg)
            except BaseException:
                import traceback

                traceback.print_exc()
                os._exit(3)
        sys.stdout.write(f"{pid}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    zygote()
