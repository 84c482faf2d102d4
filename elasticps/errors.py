"""The one exception tree of elasticps.

Every error raised by elasticps on purpose derives from :class:`ElasticPSError`::

    ElasticPSError
    ├── ConfigError                  a bad env var, keyword argument or job spec field
    ├── DataError                    a dataset that cannot be read or written
    │   └── MalformedInputError      rows that do not parse (carries line numbers)
    ├── StoreError                   the coordination store (etcd or embedded) failed
    │   ├── StoreUnavailableError    cannot reach the store right now; retry later
    │   ├── LeaseExpiredError        a lease we relied on is gone
    │   ├── StoreValueError          a key holds a value that does not parse
    │   └── NotLeaderError           we no longer hold the election lock (fenced off)
    ├── CheckpointError              a checkpoint is missing, corrupt or unwritable
    ├── ClusterError                 Kubernetes / Volcano submission failed
    └── RPCError                     a remote call failed; ``code`` keeps the gRPC status name
        ├── UnavailableError         UNAVAILABLE / DEADLINE_EXCEEDED: the peer may come back
        ├── UnauthenticatedError     UNAUTHENTICATED: missing or wrong job token
        ├── InvalidArgumentError     INVALID_ARGUMENT / OUT_OF_RANGE: the request was bad
        ├── NotFoundError            NOT_FOUND: unknown table, task or key
        ├── FailedPreconditionError  FAILED_PRECONDITION / ABORTED: state forbids the call now
        └── RemoteError              any other status: a bug or resource problem on the peer

Status codes of elasticps' own services are turned into these classes in exactly one place,
:func:`elasticps.rpc.status.raise_for_rpc_error`; servers turn them back into status codes in
:func:`elasticps.rpc.status.status_for`. (etcd speaks gRPC too: the etcd backend maps its
client's failures to :class:`StoreError` at the store boundary, ``store/etcd_store.py``.)
"""

from __future__ import annotations


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
    """A remote call failed. ``code`` is the gRPC status name, e.g. ``"UNAVAILABLE"``."""

    default_code = "UNKNOWN"

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code or self.default_code


class UnavailableError(RPCError):
    """The peer cannot be reached or did not answer in time; it may come back."""

    default_code = "UNAVAILABLE"


class UnauthenticatedError(RPCError):
    """The call carried no job token or a wrong one."""

    default_code = "UNAUTHENTICATED"


class InvalidArgumentError(RPCError):
    """The request was malformed: bad shape, dtype, id range, unknown option."""

    default_code = "INVALID_ARGUMENT"


class NotFoundError(RPCError):
    """The call named something that does not exist (a table, a task)."""

    default_code = "NOT_FOUND"


class FailedPreconditionError(RPCError):
    """The peer's state forbids the call now (not initialised, not leader, pass over)."""

    default_code = "FAILED_PRECONDITION"


class RemoteError(RPCError):
    """Any other failure on the peer."""
