"""Feature transforms of Criteo datasets: the per-slot hash and the dense normalisations that
``FeatureConfig`` selects. Readers apply them through the Criteo preset schema
(:func:`elasticps.data.criteo_schema.criteo_preset`) and the general hash of
:mod:`elasticps.data.hashing`, which equals this one for Criteo values. A format-1 dataset reads
with whichever ``FeatureConfig`` the reader passes; a converted Criteo dataset (format 2)
declares one in its schema (:func:`declared_features`).

Categorical hash (never Python's ``hash()``, which is salted per process)::

    v    = the slot's uint32 value, or 2**32 when the value is missing
    key  = (slot << 33) | v                      # slot = 0 for C1 ... 25 for C26
    z    = key + 0x9E3779B97F4A7C15              (mod 2**64)
    z    = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9  (mod 2**64)
    z    = (z ^ (z >> 27)) * 0x94D049BB133111EB  (mod 2**64)
    z    =  z ^ (z >> 31)
    id   = z % id_space

That is one step of splitmix64 (Steele, Lea and Flood) seeded with ``key``. All 26 slots share
one id space (one embedding table) and the slot is part of the key, so equal values in different
slots get unrelated ids. A missing value is its own per-slot category (it cannot collide with a
real value before hashing, because 2**32 is not a uint32).

Dense normalisations (missing -> 0.0 in every mode), for column j of I1..I13:

* ``minmax`` (default; the classic Paddle CTR demo):
  ``(clip(x, lo_j, hi_j) - lo_j) / (hi_j - lo_j)`` with ``lo = [0, -3, 0, ..., 0]`` and
  ``hi = [20, 600, 100, 50, 64000, 500, 100, 50, 500, 10, 10, 10, 50]`` (the demo's clip
  values, about the 95th percentile of each column), giving [0, 1].
* ``log``: ``log(1 + max(x, 0))`` (as in DLRM's Criteo preprocessing).
* ``none``: ``float(x)``.
* ``log-missing``: ``log(1 + max(x, 0))`` as ``log``, but a missing value becomes ``-1.0``
  (impossible for a present value), so a model can tell "missing" from "zero".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from elasticps.data.criteo_schema import (
    CLIP_MAX,
    CLIP_MIN,
    DEFAULT_ID_SPACE,
    DENSE_NORMS,
    preset_options,
)
from elasticps.data.schema import Schema
from elasticps.errors import ConfigError
from elasticps.hashing import splitmix64

__all__ = [
    "DEFAULT_ID_SPACE", "DENSE_MAX", "DENSE_MIN", "DENSE_NORMS", "MISSING_VALUE", "FeatureConfig",
    "declared_features", "hash_categorical", "normalize_dense", "splitmix64",
]

MISSING_VALUE = 1 << 32

DENSE_MIN = np.array(CLIP_MIN, dtype=np.float32)
DENSE_MAX = np.array(CLIP_MAX, dtype=np.float32)


@dataclass(frozen=True)
class FeatureConfig:
    """How raw rows become model inputs: the hashed id space and the dense normalisation."""

    id_space: int = DEFAULT_ID_SPACE
    dense_norm: str = "minmax"

    def __post_init__(self) -> None:
        if isinstance(self.id_space, bool) or not isinstance(self.id_space, int) or not (
            1 <= self.id_space <= 2**63 - 1
        ):
            raise ConfigError(f"id_space={self.id_space!r} must be an integer in [1, 2**63-1]")
        if self.dense_norm not in DENSE_NORMS:
            raise ConfigError(
                f"dense_norm={self.dense_norm!r} is not one of {', '.join(DENSE_NORMS)}"
            )


def declared_features(schema: Schema) -> FeatureConfig | None:
    """The ``FeatureConfig`` whose Criteo preset ``schema`` is (what ``elasticps data convert
    criteo`` declares), None for any other schema."""
    options = preset_options(schema)
    return None if options is None else FeatureConfig(*options)


def hash_categorical(values: np.ndarray, missing: np.ndarray, id_space: int) -> np.ndarray:
    """Hash ``values`` (uint32-valued, shape ``[B, S]``, column = slot) to int64 ids.

    ``missing`` (bool, same shape) marks missing values; their ``values`` entries are ignored.
    """
    if values.ndim != 2 or values.shape != missing.shape:
        raise ValueError(
            f"values {values.shape} and missing {missing.shape} must be equal 2-D shapes"
        )
    key = values.astype(np.uint64)
    key[missing] = np.uint64(MISSING_VALUE)
    key |= np.arange(values.shape[1], dtype=np.uint64) << np.uint64(33)
    mixed = splitmix64(key)
    mixed %= np.uint64(id_space)
    return mixed.view(np.int64)  # every id is < id_space <= 2**63 - 1


def normalize_dense(values: np.ndarray, missing: np.ndarray, dense_norm: str) -> np.ndarray:
    """Normalise integer features ``values`` (``[B, 13]``) to float32; missing -> 0.0
    (-1.0 with ``log-missing``)."""
    x = values.astype(np.float32)
    if dense_norm == "minmax":
        x = (np.clip(x, DENSE_MIN, DENSE_MAX) - DENSE_MIN) / (DENSE_MAX - DENSE_MIN)
    elif dense_norm in ("log", "log-missing"):
        x = np.log1p(np.maximum(x, np.float32(0.0)))
    elif dense_norm != "none":
        raise ConfigError(f"dense_norm={dense_norm!r} is not one of {', '.join(DENSE_NORMS)}")
    x[missing] = -1.0 if dense_norm == "log-missing" else 0.0
    return x.astype(np.float32, copy=False)
