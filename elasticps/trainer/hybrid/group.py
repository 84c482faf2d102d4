"""One trainer's member of the dense group: a thread that carries out
:class:`~elasticps.trainer.hybrid.membership.Membership`'s decisions and runs the rounds.

The training thread hands each batch's dense gradient to :meth:`DenseGroup.submit` and waits
for the round that takes it; meanwhile the member runs rounds with the others. A member whose
trainer trains a task (:meth:`set_busy`) waits for its batch before each round, so the trainers
of a generation step together, one batch each, their gradients averaged; an idle member (between
tasks, waiting for work, evaluating) brings nothing to a round after :data:`IDLE_WAIT_S`, so it
never holds the others up; nor does a busy one for longer than a few of its own batch times.

Bounds (``timeout`` is PADDLE_DENSE_TIMEOUT, ``ttl`` PADDLE_LEASE_TTL):

- a member that dies mid-round breaks the round's collective at once (its sockets close), or
  after ``timeout`` if its machine vanished; the others end the generation;
- a new generation is proposed from the live member keys; a dead member's key vanishes within
  ``ttl``, and the gathering members abandon a generation that names it as soon as they see
  that, so a group re-forms within ``ttl`` + ``timeout`` of a death, at most;
- a member that leaves says so in a round (no wait at all);
- a member outside a generation tries an unreachable store again every :data:`STORE_RETRY_S`
  and fails after :data:`STORE_DEADLINE_S` of it (a formed generation's rounds need no store).

Exactly-once: a gradient is applied in the round that takes it (the plan is the same on every
member, :mod:`~elasticps.trainer.hybrid.rounds`); a round that broke is retried in the next
generation, whose state is the most advanced of its members' and the newest checkpoint, so a
batch applied anywhere before the break is a duplicate there.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from elasticps.errors import ConfigError, ElasticPSError, StoreUnavailableError
from elasticps.store.api import Compare, Lease, Put, Store
from elasticps.store.keys import (
    HYBRID_GROUP,
    HYBRID_MEMBER_PREFIX,
    GroupRecord,
    MemberInfo,
    hybrid_member_key,
    hybrid_member_of,
    read_group_record,
)
from elasticps.trainer.hybrid.checkpoints import DenseCheckpoints
from elasticps.trainer.hybrid.collectives import (
    Collectives,
    GroupBrokenError,
    LocalCollectives,
    TorchCollectives,
    device_label,
    select_backend,
)
from elasticps.trainer.hybrid.early_update import EarlyUpdates, Update
from elasticps.trainer.hybrid.membership import (
    Abandon,
    Gather,
    Membership,
    Phase,
    Propose,
    Register,
    Step,
    View,
    Wait,
)
from elasticps.trainer.hybrid.replica import DenseReplica
from elasticps.trainer.hybrid.rounds import Flag, Header, RoundPlan, plan_round

log = logging.getLogger(__name__)

IDLE_WAIT_S = 0.02  # an idle member's wait for a batch before it brings nothing to a round
BUSY_WAIT_FACTOR = 3.0  # a busy member waits this many of its batch times for its next batch
FIRST_COMPUTE_S = 0.5  # the batch time assumed before the first is measured
VIEW_EVERY_S = 0.25  # how often an active member reads the store (newcomers, vanished keys)
WAIT_S = 0.1  # a member outside a generation looks at the store again after this
STORE_RETRY_S = 1.0  # a member that could not reach the store tries again after this
# A member outside a generation that has not reached the store for this long fails (its
# trainer sees the error), as a trainer that finds no master for as long does.
STORE_DEADLINE_S = 300.0


@dataclass
class _Submission:
    header: Header
    grads: np.ndarray | None
    early: EarlyUpdates | None = None  # its update, computed during backward (a lone member)
    applied: bool | None = None  # set by the round that took it: False for a duplicate


class DenseGroup:
    """This trainer's place in the dense group (see the module docstring)."""

    def __init__(self, store: Store, replica: DenseReplica, *, name: str, host: str,
                 lease_ttl: int, timeout: float, device: torch.device,
                 checkpoints: DenseCheckpoints | None = None,
                 checkpoint_interval: float = 60.0) -> None:
        self.store, self.replica, self.name = store, replica, name
        self.lease_ttl, self.timeout, self.device = lease_ttl, timeout, device
        self.checkpoints, self.checkpoint_interval = checkpoints, checkpoint_interval
        self.membership = Membership(name, patience=timeout)
        self.lock = threading.Condition()  # guards the replica and the fields below
        self._pending: _Submission | None = None
        self._busy = False
        self._compute_s = FIRST_COMPUTE_S  # how long this trainer takes for a batch (EWMA)
        self._taken_at: float | None = None  # when the group took its last batch
        self._leaving = False
        self._ready = False
        self._error: BaseException | None = None
        self._collectives: Collectives | None = None
        self._lease: Lease | None = None
        self._view_at = 0.0
        self._store_down_since: float | None = None  # outside a generation, store unreachable
        self._view: View | None = None
        self._saved_at = time.monotonic()
        self.rounds = 0  # rounds run (tests, logs)
        self.early_rounds = 0  # rounds that committed an update computed during backward
        # Where a generation whose rank 0 this trainer is meets: served for the process's life.
        self._server = dist.TCPStore(host, 0, is_master=True, wait_for_workers=False)
        self._host = host
        self._thread = threading.Thread(target=self._run, name="dense-group", daemon=True)

    # -- the training thread's side --------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def wait_ready(self) -> None:
        """Until this member holds the job's dense state (a generation formed)."""
        with self.lock:
            self.lock.wait_for(lambda: self._ready or self._error is not None)
            self._raise_error()

    def set_busy(self, busy: bool) -> None:
        """Whether the trainer trains a task now (its member waits for its batches)."""
        with self.lock:
            self._busy = busy
            self.lock.notify_all()

    def submit(self, header: Header, grads: np.ndarray | None,
               early: EarlyUpdates | None = None) -> bool:
        """Hand a batch's dense gradient (flat; None for a skipped batch) to the group and wait
        for the round that takes it. True if it was applied, False if it was a duplicate.
        ``early``: its update as computed during the backward pass (early_update.py), which
        the round commits instead of computing it when it applies to the round."""
        submission = _Submission(header, grads, early)
        with self.lock:
            self._raise_error()
            if self._taken_at is not None:
                computed = time.monotonic() - self._taken_at
                self._compute_s = 0.8 * self._compute_s + 0.2 * computed
            self._pending = submission
            self.lock.notify_all()
            self.lock.wait_for(lambda: submission.applied is not None
                               or self._error is not None)
            self._raise_error()
            assert submission.applied is not None
            self._taken_at = time.monotonic()
            return submission.applied

    def solo(self) -> bool:
        """Whether this member is alone in a formed generation now (a round's mean is then its
        own gradient)."""
        collectives = self._collectives
        return collectives is not None and collectives.size == 1

    def values(self) -> dict[str, np.ndarray]:
        """The replica's values now: its own arrays, not copies. A round, a synchronisation or a
        restore replaces the arrays and never writes into them (optimizer steps compute into
        fresh ones), so these keep the values they had; read them, never write to them."""
        with self.lock:
            return self.replica.values()

    def leave(self) -> None:
        """Leave the group: say so in the next round, stop the member, drop the member key."""
        with self.lock:
            self._leaving = True
            self.lock.notify_all()
        if self._thread.is_alive():
            self._thread.join(self.timeout + self.lease_ttl + 5)
        lease, self._lease = self._lease, None
        if lease is not None:
            try:
                lease.revoke()  # the member key goes with it
            except ElasticPSError as exc:
                log.warning("Trainer %s could not drop its dense group key: %s", self.name, exc)

    def _raise_error(self) -> None:
        if self._error is not None:
            raise ConfigError(f"trainer {self.name}'s dense group failed: "
                              f"{self._error}") from self._error

    # -- the member's thread ----------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._done():
                self._step()
        except BaseException as exc:  # the trainer sees it at its next submit
            log.exception("Trainer %s: the dense group's member failed.", self.name)
            with self.lock:
                self._error = exc
                self.lock.notify_all()
        finally:
            self._close_collectives()

    def _done(self) -> bool:
        with self.lock:
            return self._leaving and self.membership.phase is not Phase.ACTIVE

    def _step(self) -> None:
        try:
            self._act()
        except StoreUnavailableError as exc:  # outside a generation: wait for the store
            now = time.monotonic()
            since = self._store_down_since = self._store_down_since or now
            if now - since >= STORE_DEADLINE_S:
                raise StoreUnavailableError(
                    f"trainer {self.name}'s dense group could not reach the store for "
                    f"{STORE_DEADLINE_S:g}s: {exc}") from exc
            log.warning("Trainer %s: the store is unavailable to the dense group (%s); "
                        "retrying in %.0fs.", self.name, exc, STORE_RETRY_S)
            with self.lock:
                self.lock.wait_for(lambda: self._leaving, timeout=STORE_RETRY_S)
        else:
            self._store_down_since = None

    def _act(self) -> None:
        view = self._read_view(force=self.membership.phase is not Phase.ACTIVE)
        action = self.membership.decide(view, time.monotonic())
        if isinstance(action, Register):
            self._register()
        elif isinstance(action, Propose):
            self._propose(action, view)
        elif isinstance(action, Gather):
            self._gather(action.record, action.revision)
        elif isinstance(action, Step):
            self._round(action.reform)
        elif isinstance(action, Abandon):
            self._end(action.reason)
        else:
            assert isinstance(action, Wait)
            with self.lock:
                self.lock.wait_for(lambda: self._leaving, timeout=WAIT_S)

    def _read_view(self, force: bool) -> View:
        now = time.monotonic()
        if force or self._view is None or now - self._view_at >= VIEW_EVERY_S:
            try:
                record, revision = read_group_record(self.store)
                live = {hybrid_member_of(kv.key) for kv in self.store.get_prefix(
                    HYBRID_MEMBER_PREFIX)}
            except StoreUnavailableError:
                if self._view is None or self.membership.phase is not Phase.ACTIVE:
                    raise
                return self._view  # the rounds need no store: they go on meanwhile
            self._view = View(record, revision, frozenset(m for m in live if m))
            self._view_at = now
        return self._view

    def _register(self) -> None:
        lease = self._lease
        if lease is None or lease.expired:
            lease = self.store.grant_lease(self.lease_ttl)
            lease.keep_alive()
            self._lease = lease
        info = MemberInfo(self._server.port, host=self._host, device=device_label(self.device))
        self.store.put(hybrid_member_key(self.name), info.encode(), lease.id)
        log.info("Trainer %s takes part in the dense group.", self.name)

    def _propose(self, action: Propose, view: View) -> None:
        infos = {}
        for name in action.members:
            kv = self.store.get(hybrid_member_key(name))
            if kv is None:
                return  # its key vanished since the view: decide again on a fresh one
            infos[name] = MemberInfo.decode(kv.value, kv.key)
        first = infos[action.members[0]]
        record = GroupRecord(action.generation, action.members, first.host, first.port,
                             secrets.token_hex(16),
                             select_backend([i.device for i in infos.values()]))
        compare = (Compare.mod_revision(HYBRID_GROUP, action.expected_revision)
                   if action.expected_revision else Compare.missing(HYBRID_GROUP))
        result = self.store.txn([compare], [Put(HYBRID_GROUP, record.encode())])
        if not result.succeeded:
            return  # another member proposed first: the next view shows its record
        log.info("Trainer %s proposed dense group generation %d (%s): %s.", self.name,
                 record.generation, record.backend, ", ".join(record.members))
        self._gather(record, result.revision)

    def _gather(self, record: GroupRecord, revision: int) -> None:
        self.membership.gathering(record, revision)
        self._view = None  # read after the record: a view from before it would abandon it
        rank = record.rank_of(self.name)
        assert rank is not None
        collectives: Collectives | None = None
        try:
            collectives = (LocalCollectives() if len(record.members) == 1 else
                           TorchCollectives(record, rank, self.timeout, self.device,
                                            self._abandoned))
            self._synchronise(collectives, record)
        except (GroupBrokenError, StoreUnavailableError) as exc:
            if collectives is not None:
                collectives.close()
            self._end(str(exc))
            return
        with self.lock:
            self.membership.formed()
            self._collectives = collectives
            # What the generation itself shows, until the store is read again (at once, but a
            # store that is down now must not keep the rounds from starting).
            self._view, self._view_at = View(record, revision, frozenset(record.members)), 0.0
            self._ready = True
            self.lock.notify_all()
        log.info("Trainer %s is rank %d of dense group generation %d (%d members, step %d).",
                 self.name, rank, record.generation, len(record.members), self.replica.step)

    def _abandoned(self) -> str | None:
        action = self.membership.decide(self._read_view(force=False), time.monotonic())
        return action.reason if isinstance(action, Abandon) else None

    def _synchronise(self, collectives: Collectives, record: GroupRecord) -> None:
        """Every member takes the most advanced state among theirs and the newest checkpoint
        (the lowest rank's own start values if the job has none yet)."""
        newest = self.checkpoints.newest_key() if self.checkpoints is not None else None
        rows = collectives.all_gather(self._sync_row(newest))
        if len(set(rows[:, 6].tolist())) != 1:
            raise ConfigError("the trainers of the dense group declare different dense "
                              "tables (each trainer must build the same model)")
        best_held, best_saved = _best(rows, 0), _best(rows, 3)
        if best_saved is not None and (best_held is None or best_saved[:2] > best_held[:2]):
            if collectives.rank == -best_saved[2]:
                self._restore_if_newer()
            # What the checkpoint held (it may have fallen back to an older one): ask again.
            best_held = _best(collectives.all_gather(self._sync_row(None)), 0)
        root = -best_held[2] if best_held is not None else 0
        with self.lock:
            meta, floats = self.replica.pack()
        length = collectives.broadcast(np.array([meta.size], np.int64), root)
        if collectives.rank != root:
            meta = np.zeros(int(length[0]), np.int64)
        meta = collectives.broadcast(meta, root)
        floats = collectives.broadcast(floats, root)
        with self.lock:
            if collectives.rank != root:
                self.replica.unpack(meta, floats)
            self.replica.adopt(record.generation)

    def _sync_row(self, newest: tuple[int, int] | None) -> np.ndarray:
        """(holds a state, its key, a newer checkpoint exists, its key, the tables' print)."""
        key = self.replica.key
        return np.array([key is not None, *(key or (0, 0)), newest is not None,
                         *(newest or (0, 0)), self.replica.fingerprint()], dtype=np.int64)

    def _restore_if_newer(self) -> None:
        """Load the newest readable checkpoint; keep it only if it is ahead of this state."""
        assert self.checkpoints is not None
        candidate = DenseReplica(self.replica.specs)
        key = self.checkpoints.restore_newest(candidate)
        with self.lock:
            if key is not None and (self.replica.key is None or key > self.replica.key):
                self.replica.unpack(*candidate.pack())

    def _round(self, reform: bool) -> None:
        collectives = self._collectives
        assert collectives is not None
        assert self.membership.current is not None
        submission = self._next_submission()
        with self.lock:
            leaving = self._leaving and submission is None
        header = submission.header if submission is not None else Header()
        flags = (Flag.LEAVE if leaving else Flag(0)) | (Flag.REFORM if reform else Flag(0))
        header = Header(header.kind, header.pass_id, header.task_id, header.seq, header.step,
                        flags)
        try:
            plan = self._apply_round(collectives, header, submission)
        except GroupBrokenError as exc:
            self._end(str(exc))  # the submission stays pending: the next generation takes it
            return
        current = self.membership.current
        leavers = frozenset(current.members[r] for r in plan.leavers)
        if leaving and collectives.rank == 0:
            self._save_checkpoint()  # the last one to leave: the job's final dense state
        if self.membership.after_round(leavers, plan.reform):
            log.info("Trainer %s ends dense group generation %d after a round: %s.", self.name,
                     current.generation, self.membership.log[-1].split(": ", 1)[-1])
            self._close_collectives()
            with self.lock:
                self._ready = not leaving
        if leaving:
            with self.lock:
                self.membership.leave()

    def _next_submission(self) -> _Submission | None:
        with self.lock:
            # A trainer in a task computes its next batch in about the time it took before; a
            # longer gap (it asks the master for work, reads a chunk) must not stall the others.
            wait = (min(BUSY_WAIT_FACTOR * self._compute_s + IDLE_WAIT_S, self.timeout / 2)
                    if self._busy else IDLE_WAIT_S)
            self.lock.wait_for(lambda: self._pending is not None or self._leaving,
                               timeout=wait)
            return self._pending

    def _apply_round(self, collectives: Collectives, header: Header,
                     submission: _Submission | None) -> RoundPlan:
        rows = collectives.all_gather(header.encode())
        headers = [Header.decode(row) for row in rows]
        with self.lock:
            plan = plan_round(headers, self.replica.applied)
        early = self._early_updates(submission, plan, collectives)
        mean: np.ndarray | None = None
        if plan.contributors and early is None:
            mine = (submission.grads if submission is not None and submission.grads is not None
                    and collectives.rank in plan.contributors
                    else np.zeros(self.replica.size, np.float32))
            mean = collectives.all_reduce(mine.copy()) / np.float32(len(plan.contributors))
        with self.lock:
            if early is not None:
                self.replica.commit(early)
                self.early_rounds += 1
            elif mean is not None:
                self.replica.apply(mean, plan.batch_step)
            self.replica.record(plan.recorded)
            self.rounds += 1
            if submission is not None:
                submission.applied = collectives.rank not in plan.duplicates
                self._pending = None
                self.lock.notify_all()
        if plan.contributors and collectives.rank == 0:
            self._maybe_checkpoint()
        return plan

    def _early_updates(self, submission: _Submission | None, plan: RoundPlan,
                       collectives: Collectives) -> dict[str, Update] | None:
        """The submission's early update if it is exactly what this round applies: this lone
        member's batch alone, at its step's learning rate, on the state it was computed from
        (only this thread changes the replica, so the version read here holds until the
        commit); None otherwise (the round computes the update itself)."""
        early = submission.early if submission is not None else None
        if early is None:
            return None
        fits = (collectives.size == 1 and plan.contributors == (collectives.rank,)
                and plan.batch_step == early.batch_step
                and early.version == self.replica.version
                and early.complete(self.replica.tables))
        if not fits:
            early.drop()
            return None
        try:
            return early.results()
        except Exception as exc:  # a failed early computation: the round computes it again
            log.warning("Trainer %s: an early dense update failed (%s); the round computes "
                        "it.", self.name, exc)
            return None

    def _maybe_checkpoint(self) -> None:
        if self.checkpoints is None:
            return
        if time.monotonic() - self._saved_at < self.checkpoint_interval:
            return
        self._save_checkpoint()

    def _save_checkpoint(self) -> None:
        if self.checkpoints is None:
            return
        self._saved_at = time.monotonic()
        with self.lock:
            self.checkpoints.save(self.replica, self.membership.revision)

    def _end(self, reason: str) -> None:
        generation = self.membership.current.generation if self.membership.current else 0
        log.warning("Trainer %s ends dense group generation %d: %s", self.name, generation,
                    reason)
        self._close_collectives()
        with self.lock:
            self.membership.end(reason)
            self._ready = False

    def _close_collectives(self) -> None:
        collectives, self._collectives = self._collectives, None
        if collectives is not None:
            collectives.close()


def _best(rows: np.ndarray, at: int) -> tuple[int, int, int] | None:
    """The greatest key among the rows that have one at column ``at`` (a flag, then the key),
    as (generation, step, -rank): the lowest rank wins a tie."""
    keys = [(int(r[at + 1]), int(r[at + 2]), -rank) for rank, r in enumerate(rows) if r[at]]
    return max(keys, default=None)


__all__ = ["DenseGroup"]
