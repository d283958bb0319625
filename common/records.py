"""`@record`: slotted value classes, frozen by default, without the `dataclasses` module.

Why: `topodra inspect` is a command people run by hand and scripts run in loops, and every
millisecond of its start-up counts against hwloc's lstopo (docs/bench: within 2x). Importing
`dataclasses` pulls `inspect` with `ast`, `dis`, `tokenize` and `linecache`, and each dataclass
then generates and compiles six methods: together about a third of the CPU of an `inspect` of a
small machine on the benchmark machine (hack/bench-peer). A record compiles one `__init__` and
takes equality, hashing and repr from shared functions over `operator.attrgetter`.

What it gives, as `@dataclass(frozen=True, slots=True)` does for the classes that use it:
`__init__` with the fields in order (defaults, `field(default_factory=...)`, `field(init=False)`
for values `__post_init__` sets), `__post_init__`, `__eq__` and `__hash__` over the compared
fields, `__repr__`, `__match_args__`, `__slots__`, and assignment refused on frozen records.
`@record(frozen=False)` makes a mutable one (not hashable, as a dataclass). No inheritance
between records, no ordering, no `dataclasses.replace`/`asdict`: nothing that uses a record
needs them. Type checkers see a dataclass (`typing.dataclass_transform`).
"""

from __future__ import annotations

from operator import attrgetter

# `typing` costs milliseconds at import (as `dataclasses` does): type checkers read it, the
# interpreter gets stand-ins for the three names used at run time.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeVar, dataclass_transform, overload

    T = TypeVar("T")
else:

    def dataclass_transform(**_: object) -> object:
        return lambda decorated: decorated

    def overload(decorated: object) -> object:
        return decorated


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


class FrozenRecordError(AttributeError):
    """An assignment to a frozen record."""


class Field:
    __slots__ = ("compare", "default", "default_factory", "init", "repr")

    def __init__(self, default: Any, default_factory: Any, init: bool, repr: bool, compare: bool) -> None:
        self.default, self.default_factory = default, default_factory
        self.init, self.repr, self.compare = init, repr, compare


def field(
    *,
    default: Any = MISSING,
    default_factory: Callable[[], Any] = MISSING,
    init: bool = True,
    repr: bool = True,
    compare: bool = True,
) -> Any:
    """A field's default or factory, or that `__init__` leaves it out (`init=False`)."""
    if default is not MISSING and default_factory is not MISSING:
        raise ValueError("a field takes default or default_factory, not both")
    return Field(default, default_factory, init, repr, compare)


@overload
def record(cls: type[T], /) -> type[T]: ...


@overload
def record(*, frozen: bool = True) -> Callable[[type[T]], type[T]]: ...  # noqa: F811 (overload stand-in)


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def record(cls: type[T] | None = None, /, *, frozen: bool = True) -> Any:  # noqa: F811 (overload stand-in)
    def wrap(c: type[T]) -> type[T]:
        return _build(c, frozen)

    return wrap if cls is None else wrap(cls)


def _frozen_setattr(self: Any, name: str, value: Any) -> None:
    raise FrozenRecordError(f"cannot assign to field {name!r} of a frozen {type(self).__name__}")


def _frozen_delattr(self: Any, name: str) -> None:
    raise FrozenRecordError(f"cannot delete field {name!r} of a frozen {type(self).__name__}")


def _build(cls: type[T], frozen: bool) -> type[T]:
    fields: dict[str, Field] = {}
    # not inspect.get_annotations: importing `inspect` is what records avoid
    for name, annotation in cls.__dict__.get("__annotations__", {}).items():  # noqa: RUF063
        if str(annotation).startswith(("ClassVar", "typing.ClassVar")):
            continue
        value = cls.__dict__.get(name, MISSING)
        fields[name] = value if isinstance(value, Field) else Field(value, MISSING, True, True, True)
    ns = {k: v for k, v in cls.__dict__.items() if k not in fields and k not in ("__dict__", "__weakref__")}
    ns["__slots__"] = tuple(fields)
    ns["__match_args__"] = tuple(n for n, f in fields.items() if f.init)
    ns["__init__"] = _lazy_init(fields, "__post_init__" in cls.__dict__)
    compared = attrgetter(*[n for n, f in fields.items() if f.compare] or ["__class__"])
    shown = [n for n, f in fields.items() if f.repr]

    def __eq__(self: Any, other: Any) -> Any:
        if other.__class__ is self.__class__:
            return compared(self) == compared(other)
        return NotImplemented

    def __repr__(self: Any) -> str:
        return f"{type(self).__qualname__}({', '.join(f'{n}={getattr(self, n)!r}' for n in shown)})"

    ns.setdefault("__eq__", __eq__)
    ns.setdefault("__repr__", __repr__)
    if frozen:

        def __hash__(self: Any) -> int:
            return hash(compared(self))

        names = tuple(fields)

        def every(self: Any) -> tuple[Any, ...]:
            return tuple(getattr(self, n) for n in names)

        def __getstate__(self: Any) -> Any:  # copy and pickle: the frozen __setattr__ is bypassed
            return every(self)

        def __setstate__(self: Any, state: Any) -> None:
            for name, value in zip(fields, state, strict=True):
                object.__setattr__(self, name, value)

        ns.setdefault("__hash__", __hash__)
        ns.update(__setattr__=_frozen_setattr, __delattr__=_frozen_delattr)
        ns.update(__getstate__=__getstate__, __setstate__=__setstate__)
    elif "__hash__" not in cls.__dict__ or cls.__dict__["__hash__"] is None:
        ns["__hash__"] = None
    meta: Any = type(cls)
    made: type[T] = meta(cls.__name__, cls.__bases__, ns)
    setattr(made, "__record_fields__", tuple(fields))  # noqa: B010 - not a class attribute mypy knows
    return made


