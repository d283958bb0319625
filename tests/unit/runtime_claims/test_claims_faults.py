"""kill -9 of the process serving prepare/unprepare, at random moments and at every write boundary.

Each trial: a child process (forked from a warm zygote, see crashchild.py) recovers from the
previous trial's state and runs random prepare/unprepare calls on real files; the test kills it
with SIGKILL, then "restarts" (a fresh ClaimManager here on the same folders) and checks:
- no device is held by two claims (on the driver's "hardware" and in the checkpoint);
- no claim whose prepare was answered (and not unprepared since) is lost, and its answer is the same;
- every completed claim has exactly its CDI spec on disk, and nothing else of ours is there;
- every started-only claim was rolled back: no started record, no hardware hold left behind.
In the damage trials the checkpoint is also damaged after the kill (truncated, zeroed, bytes
flipped, garbage, nested too deep): the same holds, except that a claim whose release was under
way may stay recorded after its hardware was released (fail closed: held, never given twice).
The seed of every trial is in the assertion message.
Every trial runs twice: with holds on "hardware" that outlives the process, and with holds that
die with it (`MemoryHoldDriver`, as the CPU and accelerator drivers'), for which the claim core
writes no started mark before the driver acts.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from topodra.common.runtime.checkpoint import Phase, newest, slot_paths
from topodra.common.runtime.claims import ClaimManager
from topodra.common.runtime.driver import ClaimRef

from tests.conftest import REPO
from tests.unit.runtime_claims import crashchild
from tests.unit.runtime_claims.claimkit import (
    DRIVER,
    EXCLUSIVE,
    FileClaimStore,
    HoldDriver,
    MemoryHoldDriver,
    Result,
    claim_object,
    driver_config,
    new_uid,
)

CHILD = Path(crashchild.__file__)


class Zygote:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=REPO, text=True
        )

    def spawn(self, cfg: dict[str, Any]) -> int:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(cfg) + "\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline())

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(10)


@pytest.fixture(scope="module")
def zygote() -> Iterator[Zygote]:
    z = Zygote()
    yield z
    z.close()


def kill_and_wait(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.001)
    raise AssertionError(f"child {pid} did not die")


def make_pool(store: FileClaimStore, rng: random.Random) -> list[ClaimRef]:
    """Claims that compete: 10 over 8 exclusive devices, 4 sharing one device (one share id reused)."""
    refs = []
    for i in range(10):
        devices = rng.sample(EXCLUSIVE, rng.choice((1, 1, 2)))
        results = [Result(f"r{j}" if j else "r/sub", d) for j, d in enumerate(devices)]
        config = [driver_config(env=[f"C{i}=x"])] if i % 3 == 0 else []
        refs.append(store.put(claim_object("ns1", f"ex{i}", new_uid(), results, config)))
    shares = [new_uid() for _ in range(3)]
    for i, share in enumerate([*shares, shares[0]]):
        results = [Result("s", "shared-0", share_id=share)]
        if i == 1:
            results.append(Result("e", "dev-0"))
        refs.append(store.put(claim_object("ns1", f"sh{i}", new_uid(), results)))
    return refs


@dataclass
class Model:
    """What the kubelet knows from answers it got: uid -> answer ids (prepared) or None."""

    prepared: dict[str, list[list[str]]] = field(default_factory=dict)
    unprepared: set[str] = field(default_factory=set)
    uncertain: set[str] = field(default_factory=set)
    calls: int = 0

    def read_log(self, path: Path) -> None:
        """A last line without its newline was cut short by the kill: the child writes each
        event with one write(2), but the kernel stops copying a write at a page boundary of the
        file once SIGKILL is pending. Such an answer never reached the kubelet whole: it is not
        counted, and its claims stay in flight (uncertain). Any other line must parse."""
        if not path.exists():
            return
        in_flight: set[str] = set()
        *lines, _torn = path.read_text().split("\n")  # "" when the last write was whole
        for line in lines:
            ev = json.loads(line)
            if ev["t"] == "B":
                in_flight.update(ev["uids"])
            elif ev["t"] == "A":
                self.calls += 1
                for uid, r in ev["res"].items():
                    in_flight.discard(uid)
                    self.uncertain.discard(uid)
                    if ev["op"] == "prepare" and not r["error"]:
                        self.prepared[uid] = r["ids"]
                        self.unprepared.discard(uid)
                    elif (ev["op"] == "unprepare" and not r["error"]) or ev["op"] == "prepare":
                        # a failed prepare means "not prepared" (a prepared claim answers again)
                        self.prepared.pop(uid, None)
                        self.unprepared.add(uid)
        self.uncertain |= in_flight


@dataclass
class Trials:
    tmp: Path
    zygote: Zygote
    refs: list[ClaimRef]
    memory: bool = False  # the driver's holds die with its process
    model: Model = field(default_factory=Model)
    n: int = 0
    kills: int = 0
    rolled_back: int = 0
    recovery_kills: int = 0

    @property
    def dirs(self) -> dict[str, str]:
        return {k: str(self.tmp / k) for k in ("state", "cdi", "hw")} | {
            "claims": str(self.tmp / "claims.json")
        }

    def spawn(self, seed: int, **extra: Any) -> tuple[int, Path]:
        self.n += 1
        log = self.tmp / f"trial-{self.n}.log"
        cfg = {
            **self.dirs,
            "seed": seed,
            "log": str(log),
            "stderr": str(self.tmp / f"trial-{self.n}.stderr"),
            "refs": [{"namespace": r.namespace, "name": r.name, "uid": r.uid} for r in self.refs],
            "memory": self.memory,
            **extra,
        }
        return self.zygote.spawn(cfg), log

    def wait_ready(self, log: Path, pid: int, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if log.exists() and '"t": "ready"' in log.read_text():
                return
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.001)
        stderr = (
            (self.tmp / f"trial-{self.n}.stderr").read_text()
            if (self.tmp / f"trial-{self.n}.stderr").exists()
            else ""
        )
        raise AssertionError(f"trial {self.n}: child never got ready\n{stderr}")

    def wait_answers(self, log: Path, pid: int, count: int, timeout: float = 20) -> None:
        """Until the child has answered `count` calls (it keeps going until killed)."""
        deadline = time.monotonic() + timeout
        while log.read_text().count('"t": "A"') < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"trial {self.n}: child answered too few calls")
            time.sleep(0.001)

    def wait_dead(self, pid: int, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.001)
        kill_and_wait(pid)
        raise AssertionError(f"trial {self.n}: child {pid} did not crash itself")

    def kill(self, pid: int, log: Path) -> None:
        kill_and_wait(pid)
        self.kills += 1
        self.model.read_log(log)

    def restart_and_check(self, what: str, damaged: bool = False) -> None:
        """The restart: recover on the same folders, then check every invariant."""
        started_before = set() if damaged else self._started_in_checkpoint()
        driver = (MemoryHoldDriver if self.memory else HoldDriver)(Path(self.dirs["hw"]))
        m = ClaimManager.create(
            driver,
            "node-a",
            FileClaimStore(Path(self.dirs["claims"])),
            Path(self.dirs["state"]),
            Path(self.dirs["cdi"]),
        )
        m.start()
        try:
            self._check(m, driver, what, damaged)
        finally:
            m.close()
        self.rolled_back += len(started_before)

    def _started_in_checkpoint(self) -> set[str]:
        found = newest(Path(self.dirs["state"]), DRIVER)
        if found is None:
            return set()
        return {u for u, c in found[1]["claims"].items() if c["phase"] == "started"}

    def _check(self, m: ClaimManager, driver: HoldDriver, what: str, damaged: bool = False) -> None:
        recs = m.prepared()
        started = [u for u, r in recs.items() if r.phase is not Phase.COMPLETED]
        assert started == [], f"{what}: started-only claims not rolled back: {started}"
        assert driver.violations() == [], f"{what}: the driver saw a double allocation"
        aside = list(Path(self.dirs["state"]).glob("*.corrupt-*"))
        if damaged:
            for p in aside:
                p.unlink()
        else:
            assert not aside, f"{what}: checkpoint was corrupted"

        # the hardware holds exactly what the completed claims hold
        expected: dict[str, str] = {}
        for uid, r in recs.items():
            assert r.preparation is not None
            for hold in r.preparation.state["holds"]:
                assert hold not in expected, f"{what}: {hold} held by {expected[hold]} and {uid}"
                expected[hold] = uid
        if damaged:  # a release under way at the kill may have freed hardware still recorded
            extra = {h: u for h, u in driver.holdings().items() if expected.get(h) != u}
            assert not extra, f"{what}: hardware holds no record knows: {extra}"
        else:
            assert driver.holdings() == expected, f"{what}: hardware differs from the checkpoint"

        # no exclusive device (and no device+shareID) in two completed claims
        owners: dict[tuple[str, str | None], str] = {}
        for uid, r in recs.items():
            for a in r.allocated:
                key = (a.device, a.share_id if a.device.startswith("shared") else None)
                assert key not in owners, f"{what}: {key} in claims {owners[key]} and {uid}"
                owners[key] = uid

        # CDI specs: exactly one per completed claim, with the recorded content, no temp files
        cdi = Path(self.dirs["cdi"])
        on_disk = {p.name for p in cdi.iterdir()} if cdi.exists() else set()
        assert on_disk == {r.cdi_file for r in recs.values()}, f"{what}: CDI folder {on_disk}"
        for r in recs.values():
            assert json.loads((cdi / r.cdi_file).read_text()) == r.cdi_spec

        # what the kubelet was told survived
        model = self.model
        for uid, ids in model.prepared.items():
            if uid in model.uncertain:
                continue
            assert uid in recs, f"{what}: claim {uid} was answered prepared and is lost"
            assert [list(d.cdi_device_ids) for d in recs[uid].result] == ids
        for uid in model.unprepared - model.uncertain:
            assert uid not in recs, f"{what}: claim {uid} was answered unprepared and is back"

        # the repeated answer is the recorded one, without calling the driver
        for uid in list(recs)[:3]:
            r = recs[uid]
            out = m.prepare([r.claim])[uid]
            assert [list(d.cdi_device_ids) for d in out.devices] == [list(d.cdi_device_ids) for d in r.result]
        assert [c for c in driver.calls if c[0] == "prepare"] == []

        # adopt the real outcome of calls that were in flight at the kill
        for uid in model.uncertain:
            if uid in recs:
                model.prepared[uid] = [list(d.cdi_device_ids) for d in recs[uid].result]
                model.unprepared.discard(uid)
            else:
                model.prepared.pop(uid, None)
                model.unprepared.add(uid)
        model.uncertain.clear()


def test_an_answer_the_kill_cut_short_leaves_its_claims_uncertain(tmp_path: Path) -> None:
    """Seen once in CI: the kill landed inside the child's write of a long answer line."""
    before = {"t": "B", "op": "prepare", "uids": ["u1", "u2"]}
    answer = {"t": "A", "op": "prepare", "res": {"u1": {"error": "", "ids": [["k=d"]]}}}
    whole = json.dumps(before) + "\n" + json.dumps(answer) + "\n"
    log = tmp_path / "log"
    log.write_text(whole + json.dumps({**answer, "res": {"u2": {"error": "", "ids": [["k=e"]]}}})[:40])
    model = Model()
    model.read_log(log)
    assert model.prepared == {"u1": [["k=d"]]} and model.uncertain == {"u2"} and model.calls == 1

    log.write_text(json.dumps(before)[:40] + "\n" + json.dumps(answer) + "\n")
    with pytest.raises(json.JSONDecodeError):  # only the last line can be torn
        Model().read_log(log)


