"""What the trainer needs from the pservers and the master, as typing protocols.

The real implementations are :class:`elasticps.pserver.client.PServerClient` and
:class:`elasticps.master.client.MasterClient`; unit tests of one trainer class may pass an
in-memory stand-in. Keeping the trainer coded against these narrow protocols is what lets the
torch binding be tested without sockets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from elasticps.data.batch_plan import BatchPlan
from elasticps.proto import common_pb2, master_pb2, pserver_pb2
from elasticps.pserver.dense_tag import DenseTag, TaggedDense


class ParameterClient(Protocol):
    """Sharded dense + sparse tables on the pservers."""

    def declare_tables(self, specs: list[pserver_pb2.TableSpec]) -> None: ...

    def initialize(self, dense_values: dict[str, np.ndarray], init_fn: Any = None,
                   rows: Mapping[str, tuple[np.ndarray, np.ndarray]] | None = None) -> None:
        """``rows`` (a warm start): per sparse table the ids and rows the tables start with."""
        ...

    def pull_dense(self, names: Sequence[str] | None = None) -> dict[str, np.ndarray]: ...

    def pull_sparse(self, table: str, ids: np.ndarray) -> np.ndarray: ...

    def pull_held(self, table: str, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rows of ``ids`` and whether each has a row on the pservers (what an export holds)."""
        ...

    def push(
        self,
        batch: common_pb2.BatchRef,
        dense_grads: Mapping[str, np.ndarray],
        sparse_grads: Mapping[str, tuple[np.ndarray, np.ndarray]],
        counts: Mapping[str, tuple[np.ndarray, np.ndarray]] | None = None,
    ) -> Any:
        """``counts``: per SCORE table (shows, clicks) per id of its gradient."""
        ...

    def join_round(self, trainer: str) -> None: ...  # sync mode: steps wait for trainer

    def leave_round(self, trainer: str) -> None: ...  # sync mode: they no longer do

    def close(self) -> None: ...


@runtime_checkable
class TaggedDenseClient(Protocol):
    """A client whose dense pulls carry the shards' dense tags (trainer/dense_chain.py)."""

    def pull_dense_tagged(self, names: Sequence[str] | None = None,
                          if_changed: Sequence[DenseTag] | None = None) -> TaggedDense: ...


class TaskSource(Protocol):
    """The master's task queue, as a trainer sees it."""

    def set_dataset(self, url: str, chunks_per_task: int, num_passes: int,
                    plan: BatchPlan, stream_from: str | None = None) -> Any: ...

    def get_task(self, pass_id: int) -> master_pb2.GetTaskResponse: ...

    def report_progress(self, task: master_pb2.Task, records_done: int) -> bool: ...

    def task_finished(self, task: master_pb2.Task, records: int, batches: int) -> bool: ...

    def finish_and_get(self, task: master_pb2.Task, records: int, batches: int,
                       pass_id: int) -> tuple[bool, master_pb2.GetTaskResponse]:
        """task_finished, then get_task(pass_id), in one call (one round trip)."""
        ...

    def task_failed(self, task: master_pb2.Task, reason: str) -> bool: ...

    def request_save_model(self, block_seconds: float) -> bool: ...

    def close(self) -> None: ...
