"""Train a model built from any dataset's schema with elasticps: your own table, end to end.

    elasticps data convert csv train.csv --infer > schema.yaml        # review it
    elasticps data convert csv train.csv --schema schema.yaml --out /data/shop
    elasticps data convert csv test.csv --schema schema.yaml --like /data/shop --out /data/shop-test
    elasticps run --trainers 2 --pservers 2 --workdir /tmp/shop examples/tabular/train.py \\
        --data /data/shop --test-data /data/shop-test --passes 2

or, with no conversion step, from the CSV files as pandas reads them (``--csv``: each trainer
reads them into a DataFrame and trains through ``elasticps.reader.from_pandas``; the job writes
each table once as its dataset, see docs/data.md)::

    elasticps run --trainers 2 --pservers 2 --workdir /tmp/shop examples/tabular/train.py \\
        --csv train.csv --test-csv test.csv --schema schema.yaml

The model (``models.TabularModel``, ``--model dnn|wide_deep|deepfm``) follows the dataset's
declared schema: one ``elasticps.nn.SparseEmbedding`` per sparse table reading that table's
single-valued categorical columns, one ``SparseEmbeddingBag`` (mean) per multi-valued or text
column (a text column's words, :mod:`elasticps.data.tokenize`), the normalised dense columns and
the dense_vector columns (``batch.vectors``) straight into the MLP, one output per label entry
(per class for a class label). The loss and the metrics follow the label kind (BCE and AUC for
a binary label).

After the last pass the one trainer the master lets save the model exports it to WORKDIR/model,
scores the test data with the export in plain PyTorch (``score.py``) and publishes the result,
which ``elasticps run`` writes to WORKDIR/summary.json (``auc`` for a binary label, ``rmse``
for float, ``accuracy`` for class, measured on ``--test-data``). Run directly (``python
examples/tabular/train.py --data ...``), it starts the same job with the local launcher
(``--trainers``, ``--pservers``, ``--workdir``).

With ``--export-dir DIR`` the job also exports versions of the model into DIR while it trains
(``--export-every-s|passes|tasks|batches``, ``--help`` lists them), for ``elasticps serve DIR
--model examples/tabular/score.py:model_from_export`` (docs/serving.md).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

import elasticps as eps
from elasticps.data import open_dataset, read_manifest
from elasticps.data.schema import Schema
from elasticps.trainer.export_flags import add_export_flags, schedule_from_flags

sys.path.insert(0, str(Path(__file__).resolve().parent))
from models import KINDS, TabularModel

log = logging.getLogger("tabular")

OPTIMIZERS = {"adam": (eps.optim.Adam, 1e-3), "adagrad": (eps.optim.Adagrad, 0.05),
              "sgd": (eps.optim.SGD, 0.05), "momentum": (eps.optim.Momentum, 0.01)}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--data", help="training dataset (elasticps data convert)")
    source.add_argument("--csv", help="training CSV, read with pandas and trained as a table")
    p.add_argument("--test-data", default=None,
                   help="held-out dataset converted --like the training data (default: the "
                   "training dataset's 'test' split, if it has one)")
    p.add_argument("--test-csv", default=None,
                   help="held-out CSV, with --csv (read like the training CSV)")
    p.add_argument("--schema", default=None,
                   help="the schema file of --csv (default: guessed from the data, and logged)")
    p.add_argument("--model", choices=KINDS, default="dnn")
    p.add_argument("--hidden", default="256,128", help="hidden layer sizes of the MLP")
    p.add_argument("--passes", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--optimizer", choices=sorted(OPTIMIZERS), default="adagrad",
                   help="runs on the pservers, for dense and sparse tables")
    p.add_argument("--lr", type=float, default=None,
                   help="learning rate (default: adam 1e-3, adagrad 0.05, sgd 0.05, "
                   "momentum 0.01)")
    p.add_argument("--init-scale", type=float, default=0.01,
                   help="embedding rows start uniform in [-s, s] (a function of seed and id)")
    p.add_argument("--seed", type=int, default=1, help="initial values")
    p.add_argument("--shuffle", action="store_true", help="shuffle rows within chunks")
    p.add_argument("--chunks-per-task", type=int, default=1)
    p.add_argument("--no-prefetch", action="store_true",
                   help="no communication overlap: each step sees every earlier update "
                   "(slower; one trainer then computes what local PyTorch computes)")
    p.add_argument("--dump-initial", help="(tests, one trainer) write the initial parameters "
                   "to this safetensors file before training")
    add_export_flags(p)  # --export-dir DIR and its schedule, for `elasticps serve DIR`
    p.add_argument("--trainers", type=int, default=2, help="when started outside a job")
    p.add_argument("--pservers", type=int, default=2, help="when started outside a job")
    p.add_argument("--workdir", default=None, help="when started outside a job")
    return p.parse_args(argv)


def make_optimizer(args: argparse.Namespace) -> eps.optim.OptimizerSpec:
    spec, default_lr = OPTIMIZERS[args.optimizer]
    return spec(lr=args.lr or default_lr)


def make_model(schema: Schema, args: argparse.Namespace) -> TabularModel:
    """The schema's model with its sparse layers on the pservers; each layer reads its own
    columns from the batch, so the trainer pulls exactly the rows the model looks up."""
    torch.manual_seed(args.seed)
    rows = eps.nn.RowInit("uniform", args.init_scale, args.seed)

    def embedding(table: str, id_space: int, dim: int, columns: Any) -> torch.nn.Module:
        return eps.nn.SparseEmbedding(table, id_space, dim, initializer=rows, columns=columns)

    def bag(table: str, id_space: int, dim: int, column: str, mode: Any) -> torch.nn.Module:
        return eps.nn.SparseEmbeddingBag(table, id_space, dim, initializer=rows,
                                         column=column, mode=mode)

    hidden = tuple(int(h) for h in args.hidden.split(","))
    return TabularModel(schema, embedding, bag, kind=args.model, hidden=hidden)


def test_url(args: argparse.Namespace) -> str | None:
    if args.test_data:
        return str(args.test_data)
    dataset = open_dataset(args.data)
    return dataset.split("test").url if "test" in dataset.manifest.splits else None


def data_readers(args: argparse.Namespace) -> tuple[Any, Any]:
    """The training and test readers: datasets (--data), or CSV files read with pandas as
    tables (--csv), which the job writes once as its datasets (their in-job readers)."""
    options: dict[str, Any] = {"batch_size": args.batch_size,
                               "chunks_per_task": args.chunks_per_task,
                               "shuffle_seed": args.seed if args.shuffle else None}
    if args.csv is None:
        test = test_url(args)
        return (eps.reader.cloud(args.data, **options),
                eps.reader.cloud(test, batch_size=8192) if test is not None else None)
    import pandas as pd

    train = eps.reader.from_pandas(pd.read_csv(args.csv), args.schema, **options)
    test_table = None if args.test_csv is None else eps.reader.from_pandas(
        pd.read_csv(args.test_csv), args.schema, batch_size=8192, name="test", like=train)
    return train.in_job(), None if test_table is None else test_table.in_job()


def dump_initial(trainer: eps.Trainer, reader: Any, path: str) -> None:
    """The values training starts from: dense parameters and every row the data reads."""
    from safetensors.numpy import save_file

    tensors = dict(trainer.pull_dense())
    for table, ids in trainer.table_ids(reader).items():
        tensors[f"sparse/{table}/ids"], tensors[f"sparse/{table}/rows"] = trainer.pull_rows(
            table, ids)
    save_file(tensors, path)


def model_meta(args: argparse.Namespace, data: str) -> dict[str, Any]:
    """What an export records for ``score.py`` to rebuild the model."""
    return {"model": args.model, "hidden": [int(h) for h in args.hidden.split(",")],
            "dataset": data, "passes": args.passes, "seed": args.seed}


def finish(trainer: eps.Trainer, args: argparse.Namespace, schema: Schema, data: str,
           test: str | None, workdir: Path, train_s: float) -> None:
    """Export, score the test data with the export (plain PyTorch), publish the job's result."""
    from score import load_model, metrics, score

    model_dir = workdir / "model"
    trainer.report_stage("exporting")
    trainer.export(model_dir, meta=model_meta(args, data))
    result: dict[str, Any] = {"model": args.model, "model_dir": str(model_dir),
                              "passes": args.passes, "label_kind": schema.label_kind,
                              "train_rows": read_manifest(data).num_rows,
                              "train_wall_s": round(train_s, 3), "trainer": trainer.name}
    if test is not None:
        trainer.report_stage("scoring the test data")
        model, manifest = load_model(model_dir)
        outputs, labels = score(model, test, manifest["inputs"])
        scored = metrics(schema.label_kind, outputs, labels, manifest["inputs"]["label"]["names"])
        result.update(scored, test_data=test, test_rows=len(labels))
        pass_metrics = trainer.stats.pass_metrics if trainer.stats is not None else []
        for name in scored:
            result[f"pass_test_{name}"] = [m.get(f"test_{name}") for m in pass_metrics]
        print("test " + ", ".join(f"{k} {v:.4f}" for k, v in scored.items())
              + f"; model in {model_dir}", flush=True)
    eps.publish_result(result)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.csv is None and (args.test_csv or args.schema):
        raise SystemExit("--test-csv and --schema go with --csv")
    if args.csv is not None and args.test_data:
        raise SystemExit("--test-data goes with --data; with --csv give --test-csv")
    config = eps.init()
    if config.role != "trainer":  # outside a job: start one running this script
        job = eps.Job(trainers=args.trainers, pservers=args.pservers, backend="local")
        handle = eps.launch_job(job, __file__, sys.argv[1:] if argv is None else argv,
                                workdir=args.workdir)
        return handle.wait().exit_code
    if args.dump_initial and config.trainer_count != 1:
        raise SystemExit("--dump-initial takes the values training starts from: one trainer")
    workdir = Path(config.workdir or os.getcwd())
    reader, test_reader = data_readers(args)
    schema = read_manifest(reader.dataset_url).schema
    test = test_reader.dataset_url if test_reader is not None else None
    # The loss follows the label kind the data declares: BCE with logits for a binary label.
    trainer = eps.Trainer(make_model(schema, args), optimizer=make_optimizer(args),
                          prefetch=not args.no_prefetch)

    def on_event(event: eps.events.Event) -> None:
        if isinstance(event, eps.events.EndPass):
            figures = ", ".join(f"{k} {v:.4f}" for k, v in sorted(event.metrics.items())
                                if isinstance(v, float))
            log.info("Pass %d done: %s.", event.pass_id, figures)

    trainer.connect(config)
    try:
        if args.dump_initial:
            dump_initial(trainer, reader, args.dump_initial)
        started = time.monotonic()
        eps.dist_train(trainer=trainer, reader=reader, num_passes=args.passes,
                       event_handler=on_event, test_reader=test_reader,
                       export=schedule_from_flags(
                           args, meta=model_meta(args, reader.dataset_url), root=workdir))
        if trainer.request_save_model(block_seconds=600):
            finish(trainer, args, schema, reader.dataset_url, test, workdir,
                   time.monotonic() - started)
    finally:
        trainer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
