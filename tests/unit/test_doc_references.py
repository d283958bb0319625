"""Docstrings, comments and documents point only at documents that are in the repository.

A reader of this repository has none of the notes it was written from: a "facts §7.3", a
"shared spec §2.2" or an "(issue 6)" sends them nowhere. The upstream facts the code relies on
are written down in docs/design/ in our words; a pointer names a file there (or any file of the
repository), and that file must exist.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.conftest import REPO

# Section signs of notes, issue numbers, and the notes' own names.
POINTERS = re.compile(
    r"§"
    r"|\bissue[- ]?#?\d+"
    r"|\b(?:facts|spec)\s+§"
    r"|kubelet-dra-facts|user-asks\.md|container-runtime-here|real-node-here"
    r"|shared[/ ]spec",
    re.IGNORECASE,
)
# A repository path in prose: docs/..., common/..., a relative link of a Markdown document.
DOC_PATH = re.compile(r"\b(docs/[\w./-]+\.(?:md|svg))")
MD_LINK = re.compile(r"\]\((?!https?:|#|mailto:)([^)#\s]+)")
# Figures and captured output are not prose; this file names the patterns it looks for.
SKIP = re.compile(r"^docs/bench/|\.json$|\.svg$|\.png$|^tests/unit/test_doc_references\.py$")


def _text_files() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    files = []
    for name in sorted(set(filter(None, out.split("\0")))):
        path = REPO / name
        if SKIP.search(name) or not path.is_file():
            continue
        try:
            path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # binary
        files.append(path)
    return files


def test_no_pointer_at_a_document_outside_the_repository() -> None:
    files = _text_files()
    assert len(files) > 100, "git ls-files found almost nothing: the test would prove nothing"
    found = []
    for path in files:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if (m := POINTERS.search(line)) is not None:
                found.append(f"{path.relative_to(REPO)}:{number}: {m.group(0)!r} in {line.strip()[:100]}")
    assert not found, "pointers at documents that are not in the repository:\n" + "\n".join(found)


def test_every_document_named_exists() -> None:
    missing = []
    for path in _text_files():
        text = path.read_text(encoding="utf-8")
        names = [(m.group(1), REPO / m.group(1)) for m in DOC_PATH.finditer(text)]
        if path.suffix == ".md":
            names += [(m.group(1), path.parent / m.group(1)) for m in MD_LINK.finditer(text)]
        for name, target in names:
            if not target.exists():
                missing.append(f"{path.relative_to(REPO)}: {name}")
    assert not missing, "documents named but not in the repository:\n" + "\n".join(missing)


# A module or folder of ours named in a document, as `common/...` or `drivers/<kind>/...`.
CODE_PATH = re.compile(r"`((?:common|drivers|tests|hack|deploy|proto|docs)/[\w./<>-]*)`")


def test_every_module_a_document_names_exists() -> None:
    """The design documents describe the code by its file names; a file that moved or went
    away must take the sentence with it."""
    documents = [p for p in _text_files() if p.suffix == ".md"]
    assert any(p.name == "architecture.md" for p in documents)
    missing = []
    for path in documents:
        for m in CODE_PATH.finditer(path.read_text(encoding="utf-8")):
            kinds = ("cpu", "accelerator", "nic") if "<kind>" in m.group(1) else ("",)
            if not all((REPO / m.group(1).replace("<kind>", k)).exists() for k in kinds):
                missing.append(f"{path.relative_to(REPO)}: {m.group(1)}")
    assert not missing, "modules named in documents but not in the repository:\n" + "\n".join(missing)


BARE_PATH = re.compile(r"(?<![\w/.])((?:common|drivers)/[\w./<>-]*[\w/>])")


def test_the_architecture_picture_names_real_modules() -> None:
    """docs/design/architecture.md draws the flow with module names, outside backticks too."""
    text = (REPO / "docs/design/architecture.md").read_text(encoding="utf-8")
    named = {m.group(1) for m in BARE_PATH.finditer(text)}
    assert len(named) >= 10, named
    kinds = ("cpu", "accelerator", "nic")
    missing = sorted(n for n in named if not all((REPO / n.replace("<kind>", k)).exists() for k in kinds))
    assert not missing, missing


def test_the_patterns_catch_what_they_are_for() -> None:
    """The scan would pass on any repository if its patterns matched nothing."""
    for line in (
        "(facts §7.3)",
        "shared spec §2.2",
        "The order of preference (issue 6)",
        "see issue-14",
        "kubelet-dra-facts.md",
        "../shared/spec/x.md",
    ):
        assert POINTERS.search(line), line
    for line in ("docs/design/access.md", "the issue is that", "specification"):
        assert not POINTERS.search(line), line
