"""Skipping the dense pull while this trainer's own updates are the only ones applied.

With prefetch every step pulls the dense values (1.7 MB for the CTR model) and the own update
(own_update.py) corrects them for the trainer's last push. When this trainer is the only one
pushing, that pull brings back exactly what the own update already computed. :class:`DenseChain`
knows when: each pserver shard tags its dense state (pserver/dense_tag.py), answers a pull that
names the current tag with "unchanged" and no values, and reports the tags before and after
each push. The trainer holds an exact copy of the shards' dense values while a chain of
evidence holds, link by link:

1. it starts at a pull that finds every shard *pristine* (no dense optimizer step taken yet)
   while the trainer's replica has taken none either, so the replica's optimizer state is the
   shards' (their initial state), and the pulled values are the shards' values;
2. each own push that every shard applied starting from the known tag moves the known tag to the
   shard's new one, and the known values to the replica's result: the same optimizer code on
   the same values, gradient, slots and step computes the same bits (own_update.py);
3. a dropped push (non-finite gradients) changes nothing on either side.

Anything else breaks the chain for good, and the trainer pulls every time, as before: another
trainer's push (the replica no longer sees every step), a duplicate answer (the shard had
applied that batch already, after a lost answer or in an earlier life, so it did not step now
while the replica did), a restarted or resharded pserver (a new incarnation), a pull that finds
the values changed. The chain only ever decides to skip a pull on a tag match; every doubt
costs a pull, never a stale value.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence

import numpy as np

from elasticps.proto import pserver_pb2
from elasticps.pserver.dense_tag import DenseTag
from elasticps.trainer.api import TaggedDenseClient


class DenseChain:
    """This trainer's evidence that it holds the pservers' dense values; see the module doc."""

    def __init__(self, client: TaggedDenseClient, names: Sequence[str]) -> None:
        self.client = client
        self.names = list(names)
        self._lock = threading.Lock()  # a prefetch thread and the main thread may both pull
        self._started = False
        self._known: tuple[DenseTag, ...] | None = None  # None: no chain (yet or any more)
        self._values: dict[str, np.ndarray] = {}
        self.skipped = 0  # pulls answered "unchanged" (a metric and the trainer's finish log)

    @property
    def live(self) -> bool:
        return self._known is not None

    def pull(self, replica_fresh: bool) -> dict[str, np.ndarray]:
        """The pservers' dense values now (read-only arrays when the pull was skipped).
        ``replica_fresh``: the trainer's own-update replica has taken no step yet."""
        with self._lock:
            pulled = self.client.pull_dense_tagged(self.names, self._known)
            if pulled.values is None and self._known is not None:
                self.skipped += 1
                return self._values
            if not self._started and pulled.pristine and replica_fresh:
                self._keep(pulled.tags, pulled.values)
            else:
                self._known = None  # changed by another, or no pristine start: no exact replica
            self._started = True
            assert pulled.values is not None  # a pull without a known tag returns values
            return pulled.values

    def pushed(self, responses: Sequence[pserver_pb2.PushResponse],
               after_own: Mapping[str, np.ndarray] | None) -> None:
        """Account for one own push: ``responses`` per shard, ``after_own`` the replica's
        result for it (None when the trainer dropped the batch and its replica did not step)."""
        with self._lock:
            if self._known is None:
                return
            if len(responses) != len(self._known) or not all(
                    _extends(r, tag, stepped=after_own is not None)
                    for r, tag in zip(responses, self._known, strict=True)):
                self._known = None
                return
            self._keep(tuple(DenseTag.from_proto(r.dense_after) for r in responses),
                       after_own if after_own is not None else self._values)

    def _keep(self, tags: tuple[DenseTag, ...], values: Mapping[str, np.ndarray] | None) -> None:
        assert values is not None
        self._known = tags
        self._values = {}
        for name in self.names:
            array = np.asarray(values[name])
            array.flags.writeable = False  # handed out again on the next skipped pull
            self._values[name] = array


def _extends(response: pserver_pb2.PushResponse, known: DenseTag, *, stepped: bool) -> bool:
    """Whether a shard's answer to an own push keeps the chain: it started from the known state
    and applied the step the replica took (or, for a dropped batch, changed nothing)."""
    if not (response.HasField("dense_before") and response.HasField("dense_after")):
        return False  # sync or geo mode, or an older pserver
    before = DenseTag.from_proto(response.dense_before)
    after = DenseTag.from_proto(response.dense_after)
    if before != known:
        return False
    if stepped:
        return response.applied and not response.skipped and after != before
    return response.skipped and after == before
