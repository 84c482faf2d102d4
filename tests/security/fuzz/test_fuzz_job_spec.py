"""Fuzz: job specs with any value in any field (and YAML text of any shape); only ConfigError
comes out, and what is accepted stays within the spec's bounds."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from elasticps.cluster.spec import MAX_GPUS_PER_POD, Job, JobSpecWarning
from elasticps.config import MAX_PSERVERS, MAX_TRAINERS
from elasticps.errors import ConfigError
from elasticps.user_yaml import load_user_yaml
from tests.security.fuzz.common import FUZZ, json_values, with_fields

VALID: dict[str, Any] = {
    "job_name": "ctr", "namespace": "ml", "entry_point": "python train.py --passes 2",
    "trainers": 4, "min_trainers": 2, "max_trainers": 8, "pservers": 2, "num_gpus": 4,
    "trainer_cpu": 2, "trainer_mem": "4Gi", "pserver_cpu": "500m", "pserver_mem": "2Gi",
    "master_cpu": 1, "master_mem": "1Gi", "data": "pvc://ctr-data/criteo",
    "checkpoint": "s3://bucket/ckpt", "env": {"PADDLE_LEASE_TTL": 15, "NCCL_DEBUG": "WARN"},
    "etcd": {"replicas": 3, "storage": "8Gi"}, "queue": "default", "image": "e/ps:1",
    "insecure": False,
}
FIELDS = [*sorted(VALID), "num_cpus", "memory", "trainer_gpu", "local"]


def _check(doc: Any) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", JobSpecWarning)
        try:
            job = Job.from_dict(doc)
        except ConfigError:
            return
    plan = job.plan
    assert 1 <= plan.min_trainers <= plan.trainers <= plan.max_trainers <= MAX_TRAINERS
    assert 1 <= plan.pservers <= MAX_PSERVERS
    assert 0 <= plan.trainer.gpus <= MAX_GPUS_PER_POD


@pytest.mark.timeout(60)
@FUZZ
@given(doc=with_fields(VALID, FIELDS))
def test_job_spec_fields_raise_only_config_error(doc: dict[str, Any]) -> None:
    _check(doc)


@pytest.mark.timeout(60)
@FUZZ
@given(env=st.dictionaries(st.text(max_size=12) | st.sampled_from(
    ["PADDLE_LEASE_TTL", "PADDLE_CHECKPOINT_KEEP", "PADDLE_USE_GPU", "PADDLE_DATA_SCHEMES",
     "PADDLE_MAX_MESSAGE_MB", "PADDLE_JOB_TOKEN"]), json_values, max_size=4),
       etcd=json_values)
def test_env_and_etcd_sections_raise_only_config_error(env: Any, etcd: Any) -> None:
    _check({**VALID, "env": env, "etcd": etcd})


@pytest.mark.timeout(60)
@FUZZ
@given(text=st.text(max_size=200) | st.binary(max_size=200))
def test_yaml_text_of_any_shape(text: str | bytes) -> None:
    try:
        doc = load_user_yaml(text, "job.yaml")  # what Job.from_yaml reads a file with
    except ConfigError:
        return
    _check(doc)


def test_the_fuzzed_base_is_valid() -> None:
    assert Job.from_dict(VALID).plan.trainers == 4
