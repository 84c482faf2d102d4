"""Write user-item interactions from a planted taste model: data for a two-tower retriever.

    python examples/two_tower/make_data.py --rows 50000 --out /tmp/retrieval

writes two datasets, ``train`` and ``test`` (the test split converted ``like`` the training
one), of rows ``(user, item)``: every row is a positive pair (the label ``click`` is 1). Users
and items each belong to one of ``--clusters`` tastes; a user's item comes from the user's taste
with probability ``--affinity``, else from any taste. Ids are passthrough (``user`` in
``[0, users)``, ``item`` in ``[0, items)``), each into its own table, and every item turns up
in the training rows (so a model's sampled negatives read trained rows). ``planted.json`` holds
the recall@10 of the planted model on the test split in batches of ``--test-batch``: it ranks a
row's own item among the batch's items by taste alone, ties broken at random.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from elasticps.data import write_dataset


def schema(users: int, items: int, dim: int) -> dict[str, object]:
    return {"label": "click", "columns": {
        "user": {"kind": "categorical", "ids": "passthrough", "table": "users",
                 "id_space": users, "dim": dim},
        "item": {"kind": "categorical", "ids": "passthrough", "table": "items",
                 "id_space": items, "dim": dim}}}


def interactions(rows: int, user_taste: np.ndarray, item_taste: np.ndarray, affinity: float,
                 rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    users = rng.integers(0, user_taste.size, rows)
    by_taste = [np.flatnonzero(item_taste == t) for t in range(int(item_taste.max()) + 1)]
    items = rng.integers(0, item_taste.size, rows)  # any taste
    own = rng.random(rows) < affinity
    for row in np.flatnonzero(own):
        pool = by_taste[user_taste[users[row]]]
        items[row] = pool[rng.integers(0, pool.size)]
    return users, items


def planted_recall(users: np.ndarray, items: np.ndarray, user_taste: np.ndarray,
                   item_taste: np.ndarray, batch: int, k: int, rng: np.random.Generator) -> float:
    """Recall@k of ranking a batch's items by taste match (ties at random): what knowing the
    tastes, and nothing else, achieves."""
    hits = total = 0
    for start in range(0, users.size, batch):
        u, i = users[start:start + batch], items[start:start + batch]
        match = (user_taste[u][:, None] == item_taste[i][None, :]).astype(float)
        scores = match + 1e-3 * rng.random(match.shape)
        positive = np.diagonal(scores)[:, None]
        ranks = (scores >= positive).sum(axis=1) - 1
        hits += int((ranks < k).sum())
        total += u.size
    return hits / total


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--rows", type=int, default=50_000)
    p.add_argument("--test-rows", type=int, default=5_000)
    p.add_argument("--users", type=int, default=2_000)
    p.add_argument("--items", type=int, default=500)
    p.add_argument("--clusters", type=int, default=20)
    p.add_argument("--affinity", type=float, default=0.9)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--rows-per-chunk", type=int, default=10_000)
    p.add_argument("--test-batch", type=int, default=256)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    user_taste = rng.integers(0, args.clusters, args.users)
    item_taste = np.arange(args.items) % args.clusters  # every taste has items
    out = Path(args.out)
    users, items = interactions(args.rows, user_taste, item_taste, args.affinity, rng)
    unseen = np.setdiff1d(np.arange(args.items), items)
    items[:unseen.size] = unseen  # every item in the training rows
    doc = schema(args.users, args.items, args.dim)
    write_dataset({"click": np.ones(args.rows, np.int64), "user": users, "item": items},
                  str(out / "train"), doc, rows_per_chunk=args.rows_per_chunk, overwrite=True)
    test_users, test_items = interactions(args.test_rows, user_taste, item_taste,
                                          args.affinity, rng)
    write_dataset({"click": np.ones(args.test_rows, np.int64), "user": test_users,
                   "item": test_items}, str(out / "test"), doc, like=str(out / "train"),
                  overwrite=True)
    recall = planted_recall(test_users, test_items, user_taste, item_taste, args.test_batch, 10,
                            rng)
    (out / "planted.json").write_text(json.dumps(
        {"planted_test_recall_at_10": recall, "test_batch": args.test_batch}, indent=1) + "\n")
    print(f"{args.rows} training and {args.test_rows} test rows in {out}; planted recall@10 "
          f"in batches of {args.test_batch}: {recall:.4f}")


if __name__ == "__main__":
    main()
