"""Reading saved slices: every form kubectl and topodra print, and pools as consumers see them."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from topodra.common.check.devices import SliceInputError, node_devices, nodes_of
from topodra.common.objectfile import ObjectFileError, load_objects, of_kind


def _slice(
    driver: str, node: str | None, devices: list[str], generation: int = 1, count: int = 1
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "driver": driver,
        "pool": {"name": node or "shared", "generation": generation, "resourceSliceCount": count},
        "devices": [{"name": d, "attributes": {"numaNode": {"int": 0}}} for d in devices],
    }
    if node:
        spec["nodeName"] = node
    else:
        spec["allNodes"] = True
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{driver}-x"},
        "spec": spec,
    }


SLICES = [_slice("a.example.com", "n1", ["d0", "d1"]), _slice("b.example.com", "n1", ["e0"])]


def test_a_kubectl_list_a_stream_a_bare_list_and_json_all_read_the_same() -> None:
    as_list = yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": SLICES})
    as_typed_list = yaml.safe_dump(
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSliceList", "items": SLICES}
    )
    as_stream = yaml.safe_dump_all(SLICES)
    as_bare = yaml.safe_dump(SLICES)  # what `topodra slices` prints
    as_json = json.dumps({"kind": "List", "items": SLICES})
    for text in (as_list, as_typed_list, as_stream, as_bare, as_json):
        assert of_kind(load_objects(text), "ResourceSlice") == SLICES


def test_objects_of_other_kinds_are_left_out() -> None:
    text = yaml.safe_dump_all([*SLICES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}])
    assert len(load_objects(text)) == 3
    assert of_kind(load_objects(text), "ResourceSlice") == SLICES


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("a: [", "not YAML or JSON"),
        ("- 1\n- 2\n", "document 1, item 1: expected an object, found int"),
        ("just text", "expected an object, found str"),
        ("items: []\n", "a list without a kind"),
    ],
)
def test_what_is_not_objects_is_an_error_naming_where(text: str, says: str) -> None:
    with pytest.raises(ObjectFileError, match=says):
        load_objects(text, "f.yaml")


def test_aliases_cannot_make_the_reader_walk_forever() -> None:
    """A YAML alias "bomb": list n holds list n-1 three times, so list 29 has 3**29 leaves. It is
    refused by its nesting depth, not walked."""
    text = "- &x0 [{kind: ResourceSlice}]\n"
    text += "".join(f"- &x{i} [*x{i - 1}, *x{i - 1}, *x{i - 1}]\n" for i in range(1, 30))
    with pytest.raises(ObjectFileError, match="nested deeper than 4"):
        load_objects(text)


def test_a_device_with_more_attributes_than_the_api_allows_is_refused() -> None:
    s = _slice("a.example.com", "n1", ["d0"])
    s["spec"]["devices"][0]["attributes"] = {f"k{i}": {"int": i} for i in range(300)}
    with pytest.raises(SliceInputError, match="300 attributes"):
        node_devices([s], "n1")


def test_only_the_newest_generation_of_a_pool_counts() -> None:
    old = _slice("a.example.com", "n1", ["old"], generation=1)
    new = _slice("a.example.com", "n1", ["new"], generation=2)
    got = node_devices([old, new], "n1")
    assert [d.name for d in got.drivers["a.example.com"]] == ["new"]
    assert any("older generation" in n for n in got.notes)


def test_a_pool_being_rewritten_is_noted() -> None:
    got = node_devices([_slice("a.example.com", "n1", ["d0"], count=2)], "n1")
    assert any("1 of 2 slices" in n for n in got.notes)


def test_the_node_is_taken_from_the_slices_when_there_is_one() -> None:
    assert node_devices(SLICES, None).node == "n1"
    two = [*SLICES, _slice("a.example.com", "n2", ["z"])]
    assert nodes_of(two) == ["n1", "n2"]
    with pytest.raises(SliceInputError, match="2 nodes"):
        node_devices(two, None)
    assert list(node_devices(two, "n2").drivers) == ["a.example.com"]


def test_a_node_without_slices_says_so() -> None:
    got = node_devices(SLICES, "n9")
    assert got.drivers == {} and got.notes == ("no ResourceSlice names node n9: nothing to check",)


def test_slices_for_many_nodes_are_counted_not_checked() -> None:
    got = node_devices([*SLICES, _slice("c.example.com", None, ["x"])], "n1")
    assert "c.example.com" not in got.drivers
    assert any("not tied to a node" in n for n in got.notes)


def test_unqualified_attribute_names_are_qualified_with_the_driver() -> None:
    (dev, *_) = node_devices(SLICES, "n1").drivers["a.example.com"]
    assert set(dev.attributes) == {"a.example.com/numaNode"}
