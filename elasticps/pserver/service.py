"""The ``ParameterServer`` gRPC servicer: decode at the edge, then call :class:`ShardState`.

Every request is decoded and validated (dtype, shape, byte length, duplicate names) before the
shard sees it; errors from the tree become gRPC statuses through ``@rpc_handler``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import grpc
import numpy as np

from elasticps.errors import InvalidArgumentError, LayoutChangedError
from elasticps.proto import pserver_pb2, pserver_pb2_grpc
from elasticps.pserver.applied import AppliedSet
from elasticps.pserver.dense_tag import DenseTag
from elasticps.pserver.shard import BatchKey, ShardState
from elasticps.pserver.sparse_table import SparseCounters
from elasticps.rpc import decode_sparse, decode_tensor, encode_tensor, rpc_handler
from elasticps.rpc.codec import decode_float32
from elasticps.rpc.fields import check_name
from elasticps.rpc.server import SHARDS_METADATA_KEY

MAX_TABLES = 10_000


def _unique_names(names: Iterable[str], what: str) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise InvalidArgumentError(f"{what} names table {name!r} twice")
        seen.add(name)


def _named(values: Iterable[pserver_pb2.NamedTensor], what: str,
           decode: Callable[..., np.ndarray] = decode_tensor) -> dict[str, np.ndarray]:
    """Named tensors, each decoded by ``decode``; a name given twice is refused."""
    values = list(values)
    _unique_names((v.name for v in values), what)
    return {v.name: decode(v.tensor, name=f"{what}[{v.name!r}]") for v in values}


def _counts(entries: Iterable[pserver_pb2.SparseGrad]
            ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each sparse entry's show/click counts, where it carries both (the shard checks their
    length against its ids)."""
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for entry in entries:
        has_shows, has_clicks = entry.HasField("shows"), entry.HasField("clicks")
        if has_shows != has_clicks:
            raise InvalidArgumentError(f"sparse gradient[{entry.table!r}] carries shows or "
                                       "clicks without the other; send both or neither")
        if has_shows:
            out[entry.table] = (
                decode_tensor(entry.shows, dtype=np.float32, name=f"shows[{entry.table!r}]"),
                decode_tensor(entry.clicks, dtype=np.float32, name=f"clicks[{entry.table!r}]"))
    return out


def applied_messages(applied: AppliedSet, pass_id: int | None) -> list[pserver_pb2.AppliedTask]:
    """The applied batches of ``pass_id`` (every pass if None) as proto messages."""
    return [
        pserver_pb2.AppliedTask(pass_id=p, task_id=t, below=below, extra=extra,
                                applications=applied.applications(p, t))
        for p, t, below, extra in applied.tasks()
        if pass_id is None or p == pass_id
    ]


def _table_stats(name: str, rows: int, nbytes: int,
                 counters: SparseCounters | None) -> pserver_pb2.TableStats:
    out = pserver_pb2.TableStats(name=name, rows=rows, bytes=nbytes)
    if counters is not None:
        out.admitted, out.evicted, out.dropped = (counters.admitted, counters.evicted,
                                                  counters.dropped)
    return out


def check_layout(state: ShardState, context: grpc.ServicerContext | None) -> None:
    """Refuse a call routed for another number of shards (the job was resharded since the
    caller last looked): ABORTED, nothing changed; the client routes it again. A call without
    the header (an older client, a tool, an in-process call) is served."""
    metadata = context.invocation_metadata() if context is not None else None
    for key, value in metadata or ():
        if key == SHARDS_METADATA_KEY and value != str(state.num_shards):
            raise LayoutChangedError(
                f"pserver {state.shard} serves a layout of {state.num_shards} shards; the call "
                f"was routed for {value[:8]!r}")


# Writes a checkpoint now if anything changed; returns its id and the applied set it holds.
CheckpointNow = Callable[[], tuple[str, AppliedSet]]


