"""CTR-DNN training throughput, test AUC and CPU per sample: elasticps (1 trainer + 1 pserver,
real processes) against what a user would run instead, single-process PyTorch.

    python benchmarks/ctr_throughput.py [--mode async|sync|geo|hybrid] [--rows 200000]
        [--device cpu|cuda] [--quick] [--json FILE]

Both sides read the same synthetic dataset (generated once into a temporary directory, or
``--data``) in the same batch order, train the classic CTR-DNN (26 slots x dim 10 into one
1,000,001-row table, three 400-unit ReLU layers, batch 1000) with Adam 1e-3 for one pass, and
report samples per second of training and the AUC on the held-out test split:

- elasticps: ``elasticps run --trainers 1 --pservers 1 --mode MODE examples/ctr/train.py
  --data ...`` with its default settings (the launcher's split of the cores included:
  ``--trainer-threads`` / ``--pserver-threads`` pass its flags on); its summary's
  ``samples_per_sec`` (samples trained / time in the training loop, which includes fetching
  tasks and reading chunks), its ``auc`` (the exported model scored on the test split) and the
  trainer's per-phase step timers, with ``loop_outside_step``: the loop's time outside the step
  (reading chunks, fetching tasks, metrics); and ``elasticps_sps_training`` (``ratio_training``):
  samples per second between the trainer's first and last progress records, the loop's steady
  speed without the job's fixed costs (its start, the pass-end checkpoint every pserver writes
  before the master ends a pass), as PyTorch's timed loop leaves out its first step;
- PyTorch: ``torch.nn.Embedding(sparse=True)`` + ``SparseAdam`` for the table (lazy Adam, as the
  pservers run it), ``Adam`` for the dense layers, reading the same chunks with the same reader,
  with torch's default threads (all of the machine's cores; ``--threads`` to override), then
  scoring the same test split; and the same loop on one thread (``torch_1thread_sps``,
  ``ratio_vs_1thread``).

The cost of a sample: CPU seconds per 1,000 samples trained of each elasticps role (trainer,
pserver, master with its standby, launcher) and of the whole job, read from ``/proc`` while the
job runs (``role_cpu.py``), beside PyTorch's process CPU, two ways: ``cpu_s_per_1k`` over the
whole run (elasticps: every process's life, start-up and scoring included, the job's total exact
from ``RUSAGE_CHILDREN``; PyTorch: building the model, training, scoring) and
``cpu_s_per_1k_training`` while training only (elasticps: between two of the trainer's progress
records; PyTorch: its timed loop), None for a run too short to hold two records (``--quick``).

Each repeat runs PyTorch and then elasticps, in the same invocation, so both see the same load
(the load average is recorded with each repeat); the medians of ``--repeat`` are reported, with
ratio = elasticps / torch.
With ``--tls-cost`` each repeat also runs elasticps with ``--insecure`` (no TLS), alternating
which goes first, and reports the TLS / plaintext ratio of the medians: the cost of mutual TLS
on the same machine, in the same minutes. ``--bf16-cost`` does the same with the dense
gradients sent as bfloat16 (``PADDLE_DENSE_GRAD_DTYPE=bfloat16``): ``bf16_sps``, ``auc_bf16``
and ``bf16_over_float32``.

``--compute-dtype bfloat16`` runs both sides in mixed precision: PyTorch with its model's call
under ``torch.autocast`` (bfloat16) and the loss on the float32 output, as PyTorch's AMP recipe
writes it, and elasticps with ``--compute-dtype bfloat16``; the ratio stays like for like. Each
repeat then also runs PyTorch as a user who leaves it in float32 gets it (``torch_float32_sps``,
``auc_torch_float32``, ``ratio_vs_torch_float32``).

``--device cuda`` (a machine with a GPU and a CUDA build of torch) runs PyTorch with its model,
embedding table included, on the GPU (single-GPU PyTorch) and the elasticps trainer with
``PADDLE_USE_GPU=true``; ``taskset -c 0-7 python benchmarks/ctr_throughput.py ...`` runs both on
8 cores: torch's default threads and the launcher's split follow the cores the process may use.

A mode this checkout's elasticps does not know (an older checkout's, without ``hybrid``) stops
the benchmark at once with a message saying so (exit status 2), before anything runs.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "examples/ctr"))
sys.path.insert(0, str(REPO / "benchmarks"))  # role_cpu, thread_cpu: this directory's helpers

from models import build  # noqa: E402
from role_cpu import JobCpuWatch  # noqa: E402

from elasticps.config import MODES  # noqa: E402
from elasticps.data import FeatureConfig, open_dataset  # noqa: E402
from elasticps.data.batch import TensorBatch  # noqa: E402
from elasticps.data.metrics import auc  # noqa: E402
from elasticps.data.synth import synth_ctr  # noqa: E402
from elasticps.launch.threads import usable_cores  # noqa: E402


class ColumnsEmbedding(torch.nn.Embedding):
    """``torch.nn.Embedding`` reading the batch's slot columns, as SparseEmbedding does."""

    def __init__(self, num: int, dim: int, columns: tuple[str, ...]) -> None:
        super().__init__(num, dim, sparse=True)
        self.columns = columns

    def forward(self, batch: TensorBatch) -> torch.Tensor:  # type: ignore[override]
        ids = torch.from_numpy(batch.source.stack_ids(self.columns))
        return super().forward(ids.to(self.weight.device))


