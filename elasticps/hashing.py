"""splitmix64 over numpy arrays: the one counter-based mixer of the package.

The categorical hash of datasets (:mod:`elasticps.data.hashing`) and the pservers' row start
values, admission draws and sketch (:mod:`elasticps.pserver.hashing`) all mix with it, so a
value hashes to the same bits in every process and on every machine, and nothing keeps random
state that a checkpoint would have to save. One step of Steele, Lea and Flood's generator::

    z = key + 0x9E3779B97F4A7C15                 (mod 2**64)
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9     (mod 2**64)
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB     (mod 2**64)
    z = z ^ (z >> 31)
"""

from __future__ import annotations

import numpy as np

__all__ = ["splitmix64"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MUL1 = np.uint64(0xBF58476D1CE4E5B9)
_MUL2 = np.uint64(0x94D049BB133111EB)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """One splitmix64 step for every element of a uint64 array (wrapping arithmetic)."""
    z = np.asarray(x, dtype=np.uint64) + _GOLDEN  # a new array; the rest works in place
    with np.errstate(over="ignore"):
        z ^= z >> np.uint64(30)
        z *= _MUL1
        z ^= z >> np.uint64(27)
        z *= _MUL2
        z ^= z >> np.uint64(31)
    return z
