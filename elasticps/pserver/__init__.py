"""The parameter server: shard i of N of every dense and sparse table, with server-side optimizers,
exactly-once push bookkeeping and atomic checkpoints. See docs/pserver.md."""
