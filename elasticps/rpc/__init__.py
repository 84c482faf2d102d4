"""RPC plumbing: tensor codec, server and channel helpers, TLS and job-token auth, status
mapping."""

from elasticps.rpc.channel import call, make_channel
from elasticps.rpc.codec import decode_sparse, decode_tensor, encode_sparse, encode_tensor
from elasticps.rpc.credentials import JobCredentials, credentials_from_config
from elasticps.rpc.server import bind, make_server, rpc_handler

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
