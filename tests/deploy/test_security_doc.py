"""SECURITY.md says what each ServiceAccount token can do: it names (in backticks) every verb and
resource the roles in deploy/ grant, so a role that gains one cannot leave the threat model stale
without this failing."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
ROLE_KINDS = ("Role", "ClusterRole")
# a rule's list in a Helm template: `verbs: ["get", "list"]` (templates are not YAML until rendered)
_FLOW_LIST = re.compile(r"^\s*-?\s*(verbs|resources):\s*\[([^\]]*)\]", re.MULTILINE)


def _plain_rules() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted((REPO / "deploy").rglob("*.yaml")):
        if "templates" in path.parts:
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") in ROLE_KINDS:
                name = f"{path.relative_to(REPO)}:{doc['metadata']['name']}"
                out.extend((name, rule) for rule in doc.get("rules") or [])
    return out


def _template_lists() -> list[tuple[str, list[str]]]:
    out = []
    for path in sorted((REPO / "deploy" / "helm").rglob("templates/*.yaml")):
        for m in _FLOW_LIST.finditer(path.read_text()):
            items = [s.strip().strip("\"'") for s in m.group(2).split(",") if s.strip()]
            out.append((str(path.relative_to(REPO)), items))
    return out


def granted() -> dict[str, set[str]]:
    """Every verb and resource the deploy/ roles grant, with the files and roles that grant it."""
    where: dict[str, set[str]] = {}
    for name, rule in _plain_rules():
        for key in ("verbs", "resources"):
            for item in rule.get(key) or []:
                where.setdefault(item, set()).add(name)
    for name, items in _template_lists():
        for item in items:
            where.setdefault(item, set()).add(name)
    return where


def unnamed(text: str, found: dict[str, set[str]]) -> dict[str, list[str]]:
    named = set(re.findall(r"`([^`\s]+)`", text))
    return {item: sorted(where) for item, where in found.items() if item not in named}


def test_security_md_names_every_verb_and_resource_the_roles_grant() -> None:
    found = granted()
    # an empty scan (files moved, layout changed) must not pass
    assert {"get", "list", "watch", "create", "update", "delete"} <= set(found), sorted(found)
    assert "associated-node:update" in found and "resourceclaims/status" in found
    assert any("templates" in w for ws in found.values() for w in ws)  # the chart's roles too
    missing = unnamed((REPO / "SECURITY.md").read_text(), found)
    assert not missing, f"SECURITY.md does not name what these roles grant: {missing}"


def test_a_verb_the_document_leaves_out_is_reported() -> None:
    text = (REPO / "SECURITY.md").read_text()
    assert "`delete`" in text
    assert "delete" in unnamed(text.replace("`delete`", "delete"), granted())
