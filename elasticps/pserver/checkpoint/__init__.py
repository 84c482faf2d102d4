"""A pserver shard's checkpoints: what they hold, how they are written, read and inspected.

::

    snapshot.py    what a checkpoint holds: a consistent copy of a shard, or what changed
    format.py      the data file (safetensors) and its validation
    manifest.py    the manifest beside each data file: size, sha256, summary
    files.py       ShardCheckpoints: atomic, checksummed, versioned files on any fsspec URL
    delta.py       delta checkpoints between full ones
    inspection.py  `elasticps checkpoint inspect|verify`: read-only reports
"""
