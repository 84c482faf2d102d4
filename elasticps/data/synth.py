"""Synthetic CTR datasets with the Criteo schema, drawn from a planted model.

Rows are generated in fixed blocks of ``GEN_BLOCK`` rows, block ``b`` of split ``s`` from
``numpy.random.default_rng([seed, s, b])`` (split 0 = the dataset, 1 = its ``test/`` split), so
the data depend only on the seed and the row count (a shorter dataset is a prefix of a longer
one) and never on the chunk size. Features imitate Criteo: per-column missing rates, heavy-tailed
counts, power-law categorical frequencies over per-slot vocabularies. Each label is drawn from
the planted model's probability :mod:`elasticps.data.planted`, and that probability is stored in
the ``p_true`` column.

``best_auc`` in the manifest is the exact AUC of ``p_true`` against the labels: no model can do
better in expectation, so a trained model's AUC on the same rows is judged against it.
``best_logloss`` is their log loss. Computing them keeps 5 bytes per row in memory.

With ``test_rows`` a held-out split of fresh rows from the same model is written to
``OUT/test`` (a dataset of its own, with its own ``best_auc``), named in ``splits`` of the
main manifest; open it with ``open_dataset(OUT).split("test")`` or ``open_dataset(OUT + "/test")``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from elasticps.data.criteo_layout import (
    DENSE_TYPE,
    LABEL_TYPE,
    NUM_DENSE,
    NUM_SPARSE,
    SPARSE_TYPE,
    arrow_schema,
)
from elasticps.data.features import DENSE_MAX, splitmix64
from elasticps.data.manifest import Manifest
from elasticps.data.metrics import auc, log_loss
from elasticps.data.planted import PlantedModel, keyed
from elasticps.data.progress import Progress
from elasticps.data.writer import (
    DEFAULT_CHUNKS_PER_FILE,
    DEFAULT_COMPRESSION,
    DEFAULT_ROWS_PER_CHUNK,
    DatasetWriter,
)
from elasticps.errors import DataError

log = logging.getLogger(__name__)

GEN_BLOCK = 8192
TEST_SPLIT = "test"

# Criteo-like shape: cardinalities of the Kaggle set (capped by max_vocab) and missing rates.
CRITEO_CARDINALITY = (
    1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194,
    27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572,
)
SPARSE_MISSING = (
    0, 0, 0.034, 0.034, 0, 0.12, 0, 0, 0, 0.034, 0, 0.034, 0,
    0, 0, 0.034, 0, 0, 0.44, 0.44, 0.034, 0.76, 0, 0.034, 0.44, 0.44,
)
DENSE_MISSING = (0.45, 0, 0.21, 0.22, 0.03, 0.22, 0.04, 0.0005, 0.04, 0.45, 0.04, 0.77, 0.22)
ZIPF_POWER = 3.0  # index = floor(V * u**3): the head of each vocabulary is frequent
PILOT_ROWS = 50_000
DEFAULT_SIGNAL = 0.7  # gives a best AUC near 0.80, like models on the real Criteo data


@dataclass(frozen=True)
class SynthReport:
    manifest: Manifest
    test_manifest: Manifest | None


@dataclass(frozen=True)
class FeatureSampler:
    """Draws feature rows; the planted model labels them."""

    seed: int
    max_vocab: int

    @property
    def vocab_sizes(self) -> tuple[int, ...]:
        return tuple(min(c, self.max_vocab) for c in CRITEO_CARDINALITY)

    def features(
        self, rng: np.random.Generator, n: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(dense int32[n,13], dense_missing, sparse uint32[n,26], sparse_missing)."""
        spread = np.log1p(DENSE_MAX.astype(np.float64)) / 1.96  # 95% of values below the clip
        dense = np.floor(np.expm1(np.abs(rng.standard_normal((n, NUM_DENSE))) * spread))
        dense = np.minimum(dense, 2**31 - 1)
        negative = rng.random(n) < 0.05  # I2 is sometimes -1..-3, as in Criteo
        dense[negative, 1] = -rng.integers(1, 4, int(negative.sum()))
        dense_missing = rng.random((n, NUM_DENSE)) < np.asarray(DENSE_MISSING)
        dense_i32 = np.where(dense_missing, 0, dense).astype(np.int32)

        vocab = np.asarray(self.vocab_sizes, dtype=np.float64)
        index = np.floor(vocab * rng.random((n, NUM_SPARSE)) ** ZIPF_POWER).astype(np.uint64)
        sparse = np.empty((n, NUM_SPARSE), dtype=np.uint32)
        with np.errstate(over="ignore"):
            for k in range(NUM_SPARSE):
                sparse[:, k] = (splitmix64(keyed(self.seed, 3, k) ^ index[:, k])
                                & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        sparse_missing = rng.random((n, NUM_SPARSE)) < np.asarray(SPARSE_MISSING)
        sparse[sparse_missing] = 0
        return dense_i32, dense_missing, sparse, sparse_missing


def _calibrate_bias(model: PlantedModel, gen: FeatureSampler, label_rate: float) -> float:
    """The bias that gives mean probability ``label_rate`` on a pilot sample (bisection)."""
    rng = np.random.default_rng([gen.seed, 99])
    score = model.score(*gen.features(rng, PILOT_ROWS))
    lo, hi = -30.0, 30.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if np.mean(1.0 / (1.0 + np.exp(-(mid + score)))) < label_rate:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _block_table(
    model: PlantedModel, gen: FeatureSampler, split: int, block: int, n: int
) -> tuple[pa.Table, np.ndarray, np.ndarray]:
    rng = np.random.default_rng([gen.seed, split, block])
    dense, dense_missing, sparse, sparse_missing = gen.features(rng, GEN_BLOCK)
    p = model.probabilities(dense, dense_missing, sparse, sparse_missing)
    label = (rng.random(GEN_BLOCK) < p).astype(np.int8)
    p32 = p.astype(np.float32)
    columns = [pa.array(label[:n], type=LABEL_TYPE)]
    columns += [
        pa.array(dense[:n, j], type=DENSE_TYPE, mask=dense_missing[:n, j])
        for j in range(NUM_DENSE)
    ]
    columns += [
        pa.array(sparse[:n, k], type=SPARSE_TYPE, mask=sparse_missing[:n, k])
        for k in range(NUM_SPARSE)
    ]
    columns.append(pa.array(p32[:n], type=pa.float32()))
    return pa.Table.from_arrays(columns, schema=arrow_schema(with_p_true=True)), p32[:n], label[:n]


def _write_split(
    writer: DatasetWriter,
    model: PlantedModel,
    gen: FeatureSampler,
    split: int,
    rows: int,
    progress: Progress,
    splits: dict[str, str],
) -> Manifest:
    probs = np.empty(rows, dtype=np.float32)
    labels = np.empty(rows, dtype=np.int8)
    done = 0
    block = 0
    while done < rows:
        n = min(GEN_BLOCK, rows - done)
        table, p, y = _block_table(model, gen, split, block, n)
        writer.write(table)
        probs[done : done + n] = p
        labels[done : done + n] = y
        done += n
        block += 1
        progress.update(done)
    best_auc = auc(labels, probs)
    return writer.close(
        best_auc=None if np.isnan(best_auc) else best_auc,
        best_logloss=log_loss(labels, probs) if rows else None,
        planted_model={**model.to_dict(), "generator": {"max_vocab": gen.max_vocab,
                                                        "vocab_sizes": list(gen.vocab_sizes)}},
        splits=splits,
        source={"kind": "synthetic", "seed": gen.seed, "split": split, "rows": rows},
    )


def synth_ctr(
    out_url: str,
    rows: int,
    seed: int,
    *,
    test_rows: int = 0,
    rows_per_chunk: int = DEFAULT_ROWS_PER_CHUNK,
    chunks_per_file: int = DEFAULT_CHUNKS_PER_FILE,
    label_rate: float = 0.25,
    signal: float = DEFAULT_SIGNAL,
    max_vocab: int = 100_000,
    num_crosses: int = 3,
    compression: str = DEFAULT_COMPRESSION,
    overwrite: bool = False,
    progress: bool | None = None,
) -> SynthReport:
    """Write ``rows`` synthetic rows to ``out_url`` (and ``test_rows`` to ``out_url/test``)."""
    if rows < 1:
        raise DataError(f"rows={rows} must be >= 1")
    if test_rows < 0:
        raise DataError(f"test_rows={test_rows} must be >= 0")
    if not 0.0 < label_rate < 1.0:
        raise DataError(f"label_rate={label_rate} must be strictly between 0 and 1")
    if not signal >= 0.0:
        raise DataError(f"signal={signal} must be >= 0")
    if max_vocab < 1:
        raise DataError(f"max_vocab={max_vocab} must be >= 1")
    gen = FeatureSampler(seed=seed, max_vocab=max_vocab)
    if num_crosses < 0:
        raise DataError(f"num_crosses={num_crosses} must be >= 0")
    model = PlantedModel.draw(seed, signal=signal, num_crosses=num_crosses)
    model = model.with_bias(_calibrate_bias(model, gen, label_rate))
    options = {
        "arrow_schema": arrow_schema(with_p_true=True),
        "rows_per_chunk": rows_per_chunk,
        "chunks_per_file": chunks_per_file,
        "compression": compression,
    }
    bar = Progress("generating", enabled=progress)
    writer = DatasetWriter(out_url, overwrite=overwrite, **options)
    with writer:
        test_manifest = None
        if test_rows:
            test_url = out_url.rstrip("/") + "/" + TEST_SPLIT
            with DatasetWriter(test_url, **options) as test_writer:
                test_manifest = _write_split(test_writer, model, gen, 1, test_rows, bar, {})
        splits = {TEST_SPLIT: TEST_SPLIT} if test_rows else {}
        manifest = _write_split(writer, model, gen, 0, rows, bar, splits)
    bar.finish(rows + test_rows)
    log.info(
        "Wrote %d synthetic rows (seed %d) to %s; planted best AUC %.4f, label rate %.3f.",
        rows, seed, out_url, manifest.best_auc or float("nan"), manifest.label_rate,
    )
    return SynthReport(manifest, test_manifest)
