"""CTR-DNN training throughput: elasticps (1 trainer + 1 pserver, real processes) against a
single-process PyTorch training of the same model on the same batches.

    python benchmarks/ctr_throughput.py [--rows 100000] [--quick] [--json FILE]

Both sides read the same synthetic dataset (generated once into a temporary directory, or
``--data``) in the same batch order, train the classic CTR-DNN (26 slots x dim 10 into one table,
three 400-unit ReLU layers) with Adam, and count samples per second of training:

- elasticps: ``elasticps run --trainers 1 --pservers 1 examples/ctr/train.py --data ...``; its
  summary's ``samples_per_sec`` (samples trained / time in the training loop, which includes
  fetching tasks and reading chunks), and the trainer's per-phase timers;
- PyTorch: ``torch.nn.Embedding(sparse=True)`` + ``SparseAdam`` for the table (lazy Adam, as the
  pservers run it), ``Adam`` for the dense layers, reading the same chunks with the same reader,
  with as many torch threads as the elasticps trainer gets (``--threads``).

Each side runs ``--repeat`` times; the medians are reported, with ratio = elasticps / torch.
With ``--tls-cost`` each repeat also runs elasticps with ``--insecure`` (no TLS), alternating
which goes first, and reports the TLS / plaintext ratio of the medians: the cost of mutual TLS
on the same machine, in the same minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "examples/ctr"))

from models import build  # noqa: E402

from elasticps.data import FeatureConfig, open_dataset  # noqa: E402
from elasticps.data.batch import TensorBatch  # noqa: E402
from elasticps.data.synth import synth_ctr  # noqa: E402


class ColumnsEmbedding(torch.nn.Embedding):
    """``torch.nn.Embedding`` reading the batch's slot columns, as SparseEmbedding does."""

    def __init__(self, num: int, dim: int, columns: tuple[str, ...]) -> None:
        super().__init__(num, dim, sparse=True)
        self.columns = columns

    def forward(self, batch: TensorBatch) -> torch.Tensor:  # type: ignore[override]
        return super().forward(torch.from_numpy(batch.source.stack_ids(self.columns)))


def torch_run(data: str, args: argparse.Namespace) -> float:
    """Samples per second of plain PyTorch on the same batches."""
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    tables: dict[str, torch.nn.Embedding] = {}

    def make_embedding(table: str, dim: int, columns: tuple[str, ...]) -> torch.nn.Module:
        emb = ColumnsEmbedding(args.id_space, dim, tuple(columns))
        torch.nn.init.uniform_(emb.weight, -0.01, 0.01)
        tables[table] = emb
        return emb

    model = build("dnn", make_embedding, hidden=args.hidden)
    sparse_ids = {id(p) for emb in tables.values() for p in emb.parameters()}
    dense_opt = torch.optim.Adam([p for p in model.parameters() if id(p) not in sparse_ids],
                                 lr=args.lr)
    sparse_opt = torch.optim.SparseAdam([p for e in tables.values() for p in e.parameters()],
                                        lr=args.lr)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    features = FeatureConfig(id_space=args.id_space, dense_norm="log-missing")
    samples = 0
    start = time.perf_counter()
    for i, batch in enumerate(open_dataset(data).iter_batches(args.batch_size,
                                                              features=features)):
        dense_opt.zero_grad()
        sparse_opt.zero_grad()
        loss_fn(model(batch.to_torch()), torch.from_numpy(batch.label)).backward()
        dense_opt.step()
        sparse_opt.step()
        if i == 0:  # the first step allocates Adam's state for the whole table: not steady state
            start = time.perf_counter()
            continue
        samples += len(batch)
    return samples / (time.perf_counter() - start)


