"""Exactly-once accounting of a finished job, from durable state only.

For every pass the master recorded its last reconciliation (``master/state/accounting/<p>``:
the batch count of every DONE task and, per shard, what the sealing checkpoint held). The
shards' final checkpoints (written on their clean shutdown) hold the applied set of every pass
not yet pruned. A pass still in a final checkpoint is checked against it (missing seqs, and
applications beyond one per batch = duplicates); a pruned pass is taken from the master's
record made when it was sealed. A resharded job is accounted on its final layout's shards (a
pass sealed under another layout counts what its sealing found on the shards of that number).
"""

from __future__ import annotations

from typing import Any

from elasticps.master.snapshot import load_accounting
from elasticps.pserver.checkpoint.files import ShardCheckpoints
from elasticps.store import Store
from elasticps.store.keys import read_pserver_layout


def job_accounting(store: Store, checkpoint_url: str, num_shards: int) -> dict[str, Any]:
    layout = read_pserver_layout(store)
    num_shards = layout.shards if layout is not None else num_shards
    records = load_accounting(store)
    shards = []
    for shard in range(num_shards):
        loaded = ShardCheckpoints(checkpoint_url, shard, num_shards).load_newest()
        shards.append(None if loaded is None else loaded[0].applied)
    passes = []
    duplicates = missing = expected_total = 0
    for pass_id, record in sorted(records.items()):
        batches = {int(t): int(n) for t, n in record.get("batches", {}).items()}
        per_shard = []
        for shard, applied in enumerate(shards):
            sealed: dict[str, Any] = next(
                (s for s in record["shards"] if s["shard"] == shard), {})
            if applied is None or pass_id < applied.floor:
                lost = int(sealed.get("missing", 0))
                dups = int(sealed.get("duplicates", 0))
                source = "sealing checkpoint"
            else:
                lost = sum(1 for t, n in batches.items() for q in range(n)
                           if not applied.contains(pass_id, t, q))
                dups = sum(max(0, applied.applications(pass_id, t) - n)
                           for t, n in batches.items())
                source = "final checkpoint"
            per_shard.append({"shard": shard, "expected": sum(batches.values()),
                              "missing": lost, "duplicates": dups, "source": source})
            duplicates += dups
            missing += lost
            expected_total += sum(batches.values())
        passes.append({"pass": pass_id, "complete": bool(record.get("complete")),
                       "shards": per_shard})
    return {"passes": passes, "expected_batches": expected_total, "duplicates": duplicates,
            "missing": missing}