class ParameterServerServicer(pserver_pb2_grpc.ParameterServerServicer):
    """Serves one shard. ``last_checkpoint`` reports the newest checkpoint id for Stats."""

    def __init__(
        self,
        state: ShardState,
        incarnation: str,
        last_checkpoint: Callable[[], str] = lambda: "",
        checkpoint_now: CheckpointNow | None = None,
    ) -> None:
        self.state = state
        self.incarnation = incarnation
        self._last_checkpoint = last_checkpoint
        self._checkpoint_now = checkpoint_now

    @rpc_handler
    def DeclareTables(  # noqa: N802 (gRPC method names)
        self, request: pserver_pb2.DeclareTablesRequest, context: grpc.ServicerContext
    ) -> pserver_pb2.DeclareTablesResponse:
        check_layout(self.state, context)
        if len(request.tables) > MAX_TABLES:
            raise InvalidArgumentError(f"{len(request.tables)} tables declared at once; at "
                                       f"most {MAX_TABLES}")
        for spec in request.tables:
            check_name(spec.name, "table name")
        self.state.declare(request.tables)
        return pserver_pb2.DeclareTablesResponse(
            initialized=self.state.initialized, shard=self.state.shard,
            num_shards=self.state.num_shards, tables=self.state.specs(),
            incarnation=self.incarnation,
        )

    @rpc_handler
    def InitDense(  # noqa: N802
        self, request: pserver_pb2.InitDenseRequest, context: grpc.ServicerContext
    ) -> pserver_pb2.InitDenseResponse:
        check_layout(self.state, context)
        values = _named(request.values, "initial values")
        return pserver_pb2.InitDenseResponse(initialized=self.state.init_dense(values))

    @rpc_handler
    def InitSparse(  # noqa: N802
        self, request: pserver_pb2.InitSparseRequest, context: grpc.ServicerContext
    ) -> pserver_pb2.InitSparseResponse:
        check_layout(self.state, context)
        ids, rows = decode_sparse(request.rows, name=f"starting rows[{request.table!r}]")
        return pserver_pb2.InitSparseResponse(
            initialized=self.state.init_sparse(request.table, ids, rows))

    @rpc_handler
    def PullDense(  # noqa: N802
        self, request: pserver_pb2.PullDenseRequest, context: grpc.ServicerContext
    ) -> pserver_pb2.PullDenseResponse:
        check_layout(self.state, context)
        _unique_names(request.names, "PullDense")
        known = DenseTag.from_proto(request.if_changed) if request.HasField("if_changed") else None
        pulled = self.state.pull_dense_tagged(request.names, known)
        return pserver_pb2.PullDenseResponse(
            values=[pserver_pb2.NamedTensor(name=name, tensor=encode_tensor(array))
                    for name, array in (pulled.values or {}).items()],
            tag=pulled.tag.to_proto(), unchanged=pulled.values is None, pristine=pulled.pristine)

    @rpc_handler
    def PullSparse(  # noqa: N802
        self, request: pserver_pb2.PullSparseRequest, context: grpc.ServicerContext
    ) -> pserver_pb2.PullSparseResponse:
        check_layout(self.state, context)
        ids = decode_tensor(request.ids, dtype=np.int64, shape=(None,), name="ids")
        rows, held = self.state.pull_held(request.table, ids, held=request.held)
        if held is None:
            return pserver_pb2.PullSparseResponse(rows=encode_tensor(rows))
        return pserver_pb2.PullSparseResponse(rows=encode_tensor(rows), held=encode_tensor(held))

    @rpc_handler
    def Push(  # noqa: N802
        self, request: pserver_pb2.PushRequest, context: grpc.ServicerContext
    ) -> pserver_pb2.PushResponse:
        check_layout(self.state, context)
        if not request.HasField("batch"):
            raise InvalidArgumentError(
                "a push must carry its BatchRef (pass_id, task_id, seq): exactly-once needs it"
            )
        batch = BatchKey(request.batch.pass_id, request.batch.task_id, request.batch.seq,
                         request.batch.step, request.batch.event_time)
        what = "delta" if request.delta else "gradient"
        # FLOAT32, or BFLOAT16 from a trainer that sends its dense gradients so (widened exactly)
        dense = _named(request.dense, f"dense {what}", decode_float32)
        _unique_names((s.table for s in request.sparse), f"sparse {what}")
        sparse = {s.table: decode_sparse(s.grad, name=f"sparse {what}[{s.table!r}]")
                  for s in request.sparse}
        if request.delta:
            covered = [batch] + [BatchKey(b.pass_id, b.task_id, b.seq, 0, b.event_time)
                                 for b in request.covers]
            result = self.state.push_delta(covered, dense, sparse)
            return pserver_pb2.PushResponse(applied=result.applied, skipped=result.skipped)
        if request.covers:
            raise InvalidArgumentError("covers is for delta pushes (geo mode) only")
        result = self.state.push(batch, dense, sparse, drop=request.drop,
                                 trainer=request.batch.trainer,
                                 counts=_counts(request.sparse))
        response = pserver_pb2.PushResponse(applied=result.applied, skipped=result.skipped,
                                            pending=result.pending)
        if result.dense_before is not None and result.dense_after is not None:
            response.dense_before.CopyFrom(result.dense_before.to_proto())
            response.dense_after.CopyFrom(result.dense_after.to_proto())
        return response

    @rpc_handler
    def JoinRound(  # noqa: N802
        self, request: pserver_pb2.RoundMemberRequest, context: grpc.ServicerContext
    ) -> pserver_pb2.RoundMemberResponse:
        check_layout(self.state, context)
        check_name(request.trainer, "trainer name")
        self.state.join_round(request.trainer)
        return pserver_pb2.RoundMemberResponse()

    @rpc_handler
    def LeaveRound(  # noqa: N802
        self, request: pserver_pb2.RoundMemberRequest, context: grpc.ServicerContext
    ) -> pserver_pb2.RoundMemberResponse:
        check_layout(self.state, context)
        self.state.leave_round(request.trainer)
        return pserver_pb2.RoundMemberResponse()

    @rpc_handler
    def Stats(  # noqa: N802
        self, request: pserver_pb2.StatsRequest, context: grpc.ServicerContext
    ) -> pserver_pb2.StatsResponse:
        check_layout(self.state, context)
        stats = self.state.stats()
        return pserver_pb2.StatsResponse(
            tables=[_table_stats(n, r, b, stats.sparse.get(n)) for n, r, b in stats.tables],
            pushes=stats.pushes, pushes_per_sec=stats.pushes_per_sec,
            duplicates=stats.duplicates, skipped_nonfinite=stats.skipped_nonfinite,
            shard=stats.shard, num_shards=stats.num_shards, initialized=stats.initialized,
            applied_batches=stats.applied_batches, restored_from=stats.restored_from,
            incarnation=self.incarnation, last_checkpoint=self._last_checkpoint(),
            mode=stats.mode, rounds=stats.rounds, round_waiting=stats.round_waiting,
            round_members=stats.round_members,
        )

    @rpc_handler
    def ListApplied(  # noqa: N802
        self, request: pserver_pb2.ListAppliedRequest, context: grpc.ServicerContext
    ) -> pserver_pb2.ListAppliedResponse:
        check_layout(self.state, context)
        with self.state.lock:
            tasks = applied_messages(self.state.applied,
                                     None if request.all_passes else request.pass_id)
            restored_from = self.state.restored_from
        return pserver_pb2.ListAppliedResponse(
            tasks=tasks, restored_from=restored_from, incarnation=self.incarnation
        )

    @rpc_handler
    def Checkpoint(  # noqa: N802
        self, request: pserver_pb2.CheckpointRequest, context: grpc.ServicerContext
    ) -> pserver_pb2.CheckpointResponse:
        check_layout(self.state, context)
        if self._checkpoint_now is None:  # no checkpoints configured: report memory
            with self.state.lock:
                checkpoint_id, applied = "", self.state.applied.copy()
        else:
            checkpoint_id, applied = self._checkpoint_now()
        return pserver_pb2.CheckpointResponse(
            checkpoint_id=checkpoint_id, tasks=applied_messages(applied, request.pass_id),
            incarnation=self.incarnation, applied_floor=applied.floor,
        )

    @rpc_handler
    def PruneApplied(  # noqa: N802
        self, request: pserver_pb2.PruneAppliedRequest, context: grpc.ServicerContext
    ) -> pserver_pb2.PruneAppliedResponse:
        check_layout(self.state, context)
        return pserver_pb2.PruneAppliedResponse(
            removed_tasks=self.state.prune_applied(request.upto_pass)
        )
