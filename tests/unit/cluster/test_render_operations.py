"""What a cluster admin checks beyond the pods' security: disruption budgets, priority,
placement, bounded retries and deadlines, a 3-member etcd, and etcd's scrape annotations, on
both backends; the spec fields behind them refuse bad values naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from elasticps.cluster.manifests import BACKENDS, render
from elasticps.cluster.spec import Job
from elasticps.cluster.validate import semantic_problems
from elasticps.errors import ConfigError

SPEC: dict[str, Any] = {"job_name": "ctr", "namespace": "ml", "entry_point": "python train.py",
                        "trainers": 4, "min_trainers": 2, "max_trainers": 6, "pservers": 3,
                        "data": "pvc://ctr-data", "checkpoint": "pvc://ckpt"}


def objects_of(backend: str, **fields: Any) -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): o
            for o in render(Job.from_dict({**SPEC, **fields}), backend)}


def templates(objects: dict[tuple[str, str], dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """role -> pod template (etcd's and the setup Job's included), either backend."""
    out: dict[str, dict[str, Any]] = {}
    for obj in objects.values():
        if obj["apiVersion"] == "batch.volcano.sh/v1alpha1":
            out.update({t["name"]: t["template"] for t in obj["spec"]["tasks"]})
        elif obj["kind"] in ("Deployment", "StatefulSet", "Job"):
            out[obj["metadata"]["labels"]["elasticps.io/role"]] = obj["spec"]["template"]
    return out


def matches(selector: dict[str, str], template: dict[str, Any]) -> bool:
    return selector.items() <= template["metadata"]["labels"].items()


@pytest.mark.parametrize("backend", BACKENDS)
def test_disruption_budgets_keep_the_pservers_the_gang_and_an_etcd_quorum(backend: str) -> None:
    objects = objects_of(backend, etcd={"replicas": 3})
    pods = templates(objects)
    budgets = {o["metadata"]["name"]: o["spec"] for (kind, _), o in objects.items()
               if kind == "PodDisruptionBudget"}
    assert budgets.keys() == {"ctr-pserver", "ctr-trainer", "ctr-etcd"}
    assert budgets["ctr-pserver"]["maxUnavailable"] == 1
    assert budgets["ctr-trainer"]["minAvailable"] == 2  # min_trainers
    assert budgets["ctr-etcd"]["minAvailable"] == 2  # a quorum of 3
    for name, role in (("ctr-pserver", "pserver"), ("ctr-trainer", "trainer"),
                       ("ctr-etcd", "etcd")):
        selector = budgets[name]["selector"]["matchLabels"]
        assert [r for r, t in pods.items() if matches(selector, t)] == [role]
    single = objects_of(backend)  # one etcd member: no budget could allow its node's drain
    assert ("PodDisruptionBudget", "ctr-etcd") not in single


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_pod_gets_the_priority_class_when_the_spec_names_one(backend: str) -> None:
    pods = templates(objects_of(backend, priority_class="ml-batch", etcd={"replicas": 3}))
    assert set(pods) == {"master", "pserver", "trainer", "etcd", "etcd-setup"}
    assert {r: t["spec"].get("priorityClassName") for r, t in pods.items()} == dict.fromkeys(
        pods, "ml-batch")
    if backend == "volcano":  # the PodGroup's priority too
        assert objects_of(backend, priority_class="ml-batch")[("Job", "ctr")]["spec"][
            "priorityClassName"] == "ml-batch"
    assert all("priorityClassName" not in t["spec"] for t in templates(
        objects_of(backend)).values())


@pytest.mark.parametrize("backend", BACKENDS)
def test_pservers_and_etcd_members_spread_over_nodes(backend: str) -> None:
    pods = templates(objects_of(backend, etcd={"replicas": 3}))
    for role, node_rule in (("pserver", "ScheduleAnyway"), ("etcd", "DoNotSchedule")):
        spread = {c["topologyKey"]: c for c in pods[role]["spec"]["topologySpreadConstraints"]}
        assert spread["kubernetes.io/hostname"]["whenUnsatisfiable"] == node_rule, role
        assert spread["kubernetes.io/hostname"]["maxSkew"] == 1
        assert spread["topology.kubernetes.io/zone"]["whenUnsatisfiable"] == "ScheduleAnyway"
        for constraint in spread.values():  # each counts only its own role's pods
            assert matches(constraint["labelSelector"]["matchLabels"], pods[role])
            assert [r for r, t in pods.items()
                    if matches(constraint["labelSelector"]["matchLabels"], t)] == [role]


def test_volcano_retries_are_bounded_and_a_failed_trainer_is_counted() -> None:
    job = objects_of("volcano")[("Job", "ctr")]["spec"]
    tasks = {t["name"]: t for t in job["tasks"]}
    assert job["maxRetry"] == 3 * (1 + 3 + 6)
    # a script that raises ends its pod: Volcano sees PodFailed, replaces it, counts it
    assert tasks["trainer"]["template"]["spec"]["restartPolicy"] == "Never"
    assert any("PodFailed" in p.get("events", []) and p["action"] == "RestartPod"
               for p in tasks["trainer"]["policies"])
    assert job["ttlSecondsAfterFinished"] == 86400


def test_kubernetes_retries_are_bounded_per_trainer() -> None:
    trainers = objects_of("kubernetes")[("Job", "ctr-trainer")]["spec"]
    assert trainers["backoffLimitPerIndex"] == 3
    assert trainers["maxFailedIndexes"] == 4 - 2
    assert trainers["ttlSecondsAfterFinished"] == 86400
    assert "activeDeadlineSeconds" not in trainers  # no deadline unless the spec asks


@pytest.mark.parametrize(("given", "seconds"), [(7200, 7200), ("90m", 5400), ("12h", 43200),
                                                 ("2d", 172800)])
def test_active_deadline_and_ttl_reach_both_backends(given: Any, seconds: int) -> None:
    fields = {"active_deadline": given, "ttl_after_finished": "1h"}
    trainers = objects_of("kubernetes", **fields)[("Job", "ctr-trainer")]["spec"]
    assert trainers["activeDeadlineSeconds"] == seconds
    assert trainers["ttlSecondsAfterFinished"] == 3600
    job = objects_of("volcano", **fields)[("Job", "ctr")]["spec"]
    tasks = {t["name"]: t for t in job["tasks"]}
    assert job["ttlSecondsAfterFinished"] == 3600
    master = tasks["master"]
    assert master["template"]["spec"]["activeDeadlineSeconds"] == seconds
    # the master's pod fails only when its deadline passed (crashes restart in place): the
    # whole job ends then; an eviction still replaces it
    assert {"event": "PodFailed", "action": "TerminateJob"} in master["policies"]
    assert {"event": "PodEvicted", "action": "RestartPod"} in master["policies"]
    assert master["template"]["spec"]["restartPolicy"] == "OnFailure"


@pytest.mark.parametrize(("field", "value", "message"), [
    ("active_deadline", 0, "must be from 1"),
    ("active_deadline", "soon", "is not a duration"),
    ("active_deadline", "400d", "must be from 1"),
    ("active_deadline", True, "is a boolean"),
    ("ttl_after_finished", -5, "is not a duration"),
    ("ttl_after_finished", "31d", "to 2,592,000"),
    ("ttl_after_finished", 0, "must be from 60"),
    ("priority_class", "High_Priority", "DNS-1123 subdomain"),
])
def test_bad_deadlines_and_priority_classes_name_the_field(field: str, value: Any,
                                                           message: str) -> None:
    with pytest.raises(ConfigError, match=rf"job spec field '{field}': .*{message}"):
        Job.from_dict({**SPEC, field: value})


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_three_member_etcd_bootstraps_from_its_stable_names(backend: str) -> None:
    objects = objects_of(backend, etcd={"replicas": 3})
    sts = objects[("StatefulSet", "ctr-etcd")]
    service = objects[("Service", "ctr-etcd")]
    assert sts["spec"]["replicas"] == 3
    assert sts["spec"]["serviceName"] == "ctr-etcd"
    assert service["spec"]["clusterIP"] == "None"  # headless: one DNS name per member
    assert service["spec"]["publishNotReadyAddresses"] is True  # resolvable before ready
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    args = dict(a.removeprefix("--").split("=", 1) for a in container["args"] if "=" in a)
    # StatefulSet pod <sts>-<i>, reachable as <pod>.<serviceName>.<namespace>.svc
    members = [f"ctr-etcd-{i}" for i in range(3)]
    assert args["initial-cluster"] == ",".join(
        f"{m}=https://{m}.ctr-etcd.ml.svc:2380" for m in members)
    assert args["name"] == "$(POD_NAME)"
    assert args["initial-advertise-peer-urls"] == "https://$(POD_NAME).ctr-etcd.ml.svc:2380"
    assert container["env"] == [{"name": "POD_NAME", "valueFrom": {
        "fieldRef": {"fieldPath": "metadata.name"}}}]
    assert args["initial-cluster-state"] == "new"
    assert semantic_problems(list(objects.values())) == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_etcd_members_carry_scrape_annotations_for_their_metrics_port(backend: str) -> None:
    sts = objects_of(backend)[("StatefulSet", "ctr-etcd")]
    template = sts["spec"]["template"]
    annotations = template["metadata"]["annotations"]
    (container,) = template["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert annotations == {"prometheus.io/scrape": "true",
                           "prometheus.io/port": str(ports["metrics"]),
                           "prometheus.io/path": "/metrics"}
    assert "--listen-metrics-urls=http://0.0.0.0:2381" in container["args"]
