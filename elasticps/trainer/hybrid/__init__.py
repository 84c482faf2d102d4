"""Hybrid mode: the dense parameters replicated on every trainer and averaged by all-reduce
(``torch.distributed``, gloo or NCCL), the sparse rows through the pservers as in async mode.

::

    membership.py    who is in the dense group, and what a trainer does about it (pure)
    rounds.py        one round of the group: which batches count, which are duplicates (pure)
    replica.py       the dense values, optimizer state and applied batches every member holds
    checkpoints.py   the replica's checkpoints, published under the group's generation
    collectives.py   torch.distributed for one generation: rendezvous, all-reduce, broadcast
    group.py         a member's loop: the view of the store, the generations, the rounds
    params.py        HybridParams: the trainer's ParameterClient (sparse to the pservers)

docs/trainer.md (Hybrid mode) and docs/fault-tolerance.md say what it guarantees.
"""
