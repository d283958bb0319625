"""`topodra synth` as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from topodra.common.synth import MANIFEST, shipped_spec_names, shipped_spec_text
from topodra.drivers.cli.main import main


def test_list_names_every_shipped_spec(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["synth", "--list"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert listed == shipped_spec_names()


def test_show_prints_the_shipped_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["synth", "--spec", "1s-4acc", "--show"]) == 0
    assert capsys.readouterr().out == shipped_spec_text("1s-4acc")


def test_build_by_name_then_refuse_then_force(synth_base: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = synth_base / "cli-1s"
    assert main(["synth", "--spec", "1s-4acc", "--dest", str(out), "-o", "json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["accelerators"] == 4 and summary["packages"] == 1 and summary["uplink"] == "eno1"
    assert (out / "sys/bus/pci/devices").is_dir() and (out / MANIFEST).is_file()
    assert main(["synth", "--spec", "1s-4acc", "--dest", str(out)]) == 2
    assert "use --force" in capsys.readouterr().err
    assert main(["synth", "--spec", "1s-4acc", "--dest", str(out), "--force", "--hostname", "ws-2"]) == 0
    assert (out / "proc/sys/kernel/hostname").read_text() == "ws-2\n"


def test_build_from_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "lab.json"
    spec.write_text(json.dumps({"cpu": {"cores_per_socket": 2, "threads_per_core": 2}}))
    out = tmp_path / "tree"
    assert main(["synth", "--spec", str(spec), "--dest", str(out), "--output", "json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["name"] == "lab" and summary["cpus"] == 4
    assert (out / "sys/devices/system/cpu/online").read_text() == "0-3\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["synth"], "--spec FILE|NAME is required"),
        (["synth", "--spec", "1s-4acc"], "--dest DIR is required"),
        (["synth", "--spec", "nope", "--dest", "x"], "no shipped spec named 'nope'"),
    ],
)
def test_usage_errors_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_bad_spec_on_stdin_is_one_clear_line(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "topodra.drivers.cli.main",
            "synth",
            "--spec",
            "-",
            "--dest",
            str(tmp_path / "t"),
        ],
        input='{"cpu": {"sockets": 0}}',
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2
    assert out.stderr == "topodra synth: stdin: cpu.sockets: must be at least 1, not 0\n"
    assert not (tmp_path / "t").exists()
