"""``elasticps.Trainer``: a PyTorch model trained against the pservers, fed by the master.

::

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = elasticps.nn.SparseEmbedding("features", 1_000_003, 8,
                                                    columns=["country", "device"])
            self.out = torch.nn.Linear(2 * 8 + 3, 1)

        def forward(self, batch):                      # an elasticps.data.TensorBatch
            return self.out(torch.cat([batch.dense, self.emb(batch).flatten(1)], 1))

    trainer = elasticps.Trainer(Model(), optimizer=elasticps.optim.Adam(lr=1e-3))
    elasticps.dist_train(trainer=trainer, reader=elasticps.reader.cloud(url), num_passes=2)
    metrics = trainer.evaluate(elasticps.reader.cloud(test_url))

Every trainable parameter of the model is a dense table, every sparse layer
(:mod:`elasticps.nn`) reads a sparse table; the optimizer spec runs on the pservers. The loss
and the metrics follow the dataset's label kind (objective.py, metrics.py).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from elasticps.config import COMPUTE_DTYPES, Config, current
from elasticps.data.dataset import reading_schema
from elasticps.data.manifest import read_manifest
from elasticps.data.model_inputs import model_inputs
from elasticps.data.schema import MIXED, Schema
from elasticps.data.score_histogram import ScoreHistogram
from elasticps.errors import ConfigError, ElasticPSError
from elasticps.proto import master_pb2, pserver_pb2
from elasticps.store.keys import publish_freshness, publish_task_scores
from elasticps.telemetry.logfmt import process_node
from elasticps.trainer.api import ParameterClient, TaggedDenseClient, TaskSource
from elasticps.trainer.dataset_reader import (
    TrainingData,
    as_dataset_reader,
    as_training_data,
    check_test_classes,
    dataset_schema,
    read_whole,
)
from elasticps.trainer.dense import DenseSync
from elasticps.trainer.dense_chain import DenseChain
from elasticps.trainer.device import Placement, select_device
from elasticps.trainer.events import Event
from elasticps.trainer.export import export_model
from elasticps.trainer.export_chain import load_state
from elasticps.trainer.export_schedule import ExportSchedule
from elasticps.trainer.feed import Feed, call_model
from elasticps.trainer.geo import GeoParams
from elasticps.trainer.heads import Head, HeadsObjective
from elasticps.trainer.hybrid.params import HybridParams, hybrid_params
from elasticps.trainer.model_dir import Draft
from elasticps.trainer.objective import (
    LABEL_KINDS,
    LossFn,
    MetricsFactory,
    Objective,
    TrainingObjective,
)
from elasticps.trainer.optim import Adam, OptimizerSpec
from elasticps.trainer.own_update import OwnDenseUpdate
from elasticps.trainer.precision import ComputePrecision, warn_if_emulated
from elasticps.trainer.progress import ProgressRecord
from elasticps.trainer.result import default_result
from elasticps.trainer.row_policy import policy_from_settings
from elasticps.trainer.scheduled_export import ScheduledExports
from elasticps.trainer.sparse import SparseLayer
from elasticps.trainer.sparse_rows import SparseTables
from elasticps.trainer.step import StepRunner
from elasticps.trainer.step_worker import LoopStats, StepWorker
from elasticps.trainer.stream_exports import StreamVersions
from elasticps.trainer.stream_reader import StreamReader
from elasticps.trainer.task_loop import TaskLoop
from elasticps.trainer.warm_start import export_of

if TYPE_CHECKING:
    from elasticps.store.api import Store
    from elasticps.telemetry.role import RoleTelemetry

log = logging.getLogger(__name__)

# Modes whose steps wait for the trainers that train a task (sync: the pservers' barriers,
# hybrid: the dense group's rounds); the step worker says when a task starts and ends.
ROUND_MODES = ("sync", "hybrid")

IDS_BATCH_SIZE = 65536  # batches read by export() to collect the training data's ids

_REMOVED = {
    "sparse_ids": "Trainer(sparse_ids=...) is gone: each sparse layer derives the ids it looks up "
                  "from the batch (elasticps.nn.SparseEmbedding(..., columns=[...])), so the "
                  "prefetched rows always match; see docs/trainer.md",
}


class Trainer:
    """Owns the model, the loss, the optimizer spec and, once connected, the job's clients.

    ``loss_fn`` (default: by the dataset's label kind) is called ``loss_fn(output, label)``
    with the model's output as it is, plus ``weight=w`` and ``batch=`` (the TensorBatch) if it
    has parameters of those names. ``metrics`` (a callable returning an
    :class:`elasticps.metrics.MetricAccumulator`) replaces the label kind's metrics. ``heads``
    (``{label: weight or elasticps.Head}``) trains a multi-task model that returns
    ``{label: output}``, one head per label column (heads.py; the default for a dataset whose
    labels mix kinds). ``feed`` maps a :class:`~elasticps.data.batch.TensorBatch` to the
    model's arguments (default: ``model(batch)``; see feed.py). ``label_kind`` (binary, float,
    multi_label, class) overrides the one the dataset's schema declares. ``device`` (default:
    ``cuda:0`` when the job's ``PADDLE_USE_GPU`` is true, else the CPU) is where the model
    computes; see device.py. ``compute_dtype`` (float32 or bfloat16; default: the job's
    ``PADDLE_COMPUTE_DTYPE``, float32 outside a job) is what its training steps compute in;
    see precision.py.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        loss_fn: LossFn | None = None,
        optimizer: OptimizerSpec | None = None,
        *,
        feed: Feed | None = None,
        label_kind: str | None = None,
        metrics: MetricsFactory | None = None,
        heads: Mapping[str, Head | float] | None = None,
        dense_sync_every: int = 1,
        prefetch: bool = True,
        progress_every: int = 20,
        device: str | torch.device | Placement | None = None,
        compute_dtype: str | None = None,
        **removed: Any,
    ) -> None:
        for name in removed:
            if name in _REMOVED:
                raise ConfigError(_REMOVED[name])
            raise TypeError(f"Trainer() got an unexpected keyword argument {name!r}")
        if optimizer is not None and not isinstance(optimizer, OptimizerSpec):
            raise ConfigError(
                f"optimizer={optimizer!r} must be an elasticps.optim spec (SGD, Momentum, "
                "Adagrad, Adam, AdamW): the optimizer runs on the pservers")
        if compute_dtype is not None and compute_dtype not in COMPUTE_DTYPES:
            raise ConfigError(f"compute_dtype={compute_dtype!r} is not one of "
                              f"{', '.join(COMPUTE_DTYPES)}")
        if label_kind is not None and label_kind not in LABEL_KINDS:
            raise ConfigError(f"label_kind={label_kind!r} is not one of {', '.join(LABEL_KINDS)}")
        if metrics is not None and not callable(metrics):
            raise ConfigError(f"metrics={metrics!r} must be a callable that returns a fresh "
                              "elasticps.metrics.MetricAccumulator (one per pass)")
        if heads is not None and (loss_fn is not None or label_kind is not None):
            raise ConfigError("heads= gives each label its own kind and loss: give a head its "
                              "loss with elasticps.Head(loss_fn=...), not loss_fn= or label_kind=")
        self.model = model
        self.loss_fn = loss_fn
        self.optimizer = optimizer or Adam()
        self.prefetch = prefetch
        self.feed = feed
        self.label_kind = label_kind
        self.metrics = metrics
        self.heads = heads
        self.progress_every = progress_every
        self.compute_dtype = compute_dtype
        self._device = device if isinstance(device, Placement | None) \
            else Placement.for_device(device)
        self.dense = DenseSync(model, dense_sync_every)
        self.tables = SparseTables(model)
        clash = set(self.tables) & set(self.dense.names)
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
        self._trained_on: TrainingData | None = None  # the last dataset (or stream) trained
        # resolved by train() from the dataset
        self._objective: TrainingObjective | None = None
        self._worker: StepWorker | None = None  # the training in progress (for the metrics)
        # A warm start's sparse rows (warm_start), sent by whoever initialises the tables.
        self._warm_rows: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.progress = ProgressRecord(None, "")  # job/progress/<name>, once connected

    @property
    def sparse(self) -> dict[str, SparseLayer]:
        """Each sparse table and the layer that declares it."""
        return {table: self.tables.first(table) for table in self.tables}

    # -- wiring -------------------------------------------------------------------------------

    def table_specs(self) -> list[pserver_pb2.TableSpec]:
        specs = self.dense.table_specs(self.optimizer)
        sparse = [self.tables.first(t).table_spec(self.optimizer) for t in self.tables]
        # The job spec's tables: (PADDLE_SPARSE_POLICIES) replace what the layers declare.
        settings = self.config.sparse_policy_settings if self.config is not None else {}
        unknown = sorted(set(settings) - set(self.tables))
        if unknown:
            raise ConfigError(f"the job declares policies for {unknown}, which are not sparse "
                              f"tables of this model; its tables: {sorted(self.tables)}")
        for spec in sparse:
            if spec.name in settings:
                spec.policy.CopyFrom(policy_from_settings(spec.name, settings[spec.name]))
        return specs + sparse

    def attach(self, params: ParameterClient, master: TaskSource | None, name: str) -> None:
        """Use these clients (tests and :meth:`connect`); declares and initialises the tables."""
        self.params, self.master, self.name = params, master, name
        self._place()
        specs = self.table_specs()
        params.declare_tables(specs)
        # Pushes carry show/click counts for the tables that evict by them (as declared: the
        # job spec's tables: may have replaced a layer's policy).
        scored = pserver_pb2.SparsePolicy.SCORE
        self.tables.counted = {s.name for s in specs if s.policy.evict == scored}
        params.initialize(self.dense.values(), rows=self._warm_rows)
        self.dense.load(params.pull_dense(self.dense.names))
        self.tables.bind(params)

    def _place(self) -> None:
        """Move the model to its device (the Trainer's ``device``, else PADDLE_USE_GPU's) and
        tell the dense and sparse sides where tensors go."""
        placement = self._device or select_device(
            self.config.use_gpu if self.config is not None else False)
        self.model.to(placement.device)
        self.dense.placement = placement
        self.tables.placement = placement
        if placement.device.type != "cpu":
            log.info("Trainer %s computes on %s (pinned host memory, asynchronous copies).",
                     self.name, placement.device)

    @property
    def placement(self) -> Placement:
        return self.tables.placement

    def _publish_scores(self, task: master_pb2.Task, scores: ScoreHistogram) -> None:
        """A finished stream task's progressive-validation scores, for the master to sum per
        partition; a store that cannot take them costs the figure, not the training."""
        doc = {"partition": task.partition, "time": task.event_time or None,
               "trainer": self.name, **scores.to_json()}
        try:
            publish_task_scores(self.store, task.partition, task.task_id, doc)
        except ElasticPSError as exc:
            log.warning("Trainer %s could not record the scores of task %d (partition %s): "
                        "%s", self.name, task.task_id, task.partition, exc)

    def warm_start(self, model_dir: str | os.PathLike[str]) -> None:
        """Start the job's tables from an export (``model_dir``: a full export, the newest
        delta of a chain, or a model directory whose ``LATEST`` names its newest version)
        instead of their initializers; call it before :meth:`connect` (which does it itself
        when ``PADDLE_WARM_START`` names one: ``elasticps run --warm-start``). The
        model's dense parameters take the export's values; each sparse table starts with the
        export's rows (fresh optimizer state, each row as pushed once). It applies when the
        tables are first initialised: a job whose pservers restored checkpoints goes on from
        them. Every dense table of the model must be in the export, with its shape; a sparse
        table the export does not hold starts empty."""
        if self.params is not None:
            raise ConfigError("warm_start() comes before connect(): the tables are initialised "
                              "when the trainer joins the job")
        state = load_state(export_of(model_dir))
        values = self.dense.values()
        missing = sorted(set(values) - set(state.dense))
        unknown = sorted(set(state.sparse) - set(self.tables))
        if missing or unknown:
            raise ConfigError(f"the export {model_dir} does not fit this model: dense table(s) "
                              f"{missing} missing from it, sparse table(s) {unknown} not in the "
                              f"model (its sparse tables: {sorted(self.tables)})")
        for name, value in values.items():
            if state.dense[name].shape != value.shape:
                raise ConfigError(f"the export {model_dir} holds {name!r} of shape "
                                  f"{list(state.dense[name].shape)}, the model "
                                  f"{list(value.shape)}")
        self.dense.load({name: state.dense[name] for name in values})
        self._warm_rows = dict(state.sparse)
        log.info("Trainer starts from the export %s: %d dense tables, %d sparse rows.",
                 model_dir, len(values), sum(ids.size for ids, _ in state.sparse.values()))

    def connect(self, config: Config | None = None) -> None:
        """Join the job described by ``config`` (default: the PADDLE_* environment)."""
        from elasticps.master.client import MasterClient
        from elasticps.pserver.client import PServerClient
        from elasticps.rpc.call_metrics import ClientCallMetrics
        from elasticps.rpc.credentials import credentials_from_config
        from elasticps.store import open_store

        config = config or current()
        if config.store is None:
            raise ConfigError("PADDLE_STORE is not set: this process is not part of a job")
        self.config = config
        if config.warm_start and not self._warm_rows:
            self.warm_start(config.warm_start)
        name = process_node("trainer", config.trainer_id)
        store = open_store(config.store, config.job_name)
        self.store = store
        self._closers.append(store.close)
        telemetry = self._telemetry(config, name)
        calls = ClientCallMetrics(telemetry.registry)
        credentials = credentials_from_config(config)
        pservers = PServerClient(store, credentials, config.pserver_count, call_metrics=calls,
                                 dense_grad_dtype=config.dense_grad_dtype)
        self.dense.grad_dtype = config.dense_grad_dtype
        if config.dense_grad_dtype != "float32":
            log.info("Trainer %s rounds its dense gradients to %s (PADDLE_DENSE_GRAD_DTYPE).",
                     name, config.dense_grad_dtype)
        self._closers.insert(0, pservers.close)
        params: ParameterClient = pservers
        master = MasterClient(store, credentials, name, lease_ttl=config.lease_ttl,
                              call_metrics=calls)
        self._closers.insert(0, master.close)
        master.register_trainer()
        if config.mode == "hybrid":  # dense in a replica on every trainer (trainer/hybrid/)
            hybrid = hybrid_params(params, store, config, name, lambda: self.placement.device)
            self._closers.insert(0, hybrid.close)
            params = hybrid
        self.progress.store, self.progress.name = store, name
        log.info("Trainer %s joined job %s.", name, config.job_name)
        self._serve_telemetry(telemetry, config, name, store)
        self.attach(params, master, name)

    def _telemetry(self, config: Config, name: str) -> RoleTelemetry:
        """This trainer's metrics, labelled with its index (``trainer``), not its name: a
        restarted trainer continues its index's series."""
        from elasticps.telemetry.logfmt import set_node
        from elasticps.telemetry.role import RoleTelemetry
        from elasticps.trainer.telemetry import register_trainer_metrics

        set_node(name)
        telemetry = RoleTelemetry(config.job_name, "trainer", name,
                                  trainer=str(config.trainer_id))
        register_trainer_metrics(telemetry.registry, lambda: self._worker)
        return telemetry

    def _serve_telemetry(self, telemetry: RoleTelemetry, config: Config, name: str,
                         store: Store) -> None:
        """Serve the metrics and publish where (``metrics/trainer/<name>``)."""
        try:
            telemetry.start(config.host, config.metrics_port)
        except OSError as exc:  # a second trainer in one pod: the fixed port is taken
            log.warning("Trainer %s cannot serve metrics on port %d (%s); it takes any free "
                        "port.", name, config.metrics_port, exc)
            telemetry.start(config.host, 0)
        telemetry.publish(store, config.lease_ttl)
        self._closers.insert(0, telemetry.close)

    def close(self) -> None:
        """Leave the job: the layers are unbound, the clients closed."""
        self.tables.bind(None)
        closers, self._closers = self._closers, []
        for close in closers:
            try:
                close()
            except Exception as exc:  # closing must not hide the error that ended training
                log.warning("Trainer %s: error while closing: %s", self.name, exc)
        self.params = None
        self.master = None

    def report_stage(self, stage: str | None) -> None:
        """Say what this trainer does outside training, in a few words (``"writing data"``,
        ``"exporting"``, ``"scoring"``); ``elasticps run``'s progress line and the status page
        show it until the next stage, :meth:`train` or the trainer's exit. None: nothing."""
        self.progress.set_stage(stage)

    # -- training -----------------------------------------------------------------------------

    def objective(self, dataset_url: str | None = None) -> TrainingObjective:
        """The loss and metrics for the dataset at ``dataset_url`` (the trainer's
        ``label_kind`` wins; then the dataset's schema; then the training data's kind). Heads
        (``heads=``, or labels of mixed kinds) make it a multi-task objective (heads.py)."""
        kind = self.label_kind
        schema = dataset_schema(dataset_url) if dataset_url is not None else None
        if kind is None and schema is not None:
            if self.heads is not None or schema.label_kind == MIXED:
                if self.loss_fn is not None:
                    raise ConfigError(f"the dataset's labels are of kinds "
                                      f"{[label.kind for label in schema.labels]}: a multi-task "
                                      "model gives each head its loss with "
                                      "elasticps.Head(loss_fn=...), not loss_fn=")
                return HeadsObjective([(label.name, label.kind) for label in schema.labels],
                                      self.heads, self.metrics)
            kind = schema.label_kind
        if self.heads is not None and self._objective is None:
            raise ConfigError("heads= needs a dataset whose schema names its labels "
                              f"({dataset_url or 'no dataset'} has none)")
        if kind is None and self._objective is not None:
            return self._objective
        names = None if schema is None else [label.name for label in schema.labels]
        return Objective(kind or "binary", self.loss_fn, self.metrics, names)

    @property
    def mode(self) -> str:
        """The job's training mode (PADDLE_TRAINING_MODE; async outside a job)."""
        return self.config.mode if self.config is not None else "async"

    def runner(self, objective: TrainingObjective | None = None) -> StepRunner:
        if self.params is None:
            raise ConfigError("the trainer is not connected to a job (call connect() first)")
        # Sync mode pulls after its step's barrier closed: nothing to overlap, nothing stale;
        # geo mode trains a local copy, pulled once a window; hybrid mode prefetches sparse
        # rows only, its dense values are the replica's after the last round.
        prefetch = self.prefetch and self.mode in ("async", "hybrid")
        if self.mode != "async" and self.dense.sync_every != 1:
            raise ConfigError(f"dense_sync_every={self.dense.sync_every} does not fit "
                              f"{self.mode} mode: every step must load the values it trains "
                              "(the combined step's in sync, the local copy's in geo; use 1)")
        hybrid = isinstance(self.params, HybridParams)
        # The replica splits tables as the pservers do; only a clip norm sees the split.
        own = (OwnDenseUpdate(self.dense.table_specs(self.optimizer),
                              int(getattr(self.params, "num_shards", 1)))
               if prefetch and not hybrid else None)
        if self.mode == "geo":
            assert self.config is not None
            geo = GeoParams(self.params, self.config.geo_steps)
            return StepRunner(self.model, objective or self.objective(), geo, self.dense,
                              prefetch=False, feed=self.feed, tables=self.tables,
                              on_flush=geo.flush, precision=self.precision())
        chain = (DenseChain(self.params, self.dense.names)
                 if own is not None and isinstance(self.params, TaggedDenseClient) else None)
        # hybrid: its last sparse push may be in flight (trainer/hybrid/params.py), and the
        # dense values are the replica's once the last round landed (no own update needed)
        on_flush = self.params.flush if isinstance(self.params, HybridParams) else None
        early = (self.params.early_update(self.dense)
                 if isinstance(self.params, HybridParams) else None)
        return StepRunner(self.model, objective or self.objective(), self.params, self.dense,
                          prefetch=prefetch, feed=self.feed, tables=self.tables,
                          own_update=own, dense_chain=chain, on_flush=on_flush,
                          dense_after_push=hybrid, early_update=early,
                          precision=self.precision())

    def precision(self) -> ComputePrecision:
        """What the training steps compute in (``compute_dtype``, else the job's), said in the
        log once per runner, with a warning where this CPU would emulate it."""
        dtype = self.compute_dtype or (self.config.compute_dtype if self.config is not None
                                       else "float32")
        precision = ComputePrecision(dtype, self.placement.device)
        warn_if_emulated(precision, self.name or "(not in a job)")
        return precision

    def train(self, reader: Any, num_passes: int,
              event_handler: Callable[[Event], None] | None = None, *,
              test_reader: Any = None, export: ExportSchedule | None = None) -> LoopStats:
        """Train ``num_passes`` passes over the reader's dataset, as tasks from the master; a
        stream (``elasticps.reader.stream``) is trained once (``num_passes=1``), partition by
        partition as they land, until its end marker (waiting for its first partition first).

        With ``test_reader`` (a dataset reader or URL, read whole and in order, never trained
        on) every ``EndPass`` also carries the ``test_*`` metrics of the parameters at the pass
        end (``test_auc``... by label kind); it costs one forward pass over the test set. At the
        end the last pass's metrics become the job's result unless there is one already
        (result.py). With ``export`` (an :class:`ExportSchedule`) versions of the model are
        exported into its directory while training (export_schedule.py).
        """
        if num_passes < 1:
            raise ConfigError(f"num_passes={num_passes!r} must be >= 1")
        if self.master is None:
            raise ConfigError("the trainer is not connected to a master (call connect() first)")
        if export is not None and not isinstance(export, ExportSchedule):
            raise ConfigError(f"export={export!r} must be an elasticps.ExportSchedule")
        source = as_training_data(reader)
        schema_url = source.schema_url(self.stop, self.progress.set_stage)
        objective = self.objective(schema_url)
        self._objective, self._trained_on = objective, source
        evaluate = None
        if test_reader is not None:
            test = as_dataset_reader(test_reader)
            check_test_classes(schema_url, test.dataset_url)

            def evaluate() -> dict[str, float]:
                with self.progress.during("evaluating the test set"):
                    return self.evaluate(test)
        source.join(self.master, num_passes)
        self.progress.stage = None  # training

        runner = self.runner(objective)
        try:
            worker = StepWorker(runner, trainer_name=self.name, event_handler=event_handler,
                                on_progress=self.progress.publish, evaluate=evaluate,
                                sync_rounds=self.params if self.mode in ROUND_MODES else None,
                                on_scored=self._publish_scores if self.store else None)
            self._worker = worker
            exports = None if export is None else ScheduledExports(
                worker, export, self._version_writer(), self.master.request_save_model,
                trainer_name=self.name, notes=self._version_notes(source))
            TaskLoop(self.master, source.task_batches, exports or worker,
                     trainer_name=self.name, report_every=self.progress_every,
                     stop=self.stop).run()
            if exports is not None and not self.stop.is_set():
                exports.finish()
            self.stats = worker.finish()
        finally:
            runner.close()
            self.tables.bind(self.params)  # geo: the runner had bound its local copy
        skipped = runner.dense_chain.skipped if runner.dense_chain is not None else 0
        log.info("Trainer %s finished training: %d samples in %d batches, %.1fs (%d dense pulls "
                 "skipped: its own updates were the only ones).", self.name, self.stats.samples,
                 self.stats.batches, self.stats.train_s, skipped)
        if not self.stop.is_set():
            self._offer_result(num_passes, objective.kind)
        return self.stats

    def _offer_result(self, passes: int, kind: str) -> None:
        """The last pass's metrics as the job's result, unless one exists (result.py)."""
        from elasticps.store.keys import publish_result_if_absent

        if self.store is None or self.stats is None:
            return
        doc = default_result(self.stats.pass_metrics, passes=passes, label_kind=kind,
                             trainer=self.name, headline=self.stats.headline)
        try:
            if publish_result_if_absent(self.store, doc):
                log.info("Trainer %s published the job's result (the last pass's metrics).",
                         self.name)
        except Exception as exc:  # the result is a report; training itself succeeded
            log.warning("Trainer %s could not publish the job's result: %s", self.name, exc)

    # -- after training -----------------------------------------------------------------------

    def request_save_model(self, block_seconds: float = 60.0) -> bool:
        """Ask the master whether this trainer is the one that saves the model."""
        if self.master is None:
            raise ConfigError("the trainer is not connected to a master")
        return self.master.request_save_model(block_seconds)

    def _client(self) -> ParameterClient:
        if self.params is None:
            raise ConfigError("the trainer is not connected to a job (connect() first; "
                              "close() leaves it)")
        return self.params

    def pull_dense(self) -> dict[str, np.ndarray]:
        values = self._client().pull_dense(self.dense.names)
        self.dense.load(values)
        return self.dense.values()

    def pull_rows(self, table: str, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Sorted unique ``ids`` of ``table`` and their current rows."""
        client = self._client()
        if table not in self.tables.layers:
            raise ConfigError(f"no sparse table {table!r}; tables: {sorted(self.tables)}")
        layer = self.tables.first(table)
        uniq, _ = layer.unique_ids(np.asarray(ids))
        rows = np.empty((uniq.size, layer.dim), dtype=np.float32)
        step = 1 << 18  # bounded messages for big tables
        for start in range(0, uniq.size, step):
            rows[start:start + step] = client.pull_sparse(table, uniq[start:start + step])
        return uniq, rows

    def held_rows(self, table: str, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Of the sorted unique ``ids``, those with a row on the pservers, and their rows (an id
        not admitted yet or evicted has none: it is not part of the model)."""
        client = self._client()
        if table not in self.tables.layers:
            raise ConfigError(f"no sparse table {table!r}; tables: {sorted(self.tables)}")
        layer = self.tables.first(table)
        uniq, _ = layer.unique_ids(np.asarray(ids))
        keep = np.zeros(uniq.size, dtype=bool)
        rows = np.empty((uniq.size, layer.dim), dtype=np.float32)
        step = 1 << 18  # bounded messages for big tables
        for start in range(0, uniq.size, step):
            rows[start:start + step], keep[start:start + step] = client.pull_held(
                table, uniq[start:start + step])
        return uniq[keep], rows[keep]

    def evaluate(self, data: Any) -> dict[str, float]:
        """Metrics of the current parameters on ``data`` (no gradients pushed): a reader
        (``elasticps.reader.cloud(url)``), a dataset URL, or an iterable of batches. Works
        during and after training, until :meth:`close`."""
        client = self._client()
        batches, url = read_whole(data)
        objective = self.objective(url)
        self.pull_dense()
        metrics = objective.metrics(cap=1 << 62)
        self.model.eval()
        try:
            with torch.no_grad():
                for batch in batches:
                    self.tables.install(self.tables.pull(client, batch), batch,
                                        requires_grad=False)
                    try:
                        tensors = self.placement.batch(batch)
                        scored = objective.score(call_model(self.model, self.feed, tensors),
                                                 tensors)
                    finally:
                        self.tables.clear()
                    metrics.add(scored.output, scored.label, float(scored.loss))
        finally:
            self.model.train()
        return metrics.result()

    def table_ids(self, data: Any) -> dict[str, np.ndarray]:
        """Per sparse table, every id its layers read in ``data`` (reader, URL or batches)."""
        batches, _ = read_whole(data)
        return self.tables.ids_in(batches)

    def export(self, directory: str | os.PathLike[str],
               ids: Mapping[str, np.ndarray] | Any = None,
               meta: Mapping[str, Any] | None = None,
               parent: str | os.PathLike[str] | None = None) -> Path:
        """Export dense values, the rows the pservers hold for ``ids`` per sparse table, and
        what each sparse layer reads (see export.py). ``ids``: a mapping ``{table: ids}``, or
        data (reader, URL, batches) whose ids the layers read; default: the data :meth:`train`
        read. ``parent``: a previous export's directory; this export is then a delta of it
        (changed rows, tombstones for rows gone, dense values). Afterwards the module's dense
        parameters hold the values exported."""
        table_ids = self._export_ids(ids)
        return self._export_values(directory, self.pull_dense(), table_ids, meta, parent)

    def _export_ids(self, ids: Mapping[str, np.ndarray] | Any) -> Mapping[str, np.ndarray]:
        if ids is None:
            ids = self._trained_ids()
        if not isinstance(ids, Mapping):
            ids = self.table_ids(ids)
        missing = sorted(set(self.tables) - set(ids))
        if missing:
            raise ConfigError(f"no ids to export for sparse table(s) {missing}: their layers "
                              "read no columns; pass ids={table: ids}")
        return ids

    def _export_values(self, directory: str | os.PathLike[str], dense: Mapping[str, np.ndarray],
                       ids: Mapping[str, np.ndarray], meta: Mapping[str, Any] | None,
                       parent: str | os.PathLike[str] | None) -> Path:
        sparse = {table: self.held_rows(table, table_ids) for table, table_ids in ids.items()}
        layers = {path: layer.export_record() for path, layer in self.tables.paths.items()}
        schema = self._read_schema()
        return export_model(directory, dense, sparse, layers, meta,
                            schema=None if schema is None else schema.to_dict(),
                            inputs=None if schema is None else model_inputs(schema),
                            parent=parent)

    def _trained_ids(self) -> Any:
        """What export() reads ids from by default: the data train() read."""
        if self._trained_on is None:
            raise ConfigError("export() without ids needs a trained model (or pass ids)")
        # Only ids are read: big batches, fewer slices.
        return dataclasses.replace(self._trained_on, batch_size=max(
            self._trained_on.batch_size, IDS_BATCH_SIZE), shuffle_seed=None)

    def _version_notes(self, source: Any) -> StreamVersions | None:
        """A stream's versions record how far it is trained, and their freshness."""
        status = getattr(self.master, "status", None)
        if not isinstance(source, StreamReader) or status is None:
            return None
        store = self.store

        def publish(version: int, doc: dict[str, Any]) -> None:
            if store is not None:
                publish_freshness(store, version, doc)

        return StreamVersions(source.dataset_url, source.start, status, publish)

    def _version_writer(self) -> Callable[[Path, Draft], None]:
        """Writes one scheduled version: the export of every id the training data holds, a
        delta of the draft's parent if it has one. A dataset's ids are read once, at the first
        version; a stream's are added at each version from the partitions committed since
        (each partition read once)."""
        ids: dict[str, np.ndarray] = {}
        read: set[str] = set()  # a stream's partitions whose ids are in ``ids``

        def add_stream_ids(stream: StreamReader) -> None:
            new = [p for p in stream.committed() if p.name not in read]
            if not new:
                return
            found = self.tables.ids_in(stream.read_partitions(new, max(stream.batch_size,
                                                                       IDS_BATCH_SIZE)))
            for table, table_ids in found.items():
                ids[table] = (np.union1d(ids[table], table_ids) if table in ids
                              else table_ids)
            read.update(p.name for p in new)

        def write(directory: Path, draft: Draft) -> None:
            if isinstance(self._trained_on, StreamReader):
                add_stream_ids(self._trained_on)
                self._export_ids(ids)  # every table has ids: else the ConfigError naming them
            elif not ids:
                ids.update(self._export_ids(None))
            # The pservers' values, not loaded into the module: an export during training
            # must not change what the next step computes from (geo mode's local copy, say).
            dense = self.dense.shaped(self._client().pull_dense(self.dense.names))
            with self.progress.during("exporting"):
                self._export_values(directory, dense, ids, draft.meta, draft.parent)

        return write

    def _read_schema(self) -> Schema | None:
        """The schema the training data was read with (a Criteo-layout dataset's: the preset
        with the reader's id space and dense norm), None without one."""
        if self._trained_on is None:
            return None
        manifest = read_manifest(self._trained_on.schema_url())
        if not isinstance(getattr(manifest, "schema", None), Schema):
            return None
        return reading_schema(manifest, self._trained_on.features)

