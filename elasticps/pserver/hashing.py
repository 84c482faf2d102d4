"""Counter-based hashing over numpy arrays: the same bits for the same inputs on any machine.

Row start values, admission draws and the admission sketch all hash with splitmix64
(:mod:`elasticps.hashing`), so none of them keeps random state that a checkpoint would have to
save.
"""

from __future__ import annotations

import numpy as np

from elasticps.hashing import splitmix64


def uniform01(seed: int, keys: np.ndarray, width: int, stream: int) -> np.ndarray:
    """Uniform floats in [0, 1), shape [len(keys), width], a pure function of the inputs."""
    base = splitmix64(keys.astype(np.uint64) ^ splitmix64(np.array([seed], dtype=np.uint64)))
    cols = np.arange(width, dtype=np.uint64) * np.uint64(2) + np.uint64(stream)
    bits = splitmix64(base[:, None] + cols[None, :] * np.uint64(0xD1B54A32D192ED03))
    bits >>= np.uint64(11)  # in place, as below: a pull's new rows are 100k values
    out = bits.astype(np.float64)
    out *= 1.0 / (1 << 53)
    return out
