"""``torch.distributed`` for one generation of the dense group: rendezvous, all-gather,
all-reduce, broadcast.

A generation of one member needs no process group: :class:`LocalCollectives` answers every
collective from its own arguments, so a job with one trainer never opens a socket for its dense
parameters. A larger one builds a gloo or NCCL process group directly (no global
``init_process_group``, so a trainer can end one generation and join the next in the same
process) over a :class:`torch.distributed.TCPStore` served by the generation's rank 0, under the
record's random prefix and generation number: a member of an old generation, or another job,
never meets this one.

Every call is bounded: the rendezvous by ``timeout`` and a caller's ``abandoned()`` check (a
member that died before it arrived, rank 0 included, is noticed when its store key vanishes, not
after the whole timeout), each collective by the process group's timeout. A failure of either raises
:class:`GroupBrokenError`; the engine ends the generation and forms the next.
"""

from __future__ import annotations

import contextlib
import datetime
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np
import torch
import torch.distributed as dist

from elasticps.errors import ElasticPSError
from elasticps.store.keys import GroupRecord

ARRIVAL_POLL_S = 0.05  # how often a gathering member checks who has arrived
CONNECT_ATTEMPT_S = 1.0  # one attempt to reach rank 0's rendezvous store


class GroupBrokenError(ElasticPSError):
    """A collective or the rendezvous of a generation failed: the generation is over."""


def device_label(device: torch.device) -> str:
    """What a member advertises of where it computes: "cpu", or "cuda/<the GPU's uuid>" (two
    trainers on one GPU must not both take NCCL: it refuses a GPU used by two ranks)."""
    if device.type != "cuda":
        return "cpu"
    return f"cuda/{torch.cuda.get_device_properties(device).uuid}"


def select_backend(devices: Sequence[str],
                   nccl_available: Callable[[], bool] = dist.is_nccl_available) -> str:
    """NCCL when every member computes on a GPU of its own (and this torch has NCCL), gloo
    otherwise. The proposer of a generation decides it from the members' keys, once for all."""
    on_gpus = all(d.startswith("cuda/") for d in devices) and len(set(devices)) == len(devices)
    return "nccl" if devices and on_gpus and nccl_available() else "gloo"


class Collectives(Protocol):
    rank: int
    size: int

    def all_gather(self, row: np.ndarray) -> np.ndarray:
        """Every rank's int64 ``row`` (same length everywhere), one row per rank."""
        ...

    def all_reduce(self, values: np.ndarray) -> np.ndarray:
        """The float32 sum of every rank's ``values``."""
        ...

    def broadcast(self, values: np.ndarray, root: int) -> np.ndarray:
        """``root``'s ``values`` (the others pass an array of the same shape and dtype)."""
        ...

    def close(self) -> None: ...


class LocalCollectives:
    """A generation of one: every collective is its own answer."""

    rank, size = 0, 1

    def all_gather(self, row: np.ndarray) -> np.ndarray:
        return np.asarray(row, np.int64).reshape(1, -1)

    def all_reduce(self, values: np.ndarray) -> np.ndarray:
        return values

    def broadcast(self, values: np.ndarray, root: int) -> np.ndarray:
        return values

    def close(self) -> None:
        pass


