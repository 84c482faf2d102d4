"""Write a CSV of the kind users bring: mixed columns, missing values, a multi-valued column.

    python examples/tabular/make_data.py --rows 50000 --out /tmp/shop

writes ``train.csv`` and ``test.csv`` (the same planted model, different rows) and
``planted.json`` with the best achievable test AUC (that of the true click probabilities).
Columns, as a dataframe tool would export them::

    clicked   0/1 label
    age       integer, written as "34.0" (a nullable integer column), empty when missing
    income    float, "NA" when missing
    country   a string among 30 countries
    device    a string among 5 devices, with surrounding spaces now and then
    genres    0 to 3 genres joined by "|" (empty for none)
    user_id   an integer among --users users

The planted model: ``logit = bias + f(age) + g(income) + W[country] + W[device] +
mean(W[genre]) + 0.8 W[user] + 0.6 W2[country, device]``, each W a fixed random weight.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
from pathlib import Path

import numpy as np

COUNTRIES = [f"country-{i:02d}" for i in range(30)]
DEVICES = ["phone", "tablet", "desktop", "tv", "watch"]
GENRES = ["Drama", "War", "Comedy", "Action", "Romance", "Horror", "Sci-Fi", "Crime",
          "Western", "Animation", "Musical", "Documentary"]


class Planted:
    """Fixed random weights for every feature value, drawn from ``seed``."""

    def __init__(self, seed: int, users: int) -> None:
        rng = np.random.default_rng([seed, 71])
        self.bias = -1.1
        self.country = rng.normal(0, 0.5, len(COUNTRIES))
        self.device = rng.normal(0, 0.4, len(DEVICES))
        self.genre = rng.normal(0, 0.7, len(GENRES))
        self.user = rng.normal(0, 1.0, users)
        self.cross = rng.normal(0, 1.0, (len(COUNTRIES), len(DEVICES)))

    def logit(self, age: np.ndarray, income: np.ndarray, country: np.ndarray,
              device: np.ndarray, genres: list[list[int]], user: np.ndarray) -> np.ndarray:
        age_term = np.where(np.isnan(age), 0.0, -0.02 * (np.nan_to_num(age) - 40.0))
        income_term = np.where(np.isnan(income), 0.0,
                               0.5 * (np.log(np.nan_to_num(income, nan=1.0)) - 10.5))
        genre_term = np.array([self.genre[g].mean() if g else 0.0 for g in genres])
        return (self.bias + age_term + income_term + self.country[country]
                + self.device[device] + genre_term + 0.8 * self.user[user]
                + 0.6 * self.cross[country, device])


def draw_rows(planted: Planted, rows: int, users: int,
              rng: np.random.Generator) -> tuple[list[list[str]], np.ndarray, np.ndarray]:
    age = rng.integers(18, 80, rows).astype(float)
    age[rng.random(rows) < 0.1] = np.nan
    income = rng.lognormal(10.5, 0.8, rows)
    income[rng.random(rows) < 0.15] = np.nan
    country = rng.integers(0, len(COUNTRIES), rows)
    device = rng.choice(len(DEVICES), rows, p=[0.5, 0.15, 0.25, 0.05, 0.05])
    genres = [sorted(rng.choice(len(GENRES), int(k), replace=False).tolist())
              for k in rng.integers(0, 4, rows)]
    user = np.minimum(rng.zipf(1.3, rows) - 1, users - 1)
    probs = 1.0 / (1.0 + np.exp(-planted.logit(age, income, country, device, genres, user)))
    clicked = (rng.random(rows) < probs).astype(int)
    out = []
    for i in range(rows):
        pad = " " if rng.random() < 0.05 else ""
        out.append([str(clicked[i]), "" if math.isnan(age[i]) else f"{age[i]:.1f}",
                    "NA" if math.isnan(income[i]) else f"{income[i]:.2f}",
                    COUNTRIES[country[i]], f"{pad}{DEVICES[device[i]]}{pad}",
                    "|".join(GENRES[g] for g in genres[i]), str(int(user[i]))])
    return out, clicked, probs


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    positives = labels.sum()
    negatives = len(labels) - positives
    return float((ranks[labels == 1].sum() - positives * (positives + 1) / 2)
                 / (positives * negatives))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=50_000, help="training rows")
    parser.add_argument("--test-rows", type=int, default=None, help="test rows (rows/5)")
    parser.add_argument("--users", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", required=True, help="directory for the CSV files")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    planted = Planted(args.seed, args.users)
    header = ["clicked", "age", "income", "country", "device", "genres", "user_id"]
    best = None
    for name, rows, stream in (("train", args.rows, 1),
                               ("test", args.test_rows or max(1000, args.rows // 5), 2)):
        table, labels, probs = draw_rows(planted, rows, args.users,
                                         np.random.default_rng([args.seed, stream]))
        with open(out / f"{name}.csv", "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(header)
            writer.writerows(table)
        if name == "test":
            best = auc(labels, probs)
    (out / "planted.json").write_text(json.dumps({"best_test_auc": best, "seed": args.seed}))
    print(f"wrote {out}/train.csv and {out}/test.csv; best achievable test AUC {best:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
