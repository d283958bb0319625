"""`topodra inspect --sysfs-root` on someone else's capture reads nothing outside it.

A capture is a tree of files and links made by whoever sent it. Links planted in it (absolute,
relative with `..`, through a linked folder) point at a file of the reader's own machine whose
content is a secret that no sysfs grammar accepts, so a read of it would surface in a warning.
Discovery must not read it (its access time stays put), must not show it, and must still
follow the capture's own links (absolute ones mean the capture's root). Warnings quote a file by
a short printable prefix only. The same holds where the kernel has no openat2 (the walk).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from topodra.common.topology import discover, reader
from topodra.common.topology.jsonview import to_json
from topodra.drivers.cli.main import main

from tests.conftest import FixtureTrees
from tests.kit.sysfs import CPU, NODE, basic_machine
from tests.unit.topology.test_topology_pci import switch_machine

SECRET = "TOPSECRET-d2f1c0ffee-the-readers-own-file"


@pytest.fixture(params=["openat2", "walk"])
def resolution(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Both ways of resolving beneath the root: the kernel's, and the walk used without it."""
    if request.param == "walk":
        monkeypatch.setattr(reader, "_openat2", lambda root_fd: None)
    yield request.param


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """The reader's own files, next to the capture: a secret, and a folder of them."""
    home = tmp_path / "home"
    (home / "net" / "evil0").mkdir(parents=True)
    (home / "net" / "evil0" / "address").write_text("de:ad:be:ef:00:01\n")
    secret = home / "secret"
    secret.write_text(SECRET + "\n")
    old = 1_000_000_000  # older than its mtime: any read would move the access time (relatime)
    os.utime(secret, (old, secret.stat().st_mtime))
    return home


def _plant(root: Path, outside: Path) -> None:
    cpu1 = root / CPU / "cpu1" / "topology"
    (cpu1 / "core_id").unlink()
    (cpu1 / "core_id").symlink_to(outside / "secret")  # absolute
    (root / NODE / "node0" / "meminfo").unlink()
    depth = len((root / NODE / "node0").relative_to(root.parent).parts)
    (root / NODE / "node0" / "meminfo").symlink_to("../" * depth + "home/secret")  # relative, out
    (root / CPU / "cpu0" / "cache" / "index0" / "size").unlink()
    (root / CPU / "cpu0" / "cache" / "index0" / "size").symlink_to("/proc/self/environ")
    net = root / "sys" / "class" / "net"
    net.mkdir(parents=True, exist_ok=True)
    (net / "evil0").symlink_to(outside / "net" / "evil0")  # a folder of the reader's
    # the capture's own absolute link, which means the capture's root
    (root / CPU / "cpu1" / "topology" / "physical_package_id").unlink()
    (root / CPU / "cpu1" / "topology" / "physical_package_id").symlink_to(
        "/sys/devices/system/cpu/cpu0/topology/physical_package_id"
    )


def test_links_out_of_a_capture_are_not_followed(tmp_path: Path, outside: Path, resolution: str) -> None:
    root = tmp_path / "capture"
    basic_machine(root, cpus=2)
    _plant(root, outside)
    before = (outside / "secret").stat().st_atime
    t = discover(root)
    shown = json.dumps(to_json(t)) + "\n".join(str(w) for w in t.warnings)
    assert "TOPSECRET" not in shown and "de:ad:be:ef" not in shown
    evil = [i for i in t.net_interfaces if i.name == "evil0"]  # the capture's own entry name...
    assert evil and evil[0].mac is None  # ...but nothing of the reader's folder it points to
    assert (outside / "secret").stat().st_atime == before, "the reader's own file was read"
    cpu1 = t.cpu(1)
    assert cpu1 is not None and cpu1.core_id is None  # the planted file is simply not there
    assert cpu1.package_id == 0  # the capture's own absolute link, read beneath its root
    assert t.numa_nodes[0].memory_bytes is None
    assert not any("USER=" in w.message or "PATH=" in w.message for w in t.warnings)


