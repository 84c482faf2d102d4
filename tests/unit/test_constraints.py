"""constraints.txt is the one list of versions: scripts/setup.sh installs with it, the image's
hashed requirements.lock is made from it (tests/unit/test_image_lock.py), it pins every
dependency, and the environment the tests run in is the one it describes."""

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
    specs = [*project["dependencies"],
             *(spec for extra in project["optional-dependencies"].values() for spec in extra)]
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


def test_setup_installs_with_the_constraints_and_every_extra() -> None:
    setup = (REPO / "scripts" / "setup.sh").read_text()
    assert setup.count("-c constraints.txt") == 2
    assert '-e ".[dev,s3,gcs]"' in setup  # the tests run with what the image has
