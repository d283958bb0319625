"""Finding a spec by file path or by the name of a shipped one."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from topodra.common.synth.reader import SpecError
from topodra.common.synth.spec import MachineSpec, load_spec_text

PACKAGE = "topodra.common.synth.specs"


def shipped_spec_names() -> list[str]:
    return sorted(
        entry.name.removesuffix(".json")
        for entry in resources.files(PACKAGE).iterdir()
        if entry.name.endswith(".json")
    )


def shipped_spec_text(name: str) -> str:
    if name not in shipped_spec_names():
        raise SpecError(f"no shipped spec named {name!r} (shipped: {', '.join(shipped_spec_names())})")
    return resources.files(PACKAGE).joinpath(f"{name}.json").read_text()


def load_spec(ref: str | Path) -> MachineSpec:
    """`ref` is a path to a JSON file, or the name of a shipped spec (`topodra synth --list`)."""
    path = Path(ref)
    shipped = str(ref) in shipped_spec_names()
    if path.is_file() or (not shipped and (path.suffix == ".json" or "/" in str(ref))):
        try:
            text = path.read_text()
        except OSError as exc:
            raise SpecError(f"{path}: cannot read: {exc.strerror or exc}") from None
        return load_spec_text(text, default_name=path.stem, origin=str(path))
    name = str(ref)
    return load_spec_text(shipped_spec_text(name), default_name=name, origin=f"shipped spec {name}")
