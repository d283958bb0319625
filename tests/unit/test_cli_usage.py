"""The `topodra` command as people meet it: --help with examples and exit codes, --version,
argparse errors as one line plus a hint, and every wrong flag value refused at start with one
line and exit status 2 (run as the real command, in a subprocess)."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from topodra.drivers.cli.main import SUBCOMMANDS

from tests.conftest import REPO
from tests.kit.imports import forget_first


def topodra(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k not in ("NODE_NAME", "POD_UID", "NODE_IP")}
    environ.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "topodra.drivers.cli.main", *argv],
        capture_output=True,
        text=True,
        env=environ,
        timeout=120,
        cwd=REPO,
    )


@pytest.mark.parametrize("command", [[], *([c] for c in SUBCOMMANDS)])
def test_every_help_has_examples_and_exit_codes(command: list[str]) -> None:
    done = topodra(*command, "--help")
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "examples:\n  topodra " in text, text
    examples = text[text.index("examples:") : text.index("exit status:")]
    assert examples.count("\n      ") >= 2  # at least two commands, each with what it does
    codes = text[text.index("exit status:") :]
    assert "  0  " in codes and "  2  " in codes


@pytest.mark.parametrize("command", ["serve", "inspect"])
def test_help_under_the_daemonsets_optimize_level_still_says_what_the_command_does(command: str) -> None:
    """The DaemonSets run Python with PYTHONOPTIMIZE=2 (no docstrings), and `kubectl exec`
    into a driver's container inherits it: --help then leads with the command's one-line help
    instead of an empty paragraph."""
    plain = topodra(command, "--help").stdout
    optimized = topodra(command, "--help", env={"PYTHONOPTIMIZE": "2"})
    assert optimized.returncode == 0, optimized.stderr
    lead = optimized.stdout.split("\n\n")[1]  # after the usage block
    assert lead.strip() and not lead.lstrip().startswith(("options:", "positional")), optimized.stdout
    assert lead.split()[0] in plain  # the one-line help of the plain listing


@pytest.mark.parametrize("columns", ["100", "", "junk"])
def test_help_is_wrapped_to_the_width_shutil_would_give(columns: str) -> None:
    """The parsers find the terminal width without importing shutil (the inspect path stays
    cheap); the help reads the same as with argparse's own width."""
    code = forget_first("shutil") + (
        "import argparse, sys\n"
        "from topodra.drivers.cli.usage import Parser, terminal_columns\n"
        "mine = Parser(prog='x', description='d ' * 80)\n"
        "mine.add_argument('--flag', help='h ' * 80)\n"
        "assert 'shutil' not in sys.modules\n"
        "import shutil\n"
        "theirs = argparse.ArgumentParser(prog='x', description='d ' * 80, "
        "formatter_class=argparse.RawDescriptionHelpFormatter)\n"
        "theirs.add_argument('--flag', help='h ' * 80)\n"
        "assert terminal_columns() == shutil.get_terminal_size().columns, terminal_columns()\n"
        "assert mine.format_help() == theirs.format_help(), mine.format_help()\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | ({"COLUMNS": columns} if columns else {})
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr


def test_version_is_the_packages_and_the_charts() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    chart = yaml.safe_load((REPO / "deploy/helm/topodra/Chart.yaml").read_text())
    done = topodra("--version")
    assert done.returncode == 0
    assert done.stdout == f"topodra {project}\n"
    assert chart["appVersion"] == project


def test_an_argparse_error_is_one_line_and_a_hint() -> None:
    done = topodra("inspect", "--bogus-flag")
    assert done.returncode == 2
    first, hint = done.stderr.splitlines()
    assert "--bogus-flag" in first and first.startswith("topodra")
    assert hint == "Try 'topodra --help' for the flags and examples." or "--help" in hint
    done = topodra("slices", "--driver", "gpu")
    first, hint = done.stderr.splitlines()
    assert first.startswith("topodra slices: argument --driver: invalid choice: 'gpu'")
    assert hint == "Try 'topodra slices --help' for the flags and examples."


@pytest.fixture(scope="module")
def machine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.kit.machines import synth_builder

    return synth_builder(tmp_path_factory, "usage")("1s-4acc").root


def _kubeconfig(tmp: Path, text: str) -> str:
    path = tmp / f"kubeconfig-{abs(hash(text))}"
    path.write_text(text)
    return str(path)


# (argv after the command's root flags, what the one line must say)
SLICES_CASES = [
    (["--nic-node-ip", "not-an-ip"], "argument --nic-node-ip: 'not-an-ip' is not an IP address"),
    (
        ["--accelerator-pci-ids", "/nonexistent"],
        "driver accelerator: --accelerator-pci-ids: '/nonexistent': no such file",
    ),
    (["--kubernetes-version", "1.20"], "argument --kubernetes-version: '1.20' is older than 1.34"),
    (["--kubernetes-version", "latest"], "is not a Kubernetes version"),
    (["--cpu-reserved-cpus", "0-500"], "--cpu-reserved-cpus 0-500: CPUs 64-500 do not exist on this machine"),
    (["--cpu-reserved-cpus", "0-63"], "reserves every usable CPU (0-63): nothing left to publish"),
    (["--cpu-reserved-cpus", "3-1"], "argument --cpu-reserved-cpus: '3-1' is not a CPU list"),
    (
        ["--accelerator-rescan-interval", "-5"],
        "argument --accelerator-rescan-interval: '-5': must be a finite",
    ),
    (["--nic-rescan-interval", "nan"], "argument --nic-rescan-interval: 'nan': must be a finite"),
    (["--nic-rescan-interval", "soon"], "'soon' is not a number of seconds"),
    (["--accelerator-dev-root", "dev"], "argument --accelerator-dev-root: 'dev' is not an absolute path"),
    (["--cpu-hook-dir", "hooks"], "argument --cpu-hook-dir: 'hooks' is not an absolute path"),
    (["--nic-hook-dir", "hooks"], "argument --nic-hook-dir: 'hooks' is not an absolute path"),
    (["--nic-state-dir", "state"], "argument --nic-state-dir: 'state' is not an absolute path"),
    (["--accelerator-include", "nvidia"], "argument --accelerator-include: 'nvidia' is not vendor:device"),
    (["--node-name", "Bad_Node"], "argument --node-name: 'Bad_Node' is not a valid node name"),
    (["--node-uid", "a/b"], "argument --node-uid: 'a/b' is not a UID"),
    (["--output", "table"], "argument -o/--output: 'table' is not one of yaml, json, text, wide"),
]


@pytest.mark.parametrize(("extra", "message"), SLICES_CASES, ids=[" ".join(c[0]) for c in SLICES_CASES])
def test_slices_refuses_a_bad_value_with_one_line(machine: Path, extra: list[str], message: str) -> None:
    done = topodra("slices", "--driver", "all", "--sysfs-root", str(machine), *extra)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert lines[0].startswith("topodra slices: ") and message in lines[0], done.stderr
    assert len(lines) == 1 or (len(lines) == 2 and lines[1].startswith("Try 'topodra slices --help'"))


def test_nic_node_ip_from_the_environment_is_checked_too(machine: Path) -> None:
    done = topodra("slices", "--driver", "nic", "--sysfs-root", str(machine), env={"NODE_IP": "10.0.0.300"})
    assert done.returncode == 2
    assert done.stderr.startswith("topodra slices: driver nic: $NODE_IP: '10.0.0.300' is not an IP address")
    assert done.stderr.count("\n") == 1


SERVE_CASES = [
    (["--metrics-address", "9400"], "argument --metrics-address: '9400' is not host:port"),
    (["--metrics-address", ":70000"], "is not host:port"),
    (["--metrics-address", "::1:9400"], "write an IPv6 address in brackets"),
    (
        ["--kubelet-root-dir", "var/lib/kubelet"],
        "argument --kubelet-root-dir: 'var/lib/kubelet' is not an absolute",
    ),
    (["--cdi-root", "cdi"], "argument --cdi-root: 'cdi' is not an absolute path"),
    (["--state-dir", "st"], "argument --state-dir: 'st' is not an absolute path"),
    (["--pod-uid", "../../etc"], "argument --pod-uid: '../../etc' is not a UID"),
    (["--kubeconfig", "/nonexistent/config"], "argument --kubeconfig: '/nonexistent/config': no such file"),
    (["--log-level", "loud"], "argument --log-level: invalid choice: 'loud'"),
    (["--node-name", "UPPER"], "argument --node-name: 'UPPER' is not a valid node name"),
]


@pytest.mark.parametrize(("extra", "message"), SERVE_CASES, ids=[" ".join(c[0]) for c in SERVE_CASES])
def test_serve_refuses_a_bad_flag_value_with_one_line(extra: list[str], message: str) -> None:
    done = topodra("serve", "cpu", "--node-name", "n1", *extra)
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert lines[0].startswith("topodra serve: ") and message in lines[0], done.stderr
    assert len(lines) == 2 and lines[1].startswith("Try 'topodra serve --help'")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("clusters: [unclosed\n", "is not YAML (line 2)"),
        ("just a string\n", "is not a kubeconfig: expected a YAML mapping"),
        ("apiVersion: v1\nkind: Config\n", "is not a kubeconfig: it has no clusters and no contexts"),
    ],
)
def test_serve_names_a_kubeconfig_that_is_not_one(
    tmp_path: Path, machine: Path, text: str, message: str
) -> None:
    import json

    path = _kubeconfig(tmp_path, text)
    done = topodra("serve", "cpu", "--node-name", "n1", "--sysfs-root", str(machine), "--kubeconfig", path)
    assert done.returncode == 2
    (line,) = [json.loads(x) for x in done.stderr.splitlines() if x.startswith("{")]
    assert line["msg"] == "configuration failed" and line["error"].startswith(
        f"kubeconfig {path} {message}"
    ), line
    assert "object does not support item assignment" not in done.stderr


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["capture", "--file", "me.zip"], "argument --file/-f: 'me.zip': the archive is xz-compressed tar"),
        (["capture", "--file", "/nonexistent/me.tar.xz"], "folder /nonexistent does not exist"),
        (["capture", "--output", "me.tar.xz"], "capture writes its archive to --file"),
        (["synth", "--spec", "1s-4acc", "--output", "/tmp/x"], "a path goes to --dest DIR"),
        (["synth", "--spec", "1s-4acc", "--dest", "/tmp/x", "--hostname", "no spaces"], "is not a host name"),
        (["inspect", "--output", "html"], "argument -o/--output: 'html' is not one of"),
        (["install-hooks", "--driver", "gpu"], "argument --driver: invalid choice: 'gpu'"),
    ],
)
def test_other_commands_refuse_bad_values(argv: list[str], message: str) -> None:
    done = topodra(*argv)
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert message in lines[0], done.stderr
    assert len(lines) <= 2
