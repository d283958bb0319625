"""The shared library never imports what is built on it: common/ knows no driver and no CLI.

A driver or the CLI may import common/, never the other way round; otherwise a change in one
driver could break the runtime the other two share.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def test_common_imports_no_driver_and_no_cli() -> None:
    files = sorted((REPO / "common").rglob("*.py"))
    assert files, "common/ has no Python files: is this the repository root?"
    bad = {
        str(f.relative_to(REPO)): sorted(m for m in _imports(f) if m.startswith("topodra.drivers"))
        for f in files
    }
    assert {k: v for k, v in bad.items() if v} == {}
