"""A job name is a DNS-1123 label exactly as given, wherever it enters: a job spec, the command
line (`run --job-name`, a cluster command's JOB, `store --job`), ``PADDLE_JOB_NAME``, and the
store's key prefix. ``ctr\\n`` (which a ``$`` anchor lets through) and ``a/b`` (which lies under
job ``a``'s keys) are refused with the rule, and nothing is created or asked for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from elasticps.errors import ConfigError
from elasticps.launch.launcher import Launch, LaunchOptions
from elasticps.store import open_store
from tests.helpers import run_cli
from tests.unit.cluster.fake_kube import FakeKube

BAD_NAMES = ["ctr\n", " ctr", "a/b", "ctr,elasticps.io/role!=x"]


@pytest.mark.parametrize("name", BAD_NAMES, ids=repr)
def test_a_job_spec_with_a_bad_job_name_is_refused(name: str, tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(f"job_name: {json.dumps(name)}\nentry_point: python train.py\n")
    result = run_cli("submit", str(spec), "--dry-run")
    assert result.returncode == 1, result.stderr
    assert "job spec field 'job_name'" in result.stderr
    assert "DNS-1123" in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("name", BAD_NAMES, ids=repr)
def test_run_refuses_a_bad_job_name_before_anything_starts(name: str, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    with pytest.raises(ConfigError, match="DNS-1123"):
        Launch(LaunchOptions(script=str(script), job_name=name,
                               workdir=str(tmp_path / "work")))
    assert not (tmp_path / "work").exists()


@pytest.mark.parametrize("name", BAD_NAMES, ids=repr)
def test_paddle_job_name_and_store_job_are_checked_before_the_store_opens(
        name: str, tmp_path: Path) -> None:
    db = tmp_path / "job.db"
    from_env = run_cli("store", "--store", f"file://{db}", "ls",
                       env={"PADDLE_JOB_NAME": name, "PATH": "/usr/bin:/bin"})
    assert from_env.returncode == 1
    assert "PADDLE_JOB_NAME" in from_env.stderr
    assert "DNS-1123" in from_env.stderr
    from_flag = run_cli("store", "--store", f"file://{db}", "--job", name, "ls", env={})
    assert from_flag.returncode == 1
    assert "DNS-1123" in from_flag.stderr
    assert not db.exists()


def test_a_store_prefix_cannot_reach_into_another_job(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/job.db"
    with pytest.raises(ConfigError, match=r"job name 'a/b' is not a DNS-1123 label"):
        open_store(url, "a/b")  # its keys would lie under /elasticps/a/, job a's prefix
    with open_store(url, "a") as store:
        assert store.get_prefix("") == []


@pytest.mark.parametrize("command", [["status"], ["logs"], ["delete"], ["scale", "--trainers",
                                                                          "2"]])
def test_a_cluster_command_refuses_a_bad_job_before_asking_the_api(
        command: list[str], tmp_path: Path) -> None:
    fake = FakeKube().start()
    try:
        kubeconfig = str(fake.kubeconfig(tmp_path / "kubeconfig"))
        result = run_cli(command[0], "ctr,elasticps.io/role!=x", *command[1:],
                         "--kubeconfig", kubeconfig)
        assert result.returncode == 1, result.stderr
        assert "job name 'ctr,elasticps.io/role!=x' is not a DNS-1123 label" in result.stderr
        assert fake.requests == []
    finally:
        fake.stop()
