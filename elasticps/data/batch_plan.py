"""How a dataset's rows become numbered batches: the batch identity every trainer must share.

A pserver applies each ``BatchRef(pass, task, seq)`` at most once, and the master expects
``seq = 0 .. n-1`` of every finished task on every shard, so a batch's number must mean the same
rows whoever computes it. It does when every trainer reads with the same :class:`BatchPlan`:

- ``batch_size``: a chunk of ``r`` rows has :func:`batches_in_chunk` ``= ceil(r / batch_size)``
  batches (its last one may be short); a task's batches are numbered chunk by chunk;
- ``shuffle_seed``: which rows of a chunk go into which batch (None: file order);
- ``features``: how raw rows become inputs (a canonical string of the reader's feature config).

The master pins the plan when the dataset is set (``SetDataset``), computes every task's batch
count from the manifest's row counts with it, and refuses a trainer whose plan differs. No I/O
and no numpy here: the master imports this.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from elasticps.errors import InvalidArgumentError


def batches_in_chunk(rows: int, batch_size: int) -> int:
    """Batches of a chunk of ``rows`` rows: ``ceil(rows / batch_size)``."""
    return -(-rows // batch_size)


def batches_in_chunks(chunk_rows: Sequence[int], batch_size: int) -> int:
    """Batches of a task made of chunks with these row counts (numbered chunk by chunk)."""
    return sum(batches_in_chunk(rows, batch_size) for rows in chunk_rows)


def first_batches(chunk_rows: Sequence[int], batch_size: int) -> list[int]:
    """Each chunk's first batch in a pass over chunks with these row counts, in order, and the
    pass's batch count last (``len(chunk_rows) + 1`` numbers): what numbers a batch in the job's
    data order (``BatchRef.step``, which learning-rate schedules read)."""
    starts = [0]
    for rows in chunk_rows:
        starts.append(starts[-1] + batches_in_chunk(rows, batch_size))
    return starts


def features_key(features: Any) -> str:
    """A canonical string of a feature config: the JSON object of the fields of a dataclass
    that differ from their defaults (or of a mapping), keys sorted; "" when there are none, so
    the default config reads the same from a trainer and from ``elasticps master``'s flags."""
    if features is None:
        return ""
    if dataclasses.is_dataclass(features) and not isinstance(features, type):
        features = {f.name: getattr(features, f.name) for f in dataclasses.fields(features)
                    if getattr(features, f.name) != f.default}
    if not isinstance(features, Mapping):
        raise InvalidArgumentError(f"a feature config must be a dataclass or a mapping, not "
                                   f"{type(features).__name__}")
    if not features:
        return ""
    return json.dumps(dict(features), sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class BatchPlan:
    """The batch identity of a job's dataset (see the module docstring)."""

    batch_size: int
    shuffle_seed: int | None = None
    features: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or \
                self.batch_size < 1:
            raise InvalidArgumentError(
                f"batch_size={self.batch_size!r} must be an integer >= 1: the master numbers "
                "each task's batches from it")

    def differences(self, other: BatchPlan) -> list[str]:
        """``name: ours vs theirs`` for each field that differs (empty: the same plan)."""
        return [f"{name}={getattr(self, name)!r}, not {getattr(other, name)!r}"
                for name in ("batch_size", "shuffle_seed", "features")
                if getattr(self, name) != getattr(other, name)]

    def to_dict(self) -> dict[str, Any]:
        return {"batch_size": self.batch_size, "shuffle_seed": self.shuffle_seed,
                "features": self.features}

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> BatchPlan:
        seed = doc.get("shuffle_seed")
        return cls(int(doc["batch_size"]), None if seed is None else int(seed),
                   str(doc.get("features", "")))
