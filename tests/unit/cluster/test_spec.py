"""The job spec: defaults, derivations, and bad specs rejected with the field's name."""

from __future__ import annotations

import dataclasses
import re
import warnings
from pathlib import Path
from typing import Any

import pytest

from elasticps.cluster.quantity import format_cpu, format_memory, parse_cpu, parse_memory
from elasticps.cluster.spec import Job, JobSpecWarning, Storage, warn_environment
from elasticps.errors import ConfigError
from tests.helpers import REPO

BASE: dict[str, Any] = {"entry_point": "python train.py", "namespace": "ml"}


def make(**fields: Any) -> Job:
    return Job.from_dict({**BASE, **fields})


@pytest.mark.parametrize(("trainers", "pservers"), [(1, 1), (2, 1), (3, 2), (4, 2), (9, 5),
                                                    (64, 32)])
def test_pserver_count_is_half_the_trainers_rounded_up(trainers: int, pservers: int) -> None:
    assert make(trainers=trainers).plan.pservers == pservers


def test_explicit_pservers_win_over_the_rule() -> None:
    assert make(trainers=8, pservers=1).plan.pservers == 1


def test_beginner_resources_are_split_among_trainers() -> None:
    plan = make(num_gpus=4, num_cpus=16, memory="64Gi").plan
    assert plan.trainers == 4
    assert (plan.trainer.gpus, plan.trainer.cpu_millis, plan.trainer.memory_bytes) == (
        1, 4000, 16 * 2**30)
    assert plan.use_gpu is True
    assert plan.pservers == 2


def test_advanced_fields_win_over_beginner_ones() -> None:
    plan = make(num_cpus=16, trainers=2, trainer_cpu="500m", trainer_mem="3Gi").plan
    assert (plan.trainer.cpu_millis, plan.trainer.memory_bytes) == (500, 3 * 2**30)


def test_defaults() -> None:
    job = make()
    plan = job.plan
    assert (plan.trainers, plan.min_trainers, plan.max_trainers, plan.pservers) == (1, 1, 1, 1)
    assert plan.use_gpu is False
    assert job.etcd_spec.deploy
    assert job.etcd_spec.replicas == 1
    assert plan.trainer_command == ("train.py",)


def test_namespace_defaults_to_user_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("USER_NAMESPACE", "team-a")
    assert Job(entry_point="train.py").plan.namespace == "team-a"
    monkeypatch.delenv("USER_NAMESPACE")
    assert Job(entry_point="train.py").plan.namespace == "default"


def test_entry_point_forms() -> None:
    assert make(entry_point=["python", "a b.py", "--k", "v"]).plan.trainer_command == (
        "a b.py", "--k", "v")
    assert make(entry_point="/usr/bin/python3.11 t.py --x 'a b'").plan.trainer_command == (
        "t.py", "--x", "a b")


def test_a_local_job_needs_no_entry_point_and_a_cluster_job_does() -> None:
    # launch_job runs the script it is given for a local job; a cluster job must name it.
    local = Job(trainers=2, pservers=2, backend="local", namespace="ml")
    assert (local.backend, local.local, local.plan.trainer_command) == ("local", True, ())
    assert Job(entry_point="t.py", backend="local", namespace="ml").plan.trainer_command == (
        "t.py",)
    with pytest.raises(ConfigError, match="entry_point"):
        Job(trainers=2, pservers=2, namespace="ml")
    assert Job(entry_point="t.py", namespace="ml").backend == "cluster"


def test_local_is_a_deprecated_alias_of_the_local_backend() -> None:
    with pytest.warns(DeprecationWarning, match="'local' is deprecated; write backend: local"):
        job = Job(trainers=2, local=True, namespace="ml")
    assert (job.backend, job.local) == ("local", True)
    with pytest.warns(DeprecationWarning, match="backend: cluster"):
        assert Job(entry_point="t.py", local=False, namespace="ml").backend == "cluster"
    # what to_dict writes (backend only) reads back equal, with no warning
    assert "local" not in job.to_dict()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert Job.from_dict({**job.to_dict(), "entry_point": "t.py"}).backend == "local"
        assert dataclasses.replace(job, trainers=3).backend == "local"  # passes both: agreed
    with pytest.raises(ConfigError, match="'local': local: false contradicts backend: local"):
        Job(backend="local", local=False, namespace="ml")
    with pytest.raises(ConfigError, match="'backend': 'k8s' is not one of local, cluster"):
        Job(entry_point="t.py", backend="k8s", namespace="ml")
    with pytest.raises(ConfigError, match="'local': must be true or false"):
        Job.from_dict({**BASE, "local": "yes"})


