"""Admission and eviction declared from the trainer reach the table spec, checked by name."""

from __future__ import annotations

import pytest
import torch

from elasticps.errors import ConfigError
from elasticps.nn import Admit, Evict, SparseEmbedding, SparseEmbeddingBag
from elasticps.proto import pserver_pb2
from elasticps.trainer.optim import SGD
from elasticps.trainer.sparse_rows import SparseTables

POLICY = pserver_pb2.SparsePolicy


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
