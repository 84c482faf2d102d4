"""`elasticps submit|status|logs|delete` as a user runs them, through the command line's
`main` (in this process), against a fake API server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from elasticps.cluster.validate import validate_manifests
from tests.helpers import REPO, CliResult, run_cli
from tests.unit.cluster.fake_kube import FakeKube

EXAMPLE = REPO / "examples/ctr/job.yaml"


def elasticps(*args: str) -> CliResult:
    return run_cli(*args, cwd=REPO)


def test_example_has_top_level_trainers() -> None:
    assert isinstance(yaml.safe_load(EXAMPLE.read_text())["trainers"], int)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["volcano", "kubernetes"])
def test_dry_run_prints_manifests_that_validate(backend: str) -> None:
    result = elasticps("submit", str(EXAMPLE), "--backend", backend, "--dry-run")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("---\n")
    objects = list(yaml.safe_load_all(result.stdout))
    kinds = {o["kind"] for o in objects}
    assert {"ServiceAccount", "Role", "RoleBinding", "Service", "StatefulSet", "Job",
            "NetworkPolicy"} <= kinds
    # The job's Secret is never printed, only a note in its place; every other reference
    # resolves (the validator's only complaints are about that Secret).
    assert "Secret" not in kinds
    assert "# Secret ctr-demo-secrets (namespace default) is not printed" in result.stdout
    assert "--secret-only" in result.stderr
    problems = validate_manifests(objects)
    assert problems
    assert all("'ctr-demo-secrets'" in p for p in problems), problems
    assert "&id" not in result.stdout
    assert "*id" not in result.stdout


def test_spec_error_exits_nonzero_naming_the_field(tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("entry_point: python train.py\ntrainers: 2\nmin_trainers: 5\n")
    result = elasticps("submit", str(spec), "--dry-run")
    assert result.returncode != 0
    assert "'min_trainers'" in result.stderr
    assert result.stdout == ""
    spec.write_text("entry_point: python train.py\ntrainerz: 2\n")
    result = elasticps("submit", str(spec), "--dry-run")
    assert result.returncode != 0
    assert "'trainerz'" in result.stderr


@pytest.mark.slow
def test_submit_status_logs_delete_against_the_api(fake: FakeKube, tmp_path: Path) -> None:
    kubeconfig = str(fake.kubeconfig(tmp_path / "kubeconfig"))
    result = elasticps("submit", str(EXAMPLE), "--kubeconfig", kubeconfig, "-n", "team")
    assert result.returncode == 0, result.stderr
    assert "submitted job ctr-demo to namespace team (volcano" in result.stdout
    assert "/api/v1/namespaces/team/services/https:ctr-demo-master:http/proxy/" in result.stdout
    created = fake.objects["/apis/batch.volcano.sh/v1alpha1/namespaces/team/jobs"]["ctr-demo"]
    assert created["spec"]["minAvailable"] == 1 + 2 + 2

    labels = {"elasticps.io/job": "ctr-demo", "elasticps.io/role": "trainer"}
    fake.add_pod("team", "ctr-demo-trainer-0", labels, annotations={"volcano.sh/task-index": "0"},
                 restarts=2)
    fake.logs[("team", "ctr-demo-trainer-0", "trainer")] = "pass 0 auc 0.71\n"
    result = elasticps("status", "ctr-demo", "-n", "team", "--kubeconfig", kubeconfig, "--json")
    assert result.returncode == 0, result.stderr
    status = json.loads(result.stdout)
    assert status["backend"] == "volcano"
    assert [(p["name"], p["restarts"]) for p in status["pods"]] == [("ctr-demo-trainer-0", 2)]

    result = elasticps("logs", "ctr-demo", "-n", "team", "--kubeconfig", kubeconfig)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "[ctr-demo-trainer-0] pass 0 auc 0.71\n"

    result = elasticps("delete", "ctr-demo", "-n", "team", "--kubeconfig", kubeconfig)
    assert result.returncode == 0, result.stderr
    assert "Job/ctr-demo" in result.stdout
    assert all(not items for path, items in fake.objects.items() if not path.endswith("/pods"))

    result = elasticps("status", "ctr-demo", "-n", "team", "--kubeconfig", kubeconfig)
    assert result.returncode == 1
    assert "no elasticps job 'ctr-demo' in namespace 'team'" in result.stderr
