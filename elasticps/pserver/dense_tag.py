"""Tags of a shard's dense state, so a trainer can tell that its copy of the values is current.

A tag is (incarnation, version): a random number drawn when a shard's state is created, and a
counter the shard bumps on every change of a dense table's values or optimizer state (a push,
InitDense, a restore, a declaration). Within one incarnation the counter only grows, and a new
process draws a new incarnation, so one tag names one dense state of one shard: a pserver that
restarted from a checkpoint never answers a tag it had before, even where its counter repeats.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from elasticps.proto import pserver_pb2


class DenseTag(NamedTuple):
    incarnation: int
    version: int

    def to_proto(self) -> pserver_pb2.DenseTag:
        return pserver_pb2.DenseTag(incarnation=self.incarnation, version=self.version)

    @classmethod
    def from_proto(cls, message: pserver_pb2.DenseTag) -> DenseTag:
        return cls(message.incarnation, message.version)


def new_incarnation() -> int:
    """A random fixed64, never 0 (0 is what an unset tag reads as)."""
    return secrets.randbits(64) or 1


@dataclass(frozen=True)
class TaggedDense:
    """Dense tables read from every shard with the tags of their states (a client's pull)."""

    values: dict[str, np.ndarray] | None  # None: every shard still had the tag asked about
    tags: tuple[DenseTag, ...]  # one per shard, in shard order
    pristine: bool  # no shard's dense tables have taken an optimizer step