def test_storage_forms() -> None:
    job = make(data="pvc://ctr-data/criteo/day0", checkpoint="s3://bucket/ckpt")
    assert job.data_storage == Storage(claim="ctr-data", sub_path="criteo/day0")
    assert job.data_storage.location_in_pod("/data") == "/data/criteo/day0"
    assert job.checkpoint_storage == Storage(url="s3://bucket/ckpt")
    assert make(data={"claim": "d", "path": "x"}).data_storage == Storage(claim="d", sub_path="x")


def test_etcd_endpoints_become_the_store_url() -> None:
    job = make(etcd={"endpoints": ["etcd-a:2379", "etcd-b:2379"]})
    assert not job.etcd_spec.deploy
    assert job.etcd_spec.store_url_for_endpoints == "etcd://etcd-a:2379,etcd-b:2379"
    assert make(etcd={"endpoints": "etcd://e:2379"}).etcd_spec.endpoints == ("e:2379",)


def test_env_values_become_strings_and_tunables_are_checked() -> None:
    job = make(env={"FOO": 1, "BAR": True, "PADDLE_CHECKPOINT_INTERVAL": 30})
    assert job.env == {"BAR": "true", "FOO": "1", "PADDLE_CHECKPOINT_INTERVAL": "30"}


def test_table_policies_are_kept_as_written_and_round_trip() -> None:
    tables = {"emb": {"admit_after": 2, "evict": "lfu", "max_rows": 1000},
              "ads": {"ttl_seconds": 3600}}
    job = make(tables=tables)
    assert job.tables == tables
    assert Job.from_dict(job.to_dict()) == job
    assert make().tables == {}  # the default: the model's layers decide


def test_round_trip_through_to_dict() -> None:
    job = make(trainers=3, data="pvc://d/x", etcd={"replicas": 3}, env={"A": "b"})
    again = Job.from_dict(job.to_dict())
    assert again == job
    assert again.plan == job.plan


def test_from_yaml_reads_the_example(tmp_path: Path) -> None:
    repo = REPO
    job = Job.from_yaml(repo / "examples/ctr/job.yaml")
    assert job.job_name == "ctr-demo"
    assert job.plan.trainers == 4
    assert job.plan.pservers == 2


