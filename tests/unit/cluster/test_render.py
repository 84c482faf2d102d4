"""Renderers: golden manifests, schema validity, the env contract, and per-role policies.

Regenerate the golden files after an intended change with
``ELASTICPS_UPDATE_GOLDEN=1 python -m pytest tests/unit/cluster/test_render.py`` and review the
diff like code.
"""

from __future__ import annotations

import copy
import hashlib
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from elasticps.cluster.job_secrets import PLACEHOLDER
from elasticps.cluster.manifests import BACKENDS, job_secrets, render, to_yaml
from elasticps.cluster.render import kubernetes as render_kubernetes
from elasticps.cluster.render import volcano as render_volcano
from elasticps.cluster.render.common import (
    DENSE_CHECKPOINT_ENV,
    NOT_RENDERED_ENV,
    OPTIONAL_ROLE_ENV,
    ROLE_ENV,
    SPEC_ENV_ONLY,
)
from elasticps.cluster.spec import Job
from elasticps.cluster.validate import (
    kubernetes_schema_problems,
    semantic_problems,
    validate_manifests,
    volcano_schema_problems,
)
from elasticps.config import ENV_VARS, load_config
from tests.helpers import REPO

GOLDEN = Path(__file__).parent / "golden"
TOKEN = "golden-token-not-a-secret"

JOBS: dict[str, dict[str, Any]] = {
    "small": {"job_name": "ctr-small", "namespace": "ml", "entry_point": "python train.py",
              "trainers": 2, "data": "pvc://ctr-data/criteo"},
    "large": {"job_name": "ctr-large", "namespace": "ml-prod",
              "image": "registry.example.com/ml/elasticps:0.1.0",
              "entry_point": "python examples/ctr/train.py --passes 5 --batch-size 4096",
              "num_gpus": 64, "num_cpus": 512, "memory": "2Ti", "trainers": 64,
              "min_trainers": 48, "max_trainers": 96, "pservers": 16, "pserver_cpu": 8,
              "pserver_mem": "64Gi", "master_cpu": 2, "master_mem": "4Gi",
              "data": "s3://ctr-bucket/criteo-1tb", "checkpoint": "pvc://ctr-ckpt/large",
              "etcd": {"replicas": 3, "storage": "8Gi"}, "queue": "ml-prod",
              "env": {"PADDLE_CHECKPOINT_INTERVAL": 300, "PADDLE_LEASE_TTL": 15,
                      "NCCL_DEBUG": "WARN"},
              "tables": {"features": {"admit_after": 2, "max_rows": 50_000_000,
                                      "ttl_passes": 3}}},
}


def rendered(size: str, backend: str) -> list[dict[str, Any]]:
    return render(Job.from_dict(JOBS[size]), backend)


