from __future__ import annotations

import numpy as np
import pytest

from elasticps.data.features import (
    FeatureConfig,
    hash_categorical,
    normalize_dense,
    splitmix64,
)
from elasticps.errors import ConfigError

M64 = 2**64 - 1


def documented_hash(slot: int, value: int | None, id_space: int) -> int:
    """The formula in elasticps/data/features.py's docstring, in plain Python integers."""
    v = 2**32 if value is None else value
    z = ((slot << 33) | v) + 0x9E3779B97F4A7C15 & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    z ^= z >> 31
    return z % id_space


def test_splitmix64_matches_the_reference_sequence() -> None:
    # The first output of the reference splitmix64 generator seeded with 0.
    assert int(splitmix64(np.array([0], dtype=np.uint64))[0]) == 0xE220A8397B1DCDAF


def test_hash_follows_the_documented_formula() -> None:
    values = np.array([[0x05DB9164, 0, 0xFFFFFFFF], [0x68FD1E64, 7, 0]], dtype=np.uint32)
    missing = np.array([[False, True, False], [False, False, True]])
    ids = hash_categorical(values, missing, 1_000_001)
    assert ids.dtype == np.int64
    for r in range(2):
        for slot in range(3):
            value = None if missing[r, slot] else int(values[r, slot])
            assert ids[r, slot] == documented_hash(slot, value, 1_000_001)
    # Pinned values: a change of the hash would silently invalidate every trained embedding.
    assert ids[0, 0] == documented_hash(0, 0x05DB9164, 1_000_001) == 51825
    assert ids[0, 1] == 891440


def test_hash_is_in_range_and_separates_slots_and_missing() -> None:
    rng = np.random.default_rng(5)
    values = rng.integers(0, 2**32, size=(2000, 26), dtype=np.uint64).astype(np.uint32)
    missing = rng.random((2000, 26)) < 0.2
    for id_space in (1, 7, 1_000_001, 2**40):
        ids = hash_categorical(values, missing, id_space)
        assert ids.min() >= 0
        assert ids.max() < id_space
    same_value = np.full((1, 26), 12345, dtype=np.uint32)
    per_slot = hash_categorical(same_value, np.zeros((1, 26), bool), 2**40)
    assert len(set(per_slot[0].tolist())) == 26
    # Missing is not the same category as the value 0.
    zero = np.zeros((1, 26), dtype=np.uint32)
    assert not np.any(
        hash_categorical(zero, np.ones((1, 26), bool), 2**40)
        == hash_categorical(zero, np.zeros((1, 26), bool), 2**40)
    )


def test_minmax_clips_and_scales_like_the_ctr_demo() -> None:
    raw = np.zeros((3, 13), dtype=np.int32)
    raw[0, :] = [10, -3, 50, 25, 32000, 250, 50, 25, 250, 5, 5, 5, 25]  # mid / min points
    raw[1, :] = 10**6  # above every clip value
    raw[2, 1] = -100  # below I2's minimum of -3
    missing = np.zeros((3, 13), dtype=bool)
    missing[2, 0] = True
    x = normalize_dense(raw, missing, "minmax")
    assert x.dtype == np.float32
    np.testing.assert_allclose(x[0, [0, 2, 3, 4]], 0.5)
    assert x[0, 1] == 0.0  # -3 is I2's minimum
    np.testing.assert_allclose(x[1], 1.0)
    assert x[2, 1] == 0.0
    assert x[2, 0] == 0.0  # missing


def test_log_and_none_normalisation() -> None:
    raw = np.array([[0, -2, 9, *([3] * 10)]], dtype=np.int32)
    missing = np.zeros_like(raw, dtype=bool)
    missing[0, 3] = True
    log = normalize_dense(raw, missing, "log")
    np.testing.assert_allclose(log[0, :3], [0.0, 0.0, np.log(10.0)], rtol=1e-6)
    assert log[0, 3] == 0.0
    plain = normalize_dense(raw, missing, "none")
    np.testing.assert_array_equal(plain[0, :3], [0.0, -2.0, 9.0])
    assert plain[0, 3] == 0.0


def test_feature_config_rejects_bad_values() -> None:
    with pytest.raises(ConfigError, match="id_space=0"):
        FeatureConfig(id_space=0)
    with pytest.raises(ConfigError, match="dense_norm='zscore'"):
        FeatureConfig(dense_norm="zscore")
