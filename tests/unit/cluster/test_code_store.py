"""``code_url``: the user's code as a content-addressed archive on storage, fetched by the
trainers' init container (whose exact rendered command runs here against a real directory
and a ``file://`` URL), instead of a ConfigMap."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from elasticps.cluster.code_archive import CODE_DIR, CodeLimits, pack_code
from elasticps.cluster.code_store import archive_url, code_limits, fetch_code, publish_code
from elasticps.cluster.kube_client import KubeClient
from elasticps.cluster.manifests import BACKENDS, render
from elasticps.cluster.spec import Job
from elasticps.cluster.submit import submit
from elasticps.cluster.validate import validate_manifests
from elasticps.errors import ConfigError
from tests.helpers import REPO, run_cli
from tests.unit.cluster.fake_kube import FakeKube
from tests.unit.cluster.test_code_archive import _trainer_spec, make_code


def url_job(code: Path, store: str, **extra: Any) -> Job:
    return Job(job_name="ctr", namespace="ml", entry_point="python train.py", code=str(code),
               code_url=store, **extra)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_rendered_init_container_fetches_the_archive_by_its_hash(tmp_path: Path,
                                                                     backend: str) -> None:
    code = make_code(tmp_path / "code")
    archive = pack_code(code)
    store = f"file://{tmp_path}/store"
    job = url_job(code, store, env={"AWS_PROFILE": "ml"})
    objects = render(job, backend)
    assert validate_manifests(objects) == []
    assert [o for o in objects if o["kind"] == "ConfigMap"] == []
    spec = _trainer_spec(objects)
    (init,) = spec["initContainers"]
    url = f"{store}/{archive.sha256}.tar.gz"
    assert init["command"] == ["elasticps", "code", "fetch", url, "--sha256", archive.sha256,
                               "--into", CODE_DIR, "--limit", str(256 * 2**20)]
    assert init["env"] == [{"name": "AWS_PROFILE", "value": "ml"}]  # storage credentials
    assert spec["containers"][0]["workingDir"] == CODE_DIR
    assert {"name": "code", "emptyDir": {"sizeLimit": "512Mi"}} in spec["volumes"]
    assert not (tmp_path / "store").exists()  # rendering uploads nothing

    # Upload as submit does, then run the init container's own command, paths under tmp.
    assert publish_code(archive, store).uploaded
    command = [a.replace(CODE_DIR, str(tmp_path / "workspace")) for a in init["command"]]
    done = run_cli(*command[1:], cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "workspace").iterdir()) == \
        ["model", "run.sh", "train.py"]  # the scratch copy of the archive is gone
    ran = subprocess.run([sys.executable, "train.py"], cwd=tmp_path / "workspace",
                         capture_output=True, text=True, timeout=60)
    assert ran.stdout == "training wide-deep\n", ran.stderr


def test_a_local_directory_url_works_too(tmp_path: Path) -> None:
    code = make_code(tmp_path / "code")
    archive = pack_code(code)
    published = publish_code(archive, str(tmp_path / "store"))
    assert published.url == archive_url(str(tmp_path / "store"), archive.sha256)
    assert Path(published.url).read_bytes() == archive.data
    assert fetch_code(published.url, archive.sha256, tmp_path / "out",
                      code_limits(url_job(code, str(tmp_path / "store")))) == 3
    assert (tmp_path / "out" / "model" / "net.py").read_text() == "NET = 'wide-deep'\n"


def test_upload_is_idempotent_and_repairs_a_damaged_object(tmp_path: Path) -> None:
    archive = pack_code(make_code(tmp_path / "code"))
    store = tmp_path / "store"
    first = publish_code(archive, f"file://{store}")
    target = store / f"{archive.sha256}.tar.gz"
    assert first.uploaded
    assert target.read_bytes() == archive.data
    os.utime(target, (1_000_000, 1_000_000))
    again = publish_code(archive, f"file://{store}")
    assert (again.uploaded, again.url) == (False, first.url)
    assert target.stat().st_mtime == 1_000_000  # not rewritten
    target.write_bytes(b"\0" * len(archive.data))  # same size, damaged
    assert publish_code(archive, f"file://{store}").uploaded
    assert target.read_bytes() == archive.data
    assert sorted(p.name for p in store.iterdir()) == [target.name]  # no partial left


def test_a_hash_mismatch_is_refused_and_nothing_unpacked(tmp_path: Path) -> None:
    code = make_code(tmp_path / "code")
    archive = pack_code(code)
    other_dir = make_code(tmp_path / "other")
    (other_dir / "train.py").write_text("print('not what was submitted')\n")
    other = pack_code(other_dir)
    store = tmp_path / "store"
    store.mkdir()
    # someone replaced the object after submission
    (store / f"{archive.sha256}.tar.gz").write_bytes(other.data)
    done = run_cli("code", "fetch", f"file://{store}/{archive.sha256}.tar.gz", "--sha256",
                   archive.sha256, "--into", str(tmp_path / "workspace"), cwd=REPO)
    assert done.returncode == 1
    assert f"has sha256 {other.sha256}, not the expected {archive.sha256}" in done.stderr
    assert list((tmp_path / "workspace").iterdir()) == []
    with pytest.raises(ConfigError, match="cannot fetch the code archive"):
        fetch_code(f"file://{store}/missing.tar.gz", archive.sha256, tmp_path / "w2",
                   code_limits(url_job(code, str(store))))


@pytest.mark.slow
def test_the_limit_is_code_limit_and_named(tmp_path: Path) -> None:
    code = make_code(tmp_path / "code")
    (code / "weights.bin").write_bytes(os.urandom(3 * 2**20))  # past a ConfigMap
    with pytest.raises(ConfigError, match=r"more than the 1,024,000 a ConfigMap can carry.*"
                                          r"set 'code_url'"):
        render(Job(job_name="ctr", entry_point="python train.py", code=str(code)))
    objects = render(url_job(code, "s3://bucket/code"))  # 256Mi by default: fits
    assert validate_manifests(objects) == []
    with pytest.raises(ConfigError, match=r"holds more than 2,097,152 bytes of files; "
                                          r"raise 'code_limit'"):
        render(url_job(code, "s3://bucket/code", code_limit="2Mi"))

    archive = pack_code(code, code_limits(url_job(code, "s3://b")))
    publish_code(archive, str(tmp_path / "store"))
    small = CodeLimits(2**20, 2**20, "the limit of 1,048,576 bytes (--limit)", "raise it")
    with pytest.raises(ConfigError, match=r"^code archive \S+ is more than the limit of "
                                          r"1,048,576 bytes"):
        fetch_code(archive_url(str(tmp_path / "store"), archive.sha256), archive.sha256,
                   tmp_path / "out", small)
    assert list((tmp_path / "out").iterdir()) == []


@pytest.mark.slow
def test_submit_uploads_before_creating_and_dry_run_uploads_nothing(
        fake: FakeKube, client: KubeClient, tmp_path: Path) -> None:
    code = make_code(tmp_path / "project" / "src")
    store = tmp_path / "store"
    spec = tmp_path / "project" / "job.yaml"
    spec.write_text(yaml.safe_dump({"job_name": "ctr", "namespace": "ml",
                                    "entry_point": "python train.py", "code": "src",
                                    "code_url": f"file://{store}"}))
    sha = pack_code(code).sha256
    done = run_cli("submit", str(spec), "--dry-run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"sha256 {sha}, from file://{store}/{sha}.tar.gz (dry run: nothing uploaded)" \
        in done.stderr
    assert f"file://{store}/{sha}.tar.gz" in done.stdout
    assert not store.exists()

    handle = submit(Job.from_yaml(spec), "kubernetes", client=client, environ={})
    assert (store / f"{sha}.tar.gz").read_bytes() == pack_code(code).data
    assert handle.code_location() == f"file://{store}/{sha}.tar.gz"
    assert not [r for r in fake.requests if r.path.endswith("/configmaps")]
    assert any(r.path.endswith("/deployments") for r in fake.requests)
