"""`@record` behaves as `@dataclass(frozen=True, slots=True)` for what the topology model and the
inspect views use, without importing `dataclasses` (common/records.py says why)."""

from __future__ import annotations

import copy
import pickle
import subprocess
import sys
from dataclasses import FrozenInstanceError, dataclass

import pytest
from topodra.common.records import COMPILE_AFTER, FrozenRecordError, field, record

from tests.kit.imports import forget_first


@record
class Link:
    speed: int | None
    width: int | None = None
    lanes: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class DcLink:
    speed: int | None
    width: int | None = None
    lanes: tuple[int, ...] = ()


@record
class Indexed:
    items: tuple[int, ...]
    _by_value: dict[int, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_value", {v: i for i, v in enumerate(self.items)})


@record(frozen=False)
class Box:
    kind: str
    children: list[str] = field(default_factory=list)
    w: float = 0.0


def test_the_same_as_a_frozen_slotted_dataclass() -> None:
    a, b = Link(8, lanes=(1, 2)), Link(speed=8, width=None, lanes=(1, 2))
    assert a == b and hash(a) == hash(b) and a != Link(16) and a != DcLink(8, lanes=(1, 2))
    assert repr(a) == repr(DcLink(8, lanes=(1, 2))).replace("DcLink", "Link")
    assert Link.__match_args__ == DcLink.__match_args__ == ("speed", "width", "lanes")
    assert Link.__slots__ == ("speed", "width", "lanes") and not hasattr(a, "__dict__")
    with pytest.raises(FrozenRecordError):
        a.speed = 1  # type: ignore[misc]
    with pytest.raises(FrozenInstanceError):
        DcLink(1).speed = 2  # type: ignore[misc]
    with pytest.raises(AttributeError):  # both refuse a deletion, as an AttributeError
        del a.width  # type: ignore[misc]
    with pytest.raises(TypeError):
        Link()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Link(1, 2, (), 4)  # type: ignore[call-arg]
    match a:
        case Link(8, None, lanes):
            assert lanes == (1, 2)
        case _:
            pytest.fail("positional pattern did not match")


def test_post_init_fields_left_out_of_init_repr_and_equality() -> None:
    x = Indexed((5, 7))
    assert x._by_value == {5: 0, 7: 1}
    assert repr(x) == "Indexed(items=(5, 7))"
    assert x == Indexed((5, 7)) and hash(x) == hash(Indexed((5, 7)))


def test_copies_and_pickles_although_frozen() -> None:
    x = Indexed((1, 2))
    for y in (copy.copy(x), copy.deepcopy(x), pickle.loads(pickle.dumps(x))):
        assert y == x and y._by_value == {1: 0, 2: 1}


def test_a_mutable_record_is_not_hashable_and_gets_fresh_defaults() -> None:
    a, b = Box("socket"), Box("socket")
    a.children.append("numa")
    a.w = 3.0
    assert b.children == [] and a != b and Box("socket", ["numa"], 3.0) == a
    with pytest.raises(TypeError):
        hash(a)


def test_a_field_without_default_after_one_with_is_refused_at_class_creation() -> None:
    with pytest.raises(TypeError, match="'b' without a default follows 'a'"):

        @record
        class Bad:
            a: int = 0
            b: int

    with pytest.raises(ValueError, match="not both"):
        field(default=1, default_factory=list)


def test_records_import_neither_dataclasses_nor_typing() -> None:
    code = forget_first("dataclasses", "typing", "inspect") + (
        "import topodra.common.records\n"
        "sys.exit(sorted(m for m in ('dataclasses', 'typing', 'inspect') if m in sys.modules) != [])\n"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_a_record_is_made_without_compile() -> None:
    """The first compile() call of a process builds the `ast` node classes (~1.5 ms of every
    `topodra inspect`): records exec their `__init__` text instead (once past their first
    COMPILE_AFTER instances), and tracebacks still name the record."""
    code = (
        "import builtins\n"
        "from topodra.common.records import COMPILE_AFTER, record, field\n"
        "def refuse(*a, **k):\n"
        "    raise AssertionError('compile() called')\n"
        "builtins.compile = refuse\n"
        "@record\n"
        "class Pair:\n"
        "    a: int\n"
        "    b: list = field(default_factory=list)\n"
        "p = Pair(1)\n"
        "assert p == Pair(1, []) and p.b == [], p\n"
        "for _ in range(COMPILE_AFTER):\n"
        "    Pair(2)\n"
        "assert Pair.__init__.__code__.co_filename == '<record Pair>', Pair.__init__.__code__\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr


def _mixed() -> type:
    """A fresh record class of every kind of field: each class counts its own instances."""

    @record
    class Mixed:
        a: int
        b: tuple[int, ...] = ()
        c: list[int] = field(default_factory=list)
        d: int = field(init=False, default=7)
        e: dict[str, int] = field(init=False, repr=False, compare=False)

        def __post_init__(self) -> None:
            object.__setattr__(self, "e", {"a": self.a})

    return Mixed


CALLS: list[tuple[tuple[object, ...], dict[str, object]]] = [
    ((1,), {}),
    ((1, (2,)), {}),
    ((1, (2,), [3]), {}),
    ((), {"a": 1, "c": [3]}),
    ((1,), {"c": [4], "b": (5,)}),
]
WRONG_CALLS: list[tuple[tuple[object, ...], dict[str, object]]] = [
    ((), {}),  # a is missing
    ((1,), {"a": 1}),  # a twice
    ((1, (), [], 4), {}),  # too many
    ((1,), {"d": 1}),  # not an __init__ argument
    ((1,), {"z": 1}),  # unknown
]


def test_the_first_instances_are_set_as_the_compiled_init_sets_them() -> None:
    """Records made a few times skip the compile (records.py: COMPILE_AFTER); their instances
    are the same as those of a compiled `__init__`, and a wrong call raises the same error."""
    early, late = _mixed(), _mixed()
    for _ in range(COMPILE_AFTER + 1):
        late(0)
    assert late.__init__.__code__.co_filename == "<record Mixed>"  # type: ignore[misc]
    for args, kwargs in CALLS:
        x, y = early(*args, **kwargs), late(*args, **kwargs)
        assert (repr(x), x.d, x.e) == (repr(y), y.d, y.e)  # type: ignore[attr-defined]
    assert early(1).c is not early(1).c  # type: ignore[attr-defined]
    assert early.__init__.__code__.co_filename.endswith("records.py")  # type: ignore[misc]
    for args, kwargs in WRONG_CALLS:
        with pytest.raises(TypeError) as wrong_early:
            early(*args, **kwargs)
        with pytest.raises(TypeError) as wrong_late:
            late(*args, **kwargs)
        assert str(wrong_early.value) == str(wrong_late.value)