class TorchCollectives:
    """A process group of ``record``'s members, this process at ``rank``."""

    def __init__(self, record: GroupRecord, rank: int, timeout: float, device: torch.device,
                 abandoned: Callable[[], str | None]) -> None:
        self.rank, self.size = rank, len(record.members)
        self.backend = record.backend
        self.device = device if self.backend == "nccl" else torch.device("cpu")
        limit = datetime.timedelta(seconds=timeout)
        try:
            server = _connect(record, timeout, abandoned)
            server.set_timeout(limit)
            store = dist.PrefixStore(f"{record.prefix}/{record.generation}/", server)
            _arrive(store, rank, self.size, timeout, abandoned)
            # A backend (gloo or NCCL) used directly: its collectives are not in torch's stubs.
            self.group: Any = _process_group(self.backend, store, rank, self.size, limit)
        except GroupBrokenError:
            raise
        except Exception as exc:  # gloo/TCPStore errors are RuntimeErrors of many kinds
            raise GroupBrokenError(f"generation {record.generation}: the rendezvous at "
                              f"{record.host}:{record.port} failed: {exc}") from exc
        self._server = server

    def _run(self, what: str, call: Callable[[], object]) -> None:
        try:
            work = call()
            work.wait()  # type: ignore[attr-defined]
        except Exception as exc:
            raise GroupBrokenError(f"{what} failed (a member died, left or timed out): "
                              f"{exc}") from exc

    def all_gather(self, row: np.ndarray) -> np.ndarray:
        mine = torch.from_numpy(np.ascontiguousarray(row, np.int64)).to(self.device)
        out = [torch.empty_like(mine) for _ in range(self.size)]
        self._run("all-gather", lambda: self.group.allgather([out], [mine]))
        return torch.stack(out).cpu().numpy()

    def all_reduce(self, values: np.ndarray) -> np.ndarray:
        tensor = torch.from_numpy(np.ascontiguousarray(values)).to(self.device)
        self._run("all-reduce", lambda: self.group.allreduce([tensor]))
        return tensor.cpu().numpy()

    def broadcast(self, values: np.ndarray, root: int) -> np.ndarray:
        tensor = torch.from_numpy(np.ascontiguousarray(values)).to(self.device)
        options = dist.BroadcastOptions()
        options.rootRank = root
        self._run("broadcast", lambda: self.group.broadcast([tensor], options))
        return tensor.cpu().numpy()

    def close(self) -> None:
        # A broken group may refuse a clean shutdown; it is dropped anyway.
        with contextlib.suppress(Exception):
            self.group.shutdown()


def _connect(record: GroupRecord, timeout: float,
             abandoned: Callable[[], str | None]) -> dist.TCPStore:
    """A client of rank 0's rendezvous store. A store that does not answer (its trainer died)
    is retried in short attempts, each followed by a look at ``abandoned()``: a client that
    waited the whole timeout in one attempt would hold the group up long after the store
    showed rank 0 gone."""
    give_up_at = time.monotonic() + timeout
    attempt = datetime.timedelta(seconds=CONNECT_ATTEMPT_S)
    while True:
        try:
            return dist.TCPStore(record.host, record.port, is_master=False, timeout=attempt,
                                 wait_for_workers=False)
        except Exception as exc:  # refused, reset or timed out: gloo/c10d raise many kinds
            reason = abandoned()
            if reason is not None:
                raise GroupBrokenError(f"the rendezvous was abandoned: {reason}") from exc
            if time.monotonic() > give_up_at:
                raise GroupBrokenError(f"rank 0's store at {record.host}:{record.port} did not "
                                       f"answer within {timeout:.0f}s: {exc}") from exc


def _arrive(store: dist.Store, rank: int, size: int, timeout: float,
            abandoned: Callable[[], str | None]) -> None:
    """Wait until every rank has arrived; give up when ``abandoned()`` names a reason (the
    record moved on, a member's key vanished) or after ``timeout`` seconds."""
    store.set(f"arrived/{rank}", "1")
    keys = [f"arrived/{r}" for r in range(size)]
    give_up_at = time.monotonic() + timeout
    while not store.check(keys):
        reason = abandoned()
        if reason is not None:
            raise GroupBrokenError(f"the rendezvous was abandoned: {reason}")
        if time.monotonic() > give_up_at:
            missing = [r for r in range(size) if not store.check([f"arrived/{r}"])]
            raise GroupBrokenError(f"rank(s) {missing} did not arrive within {timeout:.0f}s")
        time.sleep(ARRIVAL_POLL_S)


def _process_group(backend: str, store: dist.Store, rank: int, size: int,
                   timeout: datetime.timedelta
                   ) -> dist.ProcessGroupGloo | dist.ProcessGroupNCCL:
    if backend == "nccl":
        options = dist.ProcessGroupNCCL.Options()
        options._timeout = timeout
        return dist.ProcessGroupNCCL(store, rank, size, options)
    return dist.ProcessGroupGloo(store, rank, size, timeout)
