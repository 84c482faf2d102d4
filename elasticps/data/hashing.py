"""The one categorical hash: a column's values -> ids in its table's id space.

Stable across processes, machines and Python versions (never Python's ``hash()``, which is
salted per process), vectorised over numpy arrays, and defined for integers and strings::

    u   = v                          an integer 0 <= v < 2**32 (every Criteo value)
        = 2**32                      a missing value (its own category in each column)
        = splitmix64(v mod 2**64)    any other integer (negative, or 2**32 and above)
        = fnv1a64(UTF-8 bytes of v)  a string
    key = (salt << 33) XOR u         (mod 2**64; a salt is below 2**31)
    id  = splitmix64(key) mod id_space

``splitmix64`` (:mod:`elasticps.hashing`) is one step of Steele, Lea and Flood's generator::

    z = key + 0x9E3779B97F4A7C15                 (mod 2**64)
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9     (mod 2**64)
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB     (mod 2**64)
    z = z ^ (z >> 31)

and ``fnv1a64`` is FNV-1a (offset basis 0xCBF29CE484222325, prime 0x100000001B3). A column's
``salt`` is its schema's ``salt``, by default ``crc32(UTF-8 name) & 0x7FFFFFFF``; the Criteo
preset gives C1..C26 the salts 0..25. For the integers below 2**33 that every Criteo value and
the missing marker are, ``(salt << 33) XOR u == (salt << 33) | u``: exactly the key of the
format-1 hash (:mod:`elasticps.data.features`), so old datasets keep their ids.

Why this shape: the salt sits above the value bits, so two columns of one table never share
a key (equal values in two columns get unrelated ids), and splitmix64 is a bijection with full
avalanche, so distinct keys give independent-looking ids; integers outside 32 bits and
strings are pre-mixed so that they collide with small integers only as hash values collide.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from elasticps.data.arrow_numpy import int_numpy
from elasticps.data.schema import SALT_LIMIT, default_salt
from elasticps.hashing import splitmix64

__all__ = ["MISSING_KEY", "default_salt", "fnv1a64", "hash_keys", "int_keys", "splitmix64",
           "string_keys"]

MISSING_KEY = 1 << 32

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


def int_keys(values: np.ndarray) -> np.ndarray:
    """``u`` of integer values (any integer dtype) as uint64."""
    if values.dtype.kind == "u" and values.dtype.itemsize <= 4:
        return values.astype(np.uint64)  # all below 2**32: the value is the key
    wide = values.astype(np.int64) if values.dtype.kind == "i" else values
    u = wide.astype(np.uint64)  # two's complement for negatives
    small = (wide >= 0) & (u < np.uint64(MISSING_KEY))
    if small.all():
        return u
    return np.where(small, u, splitmix64(u))


def fnv1a64(offsets: np.ndarray, data: np.ndarray) -> np.ndarray:
    """FNV-1a 64 of each byte string ``data[offsets[i]:offsets[i + 1]]``, vectorised by byte
    position: strings are visited longest first, so each step works on a prefix."""
    lengths = np.diff(offsets)
    order = np.argsort(-lengths, kind="stable")
    starts = offsets[:-1][order]
    sorted_lengths = lengths[order]
    h = np.full(lengths.size, _FNV_OFFSET, dtype=np.uint64)
    longest = int(sorted_lengths[0]) if sorted_lengths.size else 0
    # active[p] = how many strings are longer than p (a prefix, thanks to the sort)
    active = np.searchsorted(-sorted_lengths, -np.arange(longest), side="left")
    with np.errstate(over="ignore"):
        for position in range(longest):
            k = int(active[position])
            h[:k] ^= data[starts[:k] + position].astype(np.uint64)
            h[:k] *= _FNV_PRIME
    out = np.empty_like(h)
    out[order] = h
    return out


def string_keys(array: pa.Array) -> np.ndarray:
    """``u`` of a string array (nulls get an arbitrary key; callers mask them). Each distinct
    string is hashed once."""
    if not pa.types.is_dictionary(array.type):
        array = array.dictionary_encode()
    dictionary = array.dictionary.cast(pa.large_binary())
    buffers = dictionary.buffers()
    offsets = np.frombuffer(buffers[1], dtype=np.int64, count=len(dictionary) + 1,
                            offset=dictionary.offset * 8)
    data = (np.frombuffer(buffers[2], dtype=np.uint8) if buffers[2] is not None
            else np.zeros(0, np.uint8))
    per_value = fnv1a64(offsets, data)
    return per_value[int_numpy(array.indices)] if per_value.size \
        else np.zeros(len(array), np.uint64)


def hash_keys(keys: np.ndarray, salt: int, id_space: int) -> np.ndarray:
    """Ids of keys ``u`` (uint64) of one column: ``splitmix64((salt << 33) ^ u) % id_space``,
    as int64."""
    if not 0 <= salt < SALT_LIMIT:
        raise ValueError(f"salt {salt} must be in [0, 2**31)")
    mixed = splitmix64(keys ^ np.uint64(salt << 33))
    mixed %= np.uint64(id_space)
    return mixed.view(np.int64)  # every id is < id_space <= 2**63 - 1
