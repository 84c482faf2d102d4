"""Admission and eviction declared from the trainer reach the table spec, checked by name."""

from __future__ import annotations

import json
import re

import pytest
import torch

from elasticps.config import load_config
from elasticps.errors import ConfigError
from elasticps.nn import Admit, Evict, SparseEmbedding, SparseEmbeddingBag
from elasticps.proto import pserver_pb2
from elasticps.trainer.optim import SGD
from elasticps.trainer.sparse_rows import SparseTables
from elasticps.trainer.trainer import Trainer

POLICY = pserver_pb2.SparsePolicy
SPEC = pserver_pb2.TableSpec


def _spec(layer: SparseEmbedding | SparseEmbeddingBag) -> pserver_pb2.TableSpec:
    return layer.table_spec(SGD(lr=0.1))


def test_defaults_keep_todays_behaviour() -> None:
    spec = _spec(SparseEmbedding("t", 0, 4))
    assert not spec.HasField("policy") or spec.policy == POLICY()


def test_policies_reach_the_spec() -> None:
    spec = _spec(SparseEmbedding("t", 0, 4, admit=Admit(after=2), evict=Evict(ttl_passes=3),
                                 max_rows=1000))
    assert spec.policy == POLICY(admit_after=2, ttl_passes=3, max_rows=1000, evict=POLICY.LRU)
    spec = _spec(SparseEmbeddingBag("b", 0, 4, admit=Admit(probability=0.5), evict="lfu"))
    assert spec.policy == POLICY(admit_probability=0.5, evict=POLICY.LFU)
    # max_rows alone evicts least recently used rows.
    assert _spec(SparseEmbedding("t", 0, 4, max_rows=9)).policy == POLICY(max_rows=9,
                                                                           evict=POLICY.LRU)


@pytest.mark.parametrize(("make", "match"), [
    (lambda: Admit(after=0), r"after=0"),
    (lambda: Admit(probability=2.0), r"probability=2.0"),
    (lambda: Admit(after=2, probability=0.5), "not both"),
    (lambda: Evict(ttl_passes=-1), r"ttl_passes=-1"),
    (lambda: Evict(ttl_seconds=float("nan")), r"ttl_seconds=nan"),
    (lambda: SparseEmbedding("t", 0, 4, evict="fifo"), r"'fifo'"),
    (lambda: SparseEmbedding("t", 0, 4, max_rows=-5), r"max_rows=-5"),
])
def test_bad_settings_are_refused_by_name(make, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        make()


def test_a_shared_table_needs_one_policy() -> None:
    model = torch.nn.ModuleDict({"a": SparseEmbedding("t", 0, 4, max_rows=5),
                                 "b": SparseEmbedding("t", 0, 4)})
    with pytest.raises(ConfigError, match="two different admit/evict/max_rows"):
        SparseTables(model)


class TwoTables(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = SparseEmbedding("emb", 0, 4, columns="c", admit=Admit(after=3))
        self.b = SparseEmbedding("ads", 0, 4, columns="d", max_rows=7)


def _policies(trainer: Trainer) -> dict[str, pserver_pb2.SparsePolicy]:
    return {s.name: s.policy for s in trainer.table_specs() if s.kind == SPEC.SPARSE}


def test_the_job_specs_tables_replace_what_the_layers_declare() -> None:
    """PADDLE_SPARSE_POLICIES (rendered from a job spec's tables:) reaches the table specs."""
    trainer = Trainer(TwoTables(), prefetch=False)
    assert _policies(trainer) == {"emb": POLICY(admit_after=3),
                                  "ads": POLICY(max_rows=7, evict=POLICY.LRU)}
    trainer.config = load_config(env={"PADDLE_SPARSE_POLICIES": json.dumps(
        {"emb": {"admit_probability": 0.25, "evict": "lfu", "max_rows": 100}})})
    assert _policies(trainer) == {
        "emb": POLICY(admit_probability=0.25, evict=POLICY.LFU, max_rows=100),
        "ads": POLICY(max_rows=7, evict=POLICY.LRU)}  # not named: the layer's
    trainer.config = load_config(env={"PADDLE_SPARSE_POLICIES": '{"emb": {}}'})
    assert _policies(trainer)["emb"] == POLICY()  # named with nothing: the defaults
    trainer.config = load_config(env={"PADDLE_SPARSE_POLICIES": '{"clicks": {"max_rows": 5}}'})
    with pytest.raises(ConfigError, match=r"\['clicks'\], which are not sparse tables"):
        trainer.table_specs()


@pytest.mark.parametrize(("value", "match"), [
    ("not json", "is not JSON"),
    ('["emb"]', "must be a JSON object"),
    ('{"emb": 3}', "'emb': must map settings"),
    ('{"emb": {"max_row": 3}}', r"unknown setting\(s\) \['max_row'\]"),
])
def test_bad_policy_env_is_refused_naming_it(value: str, match: str) -> None:
    with pytest.raises(ConfigError, match="PADDLE_SPARSE_POLICIES") as info:
        load_config(env={"PADDLE_SPARSE_POLICIES": value})
    assert re.search(match, str(info.value))


def test_score_eviction_reaches_the_spec_from_layers_and_the_job_spec() -> None:
    spec = _spec(SparseEmbedding("t", 0, 4, evict=Evict(policy="score", score_decay=0.9,
                                                         delete_threshold=0.5), max_rows=50))
    assert spec.policy == POLICY(evict=POLICY.SCORE, max_rows=50, score_decay=0.9,
                                 delete_threshold=0.5)
    assert _spec(SparseEmbedding("t", 0, 4, evict="score")).policy == POLICY(evict=POLICY.SCORE)
    trainer = Trainer(TwoTables(), prefetch=False)
    trainer.config = load_config(env={"PADDLE_SPARSE_POLICIES": json.dumps(
        {"emb": {"evict": "score", "click_coeff": 2, "ttl_passes": 30}})})
    assert _policies(trainer)["emb"] == POLICY(evict=POLICY.SCORE, click_coeff=2.0,
                                               ttl_passes=30)


@pytest.mark.parametrize(("make", "match"), [
    (lambda: Evict(policy="lru", score_decay=0.9), r"score_decay=0.9\) is a setting of "
                                                   r"policy='score'"),
    (lambda: Evict(policy="score", score_decay=1.5), r"score_decay=1.5\) must be in \(0, 1\]"),
    (lambda: Evict(policy="score", delete_threshold=-0.1), r"delete_threshold=-0.1"),
    (lambda: Evict(policy="score", nonclk_coeff=float("inf")), r"nonclk_coeff=inf"),
])
def test_bad_score_settings_are_refused_by_name(make, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        make()


@pytest.mark.parametrize(("settings", "match"), [
    ({"evict": "score", "delete_threshold": -1}, r"'emb'.*delete_threshold=-1"),
    ({"evict": "score", "score_decay": "fast"}, r"'emb': score_decay='fast' is not a number"),
    ({"evict": "lfu", "click_coeff": 2}, r"'emb'.*click_coeff=2.0\) is a setting of"),
])
def test_bad_score_settings_in_the_job_spec_name_the_table(settings, match: str) -> None:
    trainer = Trainer(TwoTables(), prefetch=False)
    trainer.config = load_config(env={"PADDLE_SPARSE_POLICIES": json.dumps({"emb": settings})})
    with pytest.raises(ConfigError, match=match):
        trainer.table_specs()
