"""Random bytes in every file discovery parses: it never raises, and garbage is always a warning."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from topodra.common.topology import NotASysfsTree, discover
from topodra.common.topology.discover import discover_with
from topodra.common.topology.reader import SysfsReader

from tests.unit.topology.test_topology_pci import switch_machine

# Files whose content has a grammar (numbers, masks, lists, ids, MACs...). Free-text files such
# as operstate, link speed strings or /proc/cpuinfo accept anything, so only "never raises" holds.
STRUCTURED = {
    "online", "physical_package_id", "core_id", "die_id", "cluster_id", "package_cpus", "core_cpus",
    "core_siblings", "thread_siblings", "shared_cpu_map", "level", "size", "id", "type",
    "coherency_line_size", "ways_of_associativity", "cpumap", "cpulist", "meminfo", "distance",
    "class", "vendor", "device", "subsystem_vendor", "subsystem_device", "revision", "numa_node",
    "local_cpus", "sriov_totalvfs", "sriov_numvfs", "current_link_width", "max_link_width",
    "aer_dev_fatal", "dev", "mtu", "speed", "carrier", "ifindex", "address", "cpulistaffinity",
}  # fmt: skip


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, list[str]]]:
    root = tmp_path_factory.mktemp("fuzz")
    t = switch_machine(root)
    pf = "sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0"
    t.file(f"{pf}/sriov_totalvfs", "4").file(f"{pf}/sriov_numvfs", "0")
    t.file(f"{pf}/current_link_width", "8").file(f"{pf}/aer_dev_fatal", "Undefined 0\nTOTAL_ERR_FATAL 0")
    t.file(f"{pf}/revision", "0x01").file(f"{pf}/net/eth0/ifindex", "3")
    t.file("proc/cpuinfo", "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 21\n")
    t.file("sys/devices/system/cpu/cpu0/cache/index0/coherency_line_size", "64")
    t.file("sys/devices/system/cpu/cpu0/topology/die_id", "0")
    t.file("sys/devices/system/cpu/cpu0/topology/cluster_id", "0")
    t.file("sys/devices/system/cpu/cpu0/cache/index0/ways_of_associativity", "8")
    t.file(f"{pf}/max_link_width", "16")
    r = SysfsReader(root, record=True)
    discover_with(r)
    assert r.warnings == []
    files = sorted(r.files)
    assert len(files) > 100
    yield root, files


def _poisoned(data: bytes) -> bytes:
    # a byte no grammar accepts, somewhere that stripping cannot remove
    return data + b"#\x01" + data


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_bytes_never_raise(tree: tuple[Path, list[str]], data: st.DataObject) -> None:
    root, files = tree
    rel = data.draw(st.sampled_from(files), label="file")
    content = data.draw(st.binary(max_size=200), label="content")
    path = root / rel
    original = path.read_bytes()
    try:
        path.write_bytes(content)
        discover(root)
    finally:
        path.write_bytes(original)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_garbage_in_a_structured_file_is_a_warning_naming_it(
    tree: tuple[Path, list[str]], data: st.DataObject
) -> None:
    root, files = tree
    structured = [f for f in files if f.rsplit("/", 1)[-1] in STRUCTURED]
    rel = data.draw(st.sampled_from(structured), label="file")
    content = _poisoned(data.draw(st.binary(max_size=60), label="content"))
    path = root / rel
    original = path.read_bytes()
    try:
        path.write_bytes(content)
        t = discover(root)
    finally:
        path.write_bytes(original)
    assert any(w.path == rel for w in t.warnings), (rel, content, t.warnings)


def test_every_structured_name_is_exercised(tree: tuple[Path, list[str]]) -> None:
    """The fuzz tree really contains each structured kind of file (so the test above covers it)."""
    _, files = tree
    names = {f.rsplit("/", 1)[-1] for f in files}
    missing = STRUCTURED - names - {"core_siblings", "thread_siblings", "cpulist"}  # alternatives
    assert not missing


@pytest.fixture(scope="module")
def touched(tree: tuple[Path, list[str]]) -> tuple[Path, list[str]]:
    """Every path discovery touches (files, links, folders) in the fuzz tree, for shape changes."""
    root, _ = tree
    r = SysfsReader(root, record=True)
    discover_with(r)
    return root, sorted(set(r.files) | r.links | r.listed | r.dirs)


SHAPES = ["dir", "file", "loop", "dangling", "fifo", "absolute"]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_shape_changes_never_raise(
    touched: tuple[Path, list[str]], tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    """A file turned folder, a folder turned file, links that loop or dangle, a FIFO: no exception."""
    import os
    import shutil

    root, paths = touched
    rel = data.draw(st.sampled_from(paths), label="path")
    shape = data.draw(st.sampled_from(SHAPES), label="shape")
    p = root / rel
    aside = tmp_path_factory.mktemp("aside") / "original"
    os.rename(p, aside)  # moved out whole (file, link or folder), moved back below
    try:
        if shape == "dir":
            p.mkdir()
        elif shape == "file":
            p.write_bytes(b"\xff\x00garbage")
        elif shape == "loop":
            os.symlink(p.name, p)
        elif shape == "dangling":
            os.symlink("../../nowhere/at/all", p)
        elif shape == "fifo":
            os.mkfifo(p)
        else:
            os.symlink("/sys/devices/system/cpu", p)  # absolute: the tree's own sys/, never the host's
        try:
            discover(root)
        except NotASysfsTree:
            # the one refusal allowed: the change removed sys/devices/system/cpu itself
            assert "sys/devices/system/cpu".startswith(rel)
    finally:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        elif p.exists() or p.is_symlink():
            p.unlink()
        os.rename(aside, p)
