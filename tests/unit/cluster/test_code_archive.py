"""``code: DIR``: the user's code packed deterministically, limited, shipped in a ConfigMap and
unpacked by the trainers' init container (whose exact command is run here on real files)."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from elasticps.cluster.code_archive import (
    ARCHIVE_DIR,
    CODE_DIR,
    MAX_ARCHIVE_BYTES,
    CodeLimits,
    pack_code,
    unpack_code,
)
from elasticps.cluster.manifests import BACKENDS, render
from elasticps.cluster.spec import Job
from elasticps.cluster.validate import semantic_problems, validate_manifests
from elasticps.errors import ConfigError
from tests.helpers import REPO, run_cli


def make_code(root: Path) -> Path:
    (root / "model").mkdir(parents=True)
    (root / "train.py").write_text("from model.net import NET\nprint('training', NET)\n")
    (root / "model" / "net.py").write_text("NET = 'wide-deep'\n")
    (root / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (root / "run.sh").chmod(0o755)
    for junk in (".git/objects/ab", "__pycache__", ".venv/lib", "model/__pycache__"):
        (root / junk).mkdir(parents=True, exist_ok=True)
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / ".git/objects/ab" / "cdef").write_bytes(os.urandom(64))
    (root / "__pycache__" / "train.cpython-311.pyc").write_bytes(b"\0" * 16)
    (root / "model" / "__pycache__" / "net.cpython-311.pyc").write_bytes(b"\0" * 16)
    (root / ".venv" / "lib" / "site.py").write_text("x = 1\n")
    (root / "model" / "stale.pyc").write_bytes(b"\0")
    return root


def test_only_the_code_is_packed(tmp_path: Path) -> None:
    archive = pack_code(make_code(tmp_path / "code"))
    assert archive.files == ("model/net.py", "run.sh", "train.py")
    with tarfile.open(fileobj=io.BytesIO(archive.data), mode="r:gz") as tar:
        assert tar.getnames() == list(archive.files)
        assert tar.getmember("run.sh").mode == 0o755
        assert tar.getmember("train.py").mode == 0o644
        assert {m.mtime for m in tar.getmembers()} == {0}
    assert archive.sha256 == hashlib.sha256(archive.data).hexdigest()


def make_credentials(root: Path) -> list[str]:
    """What a project directory often holds beside its code; returns their archive paths."""
    planted = [".env", ".aws/credentials", ".aws/config", "deploy/id_ed25519",
               "deploy/server.pem", "config/.env.prod", ".netrc"]
    for rel in planted:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("aws_secret_access_key = AKIA-not-for-the-cluster\n")
    return sorted(planted)


def test_credential_files_are_left_out_and_named(tmp_path: Path) -> None:
    code = make_code(tmp_path / "code")
    planted = make_credentials(code)
    archive = pack_code(code)
    assert archive.files == ("model/net.py", "run.sh", "train.py")
    assert list(archive.left_out) == planted
    with tarfile.open(fileobj=io.BytesIO(archive.data), mode="r:gz") as tar:
        assert b"AKIA" not in b"".join(tar.extractfile(m).read()  # type: ignore[union-attr]
                                       for m in tar.getmembers())
    done = run_cli("code", "pack", str(code))
    assert done.returncode == 0, done.stderr
    assert ".env" not in done.stdout.splitlines()
    assert (f"left out {len(planted)} file(s) that may hold credentials: "
            f"{', '.join(planted)}") in done.stdout


def test_an_include_pattern_ships_a_credential_file_on_purpose(tmp_path: Path) -> None:
    code = make_code(tmp_path / "code")
    make_credentials(code)
    archive = pack_code(code, include=[".env", "deploy/*.pem"])
    assert set(archive.files) == {".env", "deploy/server.pem", "model/net.py", "run.sh",
                                  "train.py"}
    assert ".env" not in archive.left_out
    assert "config/.env.prod" in archive.left_out
    done = run_cli("code", "pack", str(code), "--include", ".aws/*")
    assert ".aws/credentials" in done.stdout.splitlines()
    job = Job(job_name="ctr", namespace="ml", entry_point="python train.py", code=str(code),
              code_include=[".env"])
    (config_map,) = [o for o in render(job, "kubernetes") if o["kind"] == "ConfigMap"]
    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(
            config_map["binaryData"]["code.tar.gz"])), mode="r:gz") as tar:
        assert ".env" in tar.getnames()
        assert ".aws/credentials" not in tar.getnames()
    with pytest.raises(ConfigError, match="'code_include': must be a list of file patterns"):
        Job(job_name="ctr", namespace="ml", entry_point="python train.py", code=str(code),
            code_include=".env")


def test_the_hash_depends_on_content_only(tmp_path: Path) -> None:
    first = pack_code(make_code(tmp_path / "a"))
    # Same files written in another order, at other times, with other junk around them.
    other = tmp_path / "b"
    (other / "model").mkdir(parents=True)
    (other / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (other / "run.sh").chmod(0o755)
    (other / "model" / "net.py").write_text("NET = 'wide-deep'\n")
    (other / "train.py").write_text("from model.net import NET\nprint('training', NET)\n")
    os.utime(other / "train.py", (1_000_000, 1_000_000))
    (other / "__pycache__").mkdir()
    (other / "__pycache__" / "other.pyc").write_bytes(b"\1" * 99)
    assert pack_code(other).sha256 == first.sha256
    assert pack_code(other).data == first.data

    (other / "model" / "net.py").write_text("NET = 'deep'\n")
    changed = pack_code(other)
    assert changed.sha256 != first.sha256
    (other / "model" / "net.py").write_text("NET = 'wide-deep'\n")
    (other / "train.py").chmod(0o755)  # the executable bit is content too
    assert pack_code(other).sha256 not in (first.sha256, changed.sha256)


def test_past_the_limit_is_a_clear_error_naming_the_largest_file(tmp_path: Path) -> None:
    code = make_code(tmp_path / "code")
    (code / "weights.bin").write_bytes(os.urandom(MAX_ARCHIVE_BYTES + 1))  # incompressible
    with pytest.raises(ConfigError, match=r"job spec field 'code'.*more than the 1,024,000 "
                                          r"a ConfigMap can carry.*weights\.bin"):
        pack_code(code)
    tight = CodeLimits(100, 10**6, "code_limit=100", "raise 'code_limit'")
    with pytest.raises(ConfigError, match=r"more than code_limit=100 .*raise 'code_limit'"):
        pack_code(make_code(tmp_path / "small"), tight)


def test_bad_directories_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is not a directory"):
        pack_code(tmp_path / "missing")
    (tmp_path / "empty" / ".git").mkdir(parents=True)
    with pytest.raises(ConfigError, match="holds no files"):
        pack_code(tmp_path / "empty")
    code = make_code(tmp_path / "code")
    (tmp_path / "secret.txt").write_text("not for the cluster")
    (code / "leak.txt").symlink_to(tmp_path / "secret.txt")
    with pytest.raises(ConfigError, match=r"leak\.txt.*outside"):
        pack_code(code)
    (code / "leak.txt").unlink()
    (code / "alias.py").symlink_to(code / "train.py")  # inside: packed as the file
    assert "alias.py" in pack_code(code).files


def test_unpack_checks_the_hash_and_writes_the_same_files(tmp_path: Path) -> None:
    code = make_code(tmp_path / "code")
    archive = pack_code(code)
    path = tmp_path / "code.tar.gz"
    path.write_bytes(archive.data)
    with pytest.raises(ConfigError, match="changed after submission"):
        unpack_code(path, tmp_path / "bad", "0" * 64)
    assert not (tmp_path / "bad").exists()
    assert unpack_code(path, tmp_path / "out", archive.sha256) == 3
    for name in archive.files:
        assert (tmp_path / "out" / name).read_bytes() == (code / name).read_bytes()
    assert os.access(tmp_path / "out" / "run.sh", os.X_OK)


def test_unpack_refuses_a_member_leaving_the_directory(tmp_path: Path) -> None:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        info = tarfile.TarInfo("../escaped.py")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"x\n"))
    path = tmp_path / "evil.tar.gz"
    path.write_bytes(raw.getvalue())
    with pytest.raises(ConfigError, match="cannot be unpacked"):
        unpack_code(path, tmp_path / "out", hashlib.sha256(raw.getvalue()).hexdigest())
    assert not (tmp_path / "escaped.py").exists()


def _trainer_spec(objects: list[dict[str, Any]], role: str = "trainer") -> dict[str, Any]:
    for obj in objects:
        if obj["kind"] == "Job" and obj["apiVersion"].startswith("batch.volcano"):
            return next(t for t in obj["spec"]["tasks"] if t["name"] == role)["template"]["spec"]
        labels = obj["metadata"].get("labels", {})
        if obj["kind"] in ("Job", "Deployment", "StatefulSet") \
                and labels.get("elasticps.io/role") == role:
            return dict(obj["spec"]["template"]["spec"])
    raise AssertionError(f"no {role} template")


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_trainers_unpack_the_code_from_a_content_named_config_map(tmp_path: Path,
                                                                  backend: str) -> None:
    code = make_code(tmp_path / "code")
    archive = pack_code(code)
    job = Job(job_name="ctr", namespace="ml", entry_point="python train.py", code=str(code))
    objects = render(job, backend)
    assert validate_manifests(objects) == []
    maps = [o for o in objects if o["kind"] == "ConfigMap"]
    assert [m["metadata"]["name"] for m in maps] == [f"ctr-code-{archive.sha256[:12]}"]
    assert maps[0]["immutable"] is True
    # after the ServiceAccount and the owner of everything (its pods wait for the map), before
    # every other workload
    assert [o["kind"] for o in objects[:2]] == ["ServiceAccount", "Job"]
    assert objects.index(maps[0]) < next(i for i, o in enumerate(objects) if i > 1 and
                                         o["kind"] in ("Job", "Deployment", "StatefulSet"))
    spec = _trainer_spec(objects)
    (init,) = spec["initContainers"]
    assert init["command"][:3] == ["elasticps", "code", "unpack"]
    assert init["command"][-1] == archive.sha256
    assert spec["containers"][0]["workingDir"] == CODE_DIR
    for role in ("master", "pserver"):
        assert "initContainers" not in _trainer_spec(objects, role)

    # Run the init container's own command on the ConfigMap's bytes, paths moved under tmp.
    (tmp_path / "archive").mkdir()
    data = base64.b64decode(maps[0]["binaryData"]["code.tar.gz"])
    command = [a.replace(ARCHIVE_DIR, str(tmp_path / "archive"))
               .replace(CODE_DIR, str(tmp_path / "workspace")) for a in init["command"]]
    (tmp_path / "archive" / "code.tar.gz").write_bytes(data)
    done = run_cli(*command[1:], cwd=REPO)
    assert done.returncode == 0, done.stderr
    ran = subprocess.run([sys.executable, "train.py"], cwd=tmp_path / "workspace",
                         capture_output=True, text=True, timeout=60)
    assert ran.stdout == "training wide-deep\n", ran.stderr


def test_a_missing_config_map_is_caught(tmp_path: Path) -> None:
    job = Job(job_name="ctr", namespace="ml", entry_point="python train.py",
              code=str(make_code(tmp_path / "code")))
    objects = [o for o in render(job, "kubernetes") if o["kind"] != "ConfigMap"]
    assert any("missing ConfigMap" in p for p in semantic_problems(objects))


@pytest.mark.slow
def test_dry_run_renders_the_code_relative_to_the_spec(tmp_path: Path) -> None:
    make_code(tmp_path / "project" / "src")
    spec = tmp_path / "project" / "job.yaml"
    spec.write_text(yaml.safe_dump({"job_name": "mine", "namespace": "ml",
                                    "entry_point": "python train.py", "code": "src"}))
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    done = run_cli("submit", str(spec), "--dry-run", cwd=outside)
    assert done.returncode == 0, done.stderr
    objects = list(yaml.safe_load_all(done.stdout))
    (config_map,) = [o for o in objects if o["kind"] == "ConfigMap"]
    data = base64.b64decode(config_map["binaryData"]["code.tar.gz"])
    assert config_map["metadata"]["name"] == f"mine-code-{hashlib.sha256(data).hexdigest()[:12]}"
    shutil.rmtree(tmp_path / "project" / "src")
    done = run_cli("submit", str(spec), "--dry-run", cwd=outside)
    assert done.returncode == 1
    assert "job spec field 'code'" in done.stderr
    assert "is not a directory" in done.stderr
