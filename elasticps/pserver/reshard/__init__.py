"""Resharding a job's pservers from N to M, and exactly-once across it.

::

    split.py          re-split the shards' snapshots from N to M (pure)
    commit.py         carry it out on checkpoints and commit the layout in the store
    layout_change.py  `elasticps reshard --pservers M`: commit once, from a role's environment
    lineage.py        which parts of a batch an earlier layout already applied

The drivers live in the layer that runs them: the local launcher's in
:mod:`elasticps.launch.reshard`, the cluster's (through the API server) in
:mod:`elasticps.cluster.pserver_reshard`.
"""
