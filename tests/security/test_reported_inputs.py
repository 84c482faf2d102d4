"""The review's exact inputs that escaped validators with non-domain exceptions (the fuzzers
find them too, by chance; these pin them): each now raises only its domain error."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from elasticps.errors import CheckpointError, InvalidArgumentError
from elasticps.proto import common_pb2
from elasticps.pserver.checkpoint import format as fmt
from elasticps.rpc.codec import decode_tensor


@pytest.mark.parametrize("shape", [[1] * 65, [1] * 33, [0, 2**62], [2**62, 0, 2**62]],
                         ids=["65 dims", "33 dims", "zero beside huge", "zero between huge"])
def test_the_codec_refuses_the_reported_shapes(shape: list[int]) -> None:
    count = int(np.prod(shape, dtype=object))
    data = b"\0" * (4 * count) if count <= 1 else b""
    tensor = common_pb2.Tensor(dtype=common_pb2.FLOAT32, shape=shape, data=data)
    with pytest.raises(InvalidArgumentError):
        decode_tensor(tensor)


@pytest.mark.parametrize("header", [[], [1, 2], "x", 7, None], ids=repr)
def test_a_checkpoint_file_whose_header_is_not_an_object_is_a_checkpoint_error(
        header: object) -> None:
    raw = json.dumps(header).encode()
    with pytest.raises(CheckpointError):
        fmt.parse(struct.pack("<Q", len(raw)) + raw + b"\0" * 16)
