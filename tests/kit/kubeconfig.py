"""A kubeconfig the official client loads, for tests of what happens before or instead of a
connection: its server is an address where nothing answers."""

from __future__ import annotations

import json
from pathlib import Path


def write_kubeconfig(folder: Path, server: str = "https://127.0.0.1:1", *, insecure: bool = False) -> Path:
    """`folder`/kubeconfig: one cluster at `server`, a token user and the context joining them.
    `insecure`: the cluster skips TLS verification (a test that must reach the HTTP layer)."""
    cluster: dict[str, object] = {"server": server}
    if insecure:
        cluster["insecure-skip-tls-verify"] = True
    path = folder / "kubeconfig"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": cluster}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return path
