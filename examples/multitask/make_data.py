"""Write a CSV with three labels of three kinds from a planted model: data for a multi-task model.

    python examples/multitask/make_data.py --rows 40000 --out /tmp/shop
    elasticps data convert csv /tmp/shop/train.csv --schema /tmp/shop/schema.yaml \
        --out /tmp/shop/data
    elasticps data convert csv /tmp/shop/test.csv --schema /tmp/shop/schema.yaml \\
        --like /tmp/shop/data --out /tmp/shop/test-data

writes ``train.csv``, ``test.csv`` and ``schema.yaml``. A row is a user seeing an item: its
features are ``age`` and ``price`` (dense) and ``user`` and ``item`` (strings, hashed into one
table); its labels are ``click`` (binary), ``dwell`` (float: seconds spent on the item, logged
as a score) and ``topic`` (class: which of ``--topics`` topics the user filed it under). All
three come from one latent affinity, a user's taste for items plus an item's appeal, so a
shared model helps each head: ``click`` is drawn with ``sigmoid(1.5 affinity + 0.5 age - 0.5)``,
``dwell`` is ``2 + affinity + 0.3 log(price)`` plus noise of deviation ``--noise``, and
``topic`` is the item's topic, or with probability 0.2 any topic. ``planted.json`` holds the
planted model's test AUC of ``click``, RMSE of ``dwell`` and accuracy of ``topic``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

from elasticps.data import auc

SCHEMA = """\
labels:                                  # three labels, three kinds: one head each
  - click
  - {{name: dwell, kind: float}}
  - {{name: topic, kind: class, classes: {topics}}}
defaults: {{dim: 8, id_space: 20011}}
columns:
  age: dense
  price: {{kind: dense, norm: log}}
  user: categorical
  item: categorical
"""


def rows(n: int, user_vec: np.ndarray, item_vec: np.ndarray, item_topic: np.ndarray,
         noise: float, rng: np.random.Generator) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
    users = rng.integers(0, user_vec.shape[0], n)
    items = rng.integers(0, item_vec.shape[0], n)
    age = rng.normal(40, 12, n).round()
    price = np.exp(rng.normal(3, 1, n)).round(2)
    affinity = user_vec[users] + item_vec[items]
    click_p = 1 / (1 + np.exp(-(1.5 * affinity + 0.5 * (age - 40) / 12 - 0.5)))
    dwell_mean = 2 + affinity + 0.3 * np.log(price)
    topic = np.where(rng.random(n) < 0.8, item_topic[items],
                     rng.integers(0, int(item_topic.max()) + 1, n))
    frame = pd.DataFrame({
        "click": (rng.random(n) < click_p).astype(int),
        "dwell": (dwell_mean + rng.normal(0, noise, n)).round(3),
        "topic": topic, "age": age, "price": price,
        "user": [f"u{u}" for u in users], "item": [f"i{i}" for i in items]})
    return frame, {"click": click_p, "dwell": dwell_mean, "topic": item_topic[items]}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--rows", type=int, default=40_000)
    p.add_argument("--test-rows", type=int, default=10_000)
    p.add_argument("--users", type=int, default=300)
    p.add_argument("--items", type=int, default=100)
    p.add_argument("--topics", type=int, default=4)
    p.add_argument("--noise", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    user_vec = rng.normal(0, 0.6, args.users)
    item_vec = rng.normal(0, 0.6, args.items)
    item_topic = rng.integers(0, args.topics, args.items)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    train, _ = rows(args.rows, user_vec, item_vec, item_topic, args.noise, rng)
    test, truth = rows(args.test_rows, user_vec, item_vec, item_topic, args.noise, rng)
    train.to_csv(out / "train.csv", index=False)
    test.to_csv(out / "test.csv", index=False)
    (out / "schema.yaml").write_text(SCHEMA.format(topics=args.topics))
    planted = {
        "click_auc": auc(test["click"].to_numpy(np.float32), truth["click"]),
        "dwell_rmse": float(np.sqrt(np.mean((test["dwell"].to_numpy() - truth["dwell"]) ** 2))),
        "topic_accuracy": float(np.mean(test["topic"].to_numpy() == truth["topic"]))}
    (out / "planted.json").write_text(json.dumps(planted, indent=1) + "\n")
    print(f"{args.rows} training and {args.test_rows} test rows in {out}; planted: "
          + ", ".join(f"{k} {v:.4f}" for k, v in planted.items()))


if __name__ == "__main__":
    main()
