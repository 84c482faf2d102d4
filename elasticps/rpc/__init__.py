"""RPC plumbing: tensor codec, server and channel helpers, job-token auth, status mapping."""

from elasticps.rpc.channel import call, make_channel
from elasticps.rpc.codec import decode_sparse, decode_tensor, encode_sparse, encode_tensor
from elasticps.rpc.server import bind, make_server, rpc_handler

__all__ = [
    "bind",
    "call",
    "decode_sparse",
    "decode_tensor",
    "encode_sparse",
    "encode_tensor",
    "make_channel",
    "make_server",
    "rpc_handler",
]
