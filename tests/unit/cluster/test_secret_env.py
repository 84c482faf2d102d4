"""A spec's secret ``env:`` entries reach the pods only through the job's Secret, and the whole
``env:`` is bounded so a Volcano Job stays far below what etcd stores."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from elasticps.cluster.manifests import BACKENDS, job_secrets, render, to_yaml
from elasticps.cluster.spec import Job
from elasticps.cluster.spec_env import MAX_ENV_TOTAL, TUNABLE_ENV
from elasticps.errors import ConfigError
from tests.helpers import REPO

ACCESS_KEY = "AKIA-not-a-secret-id"
SECRET_KEY = "wJalr-SECRET-value-0123456789"
SESSION = "session-SECRET-value-abcdef"
ENDPOINT = "https://minio.example.com"
SPEC: dict[str, Any] = {
    "job_name": "ctr", "namespace": "ml", "entry_point": "python train.py", "trainers": 2,
    "data": "s3://bucket/ctr", "code_url": "s3://bucket/code",
    "env": {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_SESSION_CREDENTIALS": SESSION, "AWS_ENDPOINT_URL": ENDPOINT},
    "secret_env": ["AWS_SESSION_CREDENTIALS"],
}
SECRETS = (SECRET_KEY, SESSION)


def make_job(tmp_path: Path, **fields: Any) -> Job:
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    (code / "train.py").write_text("print('hi')\n")
    return Job.from_dict({**SPEC, "code": str(code), **fields})


def containers_of(objects: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for obj in objects:
        spec = obj.get("spec", {})
        templates = ([t["template"] for t in spec["tasks"]] if "tasks" in spec
                     else [spec["template"]] if "template" in spec else [])
        for template in templates:
            for container in [*template["spec"].get("initContainers", []),
                              *template["spec"]["containers"]]:
                out.append((f"{obj['metadata']['name']}/{container['name']}", container))
    return out


def test_names_ending_in_key_secret_token_password_and_listed_ones_are_secrets(
        tmp_path: Path) -> None:
    job = make_job(tmp_path, env={**SPEC["env"], "HF_TOKEN": "t", "DB_PASSWORD": "p",
                                  "api_secret": "s", "KEYRING": "k"})
    assert job.secret_env_names == ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_CREDENTIALS",
                                    "DB_PASSWORD", "HF_TOKEN", "api_secret")


@pytest.mark.parametrize("backend", BACKENDS)
def test_secret_entries_come_from_the_secret_in_every_container(tmp_path: Path,
                                                                 backend: str) -> None:
    job = make_job(tmp_path)
    objects = render(job, backend, secrets=job_secrets(job))
    secret = next(o for o in objects if o["kind"] == "Secret")
    assert secret["stringData"]["env.AWS_SECRET_ACCESS_KEY"] == SECRET_KEY
    assert secret["stringData"]["env.AWS_SESSION_CREDENTIALS"] == SESSION
    others = [o for o in objects if o["kind"] != "Secret"]
    text = json.dumps(others)
    assert all(value not in text for value in SECRETS)
    seen = set()
    for where, container in containers_of(others):
        env = {e["name"]: e for e in container.get("env", [])}
        if "AWS_ENDPOINT_URL" not in env:
            continue  # etcd and its setup Job get no user env
        seen.add(where.rsplit("/", 1)[1])
        assert env["AWS_ENDPOINT_URL"] == {"name": "AWS_ENDPOINT_URL", "value": ENDPOINT}
        assert env["AWS_ACCESS_KEY_ID"]["value"] == ACCESS_KEY  # an id, not a secret
        for name in ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_CREDENTIALS"):
            assert env[name] == {"name": name, "valueFrom": {"secretKeyRef": {
                "name": "ctr-secrets", "key": f"env.{name}"}}}, where
    assert seen == {"master", "pserver", "trainer", "fetch-code"}


def test_a_dry_run_secret_holds_placeholders_for_every_secret_entry(tmp_path: Path) -> None:
    job = make_job(tmp_path)
    objects = render(job, "volcano")  # no secrets given: what --dry-run renders
    secret = next(o for o in objects if o["kind"] == "Secret")
    assert {"env.AWS_SECRET_ACCESS_KEY", "env.AWS_SESSION_CREDENTIALS"} <= set(
        secret["stringData"])
    assert all(value not in to_yaml(objects) for value in SECRETS)


@pytest.mark.parametrize(("secret_env", "message"), [
    (["NOT_IN_ENV"], "'NOT_IN_ENV' is not the name of an env: entry"),
    ("AWS_ENDPOINT_URL", "must be a list"),
    ([3], "3 is not the name of an env: entry"),
])
def test_bad_secret_env_is_refused_naming_the_field(tmp_path: Path, secret_env: Any,
                                                    message: str) -> None:
    with pytest.raises(ConfigError, match=rf"job spec field 'secret_env': {message}"):
        make_job(tmp_path, secret_env=secret_env)


def test_a_bad_secret_value_is_refused_without_printing_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        make_job(tmp_path, env={"DB_PASSWORD": {"nested": SECRET_KEY}})
    assert "job spec field 'env.DB_PASSWORD'" in str(info.value)
    assert SECRET_KEY not in str(info.value)


def largest_env(total: int) -> dict[str, str]:
    """Entries of at most 32 KiB whose names and values hold ``total`` bytes."""
    env, left, index = {}, total, 0
    while left:
        name = f"BIG_{index:03d}"
        value = "x" * min(32 * 1024, left - len(name))
        env[name] = value
        left -= len(name) + len(value)
        index += 1
    return env


def test_the_whole_env_is_bounded_and_the_largest_renders_a_storable_volcano_job(
        tmp_path: Path) -> None:
    """etcd refuses objects over 1.5 MiB; 256 entries of 32 KiB made a 24.6 MB Volcano Job."""
    with pytest.raises(ConfigError, match=r"job spec field 'env': its names and values hold "
                                          r"262,145 bytes in all, more than 262,144"):
        make_job(tmp_path, env=largest_env(MAX_ENV_TOTAL + 1), secret_env=[])
    job = make_job(tmp_path, env=largest_env(MAX_ENV_TOTAL), secret_env=[])
    (vcjob,) = [o for o in render(job, "volcano") if o["kind"] == "Job"
                and o["apiVersion"].startswith("batch.volcano.sh")]
    size = len(json.dumps(vcjob).encode())
    assert 4 * MAX_ENV_TOTAL < size < 1.5 * 2**20  # three roles and the fetch init container


def test_the_spec_reference_lists_exactly_the_paddle_names_env_may_set() -> None:
    """docs/cluster.md's `env` row names the PADDLE_* variables a spec may set: the same set
    the spec check allows, so neither drifts from the other."""
    row = next(line for line in (REPO / "docs" / "cluster.md").read_text().splitlines()
               if line.startswith("| `env` |"))
    assert set(re.findall(r"`(PADDLE_[A-Z0-9_]+)`", row)) == set(TUNABLE_ENV)
