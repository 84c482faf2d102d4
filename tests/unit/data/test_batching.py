"""The batch plan: the arithmetic the master counts batches with, and what identifies a plan."""

from __future__ import annotations

import pytest

from elasticps.data.batch_plan import BatchPlan, batches_in_chunk, batches_in_chunks, features_key
from elasticps.data.features import FeatureConfig
from elasticps.errors import InvalidArgumentError
from elasticps.trainer.dataset_reader import cloud


def test_a_chunk_is_ceil_rows_over_batch_size_batches_and_a_task_sums_its_chunks() -> None:
    assert [batches_in_chunk(rows, 4) for rows in (0, 1, 4, 5, 8)] == [0, 1, 1, 2, 2]
    assert batches_in_chunks([10, 6], 4) == 3 + 2  # the last batch of each chunk is short


def test_a_readers_plan_names_its_batch_size_seed_and_non_default_features() -> None:
    assert cloud("/d", 64).plan == BatchPlan(64, None, "")
    plan = cloud("/d", 64, shuffle_seed=3, features=FeatureConfig(id_space=1009)).plan
    assert plan == BatchPlan(64, 3, '{"id_space":1009}')
    assert features_key(FeatureConfig()) == ""  # what `elasticps master --features` defaults to
    assert features_key({"b": 1, "a": 2}) == '{"a":2,"b":1}'


def test_differences_name_each_field_and_a_bad_batch_size_is_refused() -> None:
    assert BatchPlan(8).differences(BatchPlan(8)) == []
    assert BatchPlan(8, 1, "x").differences(BatchPlan(4, None, "x")) == [
        "batch_size=8, not 4", "shuffle_seed=1, not None"]
    assert BatchPlan.from_dict(BatchPlan(8, 1, "x").to_dict()) == BatchPlan(8, 1, "x")
    with pytest.raises(InvalidArgumentError, match="batch_size=0"):
        BatchPlan(0)
