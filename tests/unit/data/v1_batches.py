"""What a format-1 dataset's batches are, in a form that holds on any x86-64 machine.

Integers (ids, labels, batch boundaries, dtypes, shapes, column names) must not change by a
bit, so each (split, case) pins one SHA-256 of them. Dense floats come from numpy's ``log1p``
and float32 division, whose SIMD code differs in the last bits between CPUs and numpy
versions, so they are kept as arrays and compared within :data:`DENSE_RTOL`.

This module imports only what format-1 readers have always had, so the same function that
checks the batches made the reference (``tests/data/v1_ctr_batches.npz``) at a379aec, before
readers learnt schemas::

    python -c "from v1_batches import *; write_reference('tests/data/v1_ctr', OUT)"
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from elasticps.data import FeatureConfig, iter_batches, open_dataset
from elasticps.data.criteo_layout import SPARSE_COLUMNS

# (batch size, start record, features, shuffle seed): every FeatureConfig mode, resumes, shuffles.
CASES = [
    (64, 0, FeatureConfig(), None),
    (100, 37, FeatureConfig(id_space=1000), 5),
    (128, 0, FeatureConfig(dense_norm="log-missing", id_space=2**40 + 7), None),
    (77, 10, FeatureConfig(dense_norm="log"), 3),
    (200, 0, FeatureConfig(dense_norm="none", id_space=1), None),
]
# float32 log1p and division are within a few units in the last place (2**-23 ~ 1.2e-7) on
# every numpy SIMD target; 1e-6 is about 8 of them, far below any real change of a value.
DENSE_RTOL = 1e-6
DENSE_ATOL = 1e-7


def v1_batches(url: str) -> dict[str, np.ndarray]:
    """Per (split, case): ``KEY/exact`` (the digest of every integer part), ``KEY/sizes``
    (each batch's length, in order) and ``KEY/dense`` (every batch's dense rows, stacked)."""
    ds = open_dataset(url)
    out: dict[str, np.ndarray] = {}
    for split_name, split in (("train", ds), ("test", ds.split("test"))):
        for case in range(len(CASES)):
            out.update(case_batches(split.url, case, f"{split_name}/{case}"))
    return out


def case_batches(url: str, case: int, key: str) -> dict[str, np.ndarray]:
    """``KEY/exact``, ``KEY/sizes`` and ``KEY/dense`` of the dataset at ``url`` (one split) read
    as ``CASES[case]`` says."""
    batch_size, start, features, seed = CASES[case]
    exact = hashlib.sha256()
    sizes: list[int] = []
    dense: list[np.ndarray] = []
    for chunk in open_dataset(url).chunks:
        for b in iter_batches(url, chunk, batch_size, start_record=start, features=features,
                              shuffle_seed=seed):
            exact.update(",".join(b.dense_names).encode())
            ids = [b.ids[c] for c in SPARSE_COLUMNS]
            _update(exact, (b.label, b.dense, *ids), with_bytes=False)
            _update(exact, (b.label, *ids), with_bytes=True)
            sizes.append(len(b))
            dense.append(b.dense)
    return {f"{key}/exact": np.array(exact.hexdigest()),
            f"{key}/sizes": np.array(sizes, dtype=np.int64),
            f"{key}/dense": np.concatenate(dense)}


def _update(h: hashlib._Hash, arrays: Iterable[np.ndarray], *, with_bytes: bool) -> None:
    for a in arrays:
        if with_bytes:
            h.update(np.ascontiguousarray(a).tobytes())
        else:
            h.update(f"{a.dtype}{a.shape}".encode())


def write_reference(url: str, path: str) -> None:
    np.savez_compressed(path, **v1_batches(url))  # type: ignore[arg-type]


def read_reference(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as stored:
        return {k: stored[k] for k in stored.files}


def mismatches(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> list[str]:
    """What differs between two :func:`v1_batches` results, one line per (split, case) part."""
    problems = [f"{k}: missing" for k in sorted(want.keys() - got.keys())]
    problems += [f"{k}: unexpected" for k in sorted(got.keys() - want.keys())]
    for key in sorted(want.keys() & got.keys()):
        a, b = got[key], want[key]
        if key.endswith("/dense"):
            if a.shape != b.shape or a.dtype != b.dtype:
                problems.append(f"{key}: {a.dtype}{a.shape}, want {b.dtype}{b.shape}")
            elif not np.allclose(a, b, rtol=DENSE_RTOL, atol=DENSE_ATOL):
                worst = np.unravel_index(np.argmax(np.abs(a - b)), a.shape)
                problems.append(f"{key}: row {worst[0]} column {worst[1]} is {a[worst]!r}, "
                                f"want {b[worst]!r}")
        elif not np.array_equal(a, b):
            problems.append(f"{key}: {a!r}, want {b!r}")
    return problems
