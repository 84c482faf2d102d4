"""RPC plumbing: tensor codec, server and channel helpers, TLS and job-token auth, status
mapping.

The names below load their module on first use: ``elasticps run`` imports this package for
the job's certificates (:mod:`elasticps.rpc.job_ca`) and needs neither grpc nor numpy, whose
imports would delay every process of the job it starts.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from elasticps.rpc.channel import call, make_channel
    from elasticps.rpc.codec import decode_sparse, decode_tensor, encode_sparse, encode_tensor
    from elasticps.rpc.credentials import JobCredentials, credentials_from_config
    from elasticps.rpc.server import bind, make_server, rpc_handler

_LAZY: dict[str, str] = {
    "call": "elasticps.rpc.channel",
    "make_channel": "elasticps.rpc.channel",
    "decode_sparse": "elasticps.rpc.codec",
    "decode_tensor": "elasticps.rpc.codec",
    "encode_sparse": "elasticps.rpc.codec",
    "encode_tensor": "elasticps.rpc.codec",
    "JobCredentials": "elasticps.rpc.credentials",
    "credentials_from_config": "elasticps.rpc.credentials",
    "bind": "elasticps.rpc.server",
    "make_server": "elasticps.rpc.server",
    "rpc_handler": "elasticps.rpc.server",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'elasticps.rpc' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


__all__ = [
    "JobCredentials",
    "bind",
    "call",
    "credentials_from_config",
    "decode_sparse",
    "decode_tensor",
    "encode_sparse",
    "encode_tensor",
    "make_channel",
    "make_server",
    "rpc_handler",
]
