"""Write rows of a user's history and a candidate item from a planted model: data for attention
over a history.

    python examples/sequence/make_data.py --rows 50000 --out /tmp/history

writes two datasets, ``train`` and ``test`` (the test split converted ``like`` the training
one). A row is a user's recent items (``history``: a list of 1 to ``--max-history`` item ids,
oldest first) and a ``candidate`` item; the label ``click`` says whether the user clicked it.
Items fall into ``--clusters`` kinds; a user's history mixes one or two favourite kinds with
random items, and the click is drawn with ``sigmoid(4 * hit - 2)``, where ``hit`` is 1 when
some item of the history is of the candidate's kind: what matters is whether a past item
resembles the candidate, which is what attention with the candidate as the query finds (an
average over the whole history would dilute it). Both columns are
passthrough ids into one table ``items``. ``planted.json`` holds the planted model's test AUC.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from elasticps.data import auc, write_dataset


def schema(items: int, dim: int) -> dict[str, object]:
    return {"label": "click", "tables": {"items": {"dim": dim, "id_space": items}}, "columns": {
        "history": {"kind": "multi_categorical", "ids": "passthrough", "table": "items"},
        "candidate": {"kind": "categorical", "ids": "passthrough", "table": "items"}}}


def rows(n: int, kind: np.ndarray, max_history: int, rng: np.random.Generator
         ) -> tuple[dict[str, object], np.ndarray]:
    clusters = int(kind.max()) + 1
    by_kind = [np.flatnonzero(kind == k) for k in range(clusters)]
    histories, hits = [], np.empty(n)
    candidates = rng.integers(0, kind.size, n)
    for row in range(n):
        favourites = rng.choice(clusters, size=int(rng.integers(1, 3)), replace=False)
        length = int(rng.integers(1, max_history + 1))
        picked = []
        for _ in range(length):
            pool = by_kind[rng.choice(favourites)] if rng.random() < 0.7 else kind
            picked.append(int(rng.integers(0, pool.size)) if pool is kind
                          else int(pool[rng.integers(0, pool.size)]))
        histories.append(picked)
        hits[row] = np.any(kind[picked] == kind[candidates[row]])
    click_p = 1 / (1 + np.exp(-(4 * hits - 2)))
    clicks = (rng.random(n) < click_p).astype(np.int64)
    return {"click": clicks, "history": histories, "candidate": candidates}, click_p


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--rows", type=int, default=50_000)
    p.add_argument("--test-rows", type=int, default=5_000)
    p.add_argument("--items", type=int, default=500)
    p.add_argument("--clusters", type=int, default=10)
    p.add_argument("--max-history", type=int, default=20)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--rows-per-chunk", type=int, default=10_000)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    kind = np.arange(args.items) % args.clusters
    out = Path(args.out)
    doc = schema(args.items, args.dim)
    train, _ = rows(args.rows, kind, args.max_history, rng)
    write_dataset(train, str(out / "train"), doc, rows_per_chunk=args.rows_per_chunk,
                  overwrite=True)
    test, click_p = rows(args.test_rows, kind, args.max_history, rng)
    write_dataset(test, str(out / "test"), doc, like=str(out / "train"), overwrite=True)
    best = auc(np.asarray(test["click"], np.float32), click_p)
    (out / "planted.json").write_text(json.dumps({"best_test_auc": best}, indent=1) + "\n")
    print(f"{args.rows} training and {args.test_rows} test rows in {out}; planted test AUC "
          f"{best:.4f}")


if __name__ == "__main__":
    main()