@pytest.fixture(params=["hardware", "memory"])
def trials(request: pytest.FixtureRequest, tmp_path: Path, zygote: Zygote) -> Trials:
    store = FileClaimStore(tmp_path / "claims.json")
    refs = make_pool(store, random.Random(7))
    return Trials(tmp_path, zygote, refs, memory=request.param == "memory")


def report(t: Trials, name: str) -> None:
    print(
        f"\n{name}: {t.kills} kills, {t.model.calls} answered calls, {t.rolled_back} started-only claims "
        f"rolled back on restart, {len(t.model.prepared)} claims prepared at the end"
    )


def test_kill_at_random_moments(trials: Trials) -> None:
    rng = random.Random(1234)
    for i in range(40):
        seed = rng.randrange(1 << 30)
        pid, log = trials.spawn(seed, threads=1 + i % 2)
        trials.wait_ready(log, pid)
        trials.wait_answers(log, pid, rng.randrange(8))  # let it work, then kill at a random moment
        time.sleep(rng.uniform(0, 0.02))
        trials.kill(pid, log)
        trials.restart_and_check(f"random trial {i} (seed {seed})")
    report(trials, "random kills")


def test_kill_at_every_write_boundary(trials: Trials) -> None:
    for k in range(1, 41):
        at, after = (k + 1) // 2, k % 2 == 0  # 1 before, 1 after, 2 before, ...
        pid, log = trials.spawn(k, crash_io=at, crash_after=after)
        trials.wait_ready(log, pid)
        trials.wait_dead(pid)
        trials.kills += 1
        trials.model.read_log(log)
        trials.restart_and_check(f"io-crash trial {k} (seed {k}, fsync/rename #{at}, after: {after})")
    report(trials, "write-boundary kills")
    assert trials.rolled_back > 5  # the boundaries really left started-only claims behind


