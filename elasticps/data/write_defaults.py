"""The dataset writer's defaults and choices, without pyarrow: the command line shows them in
``elasticps data --help`` and must not load pyarrow to do so (:mod:`.writer` uses them)."""

from __future__ import annotations

DEFAULT_ROWS_PER_CHUNK = 65536
DEFAULT_CHUNKS_PER_FILE = 64
# A dataset that fits in one chunk is split into this many (a typical trainer count), so that
# every trainer gets a task, but no chunk smaller than SMALL_CHUNK_ROWS rows (one batch of the
# examples' default size): 3,000 rows make 5 chunks, 65,536 rows 8.
DEFAULT_MIN_CHUNKS = 8
SMALL_CHUNK_ROWS = 512
COMPRESSIONS = ("snappy", "zstd", "lz4", "gzip", "none")
# Snappy: within 10% of zstd in size and over twice as fast to decode on the read hot path.
DEFAULT_COMPRESSION = "snappy"