DEFAULT_THREADS = torch.get_num_threads()  # torch's own default: every core
BENCH_MODES = ("async", "sync", "geo", "hybrid")
ROLES = ("trainer", "pserver", "master", "launcher")


def torch_run(data: str, args: argparse.Namespace, threads: int | None = None,
              compute_dtype: str | None = None) -> dict[str, float]:
    """Samples per second of plain PyTorch on the same batches, its test AUC and its CPU
    seconds per 1,000 samples (whole run, and in the timed loop); ``threads`` overrides
    ``--threads`` (the one-thread arm), ``compute_dtype`` ``--compute-dtype``."""
    mixed = (compute_dtype or args.compute_dtype) == "bfloat16"
    cpu_start = time.process_time()  # this process, every thread
    torch.set_num_threads(threads or args.threads or DEFAULT_THREADS)
    torch.manual_seed(args.seed)
    tables: dict[str, torch.nn.Embedding] = {}

    def make_embedding(table: str, dim: int, columns: tuple[str, ...]) -> torch.nn.Module:
        emb = ColumnsEmbedding(args.id_space, dim, tuple(columns))
        torch.nn.init.uniform_(emb.weight, -0.01, 0.01)
        tables[table] = emb
        return emb

    device = torch.device(args.device)
    model = build("dnn", make_embedding, hidden=args.hidden).to(device)
    sparse_ids = {id(p) for emb in tables.values() for p in emb.parameters()}
    dense_opt = torch.optim.Adam([p for p in model.parameters() if id(p) not in sparse_ids],
                                 lr=args.lr)
    sparse_opt = torch.optim.SparseAdam([p for e in tables.values() for p in e.parameters()],
                                        lr=args.lr)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    features = FeatureConfig(id_space=args.id_space, dense_norm="log-missing")
    samples = trained = 0
    start, cpu_loop = time.perf_counter(), time.process_time()
    for i, batch in enumerate(open_dataset(data).iter_batches(args.batch_size,
                                                              features=features)):
        dense_opt.zero_grad()
        sparse_opt.zero_grad()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=mixed):
            output = model(batch.to_torch(device))
        loss_fn(output.float(), torch.from_numpy(batch.label).to(device)).backward()
        dense_opt.step()
        sparse_opt.step()
        trained += len(batch)
        if i == 0:  # the first step allocates Adam's state for the whole table: not steady state
            _synchronize(device)
            start, cpu_loop = time.perf_counter(), time.process_time()
            continue
        samples += len(batch)
    _synchronize(device)
    sps = samples / (time.perf_counter() - start)
    loop_cpu = time.process_time() - cpu_loop
    auc_value = held_out_auc(model, data, features, device)
    return {"sps": sps, "auc": auc_value,
            "cpu_s_per_1k": 1000 * (time.process_time() - cpu_start) / trained,
            "cpu_s_per_1k_training": 1000 * loop_cpu / samples}


