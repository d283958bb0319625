"""The cheap reading that tells whether a scan could find anything new.

A few folder listings (and, where a driver asks, the `driver` link or a few small files of each
entry) cost microseconds per entry; a full discovery costs milliseconds per device. Polling the
signature instead of scanning is what makes an unchanged machine cost nothing.
"""

from __future__ import annotations

import os

from topodra.common.inventory.contract import Policy

Signature = tuple[object, ...]


def _names(folder: str) -> tuple[str, ...]:
    try:
        return tuple(sorted(os.listdir(folder)))
    except OSError:
        return ()


def _link(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return ""


def _text(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return f.read(256).decode("ascii", "replace")
    except OSError:
        return ""


def watches_anything(policy: Policy) -> bool:
    return bool(policy.listings or policy.links or policy.files)


def read(policy: Policy) -> Signature:
    root = policy.sysfs_root
    out: list[object] = [_names(os.path.join(root, rel)) for rel in policy.listings]
    for rel, link in policy.links:
        folder = os.path.join(root, rel)
        out.append(tuple((n, _link(os.path.join(folder, n, link))) for n in _names(folder)))
    for rel, files in policy.files:
        folder = os.path.join(root, rel)
        out.append(
            tuple((n, tuple(_text(os.path.join(folder, n, f)) for f in files)) for n in _names(folder))
        )
    return tuple(out)
