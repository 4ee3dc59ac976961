"""Autoscaling bounds for a planned deployment, as a HorizontalPodAutoscaler on a Prometheus-adapter metric or
as a KEDA ScaledObject with a Prometheus trigger (docs/deploy.md, "Autoscaling").

The plan gives three numbers: the fewest and the most replicas (`bounds.replica_bounds`, which KServe's
InferenceService takes too), and the per-replica target: the highest request rate one replica serves within every
SLO and the utilisation cap (`maxRequestsPerSecondPerReplica`, the simulator's where the plan was verified), less
the plan's minHeadroom, the same margin the search keeps. At the declared rate the autoscaler then asks for the
replicas the plan recommends (or fewer, when the floor or rounding raised them), and it adds replicas as the rate
grows. The concurrency target is the running sequences per replica at that rate (Little's law: the planned running
sequences, utilisation x max concurrency, scaled by target rate / planned rate; capped at the max concurrency), an
approximation, since latency also grows with the rate.

Requests are counted by the engine's end-to-end latency histogram (one observation per finished request, the
count `vllm:request_success_total` also keeps), running sequences by its running gauge; the names come from
`inferplan.observe.engine_metrics`.
"""

from __future__ import annotations

from typing import Any

from inferplan.deploy.bounds import ReplicaBounds, replica_bounds
from inferplan.deploy.manifests import lws_name, metadata, nodes_per_replica, with_disruption_budgets
from inferplan.observe.engine_metrics import FAMILIES, EngineMetrics
from inferplan.observe.promql import escape_label_value
from inferplan.planner.request import PlanRequest
from inferplan.planner.results import Candidate, rounded

KINDS = ("hpa", "keda")
METRICS = ("requests", "concurrency")
PROMETHEUS_URL = "http://prometheus.monitoring.svc:9090"
"""The placeholder KEDA's serverAddress gets unless one is given (`inferplan render --prometheus-url`)."""
WINDOW = "2m"
"""Rate window of the queries: a few scrape intervals, short enough to follow a burst."""
SCALE_DOWN_WINDOW_S = 600
"""Load must stay low this long before a replica is removed, one every 5 minutes: a replica takes minutes to
come back (weights load), so a dip must not cost one."""


def per_replica_target(max_requests_per_second: float, min_headroom: float) -> float:
    """Requests/s one replica should carry: its SLO capacity [requests/s] less the share `min_headroom` the plan
    keeps unused (4 significant digits). The one formula the autoscalers and the operator's gauge share."""
    return rounded(max_requests_per_second * (1.0 - min_headroom))


def target_requests_per_second(request: PlanRequest, candidate: Candidate) -> float:
    """`per_replica_target` of the candidate's SLO capacity and the plan's minHeadroom."""
    return per_replica_target(candidate.predicted.max_requests_per_second_per_replica, request.min_headroom)


def target_running(request: PlanRequest, candidate: Candidate) -> float:
    """Running sequences per replica at the target rate (Little's law; see the module docstring)."""
    p = candidate.predicted
    planned = p.utilization * p.max_concurrency
    if p.requests_per_second_per_replica <= 0:
        return rounded(p.max_concurrency)
    scaled = planned * target_requests_per_second(request, candidate) / p.requests_per_second_per_replica
    return rounded(min(scaled, p.max_concurrency))


def _family(engine: str) -> EngineMetrics:
    family = FAMILIES.get(engine)
    if family is None:
        raise ValueError(f"autoscaling reads the engine's request metrics, known for {', '.join(sorted(FAMILIES))}; "
                         f"not for {engine}")
    return family


def adapter_metric(engine: str, metric: str = "requests") -> str:
    """The custom metric name the Prometheus adapter rule serves, e.g. vllm_requests_per_second."""
    family = _family(engine).family
    return f"{family}_requests_per_second" if metric == "requests" else f"{family}_requests_running"


