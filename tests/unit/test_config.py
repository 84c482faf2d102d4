"""The env contract: every variable, its alias, its default, and clear errors."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

import elasticps
from elasticps import config
from elasticps.config import ENV_VARS, Config, alias_of, load_config
from elasticps.errors import ConfigError
from tests.helpers import REPO, run_cli

TOKEN_FILE = str(REPO / "tests/data/job_token")  # holds "abc", PADDLE_JOB_TOKEN's good value

# (variable, raw value, field, parsed value) - one good value per variable.
GOOD = [
    ("PADDLE_PSERVERS", "10.0.0.1, 10.0.0.2", "pservers", ("10.0.0.1", "10.0.0.2")),
    ("PADDLE_TRAINER_ID", "3", "trainer_id", 3),
    ("PADDLE_TRAINER_COUNT", "8", "trainer_count", 8),
    ("PADDLE_NUM_GRADIENT_SERVERS", "4", "num_gradient_servers", 4),
    ("PADDLE_PORTS_NUM_FOR_SPARSE", "2", "ports_num_for_sparse", 2),
    ("PADDLE_PORT", "8000", "port", 8000),
    ("PADDLE_PORTS_NUM", "2", "ports_num", 2),
    ("PADDLE_USE_GPU", "True", "use_gpu", True),
    ("PADDLE_STORE", "etcd://a:2379,b:2379", "store", "etcd://a:2379,b:2379"),
    ("PADDLE_JOB_NAME", "ctr-demo", "job_name", "ctr-demo"),
    ("PADDLE_ROLE", "PServer", "role", "pserver"),
    ("PADDLE_JOB_TOKEN", "abc", "token", "abc"),
    ("PADDLE_JOB_TOKEN_FILE", TOKEN_FILE, "token_file", TOKEN_FILE),
    ("PADDLE_NUM_PSERVERS", "3", "num_pservers", 3),
    ("PADDLE_HOST", "10.1.2.3", "host", "10.1.2.3"),
    ("PADDLE_DATA", "/data/criteo", "data", "/data/criteo"),
    ("PADDLE_CHECKPOINT_URL", "file:///ckpt", "checkpoint_url", "file:///ckpt"),
    ("PADDLE_CHECKPOINT_INTERVAL", "2.5", "checkpoint_interval", 2.5),
    ("PADDLE_CHECKPOINT_KEEP", "5", "checkpoint_keep", 5),
    ("PADDLE_LEASE_TTL", "3", "lease_ttl", 3),
    ("PADDLE_HTTP_PORT", "8080", "http_port", 8080),
    ("PADDLE_WORKDIR", "/tmp/ctr", "workdir", "/tmp/ctr"),
    ("PADDLE_METRICS_PORT", "9090", "metrics_port", 9090),
    ("PADDLE_LOG_FORMAT", "JSON", "log_format", "json"),
    ("PADDLE_HTTP_HOST", "0.0.0.0", "http_host", "0.0.0.0"),
    ("PADDLE_TLS_DIR", "/etc/elasticps/tls", "tls_dir", "/etc/elasticps/tls"),
    ("PADDLE_INSECURE", "yes", "insecure", True),
    ("PADDLE_HEALTH_PORT", "7165", "health_port", 7165),
    ("PADDLE_MAX_MESSAGE_MB", "64", "max_message_mb", 64),
    ("PADDLE_PSERVER_MEMORY_MB", "512", "pserver_memory_mb", 512),
    ("PADDLE_MAX_IDS_PER_REQUEST", "1000", "max_ids_per_request", 1000),
    ("PADDLE_MAX_TABLES", "20", "max_tables", 20),
    ("PADDLE_CHECKPOINT_DELTAS", "8", "checkpoint_deltas", 8),
    ("PADDLE_SPARSE_POLICIES", ' {"emb": {"max_rows": 5,  "admit_after": 2}} ', "sparse_policies",
     '{"emb":{"admit_after":2,"max_rows":5}}'),
    ("PADDLE_MAX_CONCURRENT_RPCS", "8", "max_concurrent_rpcs", 8),
    ("PADDLE_DATA_SCHEMES", "file, S3,gs", "data_schemes", ("file", "s3", "gs")),
    ("PADDLE_TRAINING_MODE", " Sync ", "mode", "sync"),
    ("PADDLE_GEO_STEPS", "25", "geo_steps", 25),
    ("PADDLE_TRAINING_MODE", "hybrid", "mode", "hybrid"),
    ("PADDLE_DENSE_TIMEOUT", "30", "dense_timeout", 30.0),
    ("PADDLE_DENSE_GRAD_DTYPE", " BFloat16 ", "dense_grad_dtype", "bfloat16"),
    ("PADDLE_COMPUTE_DTYPE", " BFloat16 ", "compute_dtype", "bfloat16"),
    ("PADDLE_STREAM_POLL_S", "0.5", "stream_poll_s", 0.5),
    ("PADDLE_STREAM_PERIOD_S", "3600", "stream_period_s", 3600.0),
    ("PADDLE_WARM_START", "/models/ctr", "warm_start", "/models/ctr"),
]

# (variable, malformed value)
BAD = [
    ("PADDLE_DENSE_TIMEOUT", "0"),
    ("PADDLE_PORT", "abc"),
    ("PADDLE_PORT", "70000"),
    ("PADDLE_PORT", "-1"),
    ("PADDLE_TRAINER_ID", "-1"),
    ("PADDLE_TRAINER_ID", "1.5"),
    ("PADDLE_TRAINER_COUNT", "0"),
    ("PADDLE_NUM_GRADIENT_SERVERS", "-2"),
    ("PADDLE_PORTS_NUM_FOR_SPARSE", "x"),
    ("PADDLE_PORTS_NUM", "0"),
    ("PADDLE_USE_GPU", "maybe"),
    ("PADDLE_ROLE", "worker"),
    ("PADDLE_STORE", "redis://x"),
    ("PADDLE_JOB_NAME", "Bad_Name"),
    ("PADDLE_JOB_NAME", "x" * 64),
    ("PADDLE_NUM_PSERVERS", "0"),
    ("PADDLE_CHECKPOINT_INTERVAL", "nan"),
    ("PADDLE_CHECKPOINT_KEEP", "0"),
    ("PADDLE_LEASE_TTL", "0"),
    ("PADDLE_PSERVERS", "a b,c"),
    ("PADDLE_METRICS_PORT", "65536"),
    ("PADDLE_LOG_FORMAT", "xml"),
    ("PADDLE_TRAINER_COUNT", "10001"),
    ("PADDLE_NUM_PSERVERS", "1001"),
    ("PADDLE_LEASE_TTL", "601"),
    ("PADDLE_CHECKPOINT_KEEP", "1000000"),
    ("PADDLE_INSECURE", "maybe"),
    ("PADDLE_HEALTH_PORT", "70000"),
    ("PADDLE_MAX_MESSAGE_MB", "0"),
    ("PADDLE_MAX_MESSAGE_MB", "4096"),
    ("PADDLE_PSERVER_MEMORY_MB", "-1"),
    ("PADDLE_MAX_IDS_PER_REQUEST", "0"),
    ("PADDLE_MAX_TABLES", "0"),
    ("PADDLE_CHECKPOINT_DELTAS", "-1"),
    ("PADDLE_SPARSE_POLICIES", "{emb}"),
    ("PADDLE_MAX_CONCURRENT_RPCS", "0"),
    ("PADDLE_DATA_SCHEMES", "file,http://x"),
    ("PADDLE_TRAINING_MODE", "bsp"),
    ("PADDLE_DENSE_GRAD_DTYPE", "float16"),
    ("PADDLE_COMPUTE_DTYPE", "float16"),
    ("PADDLE_GEO_STEPS", "0"),
    ("PADDLE_GEO_STEPS", "100001"),
    ("PADDLE_STREAM_POLL_S", "0.01"),
    ("PADDLE_STREAM_PERIOD_S", "0.5"),
]


def test_every_variable_is_covered_here() -> None:
    assert {name for name, *_ in GOOD} == {var.name for var in ENV_VARS}
    assert {var.field for var in ENV_VARS} == {f.name for f in dataclasses.fields(Config)}


@pytest.mark.parametrize(("name", "raw", "field", "value"), GOOD)
def test_variable_is_read(name: str, raw: str, field: str, value: object) -> None:
    assert getattr(load_config({name: raw}), field) == value


@pytest.mark.parametrize(("name", "raw", "field", "value"), GOOD)
def test_alias_is_read_for_seed_variables(name: str, raw: str, field: str, value: object) -> None:
    var = next(v for v in ENV_VARS if v.name == name)
    alias = alias_of(var)
    if alias is None:
        assert not var.seed
        return
    assert alias == "PADDLE_INIT_" + name.removeprefix("PADDLE_")
    assert getattr(load_config({alias: raw}), field) == value
    # Both spellings agreeing is fine; disagreeing is an error naming both.
    assert getattr(load_config({alias: raw, name: raw}), field) == value


def test_seed_variables_have_aliases() -> None:
    seed = {v.name for v in ENV_VARS if v.seed}
    assert seed == {
        "PADDLE_PSERVERS", "PADDLE_TRAINER_ID", "PADDLE_TRAINER_COUNT",
        "PADDLE_NUM_GRADIENT_SERVERS", "PADDLE_PORTS_NUM_FOR_SPARSE", "PADDLE_PORT",
        "PADDLE_PORTS_NUM", "PADDLE_USE_GPU",
    }


def test_conflicting_alias_is_an_error() -> None:
    with pytest.raises(ConfigError, match="PADDLE_PORT='1' and its alias PADDLE_INIT_PORT='2'"):
        load_config({"PADDLE_PORT": "1", "PADDLE_INIT_PORT": "2"})


def test_defaults() -> None:
    config = load_config({})
    assert config.port == 7164
    assert config.ports_num == 1
    assert config.use_gpu is False
    assert config.store is None
    assert config.pserver_count == 1
    assert config.lease_ttl == 5
    assert config.max_concurrent_rpcs is None  # each server picks its role's own default


@pytest.mark.parametrize(("name", "raw"), BAD)
def test_malformed_value_names_variable_and_value(name: str, raw: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config({name: raw})
    assert name in str(info.value)
    assert repr(raw) in str(info.value)


def test_alias_error_names_the_alias() -> None:
    with pytest.raises(ConfigError, match="PADDLE_INIT_PORT='abc'"):
        load_config({"PADDLE_INIT_PORT": "abc"})


def test_keyword_overrides_win_and_are_validated() -> None:
    env = {"PADDLE_USE_GPU": "true", "PADDLE_PORT": "9000"}
    config = load_config(env, use_gpu=False, port=9001)
    assert (config.use_gpu, config.port) == (False, 9001)
    with pytest.raises(ConfigError, match="port=-5"):
        load_config(env, port=-5)
    with pytest.raises(ConfigError, match="unknown configuration option"):
        load_config(env, gpus=1)


def test_trainer_id_may_exceed_starting_count_in_elastic_jobs() -> None:
    config = load_config({"PADDLE_TRAINER_ID": "5", "PADDLE_TRAINER_COUNT": "4"})
    assert (config.trainer_id, config.trainer_count) == (5, 4)


def test_the_token_is_read_from_its_file(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(" s3cr3t-token \n")
    assert load_config({"PADDLE_JOB_TOKEN_FILE": str(path)}).token == "s3cr3t-token"
    assert load_config({"PADDLE_JOB_TOKEN_FILE": str(path),
                        "PADDLE_JOB_TOKEN": "s3cr3t-token"}).token == "s3cr3t-token"


@pytest.mark.parametrize(("content", "message"), [
    (None, "cannot read it: No such file"),
    (b"  \n", "the file is empty"),
    (b"x" * 1025, "more than 1024 bytes"),
    (b"\xff\xfe", "not UTF-8"),
    (b"other", "PADDLE_JOB_TOKEN and the token in PADDLE_JOB_TOKEN_FILE .* disagree"),
])
def test_a_bad_token_file_is_an_error_naming_it(tmp_path: Path, content: bytes | None,
                                                message: str) -> None:
    path = tmp_path / "token"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ConfigError, match=message) as info:
        load_config({"PADDLE_JOB_TOKEN_FILE": str(path), "PADDLE_JOB_TOKEN": "abc"})
    assert "other" not in str(info.value)  # the token itself is never in a message


def test_config_is_frozen_and_round_trips_through_env() -> None:
    config = load_config({name: raw for name, raw, *_ in GOOD if name != "PADDLE_TRAINER_ID"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.port = 1  # type: ignore[misc]
    assert load_config(config.to_env()) == config


def test_init_reads_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PADDLE_INIT_TRAINER_COUNT", "6")
    monkeypatch.setenv("PADDLE_USE_GPU", "1")
    config = elasticps.init(use_gpu=False)
    assert config.trainer_count == 6
    assert config.use_gpu is False


def test_env_command_lists_variables_and_checks() -> None:
    listed = run_cli("env")
    assert listed.returncode == 0, listed.stderr
    for var in ENV_VARS:
        assert var.name in listed.stdout
    bad = run_cli("env", "--check", env={"PADDLE_PORT": "abc"})
    assert bad.returncode == 1
    assert "PADDLE_PORT='abc'" in bad.stderr


def test_a_token_file_others_can_write_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("from-the-file\n")
    path.chmod(0o622)  # anyone may have chosen this token
    with pytest.raises(ConfigError, match=r"PADDLE_JOB_TOKEN_FILE '.*token' \(owner .*mode "
                                          r"0622\) can be written by other users"):
        load_config({"PADDLE_JOB_TOKEN_FILE": str(path)})


def test_a_held_token_leaves_the_environment_but_not_the_process(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PADDLE_JOB_TOKEN", "held")
    monkeypatch.setattr(config, "_held_token", "")
    config.hold_env_token()
    assert "PADDLE_JOB_TOKEN" not in os.environ
    assert load_config().token == "held"  # the process's own configs still have it
    assert load_config({}).token == ""  # an explicit environment is taken as it is
