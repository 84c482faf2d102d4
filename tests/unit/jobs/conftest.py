"""The cluster tests' fake Kubernetes API server and its client, for the cluster backend."""

from tests.unit.cluster.conftest import client, fake

__all__ = ["client", "fake"]
