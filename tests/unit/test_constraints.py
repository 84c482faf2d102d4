"""constraints.txt is the one lock for scripts/setup.sh and the image: it pins every dependency,
and the environment the tests run in is the one it describes."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import PackageNotFoundError, version

from tests.helpers import REPO


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins() -> dict[str, str]:
    lines = (REPO / "constraints.txt").read_text().splitlines()
    pairs = (line.split("==") for line in lines if line and not line.startswith("#"))
    return {_canonical(name): pinned for name, pinned in pairs}


def _declared() -> set[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    specs = [*project["dependencies"], *project["optional-dependencies"]["dev"]]
    return {_canonical(re.split(r"[<>=!~\[ ;]", spec, maxsplit=1)[0]) for spec in specs}


def test_every_declared_dependency_but_torch_is_pinned() -> None:
    assert _declared() - {"torch"} - _pins().keys() == set()


def test_the_installed_versions_are_the_pinned_ones() -> None:
    def installed(name: str) -> str | None:
        try:
            return version(name)
        except PackageNotFoundError:
            return None

    drift = {name: (installed(name), pinned) for name, pinned in _pins().items()
             if installed(name) != pinned}
    assert drift == {}, "rerun scripts/setup.sh: (installed, pinned) per package"


def test_setup_and_the_image_install_with_the_constraints() -> None:
    setup = (REPO / "scripts" / "setup.sh").read_text()
    assert setup.count("-c constraints.txt") == 2
    assert "COPY pyproject.toml README.md constraints.txt" in (REPO / "Dockerfile").read_text()
    assert "!constraints.txt" in (REPO / ".dockerignore").read_text().splitlines()
