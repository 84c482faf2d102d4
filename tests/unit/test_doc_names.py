"""Every Python name the README and docs/ show works as a reader would write it.

A dotted name (``elasticps.optim.SGD``, ``eps.events.EndPass``) must resolve attribute by
attribute, and every module on the way must import under its own dotted path, since a reader
turns ``elasticps.optim.SGD`` into ``from elasticps.optim import SGD``; every ``from elasticps...
import ...`` statement must run. Names that are not Python (``elasticps.io/job`` labels, the
``...elasticps.invalid`` TLS names) are told apart by what surrounds them.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from types import ModuleType

import pytest

from tests.helpers import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# A dotted name, not part of a longer dotted or hyphenated word (``elasticps.model-dir/1``, a
# format name), and not a label prefix ("/").
DOTTED = re.compile(r"(?<![\w.\-<>])(elasticps|eps)((?:\.[A-Za-z_]\w*)+)(?![\w/\-])")
FROM_IMPORT = re.compile(r"from (elasticps[\w.]*) import (\([^)]*\)|[^\n]+)")


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def dotted_names() -> list[tuple[str, str]]:
    found = {("elasticps" + m.group(2), path.name) for path in DOCS
             for m in DOTTED.finditer(_text(path))}
    return sorted(found)


def from_imports() -> list[tuple[str, str, str]]:
    found = set()
    for path in DOCS:
        for m in FROM_IMPORT.finditer(_text(path)):
            names = m.group(2).strip("()").split("#")[0]
            for name in re.split(r"[\s,]+", names):
                if re.fullmatch(r"[A-Za-z_]\w*", name) and name != "as":
                    found.add((m.group(1), name, path.name))
    return sorted(found)


def resolve(dotted: str) -> object:
    """``dotted`` attribute by attribute from ``elasticps``; every module reached on the way
    must also import by its own dotted path."""
    parts = dotted.split(".")
    obj: object = importlib.import_module(parts[0])
    for depth in range(1, len(parts)):
        path = ".".join(parts[:depth + 1])
        if isinstance(obj, ModuleType) and not hasattr(obj, parts[depth]):
            obj = importlib.import_module(path)  # a submodule not imported yet
            continue
        obj = getattr(obj, parts[depth])
        if isinstance(obj, ModuleType):
            importlib.import_module(path)
    return obj


def test_the_docs_name_some_python() -> None:
    names = {name for name, _ in dotted_names()}
    assert {"elasticps.events", "elasticps.optim.SGD", "elasticps.reader.cloud"} <= names
    assert ("elasticps.data", "write_dataset", "data.md") in from_imports()
    assert not any(name.startswith(("elasticps.io", "elasticps.invalid")) for name in names)


@pytest.mark.parametrize(("name", "doc"), dotted_names())
def test_every_dotted_name_imports(name: str, doc: str) -> None:
    try:
        resolve(name)
    except (ImportError, AttributeError) as exc:
        pytest.fail(f"{doc} names {name}, which does not import: {exc}")


@pytest.mark.parametrize(("module", "name", "doc"), from_imports())
def test_every_from_import_runs(module: str, name: str, doc: str) -> None:
    try:
        getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        pytest.fail(f"{doc}: from {module} import {name} fails: {exc}")


@pytest.mark.parametrize(("public", "home"), [("elasticps.events", "elasticps.trainer.events"),
                                              ("elasticps.optim", "elasticps.trainer.optim")])
def test_the_public_modules_hold_every_name_of_their_homes(public: str, home: str) -> None:
    inner = importlib.import_module(home)
    outer = importlib.import_module(public)
    assert sorted(outer.__all__) == sorted(inner.__all__)
    assert all(getattr(outer, name) is getattr(inner, name) for name in inner.__all__)