def _synchronize(device: torch.device) -> None:
    """Wait for the GPU's queued work, so that the clock reads finished steps."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def held_out_auc(model: torch.nn.Module, data: str, features: FeatureConfig,
                 device: torch.device) -> float:
    """AUC of ``model`` on the test split, as the CTR example scores its export."""
    dataset = open_dataset(data)
    labels, scores = [], []
    with torch.no_grad():
        for batch in dataset.split("test").iter_batches(8192, features=features):
            logits = model(batch.to_torch(device))
            scores.append(torch.sigmoid(logits).reshape(-1).cpu().numpy())
            labels.append(batch.label.reshape(-1))
    return auc(np.concatenate(labels), np.concatenate(scores))


def elasticps_run(data: str, workdir: Path, args: argparse.Namespace,
                  insecure: bool = False, dense_grad_dtype: str = "float32") -> dict[str, Any]:
    """The summary of one ``elasticps run`` (1 trainer, 1 pserver) over the same data, with
    the CPU its roles used (``cpu_s``, ``cpu_s_training``, ``samples_training``)."""
    argv = [sys.executable, "-m", "elasticps", "run", "--trainers", "1", "--pservers", "1",
            "--workdir", str(workdir), "--mode", args.mode,
            *(["--insecure"] if insecure else []),
            *(["--trainer-threads", str(args.trainer_threads)] if args.trainer_threads else []),
            *(["--pserver-threads", str(args.pserver_threads)] if args.pserver_threads else []),
            str(REPO / "examples/ctr/train.py"), "--data", data,
            "--passes", "1", "--batch-size", str(args.batch_size), "--lr", str(args.lr),
            "--hidden", ",".join(map(str, args.hidden)), "--id-space", str(args.id_space),
            "--seed", str(args.seed)]
    if args.no_prefetch:
        argv.append("--no-prefetch")
    if args.dense_sync_every is not None:
        argv += ["--dense-sync-every", str(args.dense_sync_every)]
    children_before = _children_cpu()
    with tempfile.TemporaryFile("w+") as err:
        env = {**os.environ, "PYTHONPATH": str(REPO), "PADDLE_DENSE_GRAD_DTYPE": dense_grad_dtype,
               "PADDLE_COMPUTE_DTYPE": args.compute_dtype,
               "PADDLE_USE_GPU": "true" if args.device == "cuda" else "false"}
        proc = subprocess.Popen(argv, env=env,
                                stdout=subprocess.DEVNULL, stderr=err, text=True)
        watch = JobCpuWatch(workdir, proc.pid).start()
        try:
            code = proc.wait()
        finally:
            watch.stop()
        if code != 0:
            err.seek(0)
            raise SystemExit(f"elasticps run failed:\n{err.read()[-3000:]}")
    summary: dict[str, Any] = json.loads((workdir / "summary.json").read_text())
    summary["cpu_s"] = watch.whole_run(_children_cpu() - children_before)
    training = watch.while_training(int(summary["samples"]))
    summary["samples_training"], summary["cpu_s_training"] = training or (None, None)
    summary["samples_per_sec_training"] = watch.samples_per_s_training(int(summary["samples"]))
    return summary


def _children_cpu() -> float:
    """CPU seconds of every reaped child of this process (and theirs), so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def per_1k(cpu_s: dict[str, float] | None, samples: int | None) -> dict[str, float] | None:
    """CPU seconds per 1,000 samples, by role."""
    if cpu_s is None or not samples:
        return None
    return {role: 1000 * cpu / samples for role, cpu in cpu_s.items()}