BAD: list[tuple[dict[str, Any], str]] = [
    ({"tables": "emb"}, "'tables'"),
    ({"tables": {"emb": 3}}, "'tables.emb'"),
    ({"tables": {"emb": {"max_rows": -1}}}, "'tables.emb'.*max_rows=-1"),
    ({"tables": {"emb": {"admit_after": 0}}}, "'tables.emb'.*admit_after=0"),
    ({"tables": {"emb": {"admit_probability": 1.5}}}, "'tables.emb'.*probability=1.5"),
    ({"tables": {"emb": {"evict": "fifo"}}}, "'tables.emb'.*'fifo'"),
    ({"tables": {"emb": {"ttl_seconds": "soon"}}}, "'tables.emb'.*ttl_seconds='soon'"),
    ({"tables": {"emb": {"max_row": 5}}}, "'tables.emb'.*unknown setting.*max_row"),
    ({"tables": {"emb": {"admit_after": 2, "admit_probability": 0.5}}}, "'tables.emb'.*both"),
    ({"trainers": -1}, "'trainers'"),
    ({"trainers": 0}, "'trainers'"),
    ({"trainers": 2.5}, "'trainers'"),
    ({"trainers": True}, "'trainers'"),
    ({"pservers": -3}, "'pservers'"),
    ({"num_gpus": -1}, "'num_gpus'"),
    ({"trainer_gpu": -1}, "'trainer_gpu'"),
    ({"min_trainers": 0}, "'min_trainers'"),
    ({"trainers": 2, "min_trainers": 3}, "'min_trainers'"),
    ({"trainers": 4, "min_trainers": 5, "max_trainers": 4}, "'min_trainers'"),
    ({"trainers": 4, "max_trainers": 2}, "'max_trainers'"),
    ({"job_name": "My_Job"}, "'job_name'"),
    ({"job_name": "-job"}, "'job_name'"),
    ({"job_name": "a" * 41}, "'job_name'"),
    ({"namespace": "Team A"}, "'namespace'"),
    ({"image": "bad image"}, "'image'"),
    ({"image": ""}, "'image'"),
    ({"memory": "1GB"}, "'memory'"),
    ({"memory": "-1Gi"}, "'memory'"),
    ({"memory": "lots"}, "'memory'"),
    ({"trainer_mem": "4 Gi"}, "'trainer_mem'"),
    ({"pserver_mem": "1e9"}, "'pserver_mem'"),
    ({"master_mem": 0}, "'master_mem'"),
    ({"num_cpus": "two"}, "'num_cpus'"),
    ({"trainer_cpu": "0.0001"}, "'trainer_cpu'"),
    ({"pserver_cpu": -1}, "'pserver_cpu'"),
    ({"master_cpu": "1x"}, "'master_cpu'"),
    ({"num_gpus": 3, "trainers": 2}, "'num_gpus'"),
    ({"memory": "100Mi", "trainers": 4}, "'memory'"),
    ({"num_cpus": "two", "trainer_cpu": 1}, "'num_cpus'"),
    ({"num_cpus": "20m", "trainers": 4}, "'num_cpus'"),
    ({"entry_point": "python -u train.py"}, "'entry_point'"),
    ({"entry_point": ""}, "'entry_point'"),
    ({"entry_point": "python"}, "'entry_point'"),
    ({"entry_point": "python -m pkg.train"}, "'entry_point'"),
    ({"entry_point": "python 'unclosed"}, "'entry_point'"),
    ({"entry_point": 42}, "'entry_point'"),
    ({"data": "relative/path"}, "'data'"),
    ({"data": "pvc://Bad_Claim"}, "'data'"),
    ({"data": "pvc://claim/../etc"}, "'data'"),
    ({"data": {"claim": "c", "url": "s3://x"}}, "'data'"),
    ({"data": {"pvc": "c"}}, "'data.pvc'"),
    ({"checkpoint": 7}, "'checkpoint'"),
    ({"env": {"PADDLE_ROLE": "master"}}, "'env.PADDLE_ROLE'"),
    ({"env": {"PADDLE_JOB_TOKEN": "x"}}, "'env.PADDLE_JOB_TOKEN'"),
    ({"env": {"PADDLE_TYPO": "1"}}, "'env.PADDLE_TYPO'"),
    ({"env": {"PADDLE_USE_GPU": "maybe"}}, "'env.PADDLE_USE_GPU'"),
    ({"env": {"PADDLE_CHECKPOINT_KEEP": "0"}}, "'env.PADDLE_CHECKPOINT_KEEP'"),
    ({"env": {"1BAD": "x"}}, "'env.1BAD'"),
    ({"env": {"A": None}}, "'env.A'"),
    ({"env": ["A=1"]}, "'env'"),
    ({"etcd": "yes"}, "'etcd'"),
    ({"etcd": {"deploy": True, "endpoints": ["e:2379"]}}, "'etcd'"),
    ({"etcd": {"deploy": False}}, "'etcd.endpoints'"),
    ({"etcd": {"endpoints": ["no-port"]}}, "'etcd.endpoints'"),
    ({"etcd": {"endpoints": ["h:99999"]}}, "'etcd.endpoints'"),
    ({"etcd": {"replicas": 2}}, "'etcd.replicas'"),
    ({"etcd": {"replicas": -1}}, "'etcd.replicas'"),
    ({"etcd": {"storage": "big"}}, "'etcd.storage'"),
    ({"etcd": {"deploy": "yes"}}, "'etcd.deploy'"),
    ({"etcd": {"replica": 3}}, "'etcd.replica'"),
    ({"queue": "Prod Queue"}, "'queue'"),
    ({"local": "yes"}, "'local'"),
    ({"trainer": 4}, "'trainer'"),
    ({"pserver_memory": "1Gi"}, "'pserver_memory'"),
    # upper bounds: typos of a few zeros, or attempts to exhaust a shared cluster
    ({"trainers": 10_001}, "'trainers'"),
    ({"max_trainers": 10**9}, "'max_trainers'"),
    ({"pservers": 1001}, "'pservers'"),
    ({"trainer_gpu": 65}, "'trainer_gpu'"),
    ({"num_gpus": 10**9}, "'num_gpus'"),
    ({"pserver_cpu": 100_000}, "'pserver_cpu'"),
    ({"pserver_mem": "100Ti"}, "'pserver_mem'"),
    ({"master_mem": "9" * 100}, "'master_mem'"),
    ({"etcd": {"storage": "100Ti"}}, "'etcd.storage'"),
    ({"env": {"PADDLE_LEASE_TTL": "100000"}}, "'env.PADDLE_LEASE_TTL'"),
    ({"env": {"PADDLE_CHECKPOINT_INTERVAL": "1e9"}}, "'env.PADDLE_CHECKPOINT_INTERVAL'"),
    ({"env": {f"V{i}": "x" for i in range(300)}}, "'env'"),
    ({"env": {"BIG": "x" * 40_000}}, "'env.BIG'"),
    ({"entry_point": "python train.py " + "x" * 5000}, "'entry_point'"),
    ({"insecure": "yes"}, "'insecure'"),
]


