"""The image installs what the tests ran with: requirements.lock (pip install --require-hashes)
pins every package at the version constraints.txt gives it, each with its hashes, and holds
everything the image needs besides torch: elasticps's dependencies, the object-store extras
(s3fs, gcsfs), torch's own dependencies and the wheel's build tools. The base image is pinned
by digest. (No Docker engine runs here: hadolint lints the Dockerfile in scripts/test.sh.)"""

from __future__ import annotations

import importlib.metadata
import re
import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.helpers import REPO

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")
_HASH = re.compile(r"--hash=sha256:[0-9a-f]{64}\b")


def pins(path: str) -> dict[str, str]:
    found = {}
    for line in (REPO / path).read_text().splitlines():
        match = _PIN.match(line)
        if match:
            found[canonicalize_name(match.group(1))] = match.group(2)
    return found


def locked() -> dict[str, tuple[str, int]]:
    """name -> (version, number of hashes) from requirements.lock."""
    text = (REPO / "requirements.lock").read_text()
    entries: dict[str, tuple[str, int]] = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", text):
        match = _PIN.match(block)
        if match:
            entries[canonicalize_name(match.group(1))] = (match.group(2),
                                                          len(_HASH.findall(block)))
    return entries


def test_every_locked_package_is_pinned_at_the_constraints_version_with_hashes() -> None:
    lock, constraints = locked(), pins("constraints.txt")
    assert lock, "requirements.lock holds no package"
    assert {name: version for name, (version, _) in lock.items()} == {
        name: constraints.get(name) for name in lock}, "run scripts/lock.sh"
    assert [name for name, (_, hashes) in lock.items() if hashes == 0] == []


def test_the_lock_holds_everything_the_image_installs_but_torch() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert extras["s3"] == ["s3fs>=2024.6"]
    assert extras["gcs"] == ["gcsfs>=2024.6"]
    needed = {Requirement(r).name for r in [*project["dependencies"], *extras["s3"],
                                            *extras["gcs"]]}
    needed |= {Requirement(r).name for r in importlib.metadata.requires("torch") or []
               if Requirement(r).marker is None}  # torch's own, its extras aside
    needed = {canonicalize_name(n) for n in needed} - {"torch"}
    assert needed | {"setuptools", "wheel"} <= set(locked())
    assert "torch" not in locked()  # from the PyTorch index of the image's variant


def test_the_dockerfile_installs_from_the_lock_on_a_base_pinned_by_digest() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    base = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", dockerfile, re.MULTILINE)
    assert base is not None
    assert re.fullmatch(r"python:3\.11-slim-bookworm@sha256:[0-9a-f]{64}", base.group(1))
    assert "pip install --require-hashes --no-deps -r requirements.lock" in dockerfile
    assert "--no-build-isolation" in dockerfile  # the wheel is built with the locked tools
    assert "-c constraints.txt" not in dockerfile  # no install outside the lock
    assert "!requirements.lock" in (REPO / ".dockerignore").read_text().splitlines()
