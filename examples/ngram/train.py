"""Train the seed's word model with elasticps: an N-gram language model from a plain text file.

    elasticps data convert text corpus.txt --ngram 3 --out /data/words
    elasticps run --trainers 2 --pservers 2 --workdir /tmp/words examples/ngram/train.py \\
        --data /data/words

or, converting inside the job (one trainer converts, under a store lock; the others wait)::

    elasticps run --trainers 2 --pservers 2 --workdir /tmp/words examples/ngram/train.py \\
        --text corpus.txt --ngram 3

The model (``model.NgramModel``) looks the N-1 context words up in one sparse word-embedding
table on the pservers (``elasticps.nn.SparseEmbedding("words", ..., columns=["w1", ...])``) and
predicts the next word (or the end of the sentence) over the whole vocabulary; the loss is the
class label's default, cross-entropy. Every pass ends with the test split's perplexity; after
the last pass the trainer the master lets save the model exports it (with ``vocab.txt``) to
WORKDIR/model and publishes the result that ``elasticps run`` writes to WORKDIR/summary.json:
``perplexity``, ``accuracy`` and ``cross_entropy`` on the test split, ``pass_test_perplexity``.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import torch

import elasticps as eps
from elasticps.config import Config
from elasticps.data import open_dataset, read_manifest
from elasticps.data.schema import Schema

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model import NgramModel

log = logging.getLogger("ngram")

OPTIMIZERS = {"adam": (eps.optim.Adam, 3e-3), "adagrad": (eps.optim.Adagrad, 0.1),
              "sgd": (eps.optim.SGD, 0.5), "momentum": (eps.optim.Momentum, 0.05)}
METRICS = ("perplexity", "cross_entropy", "accuracy")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--data", help="an N-gram dataset (elasticps data convert text)")
    source.add_argument("--text", help="a text file, one sentence per line: converted once "
                        "inside the job into WORKDIR/data")
    p.add_argument("--test-data", default=None,
                   help="held-out N-gram rows (default: the dataset's 'test' split)")
    text = p.add_argument_group("converting --text (as elasticps data convert text)")
    text.add_argument("--ngram", type=int, default=3, help="N: N-1 context words")
    text.add_argument("--vocab-size", type=int, default=10_000)
    text.add_argument("--min-count", type=int, default=1)
    text.add_argument("--test-fraction", type=float, default=0.1)
    text.add_argument("--split-seed", type=int, default=0, help="convert text's --seed")
    text.add_argument("--dim", type=int, default=32, help="word embedding width")
    text.add_argument("--rows-per-chunk", type=int, default=16_384,
                      help="rows per chunk (a task is a chunk)")
    p.add_argument("--hidden", type=int, default=64, help="width of the tanh layer")
    p.add_argument("--passes", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--optimizer", choices=sorted(OPTIMIZERS), default="adagrad")
    p.add_argument("--lr", type=float, default=None,
                   help="learning rate (default: adagrad 0.1, adam 3e-3, sgd 0.5, momentum 0.05)")
    p.add_argument("--init-scale", type=float, default=0.1,
                   help="word vectors start uniform in [-s, s] (a function of seed and id)")
    p.add_argument("--seed", type=int, default=1, help="initial values")
    p.add_argument("--shuffle", action="store_true", help="shuffle rows within chunks")
    p.add_argument("--no-prefetch", action="store_true",
                   help="no communication overlap: each step sees every earlier update")
    p.add_argument("--dump-initial", help="(tests, one trainer) write the initial parameters "
                   "to this safetensors file before training")
    return p.parse_args(argv)


def convert_once(config: Config, args: argparse.Namespace, out: Path) -> str:
    """Convert ``--text`` into ``out`` in exactly one trainer of the job; every trainer gets
    the dataset's URL (the others wait for the one converting)."""
    from elasticps.data.text_ngram import TextOptions, convert_text
    from elasticps.store import open_store
    from elasticps.store.once import run_once

    def convert() -> bytes:
        convert_text([args.text], str(out), TextOptions(
            ngram=args.ngram, vocab_size=args.vocab_size, min_count=args.min_count,
            test_fraction=args.test_fraction, seed=args.split_seed, dim=args.dim),
            rows_per_chunk=args.rows_per_chunk, overwrite=True)
        return str(out).encode()

    assert config.store is not None
    with open_store(config.store, config.job_name) as store:
        owner = f"trainer-{config.trainer_id}-pid{os.getpid()}"
        return run_once(store, "convert-text", convert, owner=owner).decode()