@pytest.mark.parametrize(("fields", "named"), BAD, ids=[repr(f) for f, _ in BAD])
def test_bad_spec_is_rejected_naming_the_field(fields: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigError) as info:
        make(**fields)
    assert re.search(named, str(info.value)), str(info.value)
    assert str(info.value).startswith("job spec field")


def test_missing_entry_point_names_the_file(tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("trainers: 2\n")
    with pytest.raises(ConfigError, match=r"'entry_point'.*job.yaml"):
        Job.from_yaml(spec)


def test_yaml_errors_name_the_file(tmp_path: Path) -> None:
    spec = tmp_path / "broken.yaml"
    spec.write_text("trainers: [1,\n")
    with pytest.raises(ConfigError, match=r"broken\.yaml is not valid YAML"):
        Job.from_yaml(spec)
    spec.write_text("- a list\n")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        Job.from_yaml(spec)
    with pytest.raises(ConfigError, match="cannot read job spec"):
        Job.from_yaml(tmp_path / "missing.yaml")


def test_gpu_asked_but_use_gpu_false_warns() -> None:
    with pytest.warns(JobSpecWarning, match="asks for 1 GPU.*PADDLE_USE_GPU is false"):
        job = make(num_gpus=2, env={"PADDLE_USE_GPU": "false"})
    assert job.plan.use_gpu is False  # the user's explicit choice is kept


def test_use_gpu_without_gpus_warns() -> None:
    with pytest.warns(JobSpecWarning, match="asks for no GPUs but env.PADDLE_USE_GPU is true"):
        make(env={"PADDLE_USE_GPU": "1"})


def test_consistent_gpu_settings_do_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make(num_gpus=2, env={"PADDLE_USE_GPU": "true"})
        make()


def test_submitting_environment_is_checked_like_the_seed_asks() -> None:
    job = make(num_gpus=1)
    with pytest.warns(JobSpecWarning, match="PADDLE_USE_GPU in this environment"):
        assert warn_environment(job, {"PADDLE_USE_GPU": "false"})
    assert not warn_environment(job, {"PADDLE_USE_GPU": "true"})
    assert not warn_environment(job, {})
    with pytest.raises(ConfigError, match="PADDLE_USE_GPU"):
        warn_environment(job, {"PADDLE_USE_GPU": "perhaps"})


def test_replace_revalidates() -> None:
    job = make()
    with pytest.raises(ConfigError, match="'namespace'"):
        dataclasses.replace(job, namespace="Bad NS")


@pytest.mark.parametrize(("text", "millis"), [("2", 2000), (0.5, 500), ("250m", 250), (3, 3000)])
def test_cpu_quantities(text: object, millis: int) -> None:
    assert parse_cpu(text) == millis
    assert parse_cpu(format_cpu(millis)) == millis


@pytest.mark.parametrize(("text", "nbytes"), [("512Mi", 2**29), ("1G", 10**9), ("4Gi", 2**32),
                                              (1024, 1024), ("1.5Gi", 3 * 2**29)])
def test_memory_quantities(text: object, nbytes: int) -> None:
    assert parse_memory(text) == nbytes
    assert parse_memory(format_memory(nbytes)) == nbytes


def test_the_training_mode_reaches_pservers_and_trainers() -> None:
    from elasticps.cluster.render.common import role_env

    job = make(mode="geo", geo_steps=4)
    envs = {role: {e["name"]: e.get("value") for e in role_env(
        job, role, pserver_hosts=["p0"], trainer_index_path="x")}
        for role in ("master", "pserver", "trainer")}
    assert envs["pserver"]["PADDLE_TRAINING_MODE"] == "geo"
    assert (envs["trainer"]["PADDLE_TRAINING_MODE"], envs["trainer"]["PADDLE_GEO_STEPS"]) == (
        "geo", "4")
    assert "PADDLE_TRAINING_MODE" not in envs["master"]
    assert make().mode == "async"
    assert Job.from_dict(make(mode="sync").to_dict()).mode == "sync"
    hybrid = make(mode="hybrid")
    assert {role: {e["name"]: e.get("value") for e in role_env(
        hybrid, role, pserver_hosts=["p0"], trainer_index_path="x")}["PADDLE_TRAINING_MODE"]
        for role in ("pserver", "trainer")} == {"pserver": "hybrid", "trainer": "hybrid"}


@pytest.mark.parametrize(("fields", "message"), [
    ({"mode": "bsp"}, "'mode': 'bsp' is not one of async, sync, geo"),
    ({"mode": "sync", "geo_steps": 3}, "'geo_steps': is for mode: geo"),
    ({"mode": "geo", "geo_steps": 0}, "'geo_steps': must be >= 1"),
])
def test_a_bad_mode_is_refused_naming_the_field(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        make(**fields)