def prometheus_adapter_rules(engine: str) -> dict[str, Any]:
    """prometheus-adapter `rules` that serve the per-pod request rate and running sequences of `engine` as
    custom metrics (`adapter_metric`), for the HPA's Pods metric."""
    family = _family(engine)
    rules = []
    series_of = "<<.Series>>{<<.LabelMatchers>>}"
    for metric, series, query in (
        ("requests", f"{family.e2e[0]}_count", f"sum(rate({series_of}[{WINDOW}])) by (<<.GroupBy>>)"),
        ("concurrency", family.running[0], f"sum(avg_over_time({series_of}[{WINDOW}])) by (<<.GroupBy>>)"),
    ):
        resources = {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}}
        rules.append({"seriesQuery": f'{series}{{namespace!="",pod!=""}}', "resources": resources,
                      "name": {"matches": f"^{series}$", "as": adapter_metric(engine, metric)},
                      "metricsQuery": query})
    return {"rules": rules}


GENERATED_NAME_BASE = 58
"""The API server cuts a `generateName` to this many characters before it appends 5 random ones (apiserver's
names.MaxGeneratedNameLength, 63 - 5)."""
_POD_TEMPLATE_HASH = 10  # characters of a ReplicaSet's pod-template-hash at most (a uint32 in decimal, re-lettered)


def deployment_pods(deployment: str) -> str:
    """A regex of the names of Deployment `deployment`'s pods: its ReplicaSet `DEPLOYMENT-HASH` creates them with
    generateName `DEPLOYMENT-HASH-`, which the API server cuts at GENERATED_NAME_BASE characters before the 5 random
    ones, so that a long name loses the hash's end and its dash (`DEPLOYMENT-HASH-RANDOM` only for short ones)."""
    prefix = f"{deployment}-"
    room = GENERATED_NAME_BASE - len(prefix)  # characters left for `HASH-` before the cut
    if room > _POD_TEMPLATE_HASH:
        return f"{prefix}[a-z0-9]+-[a-z0-9]+"
    if room > 0:  # a hash of room or more characters is cut to room, the dash with it
        return f"{prefix}([a-z0-9]+-[a-z0-9]+|[a-z0-9]{{{room + 5}}})"
    return f"{prefix[:GENERATED_NAME_BASE]}[a-z0-9]{{5}}"


