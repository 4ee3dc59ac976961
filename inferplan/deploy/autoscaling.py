"""Autoscaling bounds for a planned deployment, as a HorizontalPodAutoscaler on a Prometheus-adapter metric or
as a KEDA ScaledObject with a Prometheus trigger (docs/deploy.md, "Autoscaling").

The plan gives three numbers:
- min replicas: the plan's availability floor (constraints.minReplicas, default 2), never above the
  recommendation (the point prediction's replicas);
- max replicas: the tightest cap the plan sets on this GPU type (maxReplicas, the budget at the GPU's price,
  maxGpus, maxGpusPerType, availableGpus); without one, twice the recommendation, or, where the recommendation
  states prediction intervals and more are needed, the replicas that hold every SLO with each latency at the high
  end of its interval (`pessimistic_replicas`);
- the per-replica target: the highest request rate one replica serves within every SLO and the utilisation
  cap (`maxRequestsPerSecondPerReplica`), less the plan's minHeadroom, the same margin the search keeps. At
  the declared rate the autoscaler then asks for the replicas the plan recommends (or fewer, when the floor or
  rounding raised them), and it adds replicas as the rate grows. The concurrency target is the running
  sequences per replica at that rate (Little's law: the planned running sequences, utilisation x max
  concurrency, scaled by target rate / planned rate; capped at the max concurrency), an approximation, since
  latency also grows with the rate.

Requests are counted by the engine's end-to-end latency histogram (one observation per finished request, the
count `vllm:request_success_total` also keeps), running sequences by its running gauge; the names come from
`inferplan.observe.engine_metrics`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from inferplan.deploy.manifests import metadata, nodes_per_replica
from inferplan.observe.engine_metrics import FAMILIES, EngineMetrics
from inferplan.observe.promql import escape_label_value
from inferplan.planner.gpus import load_gpu_catalog
from inferplan.planner.observed import CurrentShape, predict_current
from inferplan.planner.quantiles import QUANTILE_NAMES
from inferplan.planner.results import Candidate, rounded
from inferplan.planner.spec import PlanRequest

KINDS = ("hpa", "keda")
METRICS = ("requests", "concurrency")
PROMETHEUS_URL = "http://prometheus.monitoring.svc:9090"
"""The placeholder KEDA's serverAddress gets unless one is given (`inferplan render --prometheus-url`)."""
WINDOW = "2m"
"""Rate window of the queries: a few scrape intervals, short enough to follow a burst."""
SCALE_DOWN_WINDOW_S = 600
"""Load must stay low this long before a replica is removed, one every 5 minutes: a replica takes minutes to
come back (weights load), so a dip must not cost one."""


@dataclass(frozen=True)
class ReplicaBounds:
    """Fewest and most replicas the autoscaler may run, where each comes from, and what they rest on in words (the
    rendered autoscaler's `inferplan.io/replica-bounds` annotation), for docs and review."""

    min: int
    max: int
    min_from: str
    max_from: str
    basis: str = ""


@dataclass(frozen=True)
class Pessimistic:
    """What the recommendation needs if each latency its SLOs bound comes out at the high end of its prediction
    interval: `replicas`, or None where no count holds an SLO then; `slo` says which SLO sets the count (or is
    missed even at light load), at what ratio of high end to prediction, and the latency it reaches there."""

    confidence: float
    slo: str
    replicas: int | None = None

    def words(self) -> str:
        """"every SLO holds with 9 replicas at the high end of the 80% prediction intervals (TTFT p95 <= 500 ms, ...)",
        or "no replica count holds TPOT p95 <= 50 ms at the high end of ... (... at light load)"."""
        at = f"at the high end of the {self.confidence:.0%} prediction intervals"
        if self.replicas is None:
            return f"no replica count holds every SLO {at} ({self.slo})"
        return f"every SLO holds with {self.replicas} replicas {at} ({self.slo})"


RATE_STEPS = 24
"""Bisections of the per-replica rate between light load and the point capacity (in log space: 1e4 ** 2 ** -24,
a relative step under 1e-6)."""
LIGHT_LOAD = 1e-4
"""Light load, as a share of the point capacity: where the latencies are their floor."""
PESSIMISTIC_CEILING = 4
"""Without a cap of the plan, the intervals raise maxReplicas to at most this many times the recommendation. Where
the high end of a latency lies near its SLO even at light load, the count that holds it grows without bound (the
examples ask for up to 300x the recommendation): an autoscaler bound that far above the reviewed plan is a cost
nobody agreed to. A plan that wants more says so with constraints.maxReplicas or budgetDollarsPerHour, and the
rendered annotation gives the count the intervals ask for."""