def make_model(schema: Schema, args: argparse.Namespace) -> NgramModel:
    torch.manual_seed(args.seed)
    rows = eps.nn.RowInit("uniform", args.init_scale, args.seed)

    def embedding(table: str, id_space: int, dim: int, columns: Any) -> torch.nn.Module:
        return eps.nn.SparseEmbedding(table, id_space, dim, initializer=rows, columns=columns)

    return NgramModel(schema, embedding, hidden=args.hidden)


def dump_initial(trainer: eps.Trainer, reader: Any, path: str) -> None:
    """The values training starts from: dense parameters and every row the data reads."""
    from safetensors.numpy import save_file

    tensors = dict(trainer.pull_dense())
    for table, ids in trainer.table_ids(reader).items():
        tensors[f"sparse/{table}/ids"], tensors[f"sparse/{table}/rows"] = trainer.pull_rows(
            table, ids)
    save_file(tensors, path)


def finish(trainer: eps.Trainer, args: argparse.Namespace, url: str, test: str | None,
           workdir: Path, train_s: float) -> None:
    """Export the model with its vocabulary and publish the job's result."""
    manifest = read_manifest(url)
    model_dir = workdir / "model"
    trainer.report_stage("exporting")
    trainer.export(model_dir, meta={"model": "ngram", "hidden": args.hidden,
                                    "dataset": url, "passes": args.passes, "seed": args.seed})
    vocab = manifest.files.get("vocab")
    if vocab is not None:
        shutil.copyfile(Path(url) / vocab, model_dir / "vocab.txt")
    pass_metrics = trainer.stats.pass_metrics if trainer.stats is not None else []
    last = pass_metrics[-1] if pass_metrics else {}
    result: dict[str, Any] = {"model": "ngram", "model_dir": str(model_dir), "dataset": url,
                              "passes": args.passes, "train_rows": manifest.num_rows,
                              "vocab_size": manifest.schema.num_classes,
                              "train_wall_s": round(train_s, 3), "trainer": trainer.name}
    if test is not None:
        result.update({name: last.get(f"test_{name}") for name in METRICS})
        result.update({f"pass_test_{name}": [m.get(f"test_{name}") for m in pass_metrics]
                       for name in METRICS})
        result.update(test_data=test, test_rows=int(last.get("test_samples", 0)))
        print(f"test perplexity {result['perplexity']:.3f}, accuracy {result['accuracy']:.4f}; "
              f"model in {model_dir}", flush=True)
    eps.publish_result(result)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = eps.init()
    if config.role != "trainer":
        raise SystemExit("run it in a job: elasticps run --trainers 2 --pservers 2 --workdir W "
                         "examples/ngram/train.py --text corpus.txt (or --data DIR)")
    if args.dump_initial and config.trainer_count != 1:
        raise SystemExit("--dump-initial takes the values training starts from: one trainer")
    workdir = Path(config.workdir or os.getcwd())
    url = str(args.data) if args.data else convert_once(config, args, workdir / "data")
    dataset = open_dataset(url)
    test = args.test_data or (dataset.split("test").url if "test" in dataset.manifest.splits
                              else None)
    trainer = eps.Trainer(make_model(dataset.schema, args), optimizer=(
        OPTIMIZERS[args.optimizer][0](lr=args.lr or OPTIMIZERS[args.optimizer][1])),
        prefetch=not args.no_prefetch)
    reader = eps.reader.cloud(url, batch_size=args.batch_size,
                              shuffle_seed=args.seed if args.shuffle else None)
    test_reader = eps.reader.cloud(test, batch_size=4096) if test is not None else None

    def on_event(event: eps.events.Event) -> None:
        if isinstance(event, eps.events.EndPass):
            m = event.metrics
            log.info("Pass %d done: test perplexity %.3f, accuracy %.4f; train perplexity %.3f "
                     "over %d rows.", event.pass_id, m.get("test_perplexity", float("nan")),
                     m.get("test_accuracy", float("nan")), m.get("perplexity", float("nan")),
                     int(m.get("samples", 0)))

    trainer.connect(config)
    try:
        if args.dump_initial:
            dump_initial(trainer, reader, args.dump_initial)
        started = time.monotonic()
        eps.dist_train(trainer=trainer, reader=reader, num_passes=args.passes,
                       event_handler=on_event, test_reader=test_reader)
        if trainer.request_save_model(block_seconds=600):
            finish(trainer, args, url, test, workdir, time.monotonic() - started)
    finally:
        trainer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