def test_inspect_on_a_planted_capture_shows_nothing_of_the_reader(
    tmp_path: Path, outside: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "capture"
    switch_machine(root)
    _plant(root, outside)
    for output in ("json", "text"):
        main(["inspect", "--output", output, "--sysfs-root", str(root)])
        out, err = capsys.readouterr()
        assert "TOPSECRET" not in out + err, output
        assert "de:ad:be:ef" not in out, output


def test_warnings_quote_a_short_printable_prefix(tmp_path: Path) -> None:
    root = tmp_path / "capture"
    basic_machine(root, cpus=2)
    garbage = "\x1b]0;owned\x07" + "A" * 5000  # a terminal escape, then a lot
    (root / CPU / "cpu1" / "topology" / "core_id").write_text(garbage)
    (root / NODE / "node0" / "distance").write_text("10 " + garbage)
    t = discover(root)
    quoted = [w for w in t.warnings if "core_id" in w.path or "distance" in w.path]
    assert len(quoted) == 2
    for w in quoted:
        assert w.message.isprintable() and "\x1b" not in w.message and "\x07" not in w.message
        assert "A" * 17 not in w.message and "characters)" in w.message
        assert len(w.message) < 120


@pytest.mark.parametrize("name", ["hwloc--40intel64-2g2n4c+pcilocality", "ghw--linux-amd64-accel-nvidia"])
def test_the_walk_reads_captures_as_openat2_does(
    fixture_trees: FixtureTrees, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """Where the kernel has no openat2, the walk resolves every link of a real capture alike."""
    root = fixture_trees.root(name)
    with_openat2 = to_json(discover(root))
    monkeypatch.setattr(reader, "_openat2", lambda root_fd: None)
    walked = to_json(discover(root))
    assert with_openat2["pci_devices"]
    assert walked == with_openat2


def test_a_capture_whose_sys_is_a_link_out_is_refused_in_one_line(
    tmp_path: Path, outside: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A `sys` that links to another machine's tree (here the reader's own) is not a capture of it."""
    elsewhere = tmp_path / "elsewhere"
    basic_machine(elsewhere, cpus=2)
    root = tmp_path / "capture"
    root.mkdir()
    (root / "sys").symlink_to(elsewhere / "sys")
    for command in (["inspect"], ["slices", "--driver", "cpu"]):
        assert main([*command, "--sysfs-root", str(root)]) == 2
        out, err = capsys.readouterr()
        assert "leads out of it" in err and "Traceback" not in err and not out, command


def _rename_forever(folder: str) -> None:
    a, b = os.path.join(folder, "a"), os.path.join(folder, "b")
    open(a, "w").close()
    while True:
        os.rename(a, b)
        os.rename(b, a)


def test_renames_elsewhere_on_the_machine_make_no_file_unreadable(tmp_path: Path) -> None:
    """openat2 RESOLVE_IN_ROOT answers EAGAIN when a rename or mount anywhere on the machine
    races its walk of a `..` (a link's target), and asks for a retry. Discovery took that for an
    unreadable file (a NIC's uverbs node went missing while other processes renamed files). A
    real race here: 200 links through `..`, read while another process renames a file in a loop;
    before the retry, most runs lost some (8 of 10 discoveries of a synthetic 64-accelerator
    machine warned)."""
    import multiprocessing

    root = tmp_path / "capture"
    devices = root / "sys" / "devices" / "pci0000:00"
    links = root / "sys" / "class" / "thing"
    links.mkdir(parents=True)
    for i in range(200):
        (devices / f"dev{i}").mkdir(parents=True)
        (devices / f"dev{i}" / "ibdev").write_text(f"mlx5_{i}\n")
        (links / f"t{i}").symlink_to(f"../../devices/pci0000:00/dev{i}")
    spinner = tmp_path / "spin"
    spinner.mkdir()
    proc = multiprocessing.get_context("fork").Process(
        target=_rename_forever, args=(str(spinner),), daemon=True
    )
    proc.start()
    try:
        for _ in range(5):
            r = reader.SysfsReader(root)
            got = [r.read(f"sys/class/thing/t{i}/ibdev") for i in range(200)]
            assert r.warnings == []
            assert got == [f"mlx5_{i}" for i in range(200)]
    finally:
        proc.kill()
        proc.join()