def elasticps_run(data: str, workdir: Path, args: argparse.Namespace,
                  insecure: bool = False) -> dict[str, object]:
    """The summary of one ``elasticps run`` (1 trainer, 1 pserver) over the same data."""
    argv = [sys.executable, "-m", "elasticps", "run", "--trainers", "1", "--pservers", "1",
            "--workdir", str(workdir), *(["--insecure"] if insecure else []),
            str(REPO / "examples/ctr/train.py"), "--data", data,
            "--passes", "1", "--batch-size", str(args.batch_size), "--lr", str(args.lr),
            "--hidden", ",".join(map(str, args.hidden)), "--id-space", str(args.id_space),
            "--seed", str(args.seed)]
    if args.no_prefetch:
        argv.append("--no-prefetch")
    argv += ["--dense-sync-every", str(args.dense_sync_every)]
    proc = subprocess.run(argv, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True,
                          text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"elasticps run failed:\n{proc.stderr[-3000:]}")
    summary = json.loads((workdir / "summary.json").read_text())
    return summary if isinstance(summary, dict) else {}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--hidden", default="400,400,400")
    parser.add_argument("--id-space", type=int, default=1_000_001)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=max(1, (os.cpu_count() or 1) // 2),
                        help="torch threads of the PyTorch run (default: what `elasticps run` "
                        "gives its one trainer next to one pserver, cpus // 2)")
    parser.add_argument("--data", help="an existing dataset (default: generate one)")
    parser.add_argument("--dense-sync-every", type=int, default=1,
                        help="elasticps pulls dense parameters every this many batches "
                             "(default 1: every batch, like the PyTorch run's exact parameters)")
    parser.add_argument("--no-prefetch", action="store_true",
                        help="elasticps without communication overlap")
    parser.add_argument("--quick", action="store_true", help="20k rows, one repeat")
    parser.add_argument("--tls-cost", action="store_true",
                        help="also run elasticps with --insecure each repeat and report the "
                             "TLS / plaintext ratio")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.repeat = 20_000, 1
    args.hidden = tuple(int(h) for h in args.hidden.split(","))
    with tempfile.TemporaryDirectory(prefix="elasticps-bench-") as tmp:
        data = args.data
        if data is None:
            data = str(Path(tmp) / "data")
            synth_ctr(data, args.rows, args.seed, test_rows=1000, progress=False)
        torch_sps, eps_sps, plain_sps, timers = [], [], [], []
        for i in range(args.repeat):
            torch_sps.append(torch_run(data, args))
            if args.tls_cost and i % 2:  # alternate the order: drift hits both alike
                plain_sps.append(float(elasticps_run(  # type: ignore[arg-type]
                    data, Path(tmp) / f"plain-{i}", args, insecure=True)["samples_per_sec"]))
            summary = elasticps_run(data, Path(tmp) / f"run-{i}", args)
            eps_sps.append(float(summary["samples_per_sec"]))  # type: ignore[arg-type]
            timers.append(next(iter(summary["trainer_timers"].values())))  # type: ignore[union-attr]
            if args.tls_cost and not i % 2:
                plain_sps.append(float(elasticps_run(  # type: ignore[arg-type]
                    data, Path(tmp) / f"plain-{i}", args, insecure=True)["samples_per_sec"]))
            plain = f", plaintext {plain_sps[-1]:,.0f}" if plain_sps else ""
            print(f"run {i}: torch {torch_sps[-1]:,.0f} samples/s, elasticps "
                  f"{eps_sps[-1]:,.0f} samples/s{plain}", flush=True)
    t, e = statistics.median(torch_sps), statistics.median(eps_sps)
    profile = {key: statistics.median(float(run[key]) for run in timers) for key in timers[0]}
    result = {"elasticps_sps": round(e, 1), "torch_sps": round(t, 1), "ratio": round(e / t, 3),
              "rows": args.rows, "batch_size": args.batch_size, "hidden": list(args.hidden),
              "repeat": args.repeat, "prefetch": not args.no_prefetch,
              "dense_sync_every": args.dense_sync_every,
              "torch_threads": args.threads,
              "elasticps_runs": [round(x, 1) for x in eps_sps],
              "torch_runs": [round(x, 1) for x in torch_sps],
              "elasticps_step_profile_s": profile, "cpus": os.cpu_count()}
    print(f"elasticps {e:,.0f} samples/s, PyTorch {t:,.0f} samples/s, ratio {e / t:.2f} "
          f"(target >= 0.7; medians of {args.repeat})")
    total = sum(profile.values()) or 1.0
    print("elasticps trainer step profile: " + ", ".join(
        f"{k} {100 * v / total:.0f}%" for k, v in profile.items()))
    if plain_sps:
        p = statistics.median(plain_sps)
        result.update(plaintext_sps=round(p, 1), plaintext_runs=[round(x, 1) for x in plain_sps],
                      tls_over_plaintext=round(e / p, 3))
        print(f"elasticps with mutual TLS {e:,.0f} samples/s, with --insecure {p:,.0f} "
              f"samples/s: TLS / plaintext {e / p:.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
