"""The number of trainers of a job on a cluster: read it and change it through the API server.

- Volcano: the Volcano Job's ``trainer`` task's ``replicas``. Volcano creates or deletes the
  pods; its ``minAvailable`` (the job's ``min_trainers``) is untouched.
- Kubernetes: the trainers' Indexed Job's ``parallelism`` and ``completions`` together (an
  elastic Indexed Job, Kubernetes 1.27 and later: pods with an index past the new count are
  removed), with ``maxFailedIndexes`` kept at ``count - min_trainers``.

A removed trainer pod gets SIGTERM and leaves gracefully: its task goes back to the queue
without counting as a failure, as with ``elasticps scale`` on one machine. The bounds are the
job's own ``min_trainers``/``max_trainers`` (annotations rendered at submit); a count outside
them is refused, naming them. Each change is a JSON Patch whose ``test`` ops hold the values
just read, so two scalers (a person and the autoscaler) cannot interleave a read and a write.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from elasticps.cluster.kube_client import BATCH_JOB, VOLCANO_JOB, KubeClient
from elasticps.cluster.render.common import (
    MAX_TRAINERS_ANNOTATION,
    MIN_TRAINERS_ANNOTATION,
    Names,
)
from elasticps.errors import ClusterError, ConfigError


@dataclass(frozen=True)
class TrainerCount:
    backend: str  # "volcano" | "kubernetes"
    trainers: int  # the count the job is asked to run now
    min_trainers: int
    max_trainers: int


def _bound(obj: dict[str, Any], key: str, what: str) -> int:
    value = ((obj.get("metadata") or {}).get("annotations") or {}).get(key)
    try:
        return int(str(value))
    except ValueError:
        raise ClusterError(f"{what} has no usable {key} annotation ({value!r}): was it "
                           "submitted by an elasticps older than `scale` on clusters?") from None


def _trainer_task(volcano: dict[str, Any], name: str) -> tuple[int, dict[str, Any]]:
    for i, task in enumerate((volcano.get("spec") or {}).get("tasks") or []):
        if isinstance(task, dict) and task.get("name") == "trainer":
            return i, task
    raise ClusterError(f"Volcano Job {name!r} has no trainer task")


def _located(client: KubeClient, name: str, namespace: str
             ) -> tuple[str, dict[str, Any], TrainerCount]:
    volcano = client.get(VOLCANO_JOB, namespace, name)
    if volcano is not None:
        _, task = _trainer_task(volcano, name)
        what = f"Volcano Job {name!r}"
        return "volcano", volcano, TrainerCount(
            "volcano", int(task.get("replicas", 0)),
            _bound(volcano, MIN_TRAINERS_ANNOTATION, what),
            _bound(volcano, MAX_TRAINERS_ANNOTATION, what))
    trainer_job = client.get(BATCH_JOB, namespace, Names.of_name(name).trainer)
    if trainer_job is None:
        raise ClusterError(f"no elasticps job {name!r} in namespace {namespace!r}")
    what = f"Job {Names.of_name(name).trainer!r}"
    spec = trainer_job.get("spec") or {}
    return "kubernetes", trainer_job, TrainerCount(
        "kubernetes", int(spec.get("parallelism", 0)),
        _bound(trainer_job, MIN_TRAINERS_ANNOTATION, what),
        _bound(trainer_job, MAX_TRAINERS_ANNOTATION, what))


def trainer_count(client: KubeClient, name: str, namespace: str) -> TrainerCount:
    """How many trainers job ``name`` is asked to run, and its bounds."""
    return _located(client, name, namespace)[2]


def scale_trainers(client: KubeClient, name: str, namespace: str,
                   trainers: int) -> TrainerCount:
    """Ask job ``name`` for ``trainers`` trainers; returns the count before the change."""
    backend, obj, count = _located(client, name, namespace)
    if not count.min_trainers <= trainers <= count.max_trainers:
        raise ConfigError(
            f"--trainers={trainers} is outside job {name}'s bounds [{count.min_trainers}, "
            f"{count.max_trainers}] (min_trainers/max_trainers in its spec)")
    if trainers == count.trainers:
        return count
    if backend == "volcano":
        index, task = _trainer_task(obj, name)
        path = f"/spec/tasks/{index}"
        client.patch(VOLCANO_JOB, namespace, name, [
            {"op": "test", "path": f"{path}/name", "value": "trainer"},
            {"op": "test", "path": f"{path}/replicas", "value": task.get("replicas")},
            {"op": "replace", "path": f"{path}/replicas", "value": trainers}])
    else:
        spec = obj.get("spec") or {}
        client.patch(BATCH_JOB, namespace, Names.of_name(name).trainer, [
            {"op": "test", "path": "/spec/parallelism", "value": spec.get("parallelism")},
            {"op": "test", "path": "/spec/completions", "value": spec.get("completions")},
            {"op": "replace", "path": "/spec/parallelism", "value": trainers},
            {"op": "replace", "path": "/spec/completions", "value": trainers},
            {"op": "replace", "path": "/spec/maxFailedIndexes",
             "value": trainers - count.min_trainers}])
    return count