def check_mode(mode: str) -> None:
    """Stop at once, saying so, on a mode this checkout's elasticps does not know."""
    if mode not in MODES:
        print(f"ctr_throughput: --mode {mode} is unknown to this elasticps ({REPO}: it knows "
              f"{', '.join(MODES)}); nothing was run", file=sys.stderr)
        raise SystemExit(2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000,
                        help="training rows of the generated dataset (default 200000)")
    parser.add_argument("--test-rows", type=int, default=20_000,
                        help="held-out rows both sides are scored on")
    parser.add_argument("--batch-size", type=int, default=1000,
                        help="rows per batch on both sides (default 1000)")
    parser.add_argument("--hidden", default="400,400,400",
                        help="the CTR-DNN's hidden layer widths, comma-separated")
    parser.add_argument("--id-space", type=int, default=1_000_001,
                        help="rows of the embedding table the slots hash into")
    parser.add_argument("--lr", type=float, default=1e-3,
                        help="Adam's learning rate on both sides (default 0.001)")
    parser.add_argument("--seed", type=int, default=1,
                        help="seeds the generated data and both sides' models")
    parser.add_argument("--repeat", type=int, default=3,
                        help="repeats of the PyTorch-then-elasticps pair; medians are reported")
    parser.add_argument("--mode", choices=BENCH_MODES, default="async",
                        help="elasticps run --mode (default async)")
    parser.add_argument("--trainer-threads", type=int, default=None,
                        help="elasticps run --trainer-threads (default: the launcher's split)")
    parser.add_argument("--pserver-threads", type=int, default=None,
                        help="elasticps run --pserver-threads (default: the launcher's split)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads of the PyTorch run (default: torch's own default, "
                        "every core: what a user running PyTorch alone gets)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="where both sides compute: cuda puts PyTorch's model, embedding "
                             "table included, on the GPU and runs the elasticps trainer with "
                             "PADDLE_USE_GPU=true (its rows stay on the pservers)")
    parser.add_argument("--compute-dtype", choices=("float32", "bfloat16"), default="float32",
                        help="what both sides' forward and backward passes compute in: "
                             "float32 (default), or bfloat16 (PyTorch under torch.autocast, "
                             "elasticps with --compute-dtype bfloat16; PyTorch in float32 is "
                             "then run too, as the user who leaves it at its default gets it)")
    parser.add_argument("--data", help="an existing dataset with a test split (default: "
                        "generate one)")
    parser.add_argument("--dense-sync-every", type=int, default=None,
                        help="pass --dense-sync-every to the elasticps job (default: its own)")
    parser.add_argument("--no-prefetch", action="store_true",
                        help="elasticps without communication overlap")
    parser.add_argument("--quick", action="store_true", help="20k rows, one repeat")
    parser.add_argument("--tls-cost", action="store_true",
                        help="also run elasticps with --insecure each repeat and report the "
                             "TLS / plaintext ratio")
    parser.add_argument("--bf16-cost", action="store_true",
                        help="also run elasticps with its dense gradients sent as bfloat16 "
                             "(PADDLE_DENSE_GRAD_DTYPE), alternating which goes first, and "
                             "report its samples/s and test AUC beside float32's")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()
    check_mode(args.mode)
    if args.device == "cuda" and not torch.cuda.is_available():
        print(f"ctr_throughput: --device cuda, but this torch ({torch.__version__}) sees no CUDA "
              "device; nothing was run", file=sys.stderr)
        return 2
    if args.quick:
        args.rows, args.test_rows, args.repeat = 20_000, 5_000, 1
    args.hidden = tuple(int(h) for h in args.hidden.split(","))
    with tempfile.TemporaryDirectory(prefix="elasticps-bench-") as tmp:
        data = args.data
        if data is None:
            data = str(Path(tmp) / "data")
            synth_ctr(data, args.rows, args.seed, test_rows=args.test_rows, progress=False)
        runs: list[dict[str, object]] = []
        for i in range(args.repeat):
            run: dict[str, Any] = {"load_before": os.getloadavg()[0]}
            torch_all = torch_run(data, args)
            run["torch_threads"] = torch.get_num_threads()
            run.update(torch_sps=torch_all["sps"], auc_torch=torch_all["auc"],
                       torch_cpu_s_per_1k=torch_all["cpu_s_per_1k"],
                       torch_cpu_s_per_1k_training=torch_all["cpu_s_per_1k_training"])
            # The same on one thread: what the elasticps trainer reaches when the launcher
            # gives it one core (the pserver having the other).
            torch_one = torch_run(data, args, threads=1)
            run.update(torch_1thread_sps=torch_one["sps"],
                       torch_1thread_cpu_s_per_1k=torch_one["cpu_s_per_1k"],
                       torch_1thread_cpu_s_per_1k_training=torch_one["cpu_s_per_1k_training"])
            if args.compute_dtype != "float32":  # what PyTorch left at its defaults does
                torch_float32 = torch_run(data, args, compute_dtype="float32")
                run.update(torch_float32_sps=torch_float32["sps"],
                           auc_torch_float32=torch_float32["auc"])
            if args.tls_cost and i % 2:  # alternate the order: drift hits both alike
                run["plaintext_sps"] = elasticps_run(data, Path(tmp) / f"plain-{i}", args,
                                                     insecure=True)["samples_per_sec"]
            if args.bf16_cost and i % 2:
                run.update(bf16_run(data, Path(tmp) / f"bf16-{i}", args))
            summary = elasticps_run(data, Path(tmp) / f"run-{i}", args)
            run["elasticps_sps"], run["auc_elasticps"] = (summary["samples_per_sec"],
                                                          summary["auc"])
            run["elasticps_sps_training"] = summary["samples_per_sec_training"]
            run["timers"] = step_profile(summary)
            run["elasticps_threads"] = summary.get("threads")
            run["cpu_s_per_1k"] = per_1k(summary["cpu_s"], int(summary["samples"]))
            run["cpu_s_per_1k_training"] = per_1k(summary["cpu_s_training"],
                                                  summary["samples_training"])
            if args.bf16_cost and not i % 2:
                run.update(bf16_run(data, Path(tmp) / f"bf16-{i}", args))
            if args.tls_cost and not i % 2:
                run["plaintext_sps"] = elasticps_run(data, Path(tmp) / f"plain-{i}", args,
                                                     insecure=True)["samples_per_sec"]
            run["load_after"] = os.getloadavg()[0]
            runs.append(run)
            plain = (f", plaintext {float(run['plaintext_sps']):,.0f}"  # type: ignore[arg-type]
                     if args.tls_cost else "")
            print(f"run {i}: torch {run['torch_sps']:,.0f} samples/s (auc "
                  f"{run['auc_torch']:.4f}), elasticps {run['elasticps_sps']:,.0f} samples/s "
                  f"(auc {run['auc_elasticps']:.4f}){plain}; load {run['load_before']:.2f} -> "
                  f"{run['load_after']:.2f}", flush=True)
    result = summarise(runs, args)
    print(f"elasticps ({args.mode}) {result['elasticps_sps']:,.0f} samples/s (auc "
          f"{result['auc_elasticps']:.4f})"
          f", PyTorch with {result['torch_threads']} threads {result['torch_sps']:,.0f} samples/s "
          f"(auc {result['auc_torch']:.4f}): ratio {result['ratio']:.3f}, auc difference "
          f"{result['auc_elasticps'] - result['auc_torch']:+.4f} (medians of {args.repeat}; "
          f"target ratio >= 0.85 within 0.003 auc)")
    if result["ratio_training"] is not None:
        print(f"elasticps while training (between its first and last progress records, without "
              f"the job's start and pass-end checkpoint) {result['elasticps_sps_training']:,.0f} "
              f"samples/s: ratio {result['ratio_training']:.3f}")
    print("ratio per repeat: " + ", ".join(f"{r:.3f}" for r in result["ratio_per_repeat"]))
    print(f"PyTorch on one thread {result['torch_1thread_sps']:,.0f} samples/s: elasticps / "
          f"PyTorch on one thread {result['ratio_vs_1thread']:.3f}")
    threads = result["elasticps_threads"] or {}
    print(f"elasticps threads: trainer {threads.get('trainer')}, pserver "
          f"{threads.get('pserver')} (of {threads.get('cpus')} cores)")
    for line in cpu_lines(result):
        print(line)
    profile = result["elasticps_step_profile_s"]
    total = sum(profile.values()) or 1.0
    print("elasticps trainer's training loop: " + ", ".join(
        f"{k} {100 * v / total:.0f}%" for k, v in sorted(profile.items(), key=lambda kv: -kv[1])))
    if args.tls_cost:
        print(f"elasticps with mutual TLS {result['elasticps_sps']:,.0f} samples/s, with "
              f"--insecure {result['plaintext_sps']:,.0f} samples/s: TLS / plaintext "
              f"{result['tls_over_plaintext']:.3f}")
    if args.compute_dtype != "float32":
        print(f"PyTorch in float32 (no autocast) {result['torch_float32_sps']:,.0f} samples/s "
              f"(auc {result['auc_torch_float32']:.4f}): elasticps in {args.compute_dtype} / "
              f"PyTorch in float32 {result['ratio_vs_torch_float32']:.3f}")
    if args.bf16_cost:
        print(f"elasticps with bfloat16 dense gradients {result['bf16_sps']:,.0f} samples/s "
              f"(auc {result['auc_bf16']:.4f}), with float32 {result['elasticps_sps']:,.0f} "
              f"(auc {result['auc_elasticps']:.4f}): bfloat16 / float32 "
              f"{result['bf16_over_float32']:.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


def bf16_run(data: str, workdir: Path, args: argparse.Namespace) -> dict[str, float]:
    """The same job with its dense gradients sent as bfloat16: samples/s and test AUC."""
    summary = elasticps_run(data, workdir, args, dense_grad_dtype="bfloat16")
    return {"bf16_sps": summary["samples_per_sec"], "auc_bf16": summary["auc"]}


def summarise(runs: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    """Medians over the repeats, and every repeat's figures."""

    def median(key: str) -> float:
        return statistics.median(float(run[key]) for run in runs)

    def median_by_key(key: str) -> dict[str, float] | None:
        found = [run[key] for run in runs if run.get(key)]
        if not found:
            return None
        return {k: round(statistics.median(d[k] for d in found if k in d), 4)
                for k in found[0]}

    def median_or_none(key: str) -> float | None:
        values = [float(run[key]) for run in runs if run.get(key) is not None]
        return round(statistics.median(values), 4) if values else None

    e, t, one = median("elasticps_sps"), median("torch_sps"), median("torch_1thread_sps")
    timers = [run["timers"] for run in runs]
    result: dict[str, Any] = {
        "elasticps_sps": round(e, 1), "torch_sps": round(t, 1), "ratio": round(e / t, 3),
        # Each repeat's own ratio: on a shared machine PyTorch's thread pool can collapse under
        # load in one repeat (spinning threads on busy cores), which the medians hide.
        "ratio_per_repeat": [round(float(r["elasticps_sps"]) / float(r["torch_sps"]), 3)
                             for r in runs],
        "torch_1thread_sps": round(one, 1), "ratio_vs_1thread": round(e / one, 3),
        # Between two progress records: like PyTorch's timed loop, without the job's fixed
        # costs (start, the pass-end checkpoint); None for a run too short for two records.
        "elasticps_sps_training": median_or_none("elasticps_sps_training"),
        "auc_elasticps": round(median("auc_elasticps"), 4),
        "auc_torch": round(median("auc_torch"), 4),
        "torch_threads": int(median("torch_threads")),
        "mode": args.mode, "device": args.device, "compute_dtype": args.compute_dtype,
        "elasticps_threads": runs[-1]["elasticps_threads"],
        "cpu_s_per_1k": median_by_key("cpu_s_per_1k"),
        "cpu_s_per_1k_training": median_by_key("cpu_s_per_1k_training"),
        "torch_cpu_s_per_1k": round(median("torch_cpu_s_per_1k"), 4),
        "torch_cpu_s_per_1k_training": median_or_none("torch_cpu_s_per_1k_training"),
        "torch_1thread_cpu_s_per_1k": round(median("torch_1thread_cpu_s_per_1k"), 4),
        "torch_1thread_cpu_s_per_1k_training": median_or_none(
            "torch_1thread_cpu_s_per_1k_training"),
        "elasticps_step_profile_s": {k: round(statistics.median(float(r[k]) for r in timers), 3)
                                     for k in timers[0]},
        "rows": args.rows, "test_rows": args.test_rows, "batch_size": args.batch_size,
        "hidden": list(args.hidden), "repeat": args.repeat, "prefetch": not args.no_prefetch,
        "dense_sync_every": args.dense_sync_every, "cpus": usable_cores(),
        "runs": [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in run.items()
                  if k not in ("timers", "elasticps_threads")} for run in runs],
    }
    steady = result["elasticps_sps_training"]
    result["ratio_training"] = round(steady / t, 3) if steady is not None else None
    if args.compute_dtype != "float32":
        f32 = median("torch_float32_sps")
        result.update(torch_float32_sps=round(f32, 1),
                      auc_torch_float32=round(median("auc_torch_float32"), 4),
                      ratio_vs_torch_float32=round(e / f32, 3))
    if args.bf16_cost:
        b = median("bf16_sps")
        result.update(bf16_sps=round(b, 1), auc_bf16=round(median("auc_bf16"), 4),
                      bf16_over_float32=round(b / e, 3))
    if args.tls_cost:
        p = median("plaintext_sps")
        result.update(plaintext_sps=round(p, 1), tls_over_plaintext=round(e / p, 3))
    return result


def step_profile(summary: dict[str, Any]) -> dict[str, float]:
    """Seconds of the trainer's training loop by phase: the step's timers, and the loop's time
    outside the step (reading chunks, fetching tasks, metrics)."""
    timers = dict(next(iter(summary["trainer_timers"].values())))
    sps = summary.get("samples_per_sec")
    if sps:
        loop_s = float(summary["samples"]) / float(sps)
        timers["loop_outside_step"] = max(0.0, loop_s - sum(timers.values()))
    return timers


def cpu_lines(result: dict[str, Any]) -> list[str]:
    """CPU seconds per 1,000 samples, by role, beside PyTorch's."""

    def roles(figures: dict[str, float] | None) -> str:
        if not figures:
            return "n/a (run too short for two progress records)"
        names = [*ROLES, "unread", "job"]
        return ", ".join(f"{name} {figures[name]:.3f}" for name in names if name in figures)

    lines = []
    for label, key in (("whole run", ""), ("while training", "_training")):
        torch_all, torch_one = (result[f"torch_cpu_s_per_1k{key}"],
                                result[f"torch_1thread_cpu_s_per_1k{key}"])
        lines.append(f"CPU s per 1,000 samples, {label}: elasticps "
                     f"{roles(result[f'cpu_s_per_1k{key}'])}; PyTorch "
                     f"{_fmt(torch_all)} ({result['torch_threads']} threads), "
                     f"{_fmt(torch_one)} (1 thread)")
    return lines


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