# Instances a record makes through `_bound` before its `__init__` is compiled. Compiling costs
# about 20 us a field (Python 3.11), and most records of an `inspect` of a small machine (the
# Topology, its packages, NUMA nodes, views) have a handful of instances: compiling them all was
# 1 to 1.5 ms of its 37 ms. Past this count, the compiled `__init__` pays back its compile.
COMPILE_AFTER = 16


def _lazy_init(fields: dict[str, Field], post_init: bool) -> Callable[..., None]:
    """An `__init__` that sets the fields through `_bound` for the first COMPILE_AFTER instances,
    then compiles the real one and puts it on the class: a record made a few times (or never: a
    view another output uses, SR-IOV on a machine without it) costs no compile. A call `_bound`
    cannot place (a missing or unknown argument) goes to the compiled one, which raises as
    Python does for any function."""
    _check_order(fields)
    made = 0

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        nonlocal made
        made += 1
        if made <= COMPILE_AFTER and _bound(self, fields, args, kwargs):
            if post_init:
                self.__post_init__()
            return
        cls = type(self)
        real = _init(cls, fields, post_init)
        cls.__init__ = real
        real(self, *args, **kwargs)

    return __init__


def _bound(self: Any, fields: dict[str, Field], args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Set the fields from a call as the compiled `__init__` would (in field order, defaults and
    factories included), or set nothing and return False when the call does not fit."""
    values: list[tuple[str, Any]] = []  # MISSING: call the field's default_factory
    used = taken = 0
    for name, f in fields.items():
        if f.init and used < len(args):
            if name in kwargs:
                return False  # given twice
            value = args[used]
            used += 1
        elif f.init and name in kwargs:
            value = kwargs[name]
            taken += 1
        elif f.default is not MISSING or f.default_factory is not MISSING:
            value = f.default
        elif f.init:
            return False  # missing
        else:
            continue  # init=False without a default: __post_init__ sets it
        values.append((name, value))
    if used < len(args) or taken < len(kwargs):
        return False  # too many positionals, or an unknown keyword
    for name, value in values:
        _set(self, name, fields[name].default_factory() if value is MISSING else value)
    return True


_set = object.__setattr__


def _check_order(fields: dict[str, Field]) -> None:
    defaulted = ""
    for name, f in fields.items():
        if not f.init:
            continue
        if f.default is not MISSING or f.default_factory is not MISSING:
            defaulted = defaulted or name
        elif defaulted:
            raise TypeError(f"field {name!r} without a default follows {defaulted!r}, which has one")


def _init(cls: type, fields: dict[str, Field], post_init: bool) -> Callable[..., None]:
    """`__init__`, compiled once per class: discovery makes instances in the thousands."""
    env: dict[str, Any] = {"_set": object.__setattr__, "_FACTORY": MISSING}
    params, body = [], []
    for name, f in fields.items():
        if f.init:
            if f.default is not MISSING:
                env[f"_d_{name}"] = f.default
                params.append(f"{name}=_d_{name}")
            elif f.default_factory is not MISSING:
                env[f"_f_{name}"] = f.default_factory
                params.append(f"{name}=_FACTORY")
                body.append(f"if {name} is _FACTORY: {name} = _f_{name}()")
            else:
                params.append(name)
            body.append(f"_set(self, {name!r}, {name})")
        elif f.default_factory is not MISSING:
            env[f"_f_{name}"] = f.default_factory
            body.append(f"_set(self, {name!r}, _f_{name}())")
        elif f.default is not MISSING:
            env[f"_d_{name}"] = f.default
            body.append(f"_set(self, {name!r}, _d_{name})")
    if post_init:
        body.append("self.__post_init__()")
    source = f"def __init__(self, {', '.join(params)}):\n    " + "\n    ".join(body or ["pass"]) + "\n"
    # exec of the text, not of compile(): the first compile() call of a process builds the `ast`
    # node classes (it checks whether it was handed a tree), ~1.5 ms that `topodra inspect`
    # would pay for its first record; a traceback still names the record (co_filename below).
    exec(source, env)
    init: Callable[..., None] = env["__init__"]
    init.__code__ = init.__code__.replace(co_filename=f"<record {cls.__qualname__}>")
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    return init
