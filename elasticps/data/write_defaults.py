"""The dataset writer's defaults and choices, without pyarrow: the command line shows them in
``elasticps data --help`` and must not load pyarrow to do so (:mod:`.writer` uses them)."""

from __future__ import annotations

DEFAULT_ROWS_PER_CHUNK = 65536
DEFAULT_CHUNKS_PER_FILE = 64
COMPRESSIONS = ("snappy", "zstd", "lz4", "gzip", "none")
# Snappy: within 10% of zstd in size and over twice as fast to decode on the read hot path.
DEFAULT_COMPRESSION = "snappy"
