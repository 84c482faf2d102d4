"""``elasticps.Trainer``: a PyTorch model trained against the pservers, fed by the master.

::

    model = CtrDnn(lambda table, dim: elasticps.nn.SparseEmbedding(table, 0, dim))
    trainer = elasticps.Trainer(model, torch.nn.BCEWithLogitsLoss(),
                                optimizer=elasticps.optim.Adam(lr=1e-3))
    elasticps.dist_train(trainer=trainer, reader=reader, num_passes=2)

Every trainable parameter of the model is a dense table, every
:class:`~elasticps.trainer.sparse.SparseEmbedding` a sparse table; the optimizer spec runs on
the pservers. The model's forward returns logits of a binary label (metrics use their sigmoid).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from elasticps.config import Config, current
from elasticps.errors import ConfigError
from elasticps.proto import pserver_pb2
from elasticps.trainer.api import ParameterClient, TaskSource
from elasticps.trainer.dense import DenseSync
from elasticps.trainer.events import Event
from elasticps.trainer.export import export_model
from elasticps.trainer.metrics import MetricAccumulator
from elasticps.trainer.optim import Adam, OptimizerSpec
from elasticps.trainer.sparse import SparseEmbedding
from elasticps.trainer.step import Feed, SparseIds, StepRunner, ctr_feed
from elasticps.trainer.step_worker import LoopStats, StepWorker
from elasticps.trainer.task_loop import TaskLoop

log = logging.getLogger(__name__)

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


class Trainer:
    """Owns the model, the loss, the optimizer spec and, once connected, the job's clients."""

    def __init__(
        self,
        model: torch.nn.Module,
        loss_fn: LossFn | None = None,
        optimizer: OptimizerSpec | None = None,
        *,
        dense_sync_every: int = 1,
        prefetch: bool = True,
        feed: Feed = ctr_feed,
        sparse_ids: SparseIds | None = None,
        progress_every: int = 20,
    ) -> None:
        if optimizer is not None and not isinstance(optimizer, OptimizerSpec):
            raise ConfigError(
                f"optimizer={optimizer!r} must be an elasticps.optim spec (SGD, Momentum, "
                "Adagrad, Adam): the optimizer runs on the pservers")
        self.model = model
        self.loss_fn: LossFn = loss_fn or torch.nn.BCEWithLogitsLoss()
        self.optimizer = optimizer or Adam()
        self.prefetch = prefetch
        self.feed = feed
        self.sparse_ids = sparse_ids
        self.progress_every = progress_every
        self.dense = DenseSync(model, dense_sync_every)
        self.sparse: dict[str, SparseEmbedding] = {}
        for module in model.modules():
            if isinstance(module, SparseEmbedding):
                seen = self.sparse.setdefault(module.table_name, module)
                if (seen.dim, seen.num_embeddings) != (module.dim, module.num_embeddings):
                    raise ConfigError(f"sparse table {module.table_name!r} is used with two "
                                      "different shapes")
        clash = set(self.sparse) & set(self.dense.names)
        if clash:
            raise ConfigError(f"table name(s) {sorted(clash)} are both sparse and dense")
        self.config: Config | None = None
        self.name = ""
        self.params: ParameterClient | None = None
        self.master: TaskSource | None = None
        self._closers: list[Callable[[], None]] = []
        self.store: Any = None
        self.stats: LoopStats | None = None
        self.stop = threading.Event()

    # -- wiring -------------------------------------------------------------------------------

    def table_specs(self) -> list[pserver_pb2.TableSpec]:
        specs = self.dense.table_specs(self.optimizer)
        specs += [layer.table_spec(self.optimizer) for layer in self.sparse.values()]
        return specs

    def attach(self, params: ParameterClient, master: TaskSource | None, name: str) -> None:
        """Use these clients (tests and :meth:`connect`); declares and initialises the tables."""
        self.params, self.master, self.name = params, master, name
        params.declare_tables(self.table_specs())
        params.initialize(self.dense.values())
        self.dense.load(params.pull_dense(self.dense.names))

    def connect(self, config: Config | None = None) -> None:
        """Join the job described by ``config`` (default: the PADDLE_* environment)."""
        from elasticps.master.client import MasterClient
        from elasticps.pserver.client import PServerClient
        from elasticps.store import open_store

        config = config or current()
        if config.store is None:
            raise ConfigError("PADDLE_STORE is not set: this process is not part of a job")
        self.config = config
        name = f"trainer-{config.trainer_id}-{socket.gethostname()}-{os.getpid()}"
        store = open_store(config.store, config.job_name)
        self.store = store
        self._closers.append(store.close)
        params = PServerClient(store, config.token, config.pserver_count)
        self._closers.insert(0, params.close)
        master = MasterClient(store, config.token, name, lease_ttl=config.lease_ttl)
        self._closers.insert(0, master.close)
        master.register_trainer()
        log.info("Trainer %s joined job %s.", name, config.job_name)
        self.attach(params, master, name)

    def close(self) -> None:
        closers, self._closers = self._closers, []
        for close in closers:
            try:
                close()
            except Exception as exc:  # closing must not hide the error that ended training
                log.warning("Trainer %s: error while closing: %s", self.name, exc)

    # -- training -----------------------------------------------------------------------------

    def runner(self) -> StepRunner:
        if self.params is None:
            raise ConfigError("the trainer is not connected to a job (call connect() first)")
        return StepRunner(self.model, self.loss_fn, self.params, self.dense,
                          prefetch=self.prefetch, feed=self.feed, sparse_ids=self.sparse_ids)

    def train(self, reader: Any, num_passes: int,
              event_handler: Callable[[Event], None] | None = None, *,
              test_reader: Any = None) -> LoopStats:
        """Train ``num_passes`` passes over the reader's dataset, as tasks from the master.

        With ``test_reader`` (a dataset reader or URL, read whole and in order, never trained
        on) every ``EndPass`` also carries ``test_auc``, ``test_logloss`` and ``test_samples``
        of the parameters at the pass end; it costs one forward pass over the test set.
        """
        from elasticps.store.keys import TrainerProgress, publish_progress
        from elasticps.trainer.dataset_reader import as_dataset_reader

        if num_passes < 1:
            raise ConfigError(f"num_passes={num_passes!r} must be >= 1")
        if self.master is None:
            raise ConfigError("the trainer is not connected to a master (call connect() first)")
        source = as_dataset_reader(reader)
        evaluate = None
        if test_reader is not None:
            test = as_dataset_reader(test_reader)

            def evaluate() -> dict[str, float]:
                from elasticps.data import open_dataset

                return self.evaluate(open_dataset(test.dataset_url).iter_batches(
                    test.batch_size, features=test.features))
        self.master.set_dataset(source.dataset_url, source.chunks_per_task, num_passes)
        store = self.store

        def on_progress(stats: LoopStats) -> None:
            if store is None:
                return
            try:
                publish_progress(store, self.name, TrainerProgress(
                    stats.pass_id, stats.samples, stats.batches, stats.loss_ewma,
                    stats.train_s, stats.tasks, stats.timers))
            except Exception as exc:  # progress is cosmetic; the store may be briefly down
                log.debug("Trainer %s could not publish progress: %s", self.name, exc)

        runner = self.runner()
        try:
            worker = StepWorker(runner, trainer_name=self.name, event_handler=event_handler,
                                on_progress=on_progress, evaluate=evaluate)
            TaskLoop(self.master, source.task_batches, worker, trainer_name=self.name,
                     report_every=self.progress_every, stop=self.stop).run()
            self.stats = worker.finish()
        finally:
            runner.close()
        log.info("Trainer %s finished training: %d samples in %d batches, %.1fs.", self.name,
                 self.stats.samples, self.stats.batches, self.stats.train_s)
        return self.stats

    # -- after training -----------------------------------------------------------------------

    def request_save_model(self, block_seconds: float = 60.0) -> bool:
        """Ask the master whether this trainer is the one that saves the model."""
        if self.master is None:
            raise ConfigError("the trainer is not connected to a master")
        return self.master.request_save_model(block_seconds)

    def pull_dense(self) -> dict[str, np.ndarray]:
        if self.params is None:
            raise ConfigError("the trainer is not connected to a job")
        values = self.params.pull_dense(self.dense.names)
        self.dense.load(values)
        return {name: p.detach().numpy().copy() for name, p in self.dense.params.items()}

    def pull_rows(self, table: str, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Sorted unique ``ids`` of ``table`` and their current rows."""
        if self.params is None:
            raise ConfigError("the trainer is not connected to a job")
        if table not in self.sparse:
            raise ConfigError(f"no sparse table {table!r}; tables: {sorted(self.sparse)}")
        uniq, _ = self.sparse[table].unique_ids(np.asarray(ids))
        rows = np.empty((uniq.size, self.sparse[table].dim), dtype=np.float32)
        step = 1 << 18  # bounded messages for big tables
        for start in range(0, uniq.size, step):
            rows[start:start + step] = self.params.pull_sparse(table, uniq[start:start + step])
        return uniq, rows

    def evaluate(self, batches: Iterable[Any]) -> dict[str, float]:
        """AUC and log loss of the current parameters on ``batches`` (no gradients pushed)."""
        self.pull_dense()
        metrics = MetricAccumulator(cap=1 << 62)
        self.model.eval()
        try:
            with torch.no_grad():
                for batch in batches:
                    inputs, labels = self.feed(batch)
                    logits = self.model(*inputs).reshape(-1)
                    loss = float(self.loss_fn(logits, labels))
                    metrics.add(labels.numpy(), torch.sigmoid(logits).numpy(), loss)
        finally:
            self.model.train()
        return metrics.result()

    def export(self, directory: str | os.PathLike[str], ids: Mapping[str, np.ndarray],
               meta: Mapping[str, Any] | None = None) -> Path:
        """Export dense values and the rows of ``ids`` per sparse table (see export.py)."""
        dense = self.pull_dense()
        sparse = {table: self.pull_rows(table, table_ids) for table, table_ids in ids.items()}
        modules = {name: m.table_name for name, m in self.model.named_modules()
                   if isinstance(m, SparseEmbedding)}
        return export_model(directory, dense, sparse, modules, meta)
