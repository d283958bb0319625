"""`topodra check` offline: the forms it reads, its outputs, its exit statuses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from topodra.drivers.cli.main import main

from tests.check_kit import TOPODRA
from tests.unit.check.conftest import NODE


def _write(tmp_path: Path, slices: list[dict[str, Any]], name: str = "slices.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": slices}))
    return path


def test_json_report_and_exit_1_when_values_are_wrong(
    tmp_path: Path, root: Path, all_slices: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, all_slices)
    assert main(["check", "--slices", str(path), "--sysfs-root", str(root), "-o", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["node"] == NODE and doc["exitCode"] == 1
    assert doc["summary"]["errors"] > 0 and doc["summary"]["warnings"] > 0
    assert {d["driver"] for d in doc["drivers"]} >= set(TOPODRA)
    assert len(doc["alignment"]) == len(doc["drivers"]) * (len(doc["drivers"]) - 1) // 2


def test_exit_0_when_only_topodra_publishes(
    tmp_path: Path, root: Path, all_slices: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    ours = [s for s in all_slices if s["spec"]["driver"] in TOPODRA]
    path = tmp_path / "ours.yaml"
    path.write_text(yaml.safe_dump(ours))  # a bare list, as `topodra slices` prints it
    assert main(["check", "--slices", str(path), "--sysfs-root", str(root)]) == 0
    out = capsys.readouterr().out
    assert "== cpu.topodra.io" in out and "agree with the machine" in out


def test_text_and_wide_name_the_findings(
    tmp_path: Path, root: Path, all_slices: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, all_slices)
    main(["check", "--slices", str(path), "--sysfs-root", str(root)])
    text = capsys.readouterr().out
    assert "ERROR pciBusID wrong on 1 device(s) [gpu-4]" in text
    assert "dra.net/numaNode malformed on 2 device(s)" in text
    assert "to align more, a driver would add:" in text
    main(["check", "--slices", str(path), "--sysfs-root", str(root), "--output", "wide"])
    wide = capsys.readouterr().out
    assert "DEVICE" in wide and "MATCHED BY" in wide
    assert wide.count("warn  ") > text.count("warn  ")  # every finding, one line each


def test_stdin_and_yaml_output(root: Path, all_slices: list[dict[str, Any]]) -> None:
    text = yaml.safe_dump_all(all_slices)  # a multi-document stream
    cmd = [
        sys.executable,
        "-m",
        "topodra.drivers.cli.main",
        "check",
        "--slices",
        "-",
        "--sysfs-root",
        str(root),
        "-o",
        "yaml",
    ]
    proc = subprocess.run(cmd, input=text, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert yaml.safe_load(proc.stdout)["node"] == NODE


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--slices", "/no/such/file"], "no such file"),
        (["--sysfs-root", "/no/such/dir", "--slices", "x"], "no such folder"),
        (["--interval", "1", "--slices", "x"], "at least 5 seconds"),
        (["--watch", "--slices", "x"], "cannot be combined"),
    ],
)
def test_cannot_check_is_exit_2_with_one_line(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", *argv]) == 2
    err = capsys.readouterr().err
    assert says in err and err.startswith("topodra check: ") and err.count("\n") == 1


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (
            ["--kubeconfig", "/no/such/kubeconfig"],
            "argument --kubeconfig: '/no/such/kubeconfig': no such file",
        ),
        (["-o", "html"], "argument -o/--output: 'html' is not one of text, wide, json, yaml"),
        (["--node", "Not_A_Node"], "argument --node/--node-name: 'Not_A_Node' is not a valid node name"),
        (["--metrics-address", "nine"], "argument --metrics-address: 'nine' is not host:port"),
    ],
)
def test_bad_flag_values_stop_at_start(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["check", *argv])
    assert stopped.value.code == 2
    first, hint = capsys.readouterr().err.splitlines()
    assert first.startswith(f"topodra check: {says}") and "--help" in hint


def test_a_file_of_several_nodes_needs_node(
    tmp_path: Path, root: Path, all_slices: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    other = json.loads(json.dumps(all_slices[0]))
    other["spec"]["nodeName"] = "elsewhere"
    path = _write(tmp_path, [*all_slices, other])
    assert main(["check", "--slices", str(path), "--sysfs-root", str(root)]) == 2
    assert "choose one with --node" in capsys.readouterr().err
    assert (
        main(["check", "--slices", str(path), "--sysfs-root", str(root), "--node", NODE, "-o", "json"]) == 1
    )


def test_not_yaml_is_exit_2(tmp_path: Path, root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("a: [")
    assert main(["check", "--slices", str(path), "--sysfs-root", str(root)]) == 2
    assert "not YAML or JSON" in capsys.readouterr().err
