"""Optional product names from the system's pci.ids database.

Loaded only when somebody asks for a name, so discovery never pays for parsing a 1 MB file.
"""

from __future__ import annotations

from functools import lru_cache

DEFAULT_PATHS = ("/usr/share/misc/pci.ids", "/usr/share/hwdata/pci.ids")


@lru_cache(maxsize=4)
def _load(path: str) -> dict[tuple[int, int | None], str]:
    names: dict[tuple[int, int | None], str] = {}
    vendor: int | None = None
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return names
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        if line.startswith("C "):  # device classes follow: no more vendors
            break
        if not line.startswith("\t"):
            try:
                vendor = int(line[:4], 16)
            except ValueError:
                vendor = None
                continue
            names[(vendor, None)] = line[4:].strip()
        elif not line.startswith("\t\t") and vendor is not None:
            try:
                names[(vendor, int(line[1:5], 16))] = line[5:].strip()
            except ValueError:
                continue
    return names


def lookup(vendor: int, device: int, paths: tuple[str, ...] | None = None) -> str | None:
    """'Vendor Device' from the first pci.ids that exists, None when none knows it."""
    for path in paths or DEFAULT_PATHS:
        names = _load(path)
        if not names:
            continue
        v = names.get((vendor, None))
        d = names.get((vendor, device))
        if v is None and d is None:
            return None
        return " ".join(x for x in (v, d) if x)
    return None
