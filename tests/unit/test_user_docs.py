"""The user documentation stays true: the attribute and metrics references are what
hack/gen-user-docs writes from the code, every link in the guide, README and CHANGELOG points at
a file that exists, and the README's quick start prints what the README shows."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

DOCS = REPO / "docs" / "user"
LINK = re.compile(r"\]\(([^)#\s]+)(#[^)]*)?\)")


def test_references_are_generated_from_the_code() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "hack" / "gen-user-docs"), "--check"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr


def test_every_relative_link_resolves() -> None:
    pages = [
        *DOCS.glob("*.md"),
        REPO / "README.md",
        REPO / "CHANGELOG.md",
        REPO / "deploy/helm/topodra/README.md",
    ]
    broken = []
    for page in pages:
        for target, _ in LINK.findall(page.read_text()):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(REPO)} -> {target}")
    assert not broken, broken
    readme = (REPO / "README.md").read_text()
    for page in ("docs/user/README.md", "docs/user/troubleshooting.md", "CHANGELOG.md"):
        assert f"]({page})" in readme
    guide = (DOCS / "README.md").read_text()
    for page in (
        "architecture.md",
        "attributes.md",
        "cookbook.md",
        "metrics.md",
        "troubleshooting.md",
        "upgrade.md",
    ):
        assert f"]({page})" in guide
    assert "CPU manager must use the `none` policy" in "\n".join(guide.splitlines()[:4])


def test_readme_quick_start_prints_what_the_readme_shows(tmp_path: Path) -> None:
    readme = (REPO / "README.md").read_text()
    quick = readme[readme.index("## Quick start") : readme.index("## What is where")]
    (command,) = [line for line in quick.splitlines() if line.startswith("pip install . && topodra synth")]
    shown = quick[quick.index("```text") + len("```text") :].split("```", 1)[0]
    steps = command.removeprefix("pip install . && ").replace("/tmp/hgx", str(tmp_path / "hgx")).split(" && ")
    out = ""
    for step in steps:
        argv = step.split()
        assert argv[0] == "topodra"
        done = subprocess.run(
            [sys.executable, "-m", "topodra.drivers.cli.main", *argv[1:]],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        out = done.stdout
    lines = [line for line in shown.splitlines() if line.strip() and "..." not in line]
    assert len(lines) >= 5
    for line in lines:
        assert line in out, line