def pessimistic_replicas(request: PlanRequest, candidate: Candidate) -> Pessimistic | None:
    """The replicas that keep every SLO if each latency an SLO bounds is at the high end of its prediction interval
    (`predicted.intervals`, at `predicted.confidence`): the highest per-replica rate at which each SLO's predicted
    percentile x (its interval's high end / its prediction) stays within the SLO, found by bisection with the
    planner's model (`observed.predict_current`, its curve anchored on the candidate's own prediction at the planned
    rate, so a verified or calibrated candidate keeps its numbers), and the replicas of that rate as the search
    counts them (the plan's rate, minHeadroom and minReplicas), at least the recommendation's. None without
    intervals or SLOs, and for a disaggregated candidate."""
    intervals, p = candidate.predicted.intervals, candidate.predicted
    if intervals is None or candidate.roles or not request.slos:
        return None
    shape = CurrentShape(candidate.gpu_type, 1, candidate.gpus_per_replica, candidate.precision,
                         candidate.kv_cache_dtype, candidate.max_batch, candidate.data_parallel_attention,
                         candidate.expert_parallel, candidate.pipeline_parallel)

    def latency(rate: float) -> dict[str, dict[float, float]]:
        return predict_current(dataclasses.replace(request, rate_rps=rate), shape).latency

    planned = latency(p.requests_per_second_per_replica)
    slos = []  # (SLO, its interval's high end / the prediction, the high end / the model's latency at the planned rate)
    for slo in request.slos:
        name = QUANTILE_NAMES[slo.quantile]
        point = getattr(getattr(p, f"{slo.metric}_ms"), name) * 1e-3
        high = getattr(getattr(intervals, f"{slo.metric}_ms"), name)[1] * 1e-3
        model = planned[slo.metric][slo.quantile]
        slos.append((slo, max(high / point, 1.0) if point > 0 else 1.0, max(high, point) / model if model > 0 else 1.0))

    def load(rate: float) -> list[float]:
        """Each SLO's latency at the high end at `rate`, over the SLO: every one <= 1 where every SLO holds."""
        at = latency(rate)
        return [at[s.metric][s.quantile] * scale / s.max_s for s, _, scale in slos]

    def text(rate: float, where: str) -> str:
        shares = load(rate)
        i = max(range(len(slos)), key=shares.__getitem__)
        s, ratio, _ = slos[i]
        return (f"{s.metric.upper()} {QUANTILE_NAMES[s.quantile]} <= {_ms(s.max_s)} ms: up to {ratio:.3g}x the "
                f"prediction, {_ms(shares[i] * s.max_s)} ms {where}")

    confidence = p.confidence or 0.8
    best = p.max_requests_per_second_per_replica
    low, top = best * LIGHT_LOAD, best
    if max(load(low)) > 1.0:
        return Pessimistic(confidence, text(low, "at light load"))
    if max(load(top)) <= 1.0:
        low = top
    else:
        for _ in range(RATE_STEPS):
            middle = math.sqrt(low * top)
            low, top = (middle, top) if max(load(middle)) <= 1.0 else (low, middle)
    usable = max(low * (1.0 - request.min_headroom), 1e-12)
    replicas = max(request.min_replicas, math.ceil(request.rate_rps / usable - 1e-9), candidate.replicas)
    return Pessimistic(confidence, text(low, f"at {rounded(low)} requests/s per replica"), replicas)


def _ms(seconds: float) -> str:
    """Milliseconds in words: 4 significant digits, whole above 1000 (60000, not 6e+04)."""
    ms = seconds * 1e3
    return f"{ms:.0f}" if ms >= 1000 else f"{ms:.4g}"


def _price_per_gpu(request: PlanRequest, gpu_type: str) -> float:
    return request.prices.get(gpu_type, load_gpu_catalog().get(gpu_type).usd_per_hour)


