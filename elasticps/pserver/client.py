"""``PServerClient``: the trainer's view of N pserver shards as one parameter store.

Routing is :mod:`elasticps.pserver.routing`'s (the shards enforce the same rule): sparse id
``x`` lives on shard ``x % N`` (a pull sends each shard its ids, deduplicated, and puts the rows
back in the caller's order); a dense parameter is flattened and split by ``np.array_split``.

A push is one atomic Push per shard, shards in parallel, each carrying the batch's BatchRef —
every shard gets one, even with nothing to apply, so each shard's applied set accounts for every
batch. Addresses come from the store (``pserver/slot/<i>``, watched): when a shard is down the
client logs, waits with backoff (:data:`PSERVER_RETRY`) for it (or for its new address) and
retries, up to ``deadline`` seconds, so a pserver restart pauses trainers instead of crashing
them. Retrying a push is safe: a shard that already applied it answers ``applied=false``.

The number of shards can change while a job runs (``elasticps scale --pservers M``,
:mod:`elasticps.pserver.reshard.split`): the client follows ``pserver/layout``, every call carries
the shard count it was routed for (metadata ``x-elasticps-shards``), and a pserver of another
layout refuses it with ABORTED (:class:`LayoutChangedError`), changing nothing. Each public call
is routed as a whole again under the new layout; a push re-sent that way is safe (shards that
applied parts of it before the resharding know which, :mod:`elasticps.pserver.reshard.lineage`).

Initialisation: exactly one trainer initialises (store lock ``pserver/init/lock``, then
``pserver/init/done``); the others wait until every shard reports initialised. A shard restored
from a checkpoint is already initialised and is left alone. A warm start's sparse rows
(``initialize(rows=...)``, from an export) go to each shard before its dense values, which end
its initialisation.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

import grpc
import numpy as np
from google.protobuf import json_format

from elasticps.config import DENSE_GRAD_DTYPES
from elasticps.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    LayoutChangedError,
    OverloadedError,
    StoreValueError,
    UnavailableError,
)
from elasticps.gradients import finite
from elasticps.proto import common_pb2, pserver_pb2, pserver_pb2_grpc
from elasticps.pserver.dense_table import strictly_increasing
from elasticps.pserver.dense_tag import DenseTag, TaggedDense
from elasticps.pserver.routing import dense_parts, route_ids
from elasticps.pserver.sync_wait import CrossShardWait
from elasticps.retry import RetryPolicy
from elasticps.rpc import (
    JobCredentials,
    call,
    decode_tensor,
    encode_sparse,
    encode_tensor,
    make_channel,
)
from elasticps.rpc.call_metrics import ClientCallMetrics
from elasticps.rpc.codec import encode_dense
from elasticps.rpc.server import SHARDS_METADATA_KEY
from elasticps.store import Compare, Put, Store
from elasticps.store.api import Event, KeyValue
from elasticps.store.follow import PrefixFollower
from elasticps.store.keys import (
    PSERVER_INIT_DONE,
    PSERVER_INIT_LOCK,
    PSERVER_INIT_PREFIX,
    PSERVER_LAYOUT,
    PSERVER_SLOT_PREFIX,
    InitMarker,
    PServerLayout,
    PServerSlot,
    pserver_slot,
    read_pserver_layout,
    slot_of,
)

log = logging.getLogger(__name__)

INIT_ROWS_PER_REQUEST = 1 << 16  # a warm start's rows per InitSparse call (bounded messages)

# A shard that is down (UNAVAILABLE), restarted empty (FAILED_PRECONDITION until a trainer
# initialises it again) or full (RESOURCE_EXHAUSTED: more callers at once than its call limit)
# is waited for; trainers pause instead of crashing.
PSERVER_RETRY = RetryPolicy(deadline=600.0, initial_backoff=0.1, max_backoff=2.0,
                            retryable=(UnavailableError, FailedPreconditionError,
                                       OverloadedError))

T = TypeVar("T")

# How often the watcher threads look at the closed flag between events: close() waits for them,
# and a trainer's close is on the way to its job's end.
WATCH_POLL_S = 0.1


class _Shard:
    """Connection state of one slot."""

    def __init__(self) -> None:
        self.address: str | None = None
        self.value: bytes | None = None  # the slot key's value (a new process: a new value)
        self.channel: grpc.Channel | None = None
        self.stub: pserver_pb2_grpc.ParameterServerStub | None = None
        self.needs_declare = False


class PServerClient:
    """Client of all N pserver shards of a job. Thread-safe."""

    def __init__(
        self,
        store: Store,
        credentials: JobCredentials,
        num_shards: int,
        *,
        deadline: float = 600.0,
        call_timeout: float = 60.0,
        name: str | None = None,
        init_lock_ttl: int = 10,
        call_metrics: ClientCallMetrics | None = None,
        dense_grad_dtype: str = "float32",
    ) -> None:
        if num_shards < 1:
            raise InvalidArgumentError(f"num_shards={num_shards} must be >= 1")
        self.store, self.credentials = store, credentials
        self.deadline, self.call_timeout = deadline, call_timeout
        self.retry = PSERVER_RETRY.within(deadline)
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"
        self.init_lock_ttl = init_lock_ttl
        self.call_metrics = call_metrics  # every call counted by shard, method and code
        if dense_grad_dtype not in DENSE_GRAD_DTYPES:
            raise InvalidArgumentError(f"dense_grad_dtype={dense_grad_dtype!r} is not one of "
                                       f"{', '.join(DENSE_GRAD_DTYPES)}")
        self.dense_grad_dtype = dense_grad_dtype  # how a push's dense part travels
        layout = read_pserver_layout(store)  # a resharded job's count outranks the start's
        self.num_shards = layout.shards if layout is not None else num_shards
        self._shards = [_Shard() for _ in range(self.num_shards)]
        self._cond = threading.Condition()
        self._specs: dict[str, pserver_pb2.TableSpec] = {}
        self._init: tuple[Mapping[str, np.ndarray], Callable[[], Mapping[str, np.ndarray]] | None]
        self._init = ({}, None)
        # A warm start's sparse rows (per table: ids, rows), sent before the dense values.
        self._init_rows: Mapping[str, tuple[np.ndarray, np.ndarray]] = {}
        self._initialized_once = False
        # Room for several caller threads fanning out at once.
        # Threads start on demand: room for callers fanning out to a grown layout too.
        self._pool = ThreadPoolExecutor(max_workers=4 * max(self.num_shards, 16) + 4,
                                        thread_name_prefix="pserver-call")
        self._repairing = threading.Lock()
        self._retired: list[grpc.Channel] = []
        self._closed = threading.Event()
        revision = store.revision()
        for kv in store.get_prefix(PSERVER_SLOT_PREFIX):
            self._on_slot(kv.key, kv.value)
        # A watch that fails is re-created from a fresh listing (store/follow.py).
        follower = PrefixFollower(store, PSERVER_SLOT_PREFIX, self._on_event, self._on_listing,
                                  who=f"Trainer {self.name}", poll_s=WATCH_POLL_S)
        self._watcher = threading.Thread(target=follower.run, args=(self._closed, revision + 1),
                                         name="pserver-slots", daemon=True)
        self._watcher.start()
        layouts = PrefixFollower(store, PSERVER_LAYOUT, self._on_layout_event,
                                 self._on_layout_listing, who=f"Trainer {self.name}",
                                 poll_s=WATCH_POLL_S)
        self._layout_watcher = threading.Thread(target=layouts.run,
                                                args=(self._closed, revision + 1),
                                                name="pserver-layout", daemon=True)
        self._layout_watcher.start()

    # -- layout -----------------------------------------------------------------------------

    def _on_layout_event(self, event: Event) -> None:
        if event.key == PSERVER_LAYOUT and event.value:
            self._on_layout(event.value)

    def _on_layout_listing(self, listing: list[KeyValue]) -> None:
        for kv in listing:
            if kv.key == PSERVER_LAYOUT:
                self._on_layout(kv.value)

    def _on_layout(self, raw: bytes) -> None:
        try:
            layout = PServerLayout.decode(raw, PSERVER_LAYOUT)
        except StoreValueError as exc:
            log.warning("Trainer %s ignores the pserver layout: %s", self.name, exc)
            return
        self._use_layout(layout.shards)

    def _use_layout(self, shards: int) -> None:
        """Route by ``shards`` from now on: new slots, their addresses from the store."""
        with self._cond:
            if shards == self.num_shards:
                return
            for shard in self._shards:
                if shard.channel is not None:
                    self._retired.append(shard.channel)
            self._shards = [_Shard() for _ in range(shards)]
            log.info("Trainer %s routes to %d pserver shards (was %d).", self.name, shards,
                     self.num_shards)
            self.num_shards = shards
            self._cond.notify_all()
        for kv in self.store.get_prefix(PSERVER_SLOT_PREFIX):
            self._on_slot(kv.key, kv.value)

    def _routed(self, operation: Callable[[int], T]) -> T:
        """Run ``operation(shard_count)``; if the layout changes under it, run it again under
        the new one (each call of it routes everything afresh)."""
        give_up_at = time.monotonic() + self.deadline
        while True:
            shards = self.num_shards
            try:
                return operation(shards)
            except LayoutChangedError as exc:
                if time.monotonic() > give_up_at or self._closed.is_set():
                    raise UnavailableError(f"the pserver layout did not settle within "
                                           f"{self.deadline:.0f}s: {exc}") from exc
                self._await_layout(shards)

    def _await_layout(self, shards: int) -> None:
        """Wait (briefly) until the layout is no longer ``shards``: the watch usually tells
        first; a pserver that already serves the new one may answer before it does."""
        layout = read_pserver_layout(self.store)
        if layout is not None and layout.shards != shards:
            self._use_layout(layout.shards)
            return
        with self._cond:
            self._cond.wait_for(lambda: self.num_shards != shards or self._closed.is_set(),
                                timeout=1.0)

    # -- addresses --------------------------------------------------------------------------

    def _on_event(self, event: Event) -> None:
        self._on_slot(event.key, event.value if event.value else None)

    def _on_listing(self, listing: list[KeyValue]) -> None:
        """Every slot key after a watch gap: follow the slots whose holder changed meanwhile."""
        listed = {slot_of(kv.key): kv for kv in listing}
        with self._cond:
            known = [shard.value for shard in self._shards]
        for slot, value in enumerate(known):
            kv = listed.get(slot)
            if (kv.value if kv else None) != value:
                self._on_slot(pserver_slot(slot), kv.value if kv else None)

    def _on_slot(self, key: str, value: bytes | None) -> None:
        slot = slot_of(key)
        if slot is None or slot < 0:
            return
        try:
            address = PServerSlot.decode(value, key).address if value else None
        except StoreValueError as exc:
            log.warning("Trainer %s ignores pserver slot %d: %s", self.name, slot, exc)
            address = None
        with self._cond:
            if slot >= self.num_shards:
                return
            shard = self._shards[slot]
            # A PUT with the same address is still a new process (new lease): reconnect. The
            # old channel is retired, not closed: closing would CANCEL calls still in flight.
            if shard.channel is not None:
                self._retired.append(shard.channel)
            shard.address, shard.channel, shard.stub = address, None, None
            shard.value = value
            self._cond.notify_all()
        if address:
            log.info("Trainer %s sees pserver shard %d at %s.", self.name, slot, address)

    def addresses(self) -> list[str | None]:
        """Where each shard is served now, as this client knows it (None: no pserver)."""
        with self._cond:
            return [shard.address for shard in self._shards]

    def _stub(self, slot: int, shards: int, give_up_at: float
              ) -> pserver_pb2_grpc.ParameterServerStub:
        with self._cond:
            if self.num_shards != shards:
                raise LayoutChangedError(f"the job now has {self.num_shards} pserver shards, "
                                         f"this call was routed for {shards}")
            shard = self._shards[slot]
            while shard.address is None:
                if self.num_shards != shards:
                    raise LayoutChangedError(f"the job now has {self.num_shards} pserver "
                                             f"shards, this call was routed for {shards}")
                shard = self._shards[slot]  # a layout that changed and changed back
                remaining = give_up_at - time.monotonic()
                if remaining <= 0 or self._closed.is_set():
                    raise UnavailableError(
                        f"pserver shard {slot} has no address in the store ({pserver_slot(slot)}) "
                        f"after waiting {self.deadline:.0f}s"
                    )
                self._cond.wait(min(remaining, 1.0))
            if shard.stub is None:
                shard.channel = make_channel(shard.address, self.credentials, "pserver",
                                             call_metrics=self.call_metrics, shard=slot)
                shard.stub = pserver_pb2_grpc.ParameterServerStub(shard.channel)
                shard.needs_declare = bool(self._specs)
            return shard.stub

    # -- calls with waiting -----------------------------------------------------------------

    def _call(self, slot: int, method: str, request: Any, shards: int) -> Any:
        """Call ``method`` on shard ``slot`` of a layout of ``shards``, waiting out outages up
        to the deadline (the one layer that retries a pserver). LayoutChangedError when the
        layout is no longer ``shards``: the caller routes again (:meth:`_routed`)."""
        give_up_at = time.monotonic() + self.deadline
        metadata = ((SHARDS_METADATA_KEY, str(shards)),)

        def attempt() -> Any:
            stub = self._stub(slot, shards, give_up_at)
            with self._cond:
                declare = self.num_shards == shards and self._shards[slot].needs_declare
            if declare:
                self._declare_on(slot, stub, metadata)
            return call(getattr(stub, method), request, timeout=self.call_timeout,
                        what=f"pserver shard {slot} {method}", metadata=metadata)

        def on_retry(exc: BaseException) -> None:
            if isinstance(exc, FailedPreconditionError) and self._initialized_once:
                self._start_repair()  # a shard restarted empty: initialise it again

        try:
            return self.retry.call(attempt, what=f"Trainer {self.name}: pserver shard {slot} "
                                   f"{method}", on_retry=on_retry, sleep=self._pause)
        except self.retry.retryable as exc:
            raise UnavailableError(
                f"pserver shard {slot} did not serve {method} within {self.deadline:.0f}s: {exc}"
            ) from exc

    def _pause(self, seconds: float) -> bool:
        """Wait between attempts; a new address for any slot wakes us early. True once closed."""
        with self._cond:
            self._cond.wait(seconds)
        return self._closed.is_set()

    def _declare_on(self, slot: int, stub: pserver_pb2_grpc.ParameterServerStub,
                    metadata: tuple[tuple[str, str], ...]) -> None:
        request = pserver_pb2.DeclareTablesRequest(tables=list(self._specs.values()))
        call(stub.DeclareTables, request, timeout=self.call_timeout,
             what=f"pserver shard {slot} DeclareTables", metadata=metadata)
        with self._cond:
            if slot < len(self._shards):
                self._shards[slot].needs_declare = False

    def _fan_out(self, method: str, requests: list[Any], sequential: bool = False) -> list[Any]:
        """Call every shard of the layout of ``len(requests)`` shards (request i to shard i),
        in parallel unless ``sequential``."""
        shards = len(requests)
        if sequential:
            return [self._call(i, method, r, shards) for i, r in enumerate(requests)]
        return self._each([partial(self._call, i, method, r, shards)
                           for i, r in enumerate(requests)])

    def _each(self, calls: Sequence[Callable[[], T]]) -> list[T]:
        """Every call's answer, in order: on the pool in parallel, or on this thread when there
        is one (a one-shard job's every call: no hand-off to another thread and back)."""
        if len(calls) == 1:
            return [calls[0]()]
        futures = [self._pool.submit(c) for c in calls]
        return [f.result() for f in futures]

    # -- tables and initialisation ----------------------------------------------------------

    def declare_tables(self, specs: Iterable[pserver_pb2.TableSpec]) -> None:
        """Declare tables on every shard (idempotent; a conflicting spec is an error)."""
        specs = list(specs)
        request = pserver_pb2.DeclareTablesRequest(tables=specs)
        responses = self._routed(lambda n: self._fan_out("DeclareTables", [request] * n))
        for table in responses[0].tables:
            self._specs[table.name] = table

    def specs(self) -> dict[str, pserver_pb2.TableSpec]:
        """The declared tables by name, as the pservers completed their specs."""
        return dict(self._tables())

    def _tables(self) -> dict[str, pserver_pb2.TableSpec]:
        if not self._specs:
            response = self._routed(lambda n: self._call(
                0, "DeclareTables", pserver_pb2.DeclareTablesRequest(), n))
            self._specs = {t.name: t for t in response.tables}
        return self._specs

    def _initialized(self, shards: int, sequential: bool = False) -> list[bool]:
        responses = self._fan_out("DeclareTables",
                                  [pserver_pb2.DeclareTablesRequest()] * shards, sequential)
        return [r.initialized for r in responses]

    def initialize(
        self,
        dense_values: Mapping[str, np.ndarray],
        init_fn: Callable[[], Mapping[str, np.ndarray]] | None = None,
        rows: Mapping[str, tuple[np.ndarray, np.ndarray]] | None = None,
    ) -> None:
        """Run the one-trainer-initialises protocol. ``init_fn``, if given, computes the dense
        values (only the trainer that wins the lock calls it); otherwise ``dense_values``.
        ``rows`` (a warm start): per sparse table the ids and rows it starts with, sent to the
        shards before the dense values (a shard is initialised by its InitDense). Shards
        restored from a checkpoint keep what they hold."""
        self._init = (dense_values, init_fn)
        self._init_rows = dict(rows or {})
        self._routed(self._run_init_protocol)
        self._initialized_once = True

    def _start_repair(self) -> None:
        if self._repairing.acquire(blocking=False):
            threading.Thread(target=self._repair, name="pserver-reinit", daemon=True).start()

    def _repair(self) -> None:
        # Its own thread and sequential calls: the pool may be full of callers waiting for it.
        try:
            self._routed(lambda n: self._run_init_protocol(n, sequential=True))
        except Exception as exc:  # a background repair: log, the callers' retry loops go on
            log.warning("Trainer %s could not re-initialise pserver shards: %s", self.name, exc)
        finally:
            self._repairing.release()

    def _run_init_protocol(self, shards: int, sequential: bool = False) -> None:
        give_up_at = time.monotonic() + self.deadline
        while True:
            states = self._initialized(shards, sequential)
            if all(states):
                if self.store.get(PSERVER_INIT_DONE) is None:
                    self.store.put(PSERVER_INIT_DONE, self._marker("restored"))
                return
            lease = self.store.grant_lease(self.init_lock_ttl)
            won = self.store.txn([Compare.missing(PSERVER_INIT_LOCK)],
                                 [Put(PSERVER_INIT_LOCK, self._marker("lock"),
                                      lease.id)]).succeeded
            if won:
                lease.keep_alive()
                try:
                    self._initialize_shards(shards, sequential)
                    self.store.put(PSERVER_INIT_DONE, self._marker("initialised"))
                finally:
                    lease.revoke()
                log.info("Trainer %s initialised the pserver tables.", self.name)
                return
            lease.revoke()
            self._wait_for_init(give_up_at)

    def _marker(self, what: str) -> bytes:
        return InitMarker(self.name, what).encode()

    def _wait_for_init(self, give_up_at: float) -> None:
        """Wait until the lock holder finishes (done appears) or gives up (lock vanishes)."""
        revision = self.store.revision()
        if self.store.get(PSERVER_INIT_LOCK) is None:
            return
        log.info("Trainer %s waits for another trainer to initialise the tables.", self.name)
        with self.store.watch_prefix(PSERVER_INIT_PREFIX,
                                     start_revision=revision + 1) as watch:
            while time.monotonic() < give_up_at:
                event = watch.get(timeout=1.0)
                if event is not None and event.key in (PSERVER_INIT_DONE, PSERVER_INIT_LOCK):
                    return
                if self.store.get(PSERVER_INIT_LOCK) is None:
                    return
        raise UnavailableError(f"no trainer initialised the pserver tables in {self.deadline}s")

    def _initialize_shards(self, shards: int, sequential: bool) -> None:
        states = self._initialized(shards, sequential)
        if all(states):
            return
        dense_values, init_fn = self._init
        values = dict(init_fn() if init_fn is not None else dense_values)
        specs = self._tables()
        parts: list[list[pserver_pb2.NamedTensor]] = [[] for _ in range(shards)]
        for name, array in values.items():
            spec = specs.get(name)
            if spec is None or spec.kind != pserver_pb2.TableSpec.DENSE:
                raise InvalidArgumentError(
                    f"initial value for {name!r}: no dense table by that name"
                )
            flat = np.ascontiguousarray(array, dtype=np.float32).reshape(-1)
            if flat.size != math.prod(spec.shape):
                raise InvalidArgumentError(
                    f"initial value for {name!r} has {flat.size} elements; the table's shape "
                    f"{list(spec.shape)} needs {math.prod(spec.shape)}"
                )
            for i, part in enumerate(dense_parts(flat, shards)):
                parts[i].append(pserver_pb2.NamedTensor(name=name, tensor=encode_tensor(part)))
        requests = [pserver_pb2.InitDenseRequest(values=p) for p in parts]
        todo = [i for i in range(shards) if not states[i]]
        for i in todo:  # a warm start's rows first: InitDense ends a shard's initialisation
            for request in self._init_sparse_requests(i, shards):
                self._call(i, "InitSparse", request, shards)
        if sequential:
            for i in todo:
                self._call(i, "InitDense", requests[i], shards)
            return
        for f in [self._pool.submit(self._call, i, "InitDense", requests[i], shards)
                  for i in todo]:
            f.result()

    def _init_sparse_requests(self, shard: int, shards: int
                              ) -> Iterator[pserver_pb2.InitSparseRequest]:
        """Shard ``shard``'s part of the warm start's rows, in requests of at most
        :data:`INIT_ROWS_PER_REQUEST` rows."""
        for table, (ids, rows) in self._init_rows.items():
            ids = np.asarray(ids, dtype=np.int64)
            rows = np.ascontiguousarray(rows, dtype=np.float32)
            mine = np.flatnonzero(route_ids(ids, shards) == shard)
            for start in range(0, mine.size, INIT_ROWS_PER_REQUEST):
                part = mine[start:start + INIT_ROWS_PER_REQUEST]
                yield pserver_pb2.InitSparseRequest(
                    table=table, rows=encode_sparse(ids[part], rows[part]))

    # -- dense ------------------------------------------------------------------------------

    def pull_dense(self, names: Iterable[str] | None = None) -> dict[str, np.ndarray]:
        """Full dense arrays (every shard's slice, joined and reshaped)."""
        values = self.pull_dense_tagged(names).values
        assert values is not None
        return values

    def pull_dense_tagged(self, names: Iterable[str] | None = None,
                          if_changed: Sequence[DenseTag] | None = None) -> TaggedDense:
        """:meth:`pull_dense` with each shard's dense tag. With ``if_changed`` (one tag per
        shard of the current layout) the values are None when every shard still has its tag;
        if only some do, every shard is read again in full (values are all or nothing)."""
        specs = self._tables()
        wanted = list(names) if names is not None else [
            n for n, s in specs.items() if s.kind == pserver_pb2.TableSpec.DENSE]

        def pull(shards: int) -> list[pserver_pb2.PullDenseResponse]:
            plain = pserver_pb2.PullDenseRequest(names=wanted)
            if if_changed is None or len(if_changed) != shards:
                return self._fan_out("PullDense", [plain] * shards)
            responses = self._fan_out("PullDense", [
                pserver_pb2.PullDenseRequest(names=wanted, if_changed=tag.to_proto())
                for tag in if_changed])
            if any(r.unchanged for r in responses) and not all(r.unchanged for r in responses):
                responses = self._fan_out("PullDense", [plain] * shards)
            return responses

        responses = self._routed(pull)
        tags = tuple(DenseTag.from_proto(r.tag) for r in responses)
        pristine = all(r.pristine for r in responses)
        if all(r.unchanged for r in responses):
            return TaggedDense(None, tags, pristine)
        out: dict[str, np.ndarray] = {}
        for name in wanted:
            pieces = []
            for i, response in enumerate(responses):
                match = [v for v in response.values if v.name == name]
                if len(match) != 1:
                    raise InvalidArgumentError(f"pserver shard {i} did not return table {name!r}")
                pieces.append(decode_tensor(match[0].tensor, dtype=np.float32,
                                            name=f"dense {name!r} from shard {i}"))
            out[name] = np.concatenate(pieces).reshape(tuple(specs[name].shape))
        return TaggedDense(out, tags, pristine)

    # -- sparse -----------------------------------------------------------------------------

    @staticmethod
    def _route(ids: np.ndarray, shards: int) -> list[np.ndarray | slice]:
        """Per shard, the positions in ``ids`` of the ids it owns (``id % shards``), in order;
        with one shard, all of them as a slice, so that ids and rows go as they are: viewed,
        not gathered."""
        if shards == 1:
            return [slice(None)]
        owner = route_ids(ids, shards)
        order = np.argsort(owner, kind="stable")
        bounds = np.searchsorted(owner[order], np.arange(shards + 1))
        return [order[bounds[i]:bounds[i + 1]] for i in range(shards)]

    def pull_sparse(self, table: str, ids: np.ndarray) -> np.ndarray:
        """Rows for ``ids`` (int64 [n]) in their order, float32 [n, dim]."""
        return self._pull(table, ids, held=False)[0]

    def pull_held(self, table: str, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rows for ``ids`` in their order, and whether each id has a row on its shard (an
        export holds only those: a row not admitted yet or evicted is not part of the model)."""
        rows, held = self._pull(table, ids, held=True)
        assert held is not None
        return rows, held

    def _pull(self, table: str, ids: np.ndarray, held: bool
              ) -> tuple[np.ndarray, np.ndarray | None]:
        ids = np.asarray(ids)
        if ids.ndim != 1 or ids.dtype.kind not in "iu":
            raise InvalidArgumentError(
                f"ids must be an integer vector, got {ids.dtype} {ids.shape}"
            )
        ids = ids.astype(np.int64, copy=False)
        inverse: np.ndarray | None = None
        if strictly_increasing(ids):  # a trainer's layers pull their sorted unique ids
            unique = ids
        else:
            unique, inverse = np.unique(ids, return_inverse=True)
        rows, marks = self._routed(lambda n: self._pull_unique(table, unique, held, n))
        if rows is None:
            dim = int(self._tables()[table].dim) if table in self._tables() else 0
            return np.zeros((0, dim), dtype=np.float32), marks if held else None
        if inverse is None:
            return rows, marks if held else None
        return rows[inverse], marks[inverse] if held else None

    def _pull_unique(self, table: str, unique: np.ndarray, held: bool, shards: int
                     ) -> tuple[np.ndarray | None, np.ndarray]:
        groups = self._route(unique, shards)
        shard_ids = [unique[g] for g in groups]
        live = [i for i, part_ids in enumerate(shard_ids) if part_ids.size]
        responses = self._each([partial(
            self._call, i, "PullSparse",
            pserver_pb2.PullSparseRequest(table=table, ids=encode_tensor(shard_ids[i]),
                                          held=held), shards) for i in live])
        rows: np.ndarray | None = None
        marks = np.zeros(unique.size, dtype=np.bool_)
        for i, response in zip(live, responses, strict=True):
            size = shard_ids[i].size
            part = decode_tensor(response.rows, dtype=np.float32, shape=(size, None),
                                 name=f"rows from shard {i}")
            if rows is None:
                rows = np.empty((unique.size, part.shape[1]), dtype=np.float32)
            rows[groups[i]] = part
            if held:
                marks[groups[i]] = decode_tensor(response.held, dtype=np.bool_, shape=(size,),
                                                 name=f"held marks from shard {i}")
        return rows, marks

    # -- push -------------------------------------------------------------------------------

    def push(
        self,
        batch: common_pb2.BatchRef,
        dense_grads: Mapping[str, np.ndarray],
        sparse_grads: Mapping[str, tuple[np.ndarray, np.ndarray]],
        counts: Mapping[str, tuple[np.ndarray, np.ndarray]] | None = None,
    ) -> list[pserver_pb2.PushResponse]:
        """One atomic Push per shard, in parallel; returns each shard's answer. ``counts``:
        per SCORE table, (shows, clicks) per id of its gradient, split with the ids."""
        sendable = finite(dense_grads, sparse_grads)
        if not sendable:
            log.warning("Trainer %s drops batch (pass %d, task %d, seq %d): its gradients hold "
                        "NaN or Inf.", self.name, batch.pass_id, batch.task_id, batch.seq)

        def push_all(shards: int) -> list[pserver_pb2.PushResponse]:
            requests = [pserver_pb2.PushRequest(batch=batch, drop=not sendable)
                        for _ in range(shards)]
            if sendable:
                self._split(requests, dense_grads, sparse_grads, counts or {})
            wait = CrossShardWait()
            return self._each([partial(self._push_until_closed, i, r, shards, wait)
                               for i, r in enumerate(requests)])

        return self._routed(push_all)

    def push_delta(
        self,
        batches: list[common_pb2.BatchRef],
        dense_deltas: Mapping[str, np.ndarray],
        sparse_deltas: Mapping[str, tuple[np.ndarray, np.ndarray]],
    ) -> list[pserver_pb2.PushResponse]:
        """Geo mode: one atomic Push per shard of parameter deltas covering ``batches``."""
        if not batches:
            raise InvalidArgumentError("a delta push must cover at least one batch")

        def push_all(shards: int) -> list[pserver_pb2.PushResponse]:
            requests = [pserver_pb2.PushRequest(batch=batches[0], covers=batches[1:],
                                                delta=True) for _ in range(shards)]
            self._split(requests, dense_deltas, sparse_deltas)
            return self._fan_out("Push", requests)

        return self._routed(push_all)

    def _split(self, requests: list[pserver_pb2.PushRequest],
               dense: Mapping[str, np.ndarray],
               sparse: Mapping[str, tuple[np.ndarray, np.ndarray]],
               counts: Mapping[str, tuple[np.ndarray, np.ndarray]] | None = None) -> None:
        """Each shard's part of dense and sparse values (and show/click counts), into its
        request (one per shard)."""
        shards = len(requests)
        for name, grad in dense.items():
            flat = np.ascontiguousarray(grad, dtype=np.float32).reshape(-1)
            for i, part in enumerate(dense_parts(flat, shards)):
                tensor = encode_dense(part, self.dense_grad_dtype)
                requests[i].dense.append(pserver_pb2.NamedTensor(name=name, tensor=tensor))
        for name, (ids, rows) in sparse.items():
            ids = np.asarray(ids, dtype=np.int64)
            rows = np.asarray(rows, dtype=np.float32)
            groups = self._route(ids, shards)
            shown = (counts or {}).get(name)
            if shown is not None and not (len(shown[0]) == len(shown[1]) == ids.shape[0]):
                raise InvalidArgumentError(
                    f"show/click counts for table {name!r} have {len(shown[0])} / "
                    f"{len(shown[1])} entries for {ids.shape[0]} ids; give one per id")
            for i, g in enumerate(groups):
                shard_ids = ids[g]
                if shard_ids.size:
                    entry = pserver_pb2.SparseGrad(table=name,
                                                   grad=encode_sparse(shard_ids, rows[g]))
                    if shown is not None:
                        entry.shows.CopyFrom(encode_tensor(
                            np.asarray(shown[0], dtype=np.float32)[g]))
                        entry.clicks.CopyFrom(encode_tensor(
                            np.asarray(shown[1], dtype=np.float32)[g]))
                    requests[i].sparse.append(entry)

    def _push_until_closed(self, slot: int, request: pserver_pb2.PushRequest, shards: int,
                           wait: CrossShardWait) -> pserver_pb2.PushResponse:
        """Push; in sync mode a shard answers ``pending`` while the step's barrier is open,
        and the same push is sent again (the shard knows it: it waits on, adds nothing).
        Meanwhile the trainer leaves the rounds of the shards that answered this push
        (:mod:`elasticps.pserver.sync_wait`: otherwise two shards can wait on each other)."""
        while True:
            response: pserver_pb2.PushResponse = self._call(slot, "Push", request, shards)
            if not response.pending or self._closed.is_set():
                wait.answered(slot)
                return response
            leave = pserver_pb2.RoundMemberRequest(trainer=request.batch.trainer)
            for answered in wait.to_leave():
                self._call(answered, "LeaveRound", leave, shards)

    def join_round(self, trainer: str) -> None:
        """Sync mode: every shard's step barrier waits for ``trainer``'s pushes from now on
        (it began a task)."""
        request = pserver_pb2.RoundMemberRequest(trainer=trainer)
        self._routed(lambda n: self._fan_out("JoinRound", [request] * n))

    def leave_round(self, trainer: str) -> None:
        """Sync mode: every shard's step barrier stops waiting for ``trainer`` (it ended a
        task); its next push or join makes it a member again."""
        request = pserver_pb2.RoundMemberRequest(trainer=trainer)
        self._routed(lambda n: self._fan_out("LeaveRound", [request] * n))

    # -- stats and lifecycle ----------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Per-shard counters and their totals."""
        responses = self._routed(
            lambda n: self._fan_out("Stats", [pserver_pb2.StatsRequest()] * n))
        shards = [json_format.MessageToDict(r, preserving_proto_field_name=True,
                                            always_print_fields_with_no_presence=True)
                  for r in responses]
        return {
            "shards": shards,
            "pushes": sum(r.pushes for r in responses),
            "pushes_per_sec": sum(r.pushes_per_sec for r in responses),
            "duplicates": sum(r.duplicates for r in responses),
            "skipped_nonfinite": sum(r.skipped_nonfinite for r in responses),
            "rows": sum(t.rows for r in responses for t in r.tables),
            "bytes": sum(t.bytes for r in responses for t in r.tables),
            "rows_admitted": sum(t.admitted for r in responses for t in r.tables),
            "rows_evicted": sum(t.evicted for r in responses for t in r.tables),
            "grads_dropped": sum(t.dropped for r in responses for t in r.tables),
        }

    def list_applied(self, pass_id: int | None = None) -> list[pserver_pb2.ListAppliedResponse]:
        request = pserver_pb2.ListAppliedRequest(pass_id=pass_id or 0,
                                                 all_passes=pass_id is None)
        return list(self._routed(lambda n: self._fan_out("ListApplied", [request] * n)))

    def checkpoint(self, pass_id: int) -> list[pserver_pb2.CheckpointResponse]:
        """Every shard checkpoints now (if anything changed) and reports the applied batches
        of ``pass_id`` its checkpoint holds; waits out shards that are down."""
        request = pserver_pb2.CheckpointRequest(pass_id=pass_id)
        return list(self._routed(lambda n: self._fan_out("Checkpoint", [request] * n)))

    def prune_applied(self, upto_pass: int) -> int:
        """Every shard forgets (and refuses from now on) batches of passes < ``upto_pass``;
        returns the number of task entries removed."""
        request = pserver_pb2.PruneAppliedRequest(upto_pass=upto_pass)
        return sum(r.removed_tasks for r in self._routed(
            lambda n: self._fan_out("PruneApplied", [request] * n)))

    def close(self) -> None:
        self._closed.set()
        self._watcher.join(timeout=1.0)  # it leaves its watch within one poll
        self._layout_watcher.join(timeout=1.0)
        with self._cond:
            for shard in self._shards:
                if shard.channel is not None:
                    shard.channel.close()
                shard.channel = shard.stub = None
            for channel in self._retired:
                channel.close()
            self._retired.clear()
            self._cond.notify_all()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> PServerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