def _scale_target(request: PlanRequest, candidate: Candidate, name: str, target: str) -> tuple[dict[str, str], str]:
    """(scaleTargetRef, a regex of its pods' names) of the workload `manifests.render` makes for `target`."""
    if target == "kserve":  # KServe's raw deployment mode names the Deployment <isvc>-predictor
        return ({"apiVersion": "apps/v1", "kind": "Deployment", "name": f"{name}-predictor"},
                deployment_pods(f"{name}-predictor"))
    if nodes_per_replica(request, candidate) > 1:  # leader pods are <lws>-<group>, workers <lws>-<group>-<i>
        return ({"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "name": lws_name(name)},
                f"{lws_name(name)}-[0-9]+")
    return {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}, deployment_pods(name)


def keda_query(engine: str, metric: str, namespace: str | None, pod_pattern: str) -> str:
    """PromQL for the workload's total request rate (or running sequences): KEDA divides it by the replicas
    and compares it with the per-replica threshold. The pods are matched by namespace and name."""
    family = _family(engine)
    selector = ",".join([*([f"namespace={escape_label_value(namespace)}"] if namespace else []),
                         f"pod=~{escape_label_value(pod_pattern)}"])
    if metric == "requests":
        parts = [f"sum(rate({name}_count{{{selector}}}[{WINDOW}]))" for name in family.e2e]
    else:
        parts = [f"sum(avg_over_time({name}{{{selector}}}[{WINDOW}]))" for name in family.running]
    return " or ".join(f"({part})" for part in parts) if len(parts) > 1 else parts[0]


def _quantity(value: float) -> str:
    """A Kubernetes quantity for `value` in thousandths (13.35 -> '13350m', 12 -> '12')."""
    milli = max(1, round(value * 1000))
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def _behavior() -> dict[str, Any]:
    return {"scaleDown": {"stabilizationWindowSeconds": SCALE_DOWN_WINDOW_S,
                          "policies": [{"type": "Pods", "value": 1, "periodSeconds": 300}]}}


def _target_value(request: PlanRequest, candidate: Candidate, metric: str) -> float:
    if metric not in METRICS:
        raise ValueError(f"unknown autoscaling metric {metric!r}; known: {', '.join(METRICS)}")
    return (target_requests_per_second if metric == "requests" else target_running)(request, candidate)


def autoscaling(request: PlanRequest, candidate: Candidate, *, name: str, namespace: str | None = None,
                kind: str = "hpa", target: str = "deployment", metric: str = "requests",
                prometheus_url: str = PROMETHEUS_URL) -> list[dict[str, Any]]:
    """The autoscaler of the workload `manifests.render(..., target=target)` makes: an autoscaling/v2
    HorizontalPodAutoscaler on the adapter's Pods metric (kind "hpa"), or a keda.sh/v1alpha1 ScaledObject with
    a Prometheus trigger at `prometheus_url` (kind "keda"), between `replica_bounds` at the per-replica
    target (requests/s, or running sequences with metric "concurrency")."""
    if kind not in KINDS:
        raise ValueError(f"unknown autoscaling kind {kind!r}; known: {', '.join(KINDS)}")
    if candidate.roles:
        raise ValueError("a disaggregated deployment's pools are not autoscaled by inferplan: each scales on its own "
                         "load (prompts for the prefill pool, running sequences for the decode pool)")
    value = _target_value(request, candidate, metric)
    bounds = replica_bounds(request, candidate)
    ref, pods = _scale_target(request, candidate, name, target)
    unit = "requests/s" if metric == "requests" else "running sequences"
    annotations = {"inferplan.io/target-per-replica": f"{value:g} {unit} (the point prediction)",
                   "inferplan.io/max-replicas-from": bounds.max_from, "inferplan.io/replica-bounds": bounds.basis}
    meta = metadata(name, namespace, annotations=annotations)
    if kind == "hpa":
        pods_metric = {"metric": {"name": adapter_metric(request.engine, metric)},
                       "target": {"type": "AverageValue", "averageValue": _quantity(value)}}
        return [{"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": meta,
                 "spec": {"scaleTargetRef": ref, "minReplicas": bounds.min, "maxReplicas": bounds.max,
                          "metrics": [{"type": "Pods", "pods": pods_metric}], "behavior": _behavior()}}]
    trigger = {"type": "prometheus", "metricType": "AverageValue",
               "metadata": {"serverAddress": prometheus_url,
                            "query": keda_query(request.engine, metric, namespace, pods),
                            "threshold": f"{value:g}"}}
    return [{"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": meta,
             "spec": {"scaleTargetRef": ref, "pollingInterval": 15, "minReplicaCount": bounds.min,
                      "maxReplicaCount": bounds.max,
                      "advanced": {"horizontalPodAutoscalerConfig": {"behavior": _behavior()}},
                      "triggers": [trigger]}}]


def hand_replicas_to_autoscaler(objects: list[dict[str, Any]], bounds: ReplicaBounds) -> list[dict[str, Any]]:
    """Copies of rendered objects for use beside an autoscaler: the Deployment or LeaderWorkerSet without
    `spec.replicas` (what Kubernetes advises, so that an apply does not reset what the autoscaler chose), with its
    PodDisruptionBudget where the autoscaler may run 2 or more replicas (`bounds.max`) and it has none yet (a
    recommendation of one replica), an InferenceService starting from the floor."""
    handed = []
    for obj in objects:
        if obj["kind"] in ("Deployment", "LeaderWorkerSet"):
            obj = {**obj, "spec": {k: v for k, v in obj["spec"].items() if k != "replicas"}}
        elif obj["kind"] == "InferenceService":
            predictor = {**obj["spec"]["predictor"], "minReplicas": bounds.min}
            obj = {**obj, "spec": {**obj["spec"], "predictor": predictor}}
        handed.append(obj)
    return with_disruption_budgets(handed, bounds.max)


__all__ = [
    "KINDS",
    "METRICS",
    "PROMETHEUS_URL",
    "ReplicaBounds",
    "adapter_metric",
    "autoscaling",
    "deployment_pods",
    "hand_replicas_to_autoscaler",
    "keda_query",
    "per_replica_target",
    "prometheus_adapter_rules",
    "replica_bounds",
    "target_requests_per_second",
    "target_running",
]
