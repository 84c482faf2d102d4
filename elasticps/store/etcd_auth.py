"""Give a job's etcd its users: the job's user may read and write only the job's prefix.

Run once per job by the ``<job>-etcd-setup`` Job (``elasticps store setup-auth``), with the
certificate of etcd's ``root`` user, against the job's own etcd, which runs with
``--client-cert-auth``: once auth is enabled, etcd takes the user name from the client
certificate's common name, so every role (whose certificates all name the job's store user,
:func:`elasticps.identity.store_user`) is that user, and no password exists anywhere.

Every step is idempotent (an existing role, user or grant is fine), so the setup Job may be
retried, or run by several hands, and ends in the same state:

1. role ``<user>`` with READWRITE on ``[prefix, prefix_end)``;
2. user ``<user>`` (no password) granted that role;
3. user ``root`` (no password) granted ``root``, which etcd requires before auth is enabled;
4. auth enabled.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import grpc
from aetcd import rpc

from elasticps.errors import StoreError, StoreUnavailableError
from elasticps.identity import Identity
from elasticps.retry import RetryPolicy
from elasticps.store._common import prefix_range_end
from elasticps.store.etcd_tls import TlsClient, channel_credentials

log = logging.getLogger(__name__)

# The setup Job may start before etcd answers; wait for it this long, then fail (and the Job's
# pod is restarted by Kubernetes).
SETUP_RETRY = RetryPolicy(deadline=120.0, initial_backoff=0.2, max_backoff=2.0,
                          retryable=(StoreUnavailableError,))


async def _tolerating_exists(what: str, call: Callable[[], Awaitable[object]]) -> None:
    try:
        await call()
    except grpc.aio.AioRpcError as exc:
        if exc.code() == grpc.StatusCode.FAILED_PRECONDITION and "already" in (
                exc.details() or ""):
            log.info("etcd auth setup: %s already done.", what)
            return
        raise


async def _setup(host: str, port: int, identity: Identity, user: str, prefix: str) -> None:
    client = TlsClient(host=host, port=port, timeout=10, credentials=channel_credentials(identity))
    try:
        await client.connect()
        auth = client.auth_stub
        key = prefix.encode()
        permission = rpc.Permission(permType=rpc.Permission.READWRITE, key=key,
                                    range_end=prefix_range_end(key))
        no_password = rpc.UserAddOptions(no_password=True)
        await _tolerating_exists(f"role {user}", lambda: auth.RoleAdd(
            rpc.AuthRoleAddRequest(name=user)))
        await auth.RoleGrantPermission(rpc.AuthRoleGrantPermissionRequest(name=user,
                                                                          perm=permission))
        await _tolerating_exists(f"user {user}", lambda: auth.UserAdd(
            rpc.AuthUserAddRequest(name=user, options=no_password)))
        await auth.UserGrantRole(rpc.AuthUserGrantRoleRequest(user=user, role=user))
        await _tolerating_exists("user root", lambda: auth.UserAdd(
            rpc.AuthUserAddRequest(name="root", options=no_password)))
        await auth.UserGrantRole(rpc.AuthUserGrantRoleRequest(user="root", role="root"))
        await auth.AuthEnable(rpc.AuthEnableRequest())
    finally:
        await client.close()


def setup_job_auth(endpoints: list[tuple[str, int]], identity: Identity, user: str,
                   prefix: str) -> None:
    """Create ``user`` limited to ``prefix`` and enable auth, as etcd's ``root`` (the identity's
    certificate must name root). Retries an etcd that does not answer yet."""

    def attempt() -> None:
        errors = []
        for host, port in endpoints:
            try:
                asyncio.run(_setup(host, port, identity, user, prefix))
                return
            except grpc.aio.AioRpcError as exc:
                if exc.code() != grpc.StatusCode.UNAVAILABLE:
                    raise StoreError(
                        f"etcd auth setup at {host}:{port} failed: {exc.code().name}: "
                        f"{exc.details()}") from exc
                errors.append(f"{host}:{port}: {exc.details()}")
        raise StoreUnavailableError("no etcd endpoint answered: " + "; ".join(errors))

    SETUP_RETRY.call(attempt, what=f"setting up etcd auth for {user}")
    log.info("etcd auth is on; user %s may use %s only.", user, prefix)