def replica_bounds(request: PlanRequest, candidate: Candidate) -> ReplicaBounds:
    """min: the plan's floor (constraints.minReplicas), at most the recommendation; max: the tightest of the
    plan's caps on this GPU type, else twice the recommendation or, where more, the replicas that hold every SLO at
    the high end of the prediction intervals (`pessimistic_replicas`); never below the recommendation (which meets
    every cap). `basis` says all of it in words."""
    gpus = candidate.gpus_per_replica
    caps: list[tuple[int, str]] = []
    if request.max_replicas is not None:
        caps.append((request.max_replicas, "constraints.maxReplicas"))
    if request.budget_usd_per_hour is not None:
        per_replica = gpus * _price_per_gpu(request, candidate.gpu_type)
        caps.append((math.floor(request.budget_usd_per_hour / per_replica + 1e-9), "constraints.budgetDollarsPerHour"))
    if request.max_gpus is not None:
        caps.append((request.max_gpus // gpus, "constraints.maxGpus"))
    if candidate.gpu_type in request.max_gpus_per_type:
        caps.append((request.max_gpus_per_type[candidate.gpu_type] // gpus, "constraints.maxGpusPerType"))
    if request.available_gpus and candidate.gpu_type in request.available_gpus:
        caps.append((request.available_gpus[candidate.gpu_type] // gpus, "constraints.availableGpus"))
    pessimistic = pessimistic_replicas(request, candidate)
    needed = None if pessimistic is None else pessimistic.replicas
    ceiling = PESSIMISTIC_CEILING * candidate.replicas
    if caps:
        most, source = min(caps)
    elif needed is not None and needed > 2 * candidate.replicas:
        most = min(needed, ceiling)
        source = ("the SLOs at the prediction intervals' high end" if needed <= ceiling else
                  f"the SLOs at the prediction intervals' high end, at most {PESSIMISTIC_CEILING}x the recommendation")
    else:
        most, source = 2 * candidate.replicas, "twice the recommendation (the plan sets no cap)"
    least = min(request.min_replicas, candidate.replicas)
    source = source if most >= candidate.replicas else "the recommendation"
    most = max(most, candidate.replicas)
    basis = [f"minReplicas {least}: constraints.minReplicas ({request.min_replicas}), at most the recommendation's "
             f"{candidate.replicas} replicas (the point prediction)", f"maxReplicas {most}: {source}"]
    if pessimistic is None:
        basis.append("the recommendation states no prediction interval: the bounds rest on the point prediction")
    else:
        basis.append(pessimistic.words())
        if needed is not None and needed > most:
            basis.append(f"maxReplicas stops at {most}: constraints.maxReplicas or budgetDollarsPerHour allow more")
    return ReplicaBounds(min=least, max=most, min_from="constraints.minReplicas", max_from=source,
                         basis="; ".join(basis))


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


def _scale_target(request: PlanRequest, candidate: Candidate, name: str, target: str) -> tuple[dict[str, str], str]:
    """(scaleTargetRef, a regex of its pods' names) of the workload `manifests.render` makes for `target`."""
    if target == "kserve":  # KServe's raw deployment mode names the Deployment <isvc>-predictor
        return ({"apiVersion": "apps/v1", "kind": "Deployment", "name": f"{name}-predictor"},
                f"{name}-predictor-[a-z0-9]+-[a-z0-9]+")
    if nodes_per_replica(request, candidate) > 1:  # leader pods are <name>-<group>, workers <name>-<group>-<i>
        return ({"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "name": name},
                f"{name}-[0-9]+")
    return {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}, f"{name}-[a-z0-9]+-[a-z0-9]+"


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
    `spec.replicas` (what Kubernetes advises, so that an apply does not reset what the autoscaler chose), an
    InferenceService starting from the floor."""
    handed = []
    for obj in objects:
        if obj["kind"] in ("Deployment", "LeaderWorkerSet"):
            obj = {**obj, "spec": {k: v for k, v in obj["spec"].items() if k != "replicas"}}
        elif obj["kind"] == "InferenceService":
            predictor = {**obj["spec"]["predictor"], "minReplicas": bounds.min}
            obj = {**obj, "spec": {**obj["spec"], "predictor": predictor}}
        handed.append(obj)
    return handed


__all__ = [
    "KINDS",
    "METRICS",
    "PROMETHEUS_URL",
    "Pessimistic",
    "ReplicaBounds",
    "adapter_metric",
    "autoscaling",
    "hand_replicas_to_autoscaler",
    "keda_query",
    "per_replica_target",
    "pessimistic_replicas",
    "prometheus_adapter_rules",
    "replica_bounds",
    "target_requests_per_second",
    "target_running",
]