def test_kill_during_recovery(trials: Trials) -> None:
    """A crash, then a crash of the restarted process while it recovers, then the check."""
    rng = random.Random(99)
    for i in range(10):
        seed = rng.randrange(1 << 30)
        pid, log = trials.spawn(seed)
        trials.wait_ready(log, pid)
        trials.wait_answers(log, pid, rng.randrange(4))
        time.sleep(rng.uniform(0, 0.01))
        trials.kill(pid, log)
        if i % 2:  # at a random moment (recovery in a forked child takes milliseconds)
            pid, log = trials.spawn(seed + 1)
            time.sleep(rng.uniform(0, 0.01))
            trials.kill(pid, log)
        else:  # at the k-th fsync/rename from the start, i.e. inside the recovery's own writes
            k = 1 + i // 2
            pid, log = trials.spawn(seed + 1, crash_io=k, crash_after=bool(i % 4), crash_in_recovery=True)
            trials.wait_dead(pid)
            trials.kills += 1
            trials.model.read_log(log)
            crashed_in_recovery = '"t": "ready"' not in log.read_text()
            trials.recovery_kills += crashed_in_recovery
        trials.restart_and_check(f"recovery trial {i} (seed {seed})")
    report(trials, "kills during recovery")
    print(f"  of which {trials.recovery_kills} certainly inside recovery (before ready)")


