"""TLS for the etcd backend: ``etcd://host:2379?tls=DIR``.

``DIR`` is an identity directory (:mod:`elasticps.identity`): the etcd server's certificate must
come from the CA in ``ca.crt`` and name the host dialled, and we present ``tls.crt`` as our
client certificate. A job's own etcd (rendered by ``elasticps submit``) requires one, and with
auth enabled maps its common name to the job's etcd user, whose role may touch only the job's
prefix (:mod:`elasticps.store.etcd_auth`).

aetcd 1.x dials only plaintext, so :class:`TlsClient` overrides its ``connect`` (the only
place it makes a channel) to make a TLS one; everything else is aetcd's.
"""

from __future__ import annotations

import asyncio
import urllib.parse
from typing import Any

import aetcd
import grpc
from aetcd import rpc
from aetcd import watcher as aetcd_watcher

from elasticps.errors import ConfigError
from elasticps.identity import Identity


def split_tls(url: str) -> tuple[str, str | None]:
    """``etcd://h:2379?tls=/dir`` -> (``etcd://h:2379``, ``/dir``); no query -> (url, None)."""
    base, sep, query = url.partition("?")
    if not sep:
        return url, None
    params = urllib.parse.parse_qs(query, strict_parsing=True, keep_blank_values=True)
    unknown = sorted(set(params) - {"tls"})
    if unknown or len(params.get("tls", [])) != 1 or not params["tls"][0]:
        raise ConfigError(f"etcd store URL {url!r}: the only option is ?tls=DIR (a directory "
                          "with ca.crt, tls.crt and tls.key)")
    return base, params["tls"][0]


def channel_credentials(identity: Identity) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(root_certificates=identity.ca_pem,
                                        private_key=identity.key_pem,
                                        certificate_chain=identity.cert_pem)


class TlsClient(aetcd.Client):
    """An aetcd client whose channel is TLS with a client certificate."""

    _is_connecting: bool

    def __init__(self, *args: Any, credentials: grpc.ChannelCredentials, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._credentials = credentials

    async def connect(self) -> None:
        """aetcd's ``connect`` (no user/password: the certificate is the login) over TLS."""
        if self._connected.is_set():
            return
        if self._is_connecting:  # another task is connecting: wait for it, as aetcd does
            await asyncio.wait_for(self._connected.wait(), self._connect_wait_timeout)
            return
        try:
            self._is_connecting = True
            self.channel = rpc.secure_channel(f"{self._host}:{self._port}", self._credentials,
                                              options=self._options.items())
            self.kvstub = rpc.KVStub(self.channel)
            self.clusterstub = rpc.ClusterStub(self.channel)
            self.leasestub = rpc.LeaseStub(self.channel)
            self.maintenancestub = rpc.MaintenanceStub(self.channel)
            self.auth_stub = rpc.AuthStub(self.channel)
            self._watcher = aetcd_watcher.Watcher(rpc.WatchStub(self.channel),
                                                  timeout=self._timeout, metadata=self.metadata)
            self._connected.set()
        finally:
            self._is_connecting = False
