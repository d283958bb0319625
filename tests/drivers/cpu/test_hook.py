"""hooks/cpuset.sh on prepared cgroup trees: v1 (hybrid) and v2 paths, unions, refusals.

This host has cpuset on cgroup v1 only, so the unified (v2) path cannot be exercised for real
here; these tests point the hook (TOPODRA_PROC) at a folder laid out like /proc and the cgroup
mounts, where plain files stand in for the kernel's. The real v1 path is proven end to end in
test_pinning_podman.py with a real container. Each case runs under dash (Debian's /bin/sh) and
under busybox with only busybox applets on PATH, so the script stays POSIX.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from topodra.drivers.cpu import pinning

UID_A = "6f1c1a9e-3c0b-4d8e-9a51-0d2b8f9e7c11"
UID_B = "0a7b5a44-9b7e-4c1f-8e7a-55d1c3a9e002"
PID = 4242
SHELLS = ["dash", "busybox"]


@dataclass
class Tree:
    root: Path
    proc: Path
    bundle: Path
    v1: Path
    v2: Path


def hook(tmp: Path) -> Path:
    path = tmp / "hooks" / pinning.HOOK_NAME
    if not path.exists():
        pinning.install_hook(path.parent)
    return path


def make_tree(tmp: Path, cgroup_lines: list[str], mounts: list[str]) -> Tree:
    proc = tmp / "proc"
    (proc / str(PID)).mkdir(parents=True)
    (proc / str(PID) / "cgroup").write_text("\n".join(cgroup_lines) + "\n")
    (proc / "mounts").write_text("\n".join(mounts) + "\n")
    bundle = tmp / "bundle"
    bundle.mkdir()
    return Tree(tmp, proc, bundle, tmp / "cg-v1-cpuset", tmp / "cg-v2")


def v1_tree(tmp: Path, path: str = "/kubepods/pod1/ctr1") -> tuple[Tree, Path]:
    t = make_tree(
        tmp,
        [f"4:memory:{path}", f"3:cpuset:{path}", "2:cpu,cpuacct:/x", f"0::{path}"],
        [
            f"cgroup {tmp}/cg-v1-memory cgroup rw,nosuid,memory 0 0",
            f"cgroup {tmp}/cg-v1-cpuset cgroup rw,nosuid,nodev,noexec,relatime,cpuset 0 0",
            f"cgroup2 {tmp}/cg-v2 cgroup2 rw 0 0",
        ],
    )
    ctr = t.v1 / path.lstrip("/")
    ctr.mkdir(parents=True)
    (ctr / "cpuset.cpus").write_text("0-7\n")
    (ctr / "cpuset.mems").write_text("0-1\n")
    return t, ctr


def v2_tree(tmp: Path, path: str = "/kubepods.slice/pod1.slice/cri-ctr1.scope") -> tuple[Tree, list[Path]]:
    t = make_tree(tmp, [f"0::{path}"], [f"cgroup2 {tmp}/cg-v2 cgroup2 rw,nosuid 0 0"])
    dirs = [t.v2]
    for part in path.strip("/").split("/"):
        dirs.append(dirs[-1] / part)
    dirs[-1].mkdir(parents=True)
    (t.v2 / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    for d in dirs[:-1]:
        (d / "cgroup.subtree_control").write_text("cpu memory\n" if d == t.v2 else "")
    return t, dirs


def config(t: Tree, env: list[str]) -> None:
    (t.bundle / "config.json").write_text(json.dumps({"ociVersion": "1.0.2", "process": {"env": env}}))


def run(
    t: Tree, args: list[str], shell: str, state: dict[str, object] | None = None
) -> subprocess.CompletedProcess[str]:
    script = hook(t.root)
    state = {"ociVersion": "1.0.2", "id": "c1", "status": "creating", "pid": PID, "bundle": str(t.bundle)} | (
        state or {}
    )
    env = {"TOPODRA_PROC": str(t.proc), "PATH": "/usr/bin:/bin"}
    if shell == "busybox":
        busybox = shutil.which("busybox")
        if busybox is None:
            pytest.skip("busybox is not installed")
        bin_dir = t.root / "bb-bin"
        if not bin_dir.exists():
            bin_dir.mkdir()
            for applet in ("sh", "sed", "grep", "sort", "tr", "cat", "head"):
                (bin_dir / applet).symlink_to(busybox)
        env["PATH"] = str(bin_dir)
        cmd = [str(bin_dir / "sh"), str(script), *args]
    else:
        if shutil.which(shell) is None:
            pytest.skip(f"{shell} is not installed")
        cmd = [shell, str(script), *args]
    return subprocess.run(cmd, input=json.dumps(state), capture_output=True, text=True, env=env, timeout=30)


def per_result(uid: str, device: str, cpus: str, mems: str = "none") -> list[str]:
    tail = pinning.suffix(uid, device, None)
    return [f"{pinning.CPUS_PREFIX}{tail}={cpus}", f"{pinning.MEMS_PREFIX}{tail}={mems}"]


@pytest.mark.parametrize("shell", SHELLS)
def test_v1_writes_cpuset_and_mems(tmp_path: Path, shell: str) -> None:
    t, ctr = v1_tree(tmp_path)
    out = run(t, ["2-3", "0"], shell)
    assert out.returncode == 0, out.stderr
    assert (ctr / "cpuset.cpus").read_text() == "2,3\n"
    assert (ctr / "cpuset.mems").read_text() == "0\n"


@pytest.mark.parametrize("shell", SHELLS)
def test_hooks_of_one_container_add_up(tmp_path: Path, shell: str) -> None:
    t, ctr = v1_tree(tmp_path)
    first = run(t, ["1", "0"], shell)  # claim A's device
    assert first.returncode == 0, first.stderr
    assert (ctr / "cpuset.cpus").read_text() == "1\n"
    second = run(t, ["5-6", "1"], shell)  # claim B's device, same container (same bundle)
    assert second.returncode == 0, second.stderr
    assert (ctr / "cpuset.cpus").read_text() == "1,5,6\n"
    assert (ctr / "cpuset.mems").read_text() == "0,1\n"
    again = run(t, ["5-6", "1"], shell)  # a runtime running the hooks twice changes nothing
    assert again.returncode == 0 and (ctr / "cpuset.cpus").read_text() == "1,5,6\n"


@pytest.mark.parametrize("shell", SHELLS)
def test_container_env_cannot_widen_the_cpuset(tmp_path: Path, shell: str) -> None:
    t, ctr = v1_tree(tmp_path)
    # the pod's author can put anything in the environment, including our variable names
    config(t, [*per_result(UID_B, "numa-0", "0-7", "0"), pinning.claim_env(UID_A, range(8))])
    out = run(t, ["2", "0"], shell)
    assert out.returncode == 0, out.stderr
    assert (ctr / "cpuset.cpus").read_text() == "2\n"


@pytest.mark.parametrize("shell", SHELLS)
def test_annotations_cannot_redirect_the_bundle(tmp_path: Path, shell: str) -> None:
    t, ctr = v1_tree(tmp_path)
    decoy = tmp_path / "decoy"
    decoy.mkdir()
    (decoy / "topodra-cpuset.state").write_text("cpus=0-7\nmems=0\n")
    state: dict[str, object] = {"annotations": {"bundle": str(decoy), "pid": "1"}}
    out = run(t, ["3", "none"], shell, state)
    assert out.returncode == 0, out.stderr
    assert (ctr / "cpuset.cpus").read_text() == "3\n"
    assert (decoy / "topodra-cpuset.state").read_text() == "cpus=0-7\nmems=0\n"


@pytest.mark.parametrize("shell", SHELLS)
def test_memory_back_to_the_parent_when_a_later_device_says_none(tmp_path: Path, shell: str) -> None:
    t, ctr = v1_tree(tmp_path)
    (ctr.parent / "cpuset.mems").write_text("0-1\n")
    assert run(t, ["1", "0"], shell).returncode == 0
    assert (ctr / "cpuset.mems").read_text() == "0\n"
    out = run(t, ["5", "none"], shell)
    assert out.returncode == 0, out.stderr
    assert (ctr / "cpuset.cpus").read_text() == "1,5\n"
    assert (ctr / "cpuset.mems").read_text() == "0-1\n"  # unrestricted again


@pytest.mark.parametrize("shell", SHELLS)
def test_memory_untouched_when_never_restricted(tmp_path: Path, shell: str) -> None:
    t, ctr = v1_tree(tmp_path)
    out = run(t, ["4,6-7", "none"], shell)
    assert out.returncode == 0, out.stderr
    assert (ctr / "cpuset.cpus").read_text() == "4,6,7\n"
    assert (ctr / "cpuset.mems").read_text() == "0-1\n"


@pytest.mark.parametrize("shell", SHELLS)
def test_v1_effective_mismatch_fails_the_container(tmp_path: Path, shell: str) -> None:
    t, ctr = v1_tree(tmp_path)
    (ctr / "cpuset.effective_cpus").write_text("0-7\n")  # what the kernel would show if it ignored us
    out = run(t, ["2", "none"], shell)
    assert out.returncode == 1
    assert "cpuset.effective_cpus is '0-7' after writing '2'" in out.stderr


@pytest.mark.parametrize("shell", SHELLS)
def test_v2_enables_cpuset_in_every_ancestor(tmp_path: Path, shell: str) -> None:
    t, dirs = v2_tree(tmp_path)
    ctr = dirs[-1]
    (ctr / "cpuset.cpus.effective").write_text("3\n")  # stands in for the kernel's answer
    (ctr / "cpuset.mems.effective").write_text("0\n")
    out = run(t, ["3", "0"], shell)
    assert out.returncode == 0, out.stderr
    for d in dirs[:-1]:
        assert (d / "cgroup.subtree_control").read_text() == "+cpuset\n", d
    assert (ctr / "cpuset.cpus").read_text() == "3\n"
    assert (ctr / "cpuset.mems").read_text() == "0\n"


@pytest.mark.parametrize("shell", SHELLS)
def test_v2_keeps_enabled_controllers(tmp_path: Path, shell: str) -> None:
    t, dirs = v2_tree(tmp_path)
    for d in dirs[:-1]:
        (d / "cgroup.subtree_control").write_text("cpu cpuset memory\n")
    (dirs[-1] / "cpuset.cpus.effective").write_text("1\n")
    out = run(t, ["1", "none"], shell)
    assert out.returncode == 0, out.stderr
    assert all((d / "cgroup.subtree_control").read_text() == "cpu cpuset memory\n" for d in dirs[:-1])


@pytest.mark.parametrize("shell", SHELLS)
def test_v2_without_cpuset_controller_refuses(tmp_path: Path, shell: str) -> None:
    t, _ = v2_tree(tmp_path)
    (t.v2 / "cgroup.controllers").write_text("cpu io memory\n")
    out = run(t, ["1", "none"], shell)
    assert out.returncode == 1 and "cpuset controller is not available" in out.stderr


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize(
    ("args", "state", "message"),
    [
        (["1;rm -rf /", "none"], None, "is not a CPU list"),
        (["", "none"], None, "is not a CPU list"),
        (["1", "0 1"], None, "is not a list"),
        (["1", "none"], {"pid": "x"}, "no pid"),
        ([], None, "usage"),
    ],
)
def test_bad_input_is_refused(
    tmp_path: Path, shell: str, args: list[str], state: dict[str, object] | None, message: str
) -> None:
    t, ctr = v1_tree(tmp_path)
    out = run(t, args, shell, state)
    assert out.returncode == 1 and message in out.stderr, out.stderr
    assert (ctr / "cpuset.cpus").read_text() == "0-7\n"


@pytest.mark.parametrize("shell", SHELLS)
def test_missing_cgroup_is_an_error(tmp_path: Path, shell: str) -> None:
    t, ctr = v1_tree(tmp_path)
    shutil.rmtree(ctr)
    out = run(t, ["1", "none"], shell)
    assert out.returncode == 1 and "does not exist" in out.stderr


def test_installed_hook_is_the_shipped_file(tmp_path: Path) -> None:
    path = pinning.install_hook(tmp_path / "opt")
    assert path.read_bytes() == pinning.hook_source()
    assert path.stat().st_mode & 0o777 == 0o755
    assert pinning.hook_problem(path) is None
    path.chmod(0o644)
    assert "not executable" in (pinning.hook_problem(path) or "")
    assert "missing" in (pinning.hook_problem(tmp_path / "nope" / pinning.HOOK_NAME) or "")
