"""Secrets are never printed. The contract: `elasticps submit JOB.yaml --dry-run` output
contains NetworkPolicy objects and no token value (nor any certificate or key, nor a secret
entry of the spec's env:); and `elasticps env --check` masks the token."""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

import pytest
import yaml

from elasticps import cli
from tests.helpers import REPO, CliResult, run_cli

EXAMPLE = REPO / "examples/ctr/job.yaml"


def elasticps(*args: str, env: dict[str, str] | None = None) -> CliResult:
    return run_cli(*args, cwd=REPO, env={**os.environ, **(env or {})})


@pytest.mark.parametrize("backend", ["volcano", "kubernetes"])
def test_dry_run_has_network_policies_and_no_secret(backend: str) -> None:
    done = elasticps("submit", str(EXAMPLE), "--backend", backend, "--dry-run")
    assert done.returncode == 0, done.stderr
    objects = list(yaml.safe_load_all(done.stdout))
    policies = {o["metadata"]["name"] for o in objects if o["kind"] == "NetworkPolicy"}
    assert policies == {"ctr-demo-master", "ctr-demo-pserver", "ctr-demo-etcd"}
    for policy in (o for o in objects if o["kind"] == "NetworkPolicy"):
        grpc_rule = policy["spec"]["ingress"][0]
        assert grpc_rule["from"] == [{"podSelector": {"matchLabels": {
            "elasticps.io/job": "ctr-demo"}}}]
    assert not [o for o in objects if o["kind"] == "Secret"]
    for marker in ("stringData", "BEGIN", "PRIVATE KEY", "token:"):
        assert marker not in done.stdout, marker
    assert "--secret-only" in done.stdout  # the note in the Secret's place
    assert "--secret-only" in done.stderr
    # the token reaches every role's pod as a file of the Secret, in no environment
    roles = 0
    for obj in objects:
        for container in _containers(obj):
            names = {var["name"]: var for var in container.get("env", [])}
            assert "PADDLE_JOB_TOKEN" not in names
            if "PADDLE_ROLE" in names:
                roles += 1
                assert names["PADDLE_JOB_TOKEN_FILE"]["value"] == "/etc/elasticps/token/token"
    assert roles == 3


def _containers(obj: object) -> list[dict[str, Any]]:
    """Every container spec anywhere inside a manifest."""
    if isinstance(obj, dict):
        found = [obj] if "image" in obj and "name" in obj else []
        return found + [c for value in obj.values() for c in _containers(value)]
    if isinstance(obj, list):
        return [c for item in obj for c in _containers(item)]
    return []


@pytest.mark.parametrize("backend", ["volcano", "kubernetes"])
def test_dry_run_prints_no_token_that_any_code_path_made(
        backend: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Whatever token generation a dry run might reach, its value is not in the output: every
    token source of the `secrets` module answers a marker, which must not appear."""
    marker = "MARKER-0f1e2d3c4b5a"
    for name in ("token_urlsafe", "token_hex"):
        monkeypatch.setattr(secrets, name, lambda nbytes=None, marker=marker: marker)
    monkeypatch.setattr(secrets, "token_bytes", lambda nbytes=None: marker.encode())
    assert cli.main(["submit", str(EXAMPLE), "--backend", backend, "--dry-run"]) == 0
    printed = capsys.readouterr()
    assert "NetworkPolicy" in printed.out
    assert marker not in printed.out + printed.err


def test_env_check_masks_the_token(tmp_path: Path) -> None:
    token = "t0k3n-value-that-must-not-appear"
    done = elasticps("env", "--check", env={"PADDLE_JOB_TOKEN": token,
                                            "PADDLE_STORE": f"file://{tmp_path}/j.db"})
    assert done.returncode == 0, done.stderr
    assert token not in done.stdout + done.stderr
    assert f"PADDLE_JOB_TOKEN=<set, {len(token)} characters, not shown>" in done.stdout


@pytest.mark.parametrize("backend", ["volcano", "kubernetes"])
def test_dry_run_prints_no_secret_of_the_specs_env(
        backend: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Storage credentials in a spec's env: (by their names, or listed in secret_env:) reach
    every pod and the code-fetch init container only as references to the job's Secret."""
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("print('hi')\n")
    values = {"AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI-" + secrets.token_hex(8),
              "HF_TOKEN": "hf_" + secrets.token_hex(8),
              "STORAGE_CONNECTION": "conn-" + secrets.token_hex(8)}
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump({
        "job_name": "creds", "namespace": "ml", "entry_point": "python train.py",
        "code": "code", "code_url": "s3://bucket/code", "data": "s3://bucket/data",
        "env": {**values, "AWS_ACCESS_KEY_ID": "AKIAEXAMPLE"},
        "secret_env": ["STORAGE_CONNECTION"]}))
    assert cli.main(["submit", str(spec), "--backend", backend, "--dry-run"]) == 0
    printed = capsys.readouterr()
    for name, value in values.items():
        assert value not in printed.out + printed.err, name
    objects = list(yaml.safe_load_all(printed.out))
    references = [var for obj in objects for container in _containers(obj)
                  for var in container.get("env", []) if var["name"] in values]
    assert len(references) == 3 * 4  # master, pserver, trainer and fetch-code, each
    assert all(var["valueFrom"]["secretKeyRef"] == {"name": "creds-secrets",
                                                    "key": f"env.{var['name']}"}
               for var in references)
