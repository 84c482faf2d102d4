"""The etcd v3 backend: unary calls on a synchronous gRPC channel, watches on ``aetcd``.

Our :class:`~elasticps.store.api.Store` is synchronous, and so are its reads, writes and lease
calls: each is made from the calling thread on a plain (blocking) gRPC channel to etcd's KV /
Lease services, so we see response headers (revisions). A transaction thus costs one gRPC
call and nothing else; through aetcd's asyncio client it also cost a hop to an event loop
thread and back, an asyncio task and two futures, which was most of the etcd client's CPU in
the master (docs/master.md, "Figures"). Watches are long-lived streams: each store owns one
event loop in a daemon thread, where aetcd's watch streams run.

Failure handling, all in this module:

- Endpoints (``etcd://a:2379,b:2379``) are tried in order; the one that answered is tried first
  next time.
- A call that cannot reach any endpoint is retried by :data:`STORE_RETRY` for ``retry_for``
  seconds, so a brief etcd restart is ridden out, then :class:`StoreUnavailableError` is
  raised. Only UNAVAILABLE is retried; a write that timed out (DEADLINE_EXCEEDED) may have been
  applied and is surfaced at once rather than applied twice.
- A watch whose stream breaks is re-created from the revision after the last event it delivered,
  so it neither misses nor repeats an event across an etcd restart. If that revision has been
  compacted the watch ends with a :class:`StoreError` that says so.
- Leases are refreshed by our own keepalive thread (see ``ThreadedLease``), not aetcd's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import threading
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import aetcd
import grpc
from aetcd import exceptions as aetcd_errors
from aetcd import rpc
from aetcd import watcher as aetcd_watcher

from elasticps.errors import ConfigError, LeaseExpiredError, StoreError, StoreUnavailableError
from elasticps.identity import Identity
from elasticps.retry import RetryPolicy
from elasticps.store._common import (
    QueueWatch,
    ThreadedLease,
    check_compares,
    check_key,
    check_ops,
    check_prefix,
    check_ttl,
    check_value,
    prefix_range_end,
)
from elasticps.store.api import (
    Compare,
    CompareTarget,
    Event,
    EventType,
    KeyValue,
    Lease,
    Op,
    Put,
    Store,
    TxnResult,
    Watch,
)
from elasticps.store.etcd_tls import TlsClient, channel_credentials, split_tls

log = logging.getLogger(__name__)
T = TypeVar("T")

_RETRIABLE = (grpc.StatusCode.UNAVAILABLE,)


class _NoEndpointAnsweredError(StoreUnavailableError):
    """No endpoint answered one round of a call: the one failure :data:`STORE_RETRY` retries
    (a timed-out write is a StoreUnavailableError too, but may have been applied)."""


STORE_RETRY = RetryPolicy(deadline=10.0, initial_backoff=0.05, max_backoff=1.0,
                          retryable=(_NoEndpointAnsweredError,))
# A broken watch is re-created until it is cancelled; only the delays come from the policy.
WATCH_RETRY = RetryPolicy(deadline=math.inf, initial_backoff=0.05, max_backoff=1.0)
# Reconnect quickly after an etcd restart; gRPC's default backoff grows to two minutes.
_CHANNEL_OPTIONS = {
    "grpc.initial_reconnect_backoff_ms": 100,
    "grpc.min_reconnect_backoff_ms": 100,
    "grpc.max_reconnect_backoff_ms": 1000,
    "grpc.keepalive_time_ms": 10_000,
    "grpc.max_receive_message_length": 256 << 20,  # a long prefix listing exceeds 4 MiB
    "grpc.keepalive_timeout_ms": 5_000,
}
_TARGETS = {
    CompareTarget.VALUE: rpc.Compare.VALUE,
    CompareTarget.MOD_REVISION: rpc.Compare.MOD,
    CompareTarget.CREATE_REVISION: rpc.Compare.CREATE,
    CompareTarget.VERSION: rpc.Compare.VERSION,
}


def parse_endpoints(url: str) -> list[tuple[str, int]]:
    """``etcd://h1:2379,h2:2379`` -> [("h1", 2379), ("h2", 2379)]; a clear error otherwise.
    A ``?tls=DIR`` option is ignored here (see :func:`~elasticps.store.etcd_tls.split_tls`)."""
    if not url.startswith("etcd://"):
        raise ConfigError(f"etcd store URL {url!r} must start with etcd://")
    body = split_tls(url)[0][len("etcd://"):].rstrip("/")
    endpoints = []
    for part in body.split(","):
        host, sep, port = part.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"etcd endpoint {part!r} in {url!r} must be host:port")
        endpoints.append((host, int(port)))
    return endpoints


@dataclass(frozen=True)
class _Endpoint:
    """One etcd endpoint's blocking channel and the stubs the unary calls use."""

    channel: grpc.Channel
    kv: Any  # rpc.KVStub on a blocking channel
    lease: Any  # rpc.LeaseStub on a blocking channel

    @classmethod
    def dial(cls, host: str, port: int,
             credentials: grpc.ChannelCredentials | None) -> _Endpoint:
        target, options = f"{host}:{port}", list(_CHANNEL_OPTIONS.items())
        channel = (grpc.insecure_channel(target, options=options) if credentials is None
                   else grpc.secure_channel(target, credentials, options=options))
        return cls(channel, rpc.KVStub(channel), rpc.LeaseStub(channel))