def newest_slot(state: Path) -> Path:
    """The checkpoint slot a start would read (the first slot when none verifies)."""
    found = newest(state, DRIVER)
    return found[0] if found is not None else slot_paths(state, DRIVER)[0]


def damage(path: Path, rng: random.Random) -> str:
    """Damage the checkpoint as a disk or a careless hand might; returns what was done."""
    data = path.read_bytes() if path.exists() else b""
    kind = rng.choice(("truncate", "zero", "flip", "garbage", "nested"))
    if kind == "truncate":
        data = data[: rng.randrange(len(data) or 1)]
    elif kind == "zero":
        data = b""
    elif kind == "flip":
        out = bytearray(data or b"{}")
        for _ in range(rng.randint(1, 4)):
            out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
        data = bytes(out)
    elif kind == "garbage":
        data = bytes(rng.randrange(256) for _ in range(rng.randint(1, 4096)))
    else:
        data = b'{"claims":' * 50_000
    path.write_bytes(data)
    return kind


def test_kill_and_damage_the_checkpoint(trials: Trials) -> None:
    """Kills at random moments and at write boundaries; after two kills of three the checkpoint
    is damaged before the restart. No device is ever held by two claims."""
    rng = random.Random(4321)
    state = Path(trials.dirs["state"])
    kinds: list[str] = []
    for i in range(36):
        seed = rng.randrange(1 << 30)
        if i % 2:
            pid, log = trials.spawn(seed, crash_io=rng.randint(1, 12), crash_after=bool(rng.randrange(2)))
            trials.wait_ready(log, pid)
            trials.wait_dead(pid)
            trials.kills += 1
            trials.model.read_log(log)
        else:
            pid, log = trials.spawn(seed, threads=1 + i % 4 // 2)
            trials.wait_ready(log, pid)
            trials.wait_answers(log, pid, rng.randrange(8))
            time.sleep(rng.uniform(0, 0.02))
            trials.kill(pid, log)
        done = damage(newest_slot(state), rng) if i % 3 != 2 else "none"
        kinds.append(done)
        # every check is the damaged one: a release cut short by an earlier kill may still be
        # recorded after its hardware was freed, until that claim is unprepared again
        trials.restart_and_check(f"damage trial {i} (seed {seed}, damage {done})", damaged=True)
    report(trials, "kills with a damaged checkpoint")
    print(f"  damage: {', '.join(f'{k} x{kinds.count(k)}' for k in sorted(set(kinds)))}")
    assert kinds.count("none") == 12
