"""The CTR demo: train CTR-DNN (or Wide&Deep) with elasticps, end to end, on one command.

    elasticps run --trainers 2 --pservers 2 --workdir /tmp/ctr examples/ctr/train.py

Run directly (``python examples/ctr/train.py --trainers 2 --pservers 2``), it starts the same
job with ``elasticps.launch_job`` (the local launcher). Inside the job, without ``--data``,
exactly one trainer generates a synthetic dataset (planted model, known best AUC) with a
held-out test split into WORKDIR/data, under a store lock; the others wait for it. After the
last pass the one trainer the master lets save the model exports it to WORKDIR/model, scores
the test split with the exported model (``score.py``, plain PyTorch), and publishes the result
the launcher puts in summary.json.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

import torch

import elasticps as eps
from elasticps.data import FeatureConfig, open_dataset, read_manifest
from elasticps.data.features import DEFAULT_ID_SPACE, declared_features
from elasticps.store.once import run_once

sys.path.insert(0, str(Path(__file__).resolve().parent))
from models import build

log = logging.getLogger("ctr")

# The defaults are the README's demo: about a minute on 2 cores. CTR models learn most in their
# first pass over fresh rows and overfit in later ones, so the rows go into one pass; and one
# planted cross, not three (each is a random weight per value pair: 3 cost ~0.03 AUC at these
# sizes). 1M rows x 1 pass ends 0.016-0.018 below the planted optimum, where 200k rows x 2 passes
# with 3 crosses stayed 0.041 below (docs/trainer.md has the measurements).
ROWS = 1_000_000
PASSES = 1
DENSE_NORM = "log-missing"  # log1p counts, missing = -1: "missing" is not "zero"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Train a CTR model with elasticps.")
    p.add_argument("--rows", type=int, default=ROWS, help="synthetic training rows")
    p.add_argument("--test-rows", type=int, default=None,
                   help="held-out rows (default rows/5, at most 100,000)")
    p.add_argument("--rows-per-chunk", type=int, default=None,
                   help="rows per dataset chunk (default: about rows/32)")
    p.add_argument("--max-vocab", type=int, default=100,
                   help="synthetic data: distinct values per categorical slot at most")
    p.add_argument("--num-crosses", type=int, default=1,
                   help="synthetic data: planted pairwise feature crosses (each a random weight "
                   "per value pair, learnt only from many rows of that pair)")
    p.add_argument("--signal", type=float, default=None,
                   help="synthetic data: planted signal strength (data default 0.7, best AUC "
                   "about 0.80; larger is easier)")
    p.add_argument("--data", help="an existing dataset directory (skip generation): a "
                   "synthetic one, or Criteo text converted by `elasticps data convert criteo`")
    p.add_argument("--dense-norm", default=None,
                   choices=["log-missing", "log", "minmax", "none"],
                   help="dense feature normalisation (see elasticps.data.features; default "
                   f"{DENSE_NORM}); a converted Criteo dataset declares its own, which this may "
                   "only repeat")
    p.add_argument("--passes", type=int, default=PASSES)
    p.add_argument("--model", choices=["dnn", "wide_deep", "deepfm"], default="dnn")
    p.add_argument("--hidden", default="400,400,400", help="hidden layer sizes")
    p.add_argument("--embedding-dim", type=int, default=10)
    p.add_argument("--id-space", type=int, default=None,
                   help=f"hashed ids per table (default {DEFAULT_ID_SPACE:,}); a converted Criteo "
                   "dataset declares its own, which this may only repeat")
    p.add_argument("--admit-after", type=int, default=1,
                   help="a sparse row is created by its id's k-th push (1 = the first)")
    p.add_argument("--ttl-passes", type=int, default=0,
                   help="evict sparse rows not pushed for N passes (0 = never)")
    p.add_argument("--ttl-seconds", type=float, default=0.0,
                   help="evict sparse rows not pushed for T seconds (0 = never)")
    p.add_argument("--evict-score", action="store_true",
                   help="evict sparse rows by their decayed show/click score at each pass end "
                        "(Paddle's CTR accessor; its defaults unless the two below are given)")
    p.add_argument("--score-decay", type=float, default=None,
                   help="with --evict-score: show/click decay per pass end (default 0.98)")
    p.add_argument("--delete-threshold", type=float, default=None,
                   help="with --evict-score: rows scoring below it leave (default 0.8)")
    p.add_argument("--max-rows", type=int, default=0,
                   help="sparse rows per table per pserver at most, evicting LRU (0 = no cap)")
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--optimizer", choices=["adam", "adagrad", "sgd", "momentum"], default="adam")
    p.add_argument("--lr", type=float, default=None, help="learning rate (default per optimizer)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--shuffle", action="store_true", help="shuffle rows within chunks")
    p.add_argument("--chunks-per-task", type=int, default=1)
    p.add_argument("--dense-sync-every", type=int, default=1)
    p.add_argument("--no-prefetch", action="store_true",
                   help="no communication overlap (exact synchronous steps)")
    p.add_argument("--dump-initial", help="(tests) write initial parameters to this safetensors")
    p.add_argument("--trainers", type=int, default=2, help="when started outside a job")
    p.add_argument("--pservers", type=int, default=2, help="when started outside a job")
    p.add_argument("--workdir", default=None, help="when started outside a job")
    return p.parse_args(argv)


def make_optimizer(args: argparse.Namespace) -> eps.optim.OptimizerSpec:
    defaults = {"adam": 1e-3, "adagrad": 0.05, "sgd": 0.05, "momentum": 0.01}
    lr = args.lr or defaults[args.optimizer]
    return {"adam": eps.optim.Adam, "adagrad": eps.optim.Adagrad, "sgd": eps.optim.SGD,
            "momentum": eps.optim.Momentum}[args.optimizer](lr=lr)


def choose_features(args: argparse.Namespace) -> FeatureConfig:
    """How rows become inputs: the flags' choice for synthetic (format-1) data; a converted
    Criteo dataset declares its id space and dense norm, which the flags may only repeat."""
    chosen = FeatureConfig(id_space=args.id_space or DEFAULT_ID_SPACE,
                           dense_norm=args.dense_norm or DENSE_NORM)
    if not args.data:
        return chosen
    manifest = read_manifest(str(args.data))
    if manifest.is_criteo_layout:
        return chosen
    declared = declared_features(manifest.schema)
    if declared is None:
        raise SystemExit(f"{args.data} is not a Criteo dataset (its schema is not the Criteo "
                         "preset of `elasticps data convert criteo`)")
    for flag, asked, have in (("--dense-norm", args.dense_norm, declared.dense_norm),
                              ("--id-space", args.id_space, declared.id_space)):
        if asked is not None and asked != have:
            raise SystemExit(f"{args.data} declares {flag} {have} (chosen when it was "
                             f"converted), not {asked}")
    return declared


def make_model(args: argparse.Namespace, id_space: int) -> torch.nn.Module:
    torch.manual_seed(args.seed)
    hidden = tuple(int(h) for h in args.hidden.split(","))
    # Each embedding reads its own columns (the 26 slots) from the batch, so the trainer knows
    # which rows to pull before the forward pass.
    evict = (eps.nn.Evict(ttl_passes=args.ttl_passes, ttl_seconds=args.ttl_seconds)
             if args.ttl_passes or args.ttl_seconds else None)
    if args.evict_score:
        evict = eps.nn.Evict(args.ttl_passes, args.ttl_seconds, "score",
                             score_decay=args.score_decay, delete_threshold=args.delete_threshold)
    return build(args.model, lambda table, dim, columns: eps.nn.SparseEmbedding(
        table, id_space, dim, initializer=eps.nn.RowInit("uniform", 0.01, args.seed),
        columns=columns, admit=eps.nn.Admit(after=args.admit_after), evict=evict,
        max_rows=args.max_rows), embedding_dim=args.embedding_dim, hidden=hidden)


def ensure_data(trainer: eps.Trainer, args: argparse.Namespace, workdir: Path) -> str:
    """The dataset URL; generated once per job (one trainer, under a store lock)."""
    if args.data:
        return str(args.data)
    out = workdir / "data"

    def generate() -> bytes:
        from elasticps.data.synth import synth_ctr

        trainer.report_stage("writing data")  # the progress line and the page say so

        test_rows = (args.test_rows if args.test_rows is not None
                     else max(1000, min(args.rows // 5, 100_000)))
        per_chunk = args.rows_per_chunk or max(1024, args.rows // 32)
        extra = {} if args.signal is None else {"signal": args.signal}
        synth_ctr(str(out), args.rows, args.seed, test_rows=test_rows, **extra,
                  rows_per_chunk=per_chunk, max_vocab=args.max_vocab, num_crosses=args.num_crosses,
                  overwrite=True,
                  progress=False)
        trainer.report_stage(None)
        return str(out).encode()

    trainer.report_stage("waiting for data")
    url = run_once(trainer.store, "synthetic-data", generate, owner=trainer.name).decode()
    trainer.report_stage(None)
    return url


def dump_initial(trainer: eps.Trainer, url: str, features: FeatureConfig, path: str) -> None:
    from safetensors.numpy import save_file

    tensors = dict(trainer.pull_dense())
    ids = trainer.table_ids(eps.reader.cloud(url, batch_size=65536, features=features))
    for table, table_ids in ids.items():
        tensors[f"sparse/{table}/ids"], tensors[f"sparse/{table}/rows"] = trainer.pull_rows(
            table, table_ids)
    save_file(tensors, path)


def _table_figures(trainer: eps.Trainer) -> dict[str, int]:
    """Sparse rows the pservers hold, admitted and evicted (their Stats), when reachable."""
    stats = getattr(trainer.params, "stats", None)
    if not callable(stats):
        return {}
    figures, sparse = stats(), set(trainer.tables)
    return {key: int(figures[key]) for key in ("rows_admitted", "rows_evicted", "grads_dropped")
            } | {"sparse_rows": sum(int(t["rows"]) for s in figures["shards"]
                                    for t in s["tables"] if t["name"] in sparse)}


def finish(trainer: eps.Trainer, args: argparse.Namespace, url: str, features: FeatureConfig,
           workdir: Path, wall: float) -> None:
    """Export the model, score the test split with the export, publish the job's result."""
    from score import auc as score_auc
    from score import load_model, score

    hidden = [int(h) for h in args.hidden.split(",")]
    model_dir = workdir / "model"
    trainer.report_stage("exporting")
    # Without ids, the export holds the rows of every id the training data holds.
    trainer.export(model_dir, meta={
        "model": args.model, "embedding_dim": args.embedding_dim, "hidden": hidden,
        "features": {"id_space": features.id_space, "dense_norm": features.dense_norm},
        "dataset": url, "passes": args.passes})
    dataset = open_dataset(url)
    test = dataset.split("test") if "test" in dataset.manifest.splits else dataset
    trainer.report_stage("scoring the test split")
    model, manifest = load_model(model_dir)
    probs, labels = score(model, manifest, Path(test.url))
    result = {"auc": score_auc(labels, probs), "best_auc": test.best_auc, "passes": args.passes,
              "pass_test_auc": [m.get("test_auc") for m in (
                  trainer.stats.pass_metrics if trainer.stats is not None else [])],
              "model": args.model, "model_dir": str(model_dir), "test_rows": int(labels.size),
              "train_rows": dataset.num_rows, "train_wall_s": round(wall, 3),
              "trainer": trainer.name, **_table_figures(trainer)}
    eps.publish_result(result)
    best = f"{test.best_auc:.4f}" if test.best_auc is not None else "unknown"
    print(f"test auc {result['auc']:.4f} (best achievable {best}); model in {model_dir}",
          flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = eps.init()
    features = choose_features(args)
    # The loss follows the data's label kind: binary clicks -> BCE with logits.
    trainer = eps.Trainer(make_model(args, features.id_space), optimizer=make_optimizer(args),
                          dense_sync_every=args.dense_sync_every,
                          prefetch=not args.no_prefetch)
    if config.role != "trainer":  # outside a job: start one running this script
        job = eps.Job(trainers=args.trainers, pservers=args.pservers, backend="local")
        handle = eps.launch_job(job, __file__, sys.argv[1:] if argv is None else argv,
                                workdir=args.workdir)
        return handle.wait().exit_code
    workdir = Path(config.workdir or os.getcwd())
    trainer.connect(config)
    try:
        url = ensure_data(trainer, args, workdir)
        if args.dump_initial:
            dump_initial(trainer, url, features, args.dump_initial)
        reader = eps.reader.cloud(url, batch_size=args.batch_size,
                                  chunks_per_task=args.chunks_per_task, features=features,
                                  shuffle_seed=args.seed if args.shuffle else None)

        dataset = open_dataset(url)
        test_reader = (eps.reader.cloud(dataset.split("test").url, batch_size=8192,
                                        features=features)
                       if "test" in dataset.manifest.splits else None)

        def on_event(event: eps.events.Event) -> None:
            if isinstance(event, eps.events.EndPass):
                m = event.metrics
                log.info("Pass %d done: test auc %.4f, logloss %.4f (best achievable %s); "
                         "train auc %.4f over %d samples.", event.pass_id,
                         m.get("test_auc", float("nan")), m.get("test_logloss", float("nan")),
                         f"{dataset.split('test').best_auc:.4f}" if test_reader else "unknown",
                         m.get("auc", float("nan")), int(m.get("samples", 0)))

        started = time.monotonic()
        eps.dist_train(trainer=trainer, reader=reader, num_passes=args.passes,
                       event_handler=on_event, test_reader=test_reader)
        if trainer.request_save_model(block_seconds=600):
            finish(trainer, args, url, features, workdir, time.monotonic() - started)
    finally:
        trainer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
