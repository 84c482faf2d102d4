"""The parameter-value oracle: count, in the final parameters, how often each batch was applied
on each shard, and check every count is exactly 1.

The oracle's job (:mod:`elasticps.chaos.oracle_script`, a counting model with plain SGD) adds
exactly 1 to row ``(pass * rows + row) * shards + shard`` of table ``oracle`` each time the batch
holding dataset row ``row`` is applied in pass ``pass`` on shard ``shard``, and 1 to that shard's
element of the dense ``counter`` for every batch applied there. Nothing here reads the master's
records or the shards' applied sets (the mechanism under test): only parameter values, from each
shard's newest published checkpoint (its final one, written when the job stopped), compared
with what the data alone predicts. A row whose count is not exactly 1 is a mismatch: 0 means a
batch was lost on that shard, 2 that it was applied twice.

On a stream (``--stream``) the data are partitions that land while the job runs, each holding
its rows' indices in the whole stream (partition ``k`` of ``r`` rows holds rows ``k*r`` to
``(k+1)*r - 1``), trained in one pass: the rows and their batches are counted over every
partition, in name order, read from the stream's prefix when the job is over.

A resharded job (``pserver/layout``) is read from its final layout's shards: the rows of all of
them are gathered and counted by the shard they were encoded for (``id % shards`` with the count
the job started with, which the trainers keep using for the ids), the dense counter's elements
joined from the final slices; every row then lies on final shard ``id % final``, else it counts
as unexpected.

**Sync mode** applies the *mean* of a round's contributions, so with SGD a batch's rows would get
``1/r`` for a round of ``r`` batches, and ``r`` is not known afterwards (a round can even hold one
more batch than there are trainers: a dead trainer's push stays in it and its replacement's joins
it). Reading those fractions would be ambiguous: two applications at 1/2 read as one at 1. So in
sync mode the oracle's script trains its counting table with Adagrad (lr 1, eps 0, accumulator 0)
instead: a row's first step is ``-lr * g / sqrt(g * g)``, exactly 1 whatever the round's size (in
binary floating point ``sqrt(fl(g * g)) == |g|``), and every later step adds
``g_k / sqrt(g_1^2 + ... + g_k^2)``, strictly between 0 and 1, so a row applied twice reads
strictly between 1 and 2. Every count must therefore still be exactly 1; a value in (1, 2) is a
duplicate, 0 a loss, anything else a partial or corrupt step. What stays invisible, in every mode:
the same rows applied twice *within one step* (two copies of a batch in one sync round, which the
round's per-batch dedup prevents) sum their gradients before the step. The dense counter stays on
SGD: in sync mode it counts the *rounds* applied on its shard (each round's mean adds 1; after a
resharding, a round in which some batches' counter position was already applied by an older
layout's shard, and so masked, adds the fraction of its batches that were not), so it is only
checked to lie in (0, batches] there (exactly the batches, a whole number, in async and geo).

**Hybrid mode** keeps the dense parameters on the trainers, averaged by the dense group's rounds,
and the sparse rows on the pservers as in async mode: the counting table is read from the
shards' checkpoints and trains with SGD, exactly as in async; the dense ``counter`` is read from
the newest dense checkpoint (``trainer/hybrid/checkpoints.py``; the last trainer to leave writes
one) and, as in sync mode, counts rounds (each round's mean adds 1 to every element).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from elasticps.data.batch_plan import batches_in_chunk
from elasticps.data.from_table import write_dataset
from elasticps.data.manifest import ChunkRef, read_manifest
from elasticps.data.stream import FsspecPartitionSource
from elasticps.pserver.checkpoint.files import ShardCheckpoints
from elasticps.store.api import Store
from elasticps.store.keys import HYBRID_CHECKPOINT_PREFIX, read_pserver_layout
from elasticps.trainer.hybrid.checkpoints import SUBDIR as DENSE_SUBDIR

TABLE = "oracle"  # the names oracle_script.py trains (it imports torch; this module does not)
ROW_COLUMN = "row"
COUNTER = "counter"
EXAMPLES = 10  # mismatching rows named in the report
ROUND_MODES = ("sync", "hybrid")  # the dense counter counts rounds, not batches


def write_oracle_data(path: str, rows: int, rows_per_chunk: int, *, first_row: int = 0,
                      id_space: int | None = None) -> None:
    """A dataset whose only feature is each row's own index (a passthrough id column): rows
    ``first_row`` to ``first_row + rows - 1`` of ``id_space`` (a stream's partition holds a
    slice of the whole stream's rows; every partition declares the same id space)."""
    ids = np.arange(first_row, first_row + rows, dtype=np.int64)
    write_dataset({"y": np.zeros(rows, np.float32), ROW_COLUMN: ids},
                  path, {"label": {"name": "y", "kind": "float"},
                         "columns": {ROW_COLUMN: {"kind": "categorical", "ids": "passthrough",
                                                  "table": "rows",
                                                  "id_space": id_space or first_row + rows}}},
                  rows_per_chunk=rows_per_chunk, overwrite=True)


@dataclass(frozen=True)
class OracleSpec:
    """What the oracle job trained: its dataset, passes, batch size and shards."""

    data: str
    passes: int
    batch_size: int
    shards: int
    mode: str = "async"  # sync, hybrid: the counter counts rounds (see the module docstring)
    stream: bool = False  # ``data`` is a stream's prefix (its partitions, in name order)

    def chunks(self) -> list[ChunkRef]:
        """Every chunk of the data, in the order its rows are numbered."""
        if not self.stream:
            return list(read_manifest(self.data).chunks)
        source = FsspecPartitionSource(self.data)
        return [chunk for partition in source.partitions(None)
                for chunk in source.manifest(partition).chunks]

    def batch_starts(self) -> tuple[int, np.ndarray]:
        """(rows, the first row of every batch in row order), from the manifests."""
        starts: list[int] = []
        offset = 0
        for chunk in self.chunks():
            count = batches_in_chunk(chunk.num_rows, self.batch_size)
            starts.extend(offset + k * self.batch_size for k in range(count))
            offset += chunk.num_rows
        return offset, np.asarray(starts, dtype=np.int64)


@dataclass
class ShardCount:
    shard: int
    rows_checked: int = 0
    mismatches: int = 0  # rows whose count is not exactly 1
    batch_mismatches: int = 0  # batches with any such row
    never_applied: int = 0  # rows with count 0
    applied_twice_or_more: int = 0  # rows with count > 1 (>= 2 with SGD; (1, 2) with Adagrad)
    unexpected_rows: int = 0  # nonzero rows outside the dataset's ids (must be 0)
    counter: float | None = None  # the dense counter: batches applied on this shard
    counter_expected: int = 0  # the batches (sync: the most rounds there can be)
    counter_low: int = 0  # the fewest batches (counter_expected; sync: 0, exclusive)
    counter_whole: bool = True  # the counter counts whole batches (not in sync mode)
    checkpoint: str = ""

    @property
    def counter_ok(self) -> bool:
        c = self.counter
        if c is None:
            return False
        if not self.counter_whole:  # sync: some round applied, each adding at most 1
            return 0 < c <= self.counter_expected or c == self.counter_expected == 0
        return float(c).is_integer() and self.counter_low <= c <= self.counter_expected


@dataclass
class OracleResult:
    rows_checked: int = 0
    mismatches: int = 0
    batches_checked: int = 0
    batch_mismatches: int = 0
    shards: list[ShardCount] = field(default_factory=list)
    examples: list[dict[str, Any]] = field(default_factory=list)  # {pass, row, shard, count}
    error: str | None = None

    @property
    def counters_ok(self) -> bool:
        return all(s.counter_ok for s in self.shards)

    def as_dict(self) -> dict[str, Any]:
        return {"rows_checked": self.rows_checked, "mismatches": self.mismatches,
                "batches_checked": self.batches_checked,
                "batch_mismatches": self.batch_mismatches, "counters_ok": self.counters_ok,
                "shards": [vars(s) for s in self.shards], "examples": self.examples,
                "error": self.error}


def check_oracle(spec: OracleSpec, checkpoint_url: str, store: Store | None = None
                 ) -> OracleResult:
    """Read every shard's newest checkpoint and count (see the module docstring)."""
    rows, starts = spec.batch_starts()
    result = OracleResult()
    final = _final_layout(store, spec.shards)
    ids, values, counter, checkpoints, misplaced = _gather(spec, checkpoint_url, store, final)
    if spec.mode == "hybrid":
        counter = _dense_counter(spec, checkpoint_url, store)
    for shard in range(spec.shards):
        counts = np.zeros((spec.passes, rows), dtype=np.float64)
        batches = spec.passes * len(starts)
        account = ShardCount(shard, counter_expected=batches,
                             counter_low=0 if spec.mode in ROUND_MODES else batches,
                             counter_whole=spec.mode not in ROUND_MODES,
                             checkpoint=checkpoints if final != spec.shards
                             else checkpoints.split(",")[shard])
        _fill(counts, ids, values, misplaced, spec, shard, rows, account)
        if counter is not None:
            account.counter = float(counter[shard])
        _tally(counts, starts, shard, account, result)
    result.rows_checked = sum(s.rows_checked for s in result.shards)
    result.mismatches = sum(s.mismatches + s.unexpected_rows for s in result.shards)
    result.batches_checked = spec.passes * len(starts) * spec.shards
    result.batch_mismatches = sum(s.batch_mismatches for s in result.shards)
    return result


def _final_layout(store: Store | None, started_with: int) -> int:
    layout = read_pserver_layout(store) if store is not None else None
    return layout.shards if layout is not None else started_with


def _gather(spec: OracleSpec, checkpoint_url: str, store: Store | None, final: int
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, str, np.ndarray]:
    """Every final shard's oracle rows (ids, values, whether each lies on the wrong shard),
    the dense counter joined (None if a shard lacks it) and the checkpoints read."""
    ids: list[np.ndarray] = []
    values: list[np.ndarray] = []
    misplaced: list[np.ndarray] = []
    counters: list[np.ndarray | None] = []
    read: list[str] = []
    for shard in range(final):
        loaded = ShardCheckpoints(checkpoint_url, shard, final, store=store).load_newest()
        if loaded is None:
            read.append("")
            counters.append(None)
            continue
        snap, manifest = loaded
        read.append(manifest.id)
        table = snap.sparse.get(TABLE)
        if table is not None:
            shard_ids = np.asarray(table.ids, dtype=np.int64)
            ids.append(shard_ids)
            values.append(np.asarray(table.values, np.float64).reshape(len(shard_ids), -1)[:, 0])
            misplaced.append(shard_ids % final != shard)
        dense = snap.dense.get(COUNTER)
        counters.append(None if dense is None else dense.values.reshape(-1))
    counter = (np.concatenate([c for c in counters if c is not None])
               if all(c is not None for c in counters) else None)
    if counter is not None and counter.size != spec.shards:
        counter = None
    return (np.concatenate(ids) if ids else np.zeros(0, np.int64),
            np.concatenate(values) if values else np.zeros(0),
            counter, ",".join(read),
            np.concatenate(misplaced) if misplaced else np.zeros(0, np.bool_))


def _dense_counter(spec: OracleSpec, checkpoint_url: str, store: Store | None
                   ) -> np.ndarray | None:
    """Hybrid mode: the dense counter of the newest dense checkpoint (None if there is none)."""
    loaded = ShardCheckpoints(f"{checkpoint_url.rstrip('/')}/{DENSE_SUBDIR}", 0, 1, store=store,
                              key_prefix=HYBRID_CHECKPOINT_PREFIX).load_newest()
    dense = loaded[0].dense.get(COUNTER) if loaded is not None else None
    counter = None if dense is None else np.asarray(dense.values).reshape(-1)
    return counter if counter is not None and counter.size == spec.shards else None


def _fill(counts: np.ndarray, ids: np.ndarray, values: np.ndarray, misplaced: np.ndarray,
          spec: OracleSpec, shard: int, rows: int, account: ShardCount) -> None:
    index = ids // spec.shards  # pass * rows + row
    encoded_for = ids % spec.shards == shard
    ours = encoded_for & (index < spec.passes * rows) & ~misplaced
    account.unexpected_rows = int(np.count_nonzero(values[encoded_for & ~ours]))
    counts.reshape(-1)[index[ours]] = values[ours]


def _tally(counts: np.ndarray, starts: np.ndarray, shard: int, account: ShardCount,
           result: OracleResult) -> None:
    wrong = counts != 1.0
    account.rows_checked = int(counts.size)
    account.mismatches = int(np.count_nonzero(wrong))
    account.never_applied = int(np.count_nonzero(counts == 0.0))
    account.applied_twice_or_more = int(np.count_nonzero(counts > 1.0))
    if len(starts) and counts.shape[1]:
        account.batch_mismatches = int(np.count_nonzero(
            np.logical_or.reduceat(wrong, starts, axis=1)))
    for pass_id, row in _first(np.argwhere(wrong), EXAMPLES - len(result.examples)):
        result.examples.append({"pass": int(pass_id), "row": int(row), "shard": shard,
                                "count": float(counts[pass_id, row])})
    result.shards.append(account)


def _first(pairs: np.ndarray, limit: int) -> Sequence[tuple[int, int]]:
    return [(int(p), int(r)) for p, r in pairs[:max(0, limit)]]


def oracle_args(spec: OracleSpec, stream_rows: int = 0) -> list[str]:
    """The oracle script's arguments for ``spec`` (a stream's: its prefix and its rows)."""
    data = (["--stream", spec.data, "--rows", str(stream_rows)] if spec.stream
            else ["--data", spec.data])
    return [*data, "--passes", str(spec.passes), "--batch-size", str(spec.batch_size)]