def workload_templates(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """role -> pod template, for either backend."""
    out: dict[str, dict[str, Any]] = {}
    for obj in objects:
        if obj["apiVersion"] == "batch.volcano.sh/v1alpha1":
            for task in obj["spec"]["tasks"]:
                out[task["name"]] = task["template"]
        elif obj["kind"] in ("Deployment", "StatefulSet", "Job"):
            role = obj["metadata"]["labels"]["elasticps.io/role"]
            if role not in ("etcd", "etcd-setup"):
                out[role] = obj["spec"]["template"]
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("size", sorted(JOBS))
def test_golden_manifests(size: str, backend: str) -> None:
    text = to_yaml(rendered(size, backend))
    path = GOLDEN / f"{size}-{backend}.yaml"
    if os.environ.get("ELASTICPS_UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.exists(), f"{path} missing: run with ELASTICPS_UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{path.name} differs; rerun with ELASTICPS_UPDATE_GOLDEN=1"


@pytest.mark.slow
@pytest.mark.parametrize("path", sorted(GOLDEN.glob("*.yaml")), ids=lambda p: p.name)
def test_golden_files_pass_every_schema_and_semantic_check(path: Path) -> None:
    objects = list(yaml.safe_load_all(path.read_text()))
    assert len(objects) >= 7
    assert validate_manifests(objects) == []


def test_rendering_is_pure_and_holds_placeholders_unless_given_secrets() -> None:
    job = Job.from_dict(JOBS["small"])
    assert render(job, "volcano") == render(job, "volcano")
    placeholder = next(o for o in render(job, "volcano") if o["kind"] == "Secret")["stringData"]
    assert set(placeholder.values()) == {PLACEHOLDER}
    a, b = job_secrets(job), job_secrets(job)
    assert a.values["token"] != b.values["token"]
    assert len(a.values["token"]) >= 40
    assert a.values["ca.crt"] != b.values["ca.crt"]  # a fresh CA per job
    secret = next(o for o in render(job, "volcano", secrets=a) if o["kind"] == "Secret")
    assert secret["stringData"] == dict(a.values)
    assert set(secret["stringData"]) == set(placeholder)


def test_every_env_var_elasticps_reads_is_assigned_to_a_role() -> None:
    assigned = {n for names in ROLE_ENV.values() for n in names}
    assigned |= {n for names in OPTIONAL_ROLE_ENV.values() for n in names}
    assigned |= {n for names in SPEC_ENV_ONLY.values() for n in names}
    assigned |= set(NOT_RENDERED_ENV)
    assert {var.name for var in ENV_VARS} <= assigned, (
        "a PADDLE_* variable was added to elasticps.config: decide which roles read it and "
        "add it to ROLE_ENV in elasticps/cluster/render/common.py")


@pytest.fixture(scope="module")
def token_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The job token as the pods read it: a file (what the Secret's volume holds)."""
    path = tmp_path_factory.mktemp("token") / "token"
    path.write_text(TOKEN + "\n")
    return path


def _resolve(env: list[dict[str, Any]], index: int,
             token: Path | None = None) -> dict[str, str]:
    """What the kubelet would put in the container's environment; the token file's path is
    ``token``'s (the Secret's volume is not mounted here)."""
    out: dict[str, str] = {}
    for item in env:
        source = item.get("valueFrom")
        if source is None:
            out[item["name"]] = item["value"]
            if item["name"] == "PADDLE_JOB_TOKEN_FILE" and token is not None:
                assert item["value"] == "/etc/elasticps/token/token"
                out[item["name"]] = str(token)
        elif "secretKeyRef" in source:
            out[item["name"]] = f"<{source['secretKeyRef']['key']}>"
        elif source["fieldRef"]["fieldPath"] == "status.podIP":
            out[item["name"]] = "10.1.2.3"
        else:
            out[item["name"]] = str(index)
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("size", sorted(JOBS))
def test_every_env_var_a_role_reads_is_set_and_parses(size: str, backend: str,
                                                      token_file: Path) -> None:
    job = Job.from_dict(JOBS[size])
    templates = workload_templates(rendered(size, backend))
    assert sorted(templates) == ["master", "pserver", "trainer"]
    for role, template in templates.items():
        (container,) = template["spec"]["containers"]
        names = [e["name"] for e in container["env"]]
        assert len(names) == len(set(names))
        assert set(ROLE_ENV[role]) <= set(names), role
        optional = set(OPTIONAL_ROLE_ENV[role]) - (set() if job.tables else
                                                   {"PADDLE_SPARSE_POLICIES"})
        optional -= set(DENSE_CHECKPOINT_ENV) if role == "trainer" else set()  # hybrid only
        assert optional <= set(names), role  # both jobs give data
        config = load_config(env=_resolve(container["env"], index=1, token=token_file))
        assert config.role == role
        assert config.job_name == job.job_name
        assert config.token == TOKEN  # read from the file the Secret's volume holds
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        volume = next(v for v in template["spec"]["volumes"] if v["name"] == "token")
        assert mounts["token"] == "/etc/elasticps/token"
        assert volume["secret"]["items"] == [{"key": "token", "path": "token"}]
        assert config.host == "10.1.2.3"
        assert config.pserver_count == job.plan.pservers
        assert len(config.pservers) == job.plan.pservers
        assert config.trainer_count == job.plan.trainers
        assert config.store is not None
        assert config.store.startswith("etcd://")
        assert config.port == 7164
        assert container["command"][:2] == ["elasticps", role]
        if role == "trainer":
            assert config.trainer_id == 1
            assert config.use_gpu is (job.plan.trainer.gpus > 0)
            assert container["command"][2:] == list(job.plan.trainer_command)
        if role == "master":
            assert config.http_port == 8080
    if size == "large":
        trainer_env = _resolve(templates["trainer"]["spec"]["containers"][0]["env"], 0,
                               token_file)
        assert trainer_env["NCCL_DEBUG"] == "WARN"
        pserver = load_config(env=_resolve(templates["pserver"]["spec"]["containers"][0]["env"],
                                           0, token_file))
        assert pserver.checkpoint_interval == 300
        assert pserver.lease_ttl == 15
        assert pserver.checkpoint_url == "/checkpoints/large"
        # The spec's tables: reach the trainers (only them), as the settings written.
        trainer = load_config(env=trainer_env)
        assert trainer.sparse_policy_settings == JOBS["large"]["tables"]
        assert pserver.sparse_policy_settings == {}


@pytest.mark.parametrize(("mode", "env", "pserver_limit", "master_limit"), [
    ("async", {}, 1024, 128), ("geo", {}, 1024, 128), ("sync", {}, 128, 128),
    ("async", {"PADDLE_MAX_CONCURRENT_RPCS": 300}, 300, 300)])
def test_each_server_gets_its_roles_call_limit_unless_the_spec_sets_one(
    mode: str, env: dict[str, Any], pserver_limit: int, master_limit: int, token_file: Path,
) -> None:
    """A pod's environment says its limit: async and geo pservers admit 1024 calls (their queued
    calls hold no thread and no request), sync pservers and the master 128; `env` wins."""
    spec = {**JOBS["small"], "mode": mode, "env": env}
    for backend in BACKENDS:
        templates = workload_templates(render(Job.from_dict(spec), backend))
        limits = {role: load_config(env=_resolve(
            templates[role]["spec"]["containers"][0]["env"], 0, token_file)).call_limit(role)
            for role in ("pserver", "master")}
        assert limits == {"pserver": pserver_limit, "master": master_limit}, backend


def test_store_url_lists_every_etcd_member_or_the_given_endpoints() -> None:
    job = Job.from_dict(JOBS["large"])
    env = _resolve(workload_templates(render(job, "volcano"))["master"]["spec"][
        "containers"][0]["env"], 0)
    assert env["PADDLE_STORE"] == "etcd://" + ",".join(
        f"ctr-large-etcd-{i}.ctr-large-etcd.ml-prod.svc:2379" for i in range(3)) + \
        "?tls=/etc/elasticps/tls"
    given = Job.from_dict({**JOBS["small"], "etcd": {"endpoints": ["etcd.infra:2379"]}})
    objects = render(given, "kubernetes")
    assert not [o for o in objects if o["metadata"]["name"].endswith("-etcd")]
    env = _resolve(workload_templates(objects)["trainer"]["spec"]["containers"][0]["env"], 0)
    assert env["PADDLE_STORE"] == "etcd://etcd.infra:2379"


def test_volcano_gang_and_per_role_policies() -> None:
    job = Job.from_dict(JOBS["large"])
    (vcjob,) = [o for o in render_volcano.render(job, secrets=job_secrets(job))
                if o["apiVersion"] == "batch.volcano.sh/v1alpha1"]
    spec = vcjob["spec"]
    assert spec["minAvailable"] == 1 + 16 + 48
    assert spec["schedulerName"] == "volcano"
    assert spec["queue"] == "ml-prod"
    assert "policies" not in spec  # nothing job-wide: one pod's failure never restarts the job
    tasks = {t["name"]: t for t in spec["tasks"]}
    assert (tasks["trainer"]["replicas"], tasks["trainer"]["minAvailable"]) == (64, 48)
    assert (tasks["pserver"]["replicas"], tasks["pserver"]["minAvailable"]) == (16, 16)
    for task in tasks.values():
        actions = {a["action"] for a in task["policies"]}
        assert "RestartJob" not in actions
        failed = [p for p in task["policies"] if "PodFailed" in p.get("events", [])]
        assert failed
        assert failed[0]["action"] == "RestartPod"
    assert {"event": "TaskCompleted", "action": "CompleteJob"} in tasks["trainer"]["policies"]
    trainer = tasks["trainer"]["template"]["spec"]
    assert trainer["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    # a script that raises fails its pod (an event Volcano counts), not a crash loop in place
    assert trainer["restartPolicy"] == "Never"
    assert tasks["pserver"]["template"]["spec"]["restartPolicy"] == "OnFailure"
    assert spec["maxRetry"] == 3 * (1 + 16 + 96)


def test_kubernetes_trainers_are_an_indexed_job_replaced_per_index() -> None:
    job = Job.from_dict(JOBS["large"])
    objects = {(o["kind"], o["metadata"]["name"]): o
               for o in render_kubernetes.render(job, secrets=job_secrets(job))}
    trainers = objects[("Job", "ctr-large-trainer")]["spec"]
    assert trainers["completionMode"] == "Indexed"
    assert trainers["completions"] == trainers["parallelism"] == 64
    assert trainers["maxFailedIndexes"] == 64 - 48
    assert trainers["template"]["spec"]["restartPolicy"] == "Never"
    pservers = objects[("StatefulSet", "ctr-large-pserver")]["spec"]
    assert pservers["replicas"] == 16
    assert pservers["podManagementPolicy"] == "Parallel"
    assert objects[("Deployment", "ctr-large-master")]["spec"]["replicas"] == 1
    etcd = objects[("StatefulSet", "ctr-large-etcd")]["spec"]
    assert etcd["replicas"] == 3
    assert etcd["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] == "8Gi"
    role = objects[("Role", "ctr-large-runner")]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]


def test_only_the_master_mounts_a_service_account_token() -> None:
    for backend in BACKENDS:
        templates = workload_templates(rendered("small", backend))
        mounted = {r for r, t in templates.items() if t["spec"]["automountServiceAccountToken"]}
        assert mounted == {"master"}


def test_servers_have_probes_and_trainers_do_not() -> None:
    templates = workload_templates(rendered("small", "kubernetes"))
    for role in ("master", "pserver"):
        container = templates[role]["spec"]["containers"][0]
        assert container["readinessProbe"]["grpc"] == {"port": 7165}  # the plaintext probe port
        assert container["livenessProbe"]["tcpSocket"] == {"port": "grpc"}
    assert "readinessProbe" not in templates["trainer"]["spec"]["containers"][0]


# ---- the validators catch what they should (each mutation must be reported) ------------


def _mutated(backend: str, mutate: Any) -> list[dict[str, Any]]:
    objects = copy.deepcopy(rendered("small", backend))
    mutate(objects)
    return objects


def _find(objects: list[dict[str, Any]], kind: str, suffix: str = "") -> dict[str, Any]:
    """The first object of ``kind`` whose name ends with ``suffix``; a "Job" is the workload
    (the Volcano Job or the trainers' Job), not the etcd setup Job."""
    return next(o for o in objects if o["kind"] == kind and o["metadata"]["name"].endswith(suffix)
                and not o["metadata"]["name"].endswith("-etcd-setup"))


def _containers(objects: list[dict[str, Any]], role: str) -> dict[str, Any]:
    return workload_templates(objects)[role]["spec"]["containers"][0]


SEMANTIC_BREAKS = [
    ("volcano", lambda o: _find(o, "Job")["spec"].update(minAvailable=99), "minAvailable"),
    ("volcano", lambda o: _find(o, "Job")["spec"]["tasks"][2]["policies"].append(
        {"event": "PodFailed", "action": "RestartJob"}), "appears twice"),
    ("volcano", lambda o: _find(o, "Job")["spec"]["tasks"][0]["policies"][0].update(
        action="RebootCluster"), "RebootCluster"),
    ("volcano", lambda o: _find(o, "Job")["spec"]["tasks"][1].update(minAvailable=5),
     "minAvailable exceeds replicas"),
    ("volcano", lambda o: _containers(o, "trainer")["env"].pop(0), "PADDLE_JOB_NAME"),
    ("kubernetes", lambda o: _containers(o, "pserver")["env"].remove(next(
        e for e in _containers(o, "pserver")["env"] if e["name"] == "PADDLE_MAX_MESSAGE_MB")),
     "does not set"),
    ("kubernetes", lambda o: _containers(o, "master")["env"].append(
        {"name": "PADDLE_ROLE", "value": "x"}), "set twice"),
    ("kubernetes", lambda o: _find(o, "Service", "-master")["spec"]["selector"].update(
        {"elasticps.io/role": "nobody"}), "no pod template"),
    ("kubernetes", lambda o: _find(o, "Secret")["stringData"].clear(), "missing from Secret"),
    ("kubernetes", lambda o: _find(o, "StatefulSet", "-pserver")["spec"].update(
        serviceName="nope"), "headless Service"),
    ("kubernetes", lambda o: _containers(o, "master")["readinessProbe"]["grpc"].update(
        port=1), "does not declare"),
    ("kubernetes", lambda o: _find(o, "Role")["rules"][0].update(verbs=["*"]), "wildcard"),
    ("kubernetes", lambda o: o.append(copy.deepcopy(_find(o, "Secret"))), "defined 2 times"),
    ("kubernetes", lambda o: _find(o, "Job")["spec"]["template"]["spec"].update(
        restartPolicy="OnFailure"), "restartPolicy"),
    ("kubernetes", lambda o: next(e for e in _containers(o, "trainer")["env"]
                                  if e["name"] == "PADDLE_TRAINER_ID")["valueFrom"]["fieldRef"]
     .update(fieldPath="spec.index"), "downward API"),
]


@pytest.mark.parametrize(("backend", "mutate", "expected"), SEMANTIC_BREAKS,
                         ids=[e for _, _, e in SEMANTIC_BREAKS])
def test_semantic_checks_catch_broken_manifests(backend: str, mutate: Any, expected: str) -> None:
    problems = semantic_problems(_mutated(backend, mutate))
    assert any(expected in p for p in problems), problems


def test_volcano_schema_rejects_unknown_and_wrong_typed_fields() -> None:
    objects = rendered("small", "volcano")
    vcjob = copy.deepcopy(_find(objects, "Job"))
    assert volcano_schema_problems(vcjob) == []
    vcjob["spec"]["minAvaliable"] = 3  # a typo the API server would silently prune
    vcjob["spec"]["tasks"][0]["replicas"] = "one"
    vcjob["spec"]["tasks"][1]["name"] = "PServer"
    problems = volcano_schema_problems(vcjob)
    assert any("minAvaliable" in p for p in problems), problems
    assert any("tasks.0.replicas" in p for p in problems), problems
    assert any("tasks.1.name" in p for p in problems), problems


def test_kubernetes_schema_is_strict() -> None:
    deployment = copy.deepcopy(_find(rendered("small", "kubernetes"), "Deployment"))
    assert kubernetes_schema_problems(deployment) == []
    deployment["spec"]["template"]["spec"]["containers"][0]["envv"] = []
    assert any("envv" in p for p in kubernetes_schema_problems(deployment))
    deployment["spec"]["replicas"] = "1"
    assert kubernetes_schema_problems(deployment)


# The packaged CRD is a byte-for-byte copy of volcano-sh/volcano's
# installer/helm/chart/volcano/crd/bases/batch.volcano.sh_jobs.yaml (controller-gen v0.20.0);
# a changed copy must be a deliberate update of this digest, never an accident.
VOLCANO_CRD_SHA256 = "789680b2c6197fc99057dd46a1a6e266f371279305f64d5e88df1ffd94393361"


def test_packaged_crd_is_the_upstream_copy() -> None:
    packaged = REPO / "elasticps/cluster/schemas/volcano-batch.volcano.sh_jobs.yaml"
    assert hashlib.sha256(packaged.read_bytes()).hexdigest() == VOLCANO_CRD_SHA256


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_role_names_its_metrics_port_and_carries_scrape_annotations(backend: str) -> None:
    templates = workload_templates(rendered("small", backend))
    assert sorted(templates) == ["master", "pserver", "trainer"]
    for role, template in templates.items():
        annotations = template["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true", role
        assert annotations["prometheus.io/path"] == "/metrics", role
        container = template["spec"]["containers"][0]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports["metrics"] == int(annotations["prometheus.io/port"]), role
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["PADDLE_METRICS_PORT"] == str(ports["metrics"]), role
        assert env["PADDLE_LOG_FORMAT"] == "text", role


@pytest.mark.parametrize(("mode", "checkpoint", "url", "claim"), [
    ("hybrid", "pvc://ctr-ckpt/large", "/checkpoints/large", "ctr-ckpt"),
    ("hybrid", "s3://bucket/ckpt", "s3://bucket/ckpt", None),
    ("hybrid", None, None, None), ("async", "pvc://ctr-ckpt/large", None, None)])
def test_hybrid_trainers_checkpoint_the_dense_state_where_the_pservers_do_if_it_is_shared(
        mode: str, checkpoint: str | None, url: str | None, claim: str | None,
        token_file: Path) -> None:
    """A hybrid job's trainers get the checkpoint location (and mount its claim) so a job whose
    every trainer died resumes its dense state; not on the pservers' per-pod emptyDir, not in
    another mode."""
    spec = {**JOBS["large"], "mode": mode, "checkpoint": checkpoint}
    for backend in BACKENDS:
        trainer = workload_templates(render(Job.from_dict(spec), backend))["trainer"]["spec"]
        (container,) = trainer["containers"]
        config = load_config(env=_resolve(container["env"], 0, token_file))
        assert config.checkpoint_url == url, backend
        mounted = {m["name"] for m in container["volumeMounts"]}
        claims = [v["persistentVolumeClaim"]["claimName"] for v in trainer["volumes"]
                  if v["name"] == "checkpoints"]
        assert ("checkpoints" in mounted, claims) == (claim is not None,
                                                      [claim] if claim else []), backend
        assert config.dense_timeout == 60.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_compute_dtype_in_the_spec_env_reaches_the_trainers(backend: str,
                                                               token_file: Path) -> None:
    spec = {**JOBS["small"], "env": {"PADDLE_COMPUTE_DTYPE": "bfloat16"}}
    templates = workload_templates(render(Job.from_dict(spec), backend))
    (trainer,) = templates["trainer"]["spec"]["containers"]
    assert load_config(env=_resolve(trainer["env"], 0, token_file)).compute_dtype == "bfloat16"
    plain = workload_templates(render(Job.from_dict(JOBS["small"]), backend))
    (trainer,) = plain["trainer"]["spec"]["containers"]
    assert "PADDLE_COMPUTE_DTYPE" not in {e["name"] for e in trainer["env"]}
