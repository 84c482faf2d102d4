"""The one-process PyTorch reference of the start benchmarks: what a PyTorch user writes for a
CSV of ``examples/tabular/make_data.py``, up to its first trained batch.

    python benchmarks/plain_torch_start.py TRAIN_CSV

pandas reads the CSV, its columns are encoded (category codes, the genres as bags, the numbers
standardised), an embedding + MLP model of the tabular example's shape trains one batch with
Adagrad. It prints one JSON line of wall-clock times (``time.time()``): torch imported, the data
ready, the first batch trained; ``job_records.plain_torch_run`` turns them into seconds after
its start.
"""

from __future__ import annotations

import json
import sys
import time


def plain_torch(csv: str, batch_size: int = 512) -> None:
    """What a PyTorch user writes for this CSV, up to its first trained batch."""
    marks: dict[str, float] = {}
    import numpy as np
    import pandas as pd
    import torch

    marks["torch_imported"] = time.time()
    frame = pd.read_csv(csv)
    label = torch.tensor(frame.pop("clicked").to_numpy(np.float32))
    dense = frame[["age", "income"]].astype("float64")
    dense = ((dense - dense.mean()) / dense.std()).fillna(0.0)
    dense_t = torch.tensor(dense.to_numpy(np.float32))
    ids = {name: torch.tensor(frame[name].astype("category").cat.codes.to_numpy(np.int64) + 1)
           for name in ("country", "device", "user_id")}
    genres = frame["genres"].fillna("").str.split("|")
    vocab = {g: i + 1 for i, g in enumerate(sorted({g for gs in genres for g in gs if g}))}
    flat = [vocab[g] for gs in genres for g in gs if g]
    lengths = torch.tensor([sum(1 for g in gs if g) for gs in genres])
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
    values = torch.tensor(flat, dtype=torch.int64)
    marks["data_ready"] = time.time()

    dim = 8
    tables = torch.nn.ModuleDict({n: torch.nn.Embedding(int(t.max()) + 1, dim)
                                  for n, t in ids.items()})
    bag = torch.nn.EmbeddingBag(len(vocab) + 1, dim, mode="mean")
    mlp = torch.nn.Sequential(torch.nn.Linear(4 * dim + 2, 256), torch.nn.ReLU(),
                              torch.nn.Linear(256, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1))
    params = [*tables.parameters(), *bag.parameters(), *mlp.parameters()]
    optimizer = torch.optim.Adagrad(params, lr=0.05)
    rows = len(label)
    for start in range(0, rows, batch_size):
        end = min(rows, start + batch_size)
        lo, hi = int(offsets[start]), int(offsets[end])
        bags = bag(values[lo:hi], offsets[start:end] - lo)
        parts = [tables[n](t[start:end]) for n, t in ids.items()]
        logit = mlp(torch.cat([dense_t[start:end], bags, *parts], 1)).squeeze(1)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logit, label[start:end])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        marks["first_batch"] = time.time()
        break  # the start is what is compared
    print(json.dumps(marks), flush=True)



if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(f"usage: {sys.argv[0]} TRAIN_CSV")
    plain_torch(sys.argv[1])
