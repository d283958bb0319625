"""API objects from what people save: `kubectl get ... -o yaml|json`, or `topodra slices`.

A file may hold one `kind: List` (or `ResourceSliceList`, ...) with `items`, a stream of YAML
documents, a bare YAML/JSON sequence of objects (what `topodra slices` prints), or one object;
any mix of these. `load_objects` flattens all of them into the objects themselves, so a command
that reads saved objects (`topodra check --slices`) accepts whichever form the user has.

Input comes from a file the user names and may be large (a capture of a whole cluster): the text
is bounded before it is parsed, and anything that is not an object is an error that names its
position, never a crash.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

MAX_BYTES = 256 * 1024 * 1024  # a kubectl dump of 10,000 nodes' slices is far below this
MAX_NESTING = 4  # a List in a list of Lists is as deep as any real file goes


class ObjectFileError(ValueError):
    """The text is not YAML/JSON or holds something that is not a Kubernetes object."""


def load_objects(text: str, source: str = "input") -> list[dict[str, Any]]:
    """Every object in `text`, `List` items flattened, in order."""
    if len(text) > MAX_BYTES:
        raise ObjectFileError(f"{source}: larger than {MAX_BYTES // (1024 * 1024)} MiB")
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the C loader is 10x faster on dumps
    try:
        documents = list(yaml.load_all(text, Loader=loader))
    except yaml.YAMLError as err:
        raise ObjectFileError(f"{source}: not YAML or JSON: {_short(err)}") from err
    except ValueError as err:  # e.g. an integer of more digits than Python converts
        raise ObjectFileError(f"{source}: a value cannot be read: {_short(err)}") from err
    out: list[dict[str, Any]] = []
    for index, doc in enumerate(documents):
        out.extend(_flatten(doc, f"{source}: document {index + 1}"))
    return out


def read_objects(path: str, flag: str) -> list[dict[str, Any]]:
    """Every object in the file `path` names ('-': stdin), read no further than MAX_BYTES;
    ObjectFileError with one line naming `flag` and the file when it cannot be read or parsed."""
    if path == "-":
        return load_objects(sys.stdin.read(MAX_BYTES + 1), f"{flag} stdin")
    if os.path.isdir(path):
        raise ObjectFileError(f"{flag} {path} is a folder; name a file")
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise ObjectFileError(f"{flag} {path}: no such file") from None
    except OSError as err:
        raise ObjectFileError(f"{flag} {path}: cannot read it: {err.strerror or err}") from None
    return load_objects(text, f"{flag} {path}")


def _flatten(doc: Any, where: str, depth: int = 0) -> Iterator[dict[str, Any]]:
    if doc is None:
        return  # an empty document (a trailing `---`)
    if depth > MAX_NESTING:  # YAML aliases can nest lists exponentially: refuse, do not walk
        raise ObjectFileError(f"{where}: lists of objects nested deeper than {MAX_NESTING}")
    if isinstance(doc, list):
        for i, item in enumerate(doc):
            yield from _flatten(item, f"{where}, item {i + 1}", depth + 1)
        return
    if not isinstance(doc, dict):
        raise ObjectFileError(f"{where}: expected an object, found {type(doc).__name__}")
    kind = doc.get("kind")
    if isinstance(kind, str) and kind.endswith("List") and isinstance(doc.get("items"), list):
        for i, item in enumerate(doc["items"]):
            yield from _flatten(item, f"{where}, items[{i}]", depth + 1)
        return
    if not isinstance(kind, str) and "items" in doc:
        raise ObjectFileError(f"{where}: a list without a kind")
    yield doc


def of_kind(objects: Iterable[Mapping[str, Any]], kind: str) -> list[dict[str, Any]]:
    """The objects of one kind; objects printed without `kind` (a `topodra slices` list always
    has it) are taken when their shape says so (a ResourceSlice has `spec.driver`)."""
    out = []
    for obj in objects:
        k = obj.get("kind")
        if k == kind or (k is None and kind == "ResourceSlice" and _looks_like_slice(obj)):
            out.append(dict(obj))
    return out


def _looks_like_slice(obj: Mapping[str, Any]) -> bool:
    spec = obj.get("spec")
    return isinstance(spec, Mapping) and isinstance(spec.get("driver"), str) and "pool" in spec


def _short(err: Exception) -> str:
    return " ".join(str(err).split())[:300]
