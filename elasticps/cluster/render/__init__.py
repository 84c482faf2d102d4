"""Pure manifest code: a job spec -> Kubernetes and Volcano objects (no API server here).

The modules that talk to the API server are beside this package in :mod:`elasticps.cluster`.
"""
