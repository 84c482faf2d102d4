"""The Dockerfile and the specs agree: the image the manifests name is the one it builds.

No Docker engine runs here, so the image itself is never built in the tests; scripts/test.sh
lints the Dockerfile with hadolint, and these tests check what can be checked without a build.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

from elasticps.cluster.spec import DEFAULT_IMAGE, Job
from elasticps.version import __version__

ROOT = Path(__file__).resolve().parents[3]
DOCKERFILE = (ROOT / "Dockerfile").read_text()


def _copy_sources() -> list[str]:
    """Sources of the Dockerfile's COPY lines that read the build context (not --from)."""
    sources: list[str] = []
    for line in DOCKERFILE.splitlines():
        words = line.split()
        if not words or words[0] != "COPY" or any(w.startswith("--from") for w in words):
            continue
        args = [w for w in words[1:] if not w.startswith("--")]
        sources += args[:-1]
    return sources


def test_default_image_is_the_package_version() -> None:
    assert f"elasticps/elasticps:{__version__}" == DEFAULT_IMAGE
    assert Job(entry_point="python train.py").image == DEFAULT_IMAGE
    demo = yaml.safe_load((ROOT / "examples/ctr/job.yaml").read_text())
    assert demo["image"] == DEFAULT_IMAGE


def test_dockerfile_labels_the_package_version() -> None:
    match = re.search(r'org\.opencontainers\.image\.version="([^"]+)"', DOCKERFILE)
    assert match is not None
    assert match[1] == __version__


def test_dockerfile_installs_the_pinned_torch() -> None:
    pinned = next(d for d in tomllib.loads((ROOT / "pyproject.toml").read_text())
                  ["project"]["dependencies"] if d.startswith("torch"))
    match = re.search(r"ARG TORCH_VERSION=(\S+)", DOCKERFILE)
    assert match is not None
    assert pinned == f"torch=={match[1]}"
    assert re.search(r"ARG TORCH_VARIANT=cpu\b", DOCKERFILE)  # CPU unless asked otherwise


def test_dockerfile_is_multi_stage_and_runs_unprivileged() -> None:
    stages = re.findall(r"^FROM\s", DOCKERFILE, flags=re.MULTILINE)
    assert len(stages) >= 2
    assert "COPY --from=build" in DOCKERFILE
    user = re.findall(r"^USER\s+(\S+)", DOCKERFILE, flags=re.MULTILINE)
    assert user
    assert user[-1] not in ("root", "0")


def test_dockerignore_admits_what_the_dockerfile_copies_and_nothing_else() -> None:
    lines = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    assert lines[0] == "*"  # deny by default: .git, .venv, tests, work dirs stay out
    admitted = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    sources = {s.rstrip("/").removeprefix("./") for s in _copy_sources()}
    assert sources, "the Dockerfile copies nothing from the build context"
    assert sources <= admitted, f"copied but ignored: {sorted(sources - admitted)}"
    for source in sources:
        assert (ROOT / source).exists(), f"the Dockerfile copies {source}, which is missing"
    assert not admitted & {".git", ".venv", "tests", "benchmarks"}
