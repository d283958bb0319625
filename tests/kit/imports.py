"""What a piece of code imports, on any interpreter.

A test that asks "does inspect import typing?" runs a fresh interpreter and reads sys.modules. Some
interpreters load modules before the first line of the test's code runs: a `.pth` file in
site-packages (CI's pyenv Python has one that imports typing and shutil) or a sitecustomize. Reading
sys.modules there blames our code for the interpreter's start-up. The prelude below forgets the
watched modules first, so only an import made after it, by the code under test, puts them back.
"""

from __future__ import annotations


def forget_first(*roots: str) -> str:
    """Python source to put first in a `python -c` program: drops every loaded module under one of
    `roots` (by top-level name) from sys.modules, so a later import of one shows again."""
    names = tuple(sorted(set(roots)))
    return (
        "import sys\n"
        f"for _name in [m for m in sys.modules if m.split('.')[0] in {names!r}]:\n"
        "    del sys.modules[_name]\n"
    )
