"""Dense column statistics measured in the conversion pass (one block at a time, merged with
Chan et al.'s parallel update, so memory is constant and the result does not depend on how the
input was cut into blocks beyond float rounding)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from elasticps.data.schema import DenseStats


@dataclass
class RunningStats:
    """count, mean, sum of squared deviations (m2), min and max of the present values."""

    count: int = 0
    mean: float = 0.0
    m2: float = 0.0
    low: float = math.inf
    high: float = -math.inf

    def update(self, values: np.ndarray) -> None:
        """Add a block's present values (float64)."""
        n = int(values.size)
        if n == 0:
            return
        mean = float(values.mean())
        m2 = float(np.square(values - mean).sum())
        total = self.count + n
        delta = mean - self.mean
        self.mean += delta * n / total
        self.m2 += m2 + delta * delta * self.count * n / total
        self.count = total
        self.low = min(self.low, float(values.min()))
        self.high = max(self.high, float(values.max()))

    def result(self) -> DenseStats:
        if self.count == 0:
            return DenseStats()
        return DenseStats(count=self.count, mean=self.mean,
                          std=math.sqrt(max(self.m2, 0.0) / self.count), min=self.low,
                          max=self.high)
