"""The one exception tree of elasticps.

Every error raised by elasticps on purpose derives from :class:`ElasticPSError`::

    ElasticPSError
    ├── ConfigError                  a bad env var, keyword argument or job spec field
    ├── DataError                    a dataset that cannot be read or written
    │   └── MalformedInputError      rows that do not parse (carries line numbers)
    ├── InvalidArgumentError         a request or value that is wrong: bad shape, dtype, id range
    ├── NotFoundError                it names something that does not exist: a table, a task
    ├── FailedPreconditionError      the state forbids it now: not initialised, job failed
    ├── ResourceExhaustedError       it would exceed a cap (ids per request, tables, memory)
    ├── LayoutChangedError           the pservers' shard count is not the caller's: route again
    ├── StoreError                   the coordination store (etcd or embedded) failed
    │   ├── StoreUnavailableError    cannot reach the store right now; retry later
    │   ├── LeaseExpiredError        a lease we relied on is gone
    │   ├── StoreValueError          a key holds a value that does not parse
    │   └── NotLeaderError           we no longer hold the election lock (fenced off)
    ├── CheckpointError              a checkpoint is missing, corrupt or unwritable
    ├── ClusterError                 Kubernetes / Volcano submission failed
    └── RPCError                     a remote call failed in transport; ``code`` is the status name
        ├── UnavailableError         UNAVAILABLE / DEADLINE_EXCEEDED: the peer may come back
        ├── OverloadedError          RESOURCE_EXHAUSTED by the server's call limit: try later
        ├── UnauthenticatedError     UNAUTHENTICATED: missing or wrong job token
        └── RemoteError              any other status: a bug or resource problem on the peer

The four domain errors in the middle are raised by pure code (the task queue, the tables, the
codec) with no notion of RPC; they cross the wire as status codes and come back as the same
class, so a caller handles "task 7 does not exist" alike in-process and over gRPC.

Status codes of elasticps' own services are turned into these classes in exactly one place,
:func:`elasticps.rpc.error_codes.raise_for_rpc_error`; servers turn them back into status codes in
:func:`elasticps.rpc.error_codes.status_for` and answer them, marked as theirs, in
:func:`elasticps.rpc.error_codes.abort_for`; nothing else knows the mapping. (etcd speaks gRPC
too: the etcd backend maps its client's failures to :class:`StoreError` at the store boundary,
``store/etcd_store.py``.)
"""

from __future__ import annotations

import reprlib

# What an error message may show of a value it did not make: a bounded excerpt, so a huge or
# deeply nested value (a YAML file's, a request's) costs no more to report than a small one.
_EXCERPT = reprlib.Repr()  # keyword arguments only from Python 3.12
_EXCERPT.maxlevel, _EXCERPT.maxstring, _EXCERPT.maxlong, _EXCERPT.maxother = 2, 80, 40, 80
for _limit in ("maxtuple", "maxlist", "maxarray", "maxdict", "maxset", "maxfrozenset",
               "maxdeque"):
    setattr(_EXCERPT, _limit, 4)


def shown(value: object) -> str:
    """``repr(value)`` cut to a bounded excerpt (80 characters of a string, four items of a
    container, two levels), computed without visiting the rest of ``value``."""
    try:
        return _EXCERPT.repr(value)
    except ValueError:  # an int past Python's 4300-digit limit for str()
        return f"<a {type(value).__name__} too large to show>"


# The exit status of a role process (master, pserver, trainer) that stopped on a ConfigError
# (sysexits.h's EX_CONFIG): the same configuration would fail the same way again, so a
# supervisor fails the job at once instead of restarting the process (launch/supervisor.py).
CONFIG_EXIT_CODE = 78


class ElasticPSError(Exception):
    """Base class of every error elasticps raises on purpose."""


class ConfigError(ElasticPSError, ValueError):
    """A configuration value is missing or malformed; the message names it."""


class DataError(ElasticPSError):
    """A dataset cannot be read or written."""


class MalformedInputError(DataError):
    """Input rows failed to parse; ``bad_lines`` lists (line number, reason) pairs."""

    def __init__(self, message: str, bad_lines: list[tuple[int, str]] | None = None) -> None:
        super().__init__(message)
        self.bad_lines = bad_lines or []


class InvalidArgumentError(ElasticPSError):
    """A request or value is malformed: bad shape, dtype, id range, unknown option."""


class NotFoundError(ElasticPSError):
    """Something named does not exist (a table, a task)."""


class FailedPreconditionError(ElasticPSError):
    """The current state forbids the operation (not initialised, not leader, job failed)."""


class ResourceExhaustedError(ElasticPSError):
    """The request would exceed a cap (ids per request, tables, declared size, a shard's
    memory) and eviction cannot make room; nothing changed. The message names the cap."""


class LayoutChangedError(ElasticPSError):
    """A pserver serves a different number of shards than the caller routed for (the job was
    resharded): nothing changed; the caller reads the new layout and routes the call again."""


class StoreError(ElasticPSError):
    """The coordination store failed."""


class StoreUnavailableError(StoreError):
    """The store cannot be reached right now; callers may retry."""


class LeaseExpiredError(StoreError):
    """A lease this process relied on has expired or was revoked."""


class StoreValueError(StoreError):
    """A store key holds a value that does not parse (corrupt, foreign or from another
    version); the message names the key."""


class NotLeaderError(StoreError):
    """This process no longer holds the election lock; its writes are refused."""


class CheckpointError(ElasticPSError):
    """A checkpoint is missing, corrupt, or cannot be written."""


class ClusterError(ElasticPSError):
    """Submitting to or querying Kubernetes / Volcano failed."""


class RPCError(ElasticPSError):
    """A remote call failed in transport. ``code`` is the gRPC status name, e.g.
    ``"UNAVAILABLE"``; :mod:`elasticps.rpc.error_codes` sets it."""

    default_code = "UNKNOWN"

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code or self.default_code


class UnavailableError(RPCError):
    """The peer cannot be reached or did not answer in time; it may come back."""

    default_code = "UNAVAILABLE"


class OverloadedError(RPCError):
    """The server refused the call unread because it already runs as many calls as it allows
    (RESOURCE_EXHAUSTED); the same call may succeed a moment later, so clients retry it with
    backoff. A message over the size limit is also RESOURCE_EXHAUSTED but never gets better:
    that one is a :class:`RemoteError`."""

    default_code = "RESOURCE_EXHAUSTED"


class UnauthenticatedError(RPCError):
    """The call carried no job token or a wrong one."""

    default_code = "UNAUTHENTICATED"


class RemoteError(RPCError):
    """Any other failure on the peer."""
