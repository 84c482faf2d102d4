"""The planted model behind synthetic CTR data: a logistic model over hashed feature weights.

For a row with integer features ``x_j`` (I1..I13) and categorical values ``v_k`` (C1..C26, with
``v_k = 2**32`` when missing)::

    logit = bias + signal * ( sum_k  scale_k * W(seed, k, v_k)
                            + sum_j  dense_weight_j * d_j
                            + sum_(a, b, s) in crosses  s * W2(seed, i, v_a, v_b) )
    p     = 1 / (1 + exp(-logit))

``d_j = log(1 + max(x_j, 0)) / log(1 + hi_j) - 1/2`` (``hi`` = the demo's clip values), 0 when
missing. ``W`` and ``W2`` are hashes turned into uniform numbers of mean 0 and variance 1, so the
weight of any value exists without a table. Everything is a pure function of the raw values and
the parameters stored in the manifest (``planted_model``), so anyone can recompute ``p``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from elasticps.data.criteo_layout import NUM_DENSE, NUM_SPARSE
from elasticps.data.features import DENSE_MAX, MISSING_VALUE, splitmix64
from elasticps.errors import DataError

KIND = "hashed-logistic-v1"
_SQRT12 = math.sqrt(12.0)


def keyed(seed: int, *tags: int) -> np.uint64:
    """A 64-bit key derived from ``seed`` and integer tags by chained splitmix64."""
    h = splitmix64(np.array([seed & (2**64 - 1)], dtype=np.uint64))
    for tag in tags:
        h = splitmix64(h ^ np.uint64(tag & (2**64 - 1)))
    return np.uint64(h[0])


def unit_uniform(h: np.ndarray) -> np.ndarray:
    """uint64 hashes -> float64 uniform on [-sqrt(3), sqrt(3)) (mean 0, variance 1)."""
    u = (h >> np.uint64(11)).astype(np.float64) * (1.0 / 2**53)
    return (u - 0.5) * _SQRT12


@dataclass(frozen=True)
class PlantedModel:
    """Parameters of the planted logistic model; see the module docstring for the formula."""

    seed: int
    bias: float
    signal: float
    slot_scales: tuple[float, ...]
    dense_weights: tuple[float, ...]
    crosses: tuple[tuple[int, int, float], ...]

    @classmethod
    def draw(cls, seed: int, signal: float = 1.0, bias: float = 0.0,
             num_crosses: int = 3) -> PlantedModel:
        """Draw the parameters from ``seed``: some slots informative, some pure noise, and
        ``num_crosses`` pairwise crosses of informative slots."""
        rng = np.random.default_rng([seed, 0x9E37])
        scales = rng.uniform(0.1, 0.6, NUM_SPARSE)
        scales[rng.choice(NUM_SPARSE, 6, replace=False)] = 0.0
        dense = rng.normal(0.0, 0.8, NUM_DENSE)
        informative = np.flatnonzero(scales > 0)
        crosses = []
        for _ in range(num_crosses):
            a, b = sorted(int(x) for x in rng.choice(informative, 2, replace=False))
            crosses.append((a, b, 0.5))
        return cls(
            seed=seed,
            bias=bias,
            signal=signal,
            slot_scales=tuple(float(s) for s in scales),
            dense_weights=tuple(float(w) for w in dense),
            crosses=tuple(crosses),
        )

    def with_bias(self, bias: float) -> PlantedModel:
        return PlantedModel(
            self.seed, bias, self.signal, self.slot_scales, self.dense_weights, self.crosses
        )

    def score(
        self,
        dense: np.ndarray,
        dense_missing: np.ndarray,
        sparse: np.ndarray,
        sparse_missing: np.ndarray,
    ) -> np.ndarray:
        """``signal * (...)`` of the formula, without the bias: float64[n]."""
        values = sparse.astype(np.uint64)
        values[sparse_missing] = np.uint64(MISSING_VALUE)
        total = np.zeros(values.shape[0], dtype=np.float64)
        with np.errstate(over="ignore"):
            for k, scale in enumerate(self.slot_scales):
                if scale:
                    h = splitmix64(keyed(self.seed, 1, k) ^ values[:, k])
                    total += scale * unit_uniform(h)
            for i, (a, b, scale) in enumerate(self.crosses):
                h = splitmix64(splitmix64(keyed(self.seed, 2, i) ^ values[:, a]) ^ values[:, b])
                total += scale * unit_uniform(h)
        x = np.log1p(np.maximum(dense, 0).astype(np.float64)) / np.log1p(
            DENSE_MAX.astype(np.float64)
        )
        x = np.where(dense_missing, 0.0, x - 0.5)
        total += x @ np.asarray(self.dense_weights, dtype=np.float64)
        return self.signal * total

    def probabilities(
        self,
        dense: np.ndarray,
        dense_missing: np.ndarray,
        sparse: np.ndarray,
        sparse_missing: np.ndarray,
    ) -> np.ndarray:
        """The true click probability of each row: float64[n]."""
        logit = self.bias + self.score(dense, dense_missing, sparse, sparse_missing)
        return 1.0 / (1.0 + np.exp(-logit))

    def to_dict(self) -> dict[str, Any]:
        body = asdict(self)
        body["crosses"] = [list(c) for c in self.crosses]
        return {"kind": KIND, **body}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> PlantedModel:
        if raw.get("kind") != KIND:
            raise DataError(f"planted model kind {raw.get('kind')!r} is not {KIND!r}")
        try:
            return cls(
                seed=int(raw["seed"]),
                bias=float(raw["bias"]),
                signal=float(raw["signal"]),
                slot_scales=tuple(float(s) for s in raw["slot_scales"]),
                dense_weights=tuple(float(w) for w in raw["dense_weights"]),
                crosses=tuple((int(a), int(b), float(s)) for a, b, s in raw["crosses"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(f"planted model parameters are malformed: {exc}") from exc