class _EtcdLease(ThreadedLease):
    def __init__(self, store: EtcdStore, lease_id: int, ttl: int) -> None:
        super().__init__(lease_id, ttl, store.describe)
        self._store = store

    def _refresh_once(self) -> bool:
        return self._store._refresh_lease(self.id)

    def _revoke_once(self) -> None:
        self._store._revoke_lease(self.id)


class _EtcdWatch(QueueWatch):
    def __init__(self, store: EtcdStore) -> None:
        super().__init__()
        self._store = store
        self.task: asyncio.Task[None] | None = None

    def _on_cancel(self) -> None:
        task = self.task
        if task is not None and not self._store._closed:
            # RuntimeError: the loop is already closed, and the task died with it.
            with contextlib.suppress(RuntimeError):
                self._store._loop.call_soon_threadsafe(task.cancel)


class EtcdStore(Store):
    """A :class:`Store` on an etcd v3 cluster. See the module docstring for failure handling."""

    def __init__(self, endpoints: Sequence[tuple[str, int]], prefix: str = "", *,
                 retry_for: float = 10.0, call_timeout: float = 5.0,
                 tls: Identity | None = None) -> None:
        if not endpoints:
            raise ConfigError("an etcd store needs at least one endpoint")
        self.endpoints = list(endpoints)
        self.prefix = check_prefix(prefix)
        self.prefix_bytes = prefix.encode()
        names = ",".join(f"{h}:{p}" for h, p in self.endpoints)
        self.describe = f"etcd store {names} ({prefix or '/'}{', TLS' if tls else ''})"
        self._tls = None if tls is None else channel_credentials(tls)
        self.retry = STORE_RETRY.within(retry_for)
        self.call_timeout = call_timeout
        self._closed = False
        self._preferred = 0
        self._registry_lock = threading.Lock()
        self._leases: list[ThreadedLease] = []
        self._watches: list[_EtcdWatch] = []
        self._endpoints = [_Endpoint.dial(h, p, self._tls) for h, p in self.endpoints]
        self._loop = asyncio.new_event_loop()  # the watches' streams run here
        self._thread = threading.Thread(target=self._loop.run_forever, name="etcd-store-loop",
                                        daemon=True)
        self._thread.start()
        self._clients: list[aetcd.Client] = self._run(self._make_clients())

    @classmethod
    def from_url(cls, url: str, prefix: str = "", **kwargs: float) -> EtcdStore:
        """``etcd://h:2379[,h2:2379][?tls=DIR]``: with ``tls``, mutual TLS with the identity
        in DIR (ca.crt, tls.crt, tls.key)."""
        tls_dir = split_tls(url)[1]
        tls = None if tls_dir is None else Identity.load(tls_dir)
        return cls(parse_endpoints(url), prefix, tls=tls, **kwargs)

    # -- plumbing ------------------------------------------------------------------------

    async def _make_clients(self) -> list[aetcd.Client]:
        if self._tls is not None:
            return [TlsClient(host=h, port=p, timeout=self.call_timeout,
                              options=_CHANNEL_OPTIONS, credentials=self._tls)
                    for h, p in self.endpoints]
        return [aetcd.Client(host=h, port=p, timeout=self.call_timeout, options=_CHANNEL_OPTIONS)
                for h, p in self.endpoints]

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._closed:
            coro.close()
            raise StoreError(f"{self.describe} is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def _call(self, what: str, fn: Callable[[_Endpoint], T]) -> T:
        """Run ``fn`` (one blocking gRPC call) against the first endpoint that answers,
        retrying for ``retry_for`` s."""
        if self._closed:
            raise StoreError(f"{self.describe} is closed")
        try:
            return self.retry.call(lambda: self._any_endpoint(what, fn),
                                   what=f"{self.describe}: {what}")
        except _NoEndpointAnsweredError as exc:
            raise StoreUnavailableError(
                f"{what} on {self.describe} failed: no endpoint answered for "
                f"{self.retry.deadline:g}s (last error: {_describe_error(exc.__cause__)})"
            ) from exc.__cause__

    def _any_endpoint(self, what: str, fn: Callable[[_Endpoint], T]) -> T:
        """``fn`` against the first endpoint that answers, the last one that did first."""
        last: BaseException | None = None
        for i in range(len(self._endpoints)):
            index = (self._preferred + i) % len(self._endpoints)
            try:
                result = fn(self._endpoints[index])
            except grpc.RpcError as exc:
                failed = cast(grpc.Call, exc)  # a blocking call's error is also its Call
                if failed.code() not in _RETRIABLE:
                    raise _translate(failed, what, self.describe) from exc
                last = exc
                continue
            self._preferred = index
            return result
        raise _NoEndpointAnsweredError(f"no endpoint answered {what} ({_describe_error(last)})") \
            from last

    def _full(self, key: str) -> bytes:
        return self.prefix_bytes + key.encode()

    def _kv(self, kv: Any) -> KeyValue:
        return KeyValue(bytes(kv.key[len(self.prefix_bytes):]).decode(), bytes(kv.value),
                        int(kv.create_revision), int(kv.mod_revision), int(kv.version),
                        int(kv.lease))

    # -- reads -----------------------------------------------------------------------------

    def get(self, key: str) -> KeyValue | None:
        request = rpc.RangeRequest(key=self._full(check_key(key)))
        response = self._call(f"get {key!r}",
                              lambda end: end.kv.Range(request, timeout=self.call_timeout))
        return self._kv(response.kvs[0]) if response.kvs else None

    def get_prefix(self, prefix: str) -> list[KeyValue]:
        start = self._full(check_prefix(prefix))
        request = rpc.RangeRequest(key=start or b"\0", range_end=prefix_range_end(start),
                                   sort_order=rpc.RangeRequest.ASCEND,
                                   sort_target=rpc.RangeRequest.KEY)
        response = self._call(f"list {prefix!r}",
                              lambda end: end.kv.Range(request, timeout=self.call_timeout))
        return [self._kv(kv) for kv in response.kvs]

    def revision(self) -> int:
        # A range over one impossible key is the cheapest way to read the header. The key lies
        # under the job's prefix: a job's etcd user may read nothing else.
        request = rpc.RangeRequest(key=self.prefix_bytes + b"\0", count_only=True)
        response = self._call("read the revision",
                              lambda end: end.kv.Range(request, timeout=self.call_timeout))
        return int(response.header.revision)

    # -- writes ----------------------------------------------------------------------------

    def put(self, key: str, value: bytes, lease: int = 0) -> int:
        return self.txn([], [Put(key, value, lease)]).revision

    def delete(self, key: str) -> bool:
        return self._delete(self._full(check_key(key)), None, f"delete {key!r}") > 0

    def delete_prefix(self, prefix: str) -> int:
        start = self._full(check_prefix(prefix))
        return self._delete(start or b"\0", prefix_range_end(start), f"delete prefix {prefix!r}")

    def _delete(self, key: bytes, range_end: bytes | None, what: str) -> int:
        request = rpc.DeleteRangeRequest(key=key, range_end=range_end or b"")
        response = self._call(what, lambda end: end.kv.DeleteRange(request,
                                                                   timeout=self.call_timeout))
        return int(response.deleted)

    def txn(self, compares: Sequence[Compare], success: Sequence[Op],
            failure: Sequence[Op] = ()) -> TxnResult:
        check_compares(compares)
        check_ops(success, "txn success")
        check_ops(failure, "txn failure")
        request = rpc.TxnRequest(compare=[self._compare(c) for c in compares],
                                 success=[self._op(op) for op in success],
                                 failure=[self._op(op) for op in failure])
        response = self._call("transaction",
                              lambda end: end.kv.Txn(request, timeout=self.call_timeout))
        return TxnResult(bool(response.succeeded), int(response.header.revision))

    def _compare(self, cmp: Compare) -> Any:
        message = rpc.Compare(key=self._full(cmp.key), result=rpc.Compare.EQUAL,
                              target=_TARGETS[cmp.target])
        if cmp.target is CompareTarget.VALUE:
            message.value = cmp.expected
        elif cmp.target is CompareTarget.MOD_REVISION:
            message.mod_revision = cmp.expected
        elif cmp.target is CompareTarget.CREATE_REVISION:
            message.create_revision = cmp.expected
        else:
            message.version = cmp.expected
        return message

    def _op(self, op: Op) -> Any:
        if isinstance(op, Put):
            return rpc.RequestOp(request_put=rpc.PutRequest(
                key=self._full(op.key), value=check_value(op.value, op.key), lease=op.lease))
        full = self._full(op.key)
        if op.prefix:
            return rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(
                key=full or b"\0", range_end=prefix_range_end(full)))
        return rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=full))

    # -- leases ----------------------------------------------------------------------------

    def grant_lease(self, ttl: int) -> Lease:
        request = rpc.LeaseGrantRequest(TTL=check_ttl(ttl))
        response = self._call(f"grant a {ttl}s lease",
                              lambda end: end.lease.LeaseGrant(request,
                                                               timeout=self.call_timeout))
        lease = _EtcdLease(self, int(response.ID), ttl)
        # Forget finished leases and watches so a long-lived store does not accumulate them.
        with self._registry_lock:
            self._leases = [*(x for x in self._leases if not x.expired), lease]
        return lease

    def _refresh_lease(self, lease_id: int) -> bool:
        def call(end: _Endpoint) -> Any:
            # One request on the keep-alive stream; its first reply is the refresh's answer.
            stream = end.lease.LeaseKeepAlive(iter([rpc.LeaseKeepAliveRequest(ID=lease_id)]),
                                              timeout=self.call_timeout)
            try:
                return next(stream, None)
            finally:
                stream.cancel()

        reply = self._call(f"refresh lease {lease_id:x}", call)
        return reply is not None and int(reply.TTL) > 0

    def _revoke_lease(self, lease_id: int) -> None:
        request = rpc.LeaseRevokeRequest(ID=lease_id)
        with contextlib.suppress(LeaseExpiredError):  # already gone: revoke is idempotent
            self._call(f"revoke lease {lease_id:x}",
                       lambda end: end.lease.LeaseRevoke(request, timeout=self.call_timeout))

    # -- watches ---------------------------------------------------------------------------

    def watch_prefix(self, prefix: str, start_revision: int | None = None) -> Watch:
        start = self._full(check_prefix(prefix))
        if start_revision is None:
            start_revision = self.revision() + 1
        elif not isinstance(start_revision, int) or start_revision < 1:
            raise ConfigError(f"watch start_revision must be an int >= 1, got {start_revision!r}")
        watch = _EtcdWatch(self)

        async def spawn() -> None:
            watch.task = asyncio.get_running_loop().create_task(
                self._watch_loop(watch, start or b"\0", prefix_range_end(start), start_revision))

        self._run(spawn())
        with self._registry_lock:
            self._watches = [*(x for x in self._watches if not x.cancelled), watch]
        return watch

    async def _watch_loop(self, watch: _EtcdWatch, key: bytes, range_end: bytes,
                          next_rev: int) -> None:
        backoff = WATCH_RETRY.backoff()
        while not watch.cancelled:
            client = self._clients[self._preferred]
            events: asyncio.Queue[Any] = asyncio.Queue()
            stream: aetcd_watcher.Watcher | None = None
            try:
                await client.connect()
                # A Watcher (one gRPC stream) per watch, discarded when it breaks: aetcd's
                # shared watcher does not recover cleanly from a dead stream.
                stream = aetcd_watcher.Watcher(rpc.WatchStub(client.channel),
                                               timeout=self.call_timeout, metadata=client.metadata)
                await stream.add_callback(key, events.put, range_end=range_end,
                                          start_revision=next_rev)
                backoff.reset()
                while True:
                    item = await events.get()
                    if item is None:
                        raise StoreUnavailableError("the watch stream was shut down")
                    if isinstance(item, BaseException):
                        raise item
                    revision = int(item.kv.mod_revision)
                    kind = EventType.PUT if item.kind == "PUT" else EventType.DELETE
                    watch.deliver(Event(kind, bytes(item.kv.key[len(self.prefix_bytes):]).decode(),
                                        bytes(item.kv.value) if kind is EventType.PUT else b"",
                                        revision))
                    # etcd sends a revision's events in one response, and aetcd queues them
                    # before any stream error, so resuming after this revision loses nothing.
                    next_rev = revision + 1
            except asyncio.CancelledError:
                return
            except aetcd_errors.RevisionCompactedError as exc:
                watch.fail(StoreError(
                    f"watch on {self.describe} needs events from revision {next_rev}, but etcd "
                    f"compacted history below {exc.compacted_revision}; re-read the state and "
                    "watch from its revision + 1"))
                return
            except Exception as exc:
                log.info("Watch on %s broke (%s); re-creating it from revision %d.",
                         self.describe, _describe_error(exc), next_rev)
                self._preferred = (self._preferred + 1) % len(self._clients)
                await asyncio.sleep(backoff.next_delay() or 0.0)  # never None: no deadline
            finally:
                if stream is not None:
                    await _quietly(stream.shutdown())

    def close(self) -> None:
        if self._closed:
            return
        for lease in self._leases:
            lease.stop_keep_alive()
        for watch in self._watches:
            watch.cancel()

        async def shutdown() -> None:
            for watch in self._watches:
                if watch.task is not None:
                    watch.task.cancel()
                    await _quietly(watch.task)
            for client in self._clients:
                await _quietly(client.close())

        self._run(shutdown())
        self._closed = True
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        for endpoint in self._endpoints:
            endpoint.channel.close()


async def _quietly(awaitable: Awaitable[Any]) -> None:
    """Await cleanup that may fail (a stream that already died); its failure is not news."""
    with contextlib.suppress(Exception, asyncio.CancelledError):
        await awaitable


def _describe_error(exc: BaseException | None) -> str:
    if isinstance(exc, grpc.RpcError) and isinstance(exc, grpc.Call):
        return f"{exc.code().name}: {exc.details()}"
    return repr(exc)


def _translate(exc: grpc.Call, what: str, describe: str) -> StoreError:
    details = exc.details() or ""
    if "lease not found" in details:
        return LeaseExpiredError(f"{what} on {describe} failed: the lease has expired or was "
                                 f"revoked ({details})")
    if exc.code() is grpc.StatusCode.DEADLINE_EXCEEDED:
        return StoreUnavailableError(f"{what} on {describe} timed out; it may or may not have "
                                     "been applied")
    return StoreError(f"{what} on {describe} failed: {exc.code().name}: {details}")


__all__ = ["EtcdStore", "parse_endpoints"]
