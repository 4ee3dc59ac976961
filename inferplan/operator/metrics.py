"""The operator's Prometheus metrics. Names are fixed: dashboards and alert rules depend on them."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from inferplan.deploy.autoscaling import per_replica_target
from inferplan.planner.quantiles import QUANTILE_NAMES
from inferplan.planner.spec import Constraints

REGISTRY = CollectorRegistry(auto_describe=True)

RECONCILE_DURATION = Histogram(
    "inferplan_reconcile_duration_seconds", "Time to plan one InferenceCapacityPlan and build its status.",
    registry=REGISTRY, buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
RECONCILE_ERRORS = Counter(
    "inferplan_reconcile_errors_total", "Reconciles that ended in an error (bad spec or unexpected failure).",
    ["reason"], registry=REGISTRY,
)
PLANS = Gauge("inferplan_plans", "Plans by condition and its status.", ["condition", "status"], registry=REGISTRY)
RECOMMENDED_REPLICAS = Gauge("inferplan_recommended_replicas", "Replicas of the recommendation.",
                             ["namespace", "plan", "gpu_type"], registry=REGISTRY)
RECOMMENDED_GPUS = Gauge("inferplan_recommended_gpus", "GPUs of the recommendation.",
                         ["namespace", "plan", "gpu_type"], registry=REGISTRY)
RECOMMENDED_COST = Gauge("inferplan_recommended_cost_dollars_per_hour", "Cost of the recommendation [USD/h].",
                         ["namespace", "plan"], registry=REGISTRY)
RECOMMENDED_TARGET_RPS = Gauge(
    "inferplan_recommended_requests_per_second_per_replica",
    "Request rate one replica of the recommendation should carry: its SLO capacity less the plan's minHeadroom, "
    "the target inferplan render gives an HPA or KEDA [requests/s].", ["namespace", "plan"], registry=REGISTRY)
PLAN_FEASIBLE = Gauge("inferplan_plan_feasible", "1 when the plan has a feasible recommendation, else 0.",
                      ["namespace", "plan"], registry=REGISTRY)
CLUSTER_GPUS = Gauge("inferplan_cluster_gpus", "Allocatable GPUs on schedulable, ready nodes, by type.",
                     ["gpu_type"], registry=REGISTRY)
RECONCILE_ERRORS.labels("Unexpected")  # exported at 0 from the start, so that rate() sees the first one
_LATENCY_LABELS = ["namespace", "plan", "metric", "quantile"]
PREDICTED_LATENCY = Gauge("inferplan_predicted_latency_seconds",
                          "Latency predicted for the observed workload on the current deployment.",
                          _LATENCY_LABELS, registry=REGISTRY)
OBSERVED_LATENCY = Gauge("inferplan_observed_latency_seconds",
                         "Latency observed (engine histograms through Prometheus) over the plan's window.",
                         _LATENCY_LABELS, registry=REGISTRY)
PREDICTION_ERROR = Gauge("inferplan_prediction_error_ratio", "(predicted - observed) / observed latency.",
                         _LATENCY_LABELS, registry=REGISTRY)
OBSERVED_RATE = Gauge("inferplan_observed_requests_per_second", "Request rate observed over the plan's window.",
                      ["namespace", "plan"], registry=REGISTRY)
CURRENT_REPLICAS = Gauge("inferplan_current_replicas", "Replicas of the deployment being observed.",
                         ["namespace", "plan", "gpu_type"], registry=REGISTRY)
CALIBRATION_FACTOR = Gauge("inferplan_calibration_factor",
                           "Online calibration multiplier on the catalog's efficiency (1 = uncalibrated).",
                           ["namespace", "plan", "factor"], registry=REGISTRY)
PLAN_CONDITION = Gauge("inferplan_plan_condition", "1 for each condition's current status and reason of a plan.",
                       ["namespace", "plan", "condition", "status", "reason"], registry=REGISTRY)

_QUANTILES = {name: str(q) for q, name in QUANTILE_NAMES.items()}  # p50 -> "0.5", the label value
_SERIES: dict[tuple[str, str], list[tuple[Gauge, tuple[str, ...]]]] = {}
"""(namespace, plan) -> the series `record_plan` set for it, so that forgetting a plan removes its own series
without looking at any other plan's (constant time per plan, whatever the number of plans)."""


def _set(gauge: Gauge, labels: tuple[str, ...], value: float) -> None:
    """Set one series of a plan (labels start with namespace and plan) and remember it for `forget_plan`."""
    gauge.labels(*labels).set(value)
    _SERIES.setdefault((labels[0], labels[1]), []).append((gauge, labels))


def _latencies(gauge: Gauge, namespace: str, name: str, table: dict, scale: float) -> None:
    for metric, quantiles in (table or {}).items():
        for percentile, value in (quantiles or {}).items():
            if percentile in _QUANTILES and isinstance(value, int | float):
                _set(gauge, (namespace, name, metric, _QUANTILES[percentile]), value * scale)


def _min_headroom(spec: Mapping | None) -> float:
    """constraints.minHeadroom of a spec (a decimal string), else its default."""
    value = ((spec or {}).get("constraints") or {}).get("minHeadroom", Constraints.model_fields["min_headroom"].default)
    try:
        return float(value)
    except (TypeError, ValueError):
        return float(Constraints.model_fields["min_headroom"].default)


def record_plan(namespace: str, name: str, status: dict, spec: Mapping | None = None) -> None:
    """Export one plan's status: recommendation, conditions, and what spec.observe found. The previous series
    of the plan are replaced (a series the status no longer backs disappears). `spec` gives the minHeadroom of
    the per-replica target (its default without one)."""
    forget_plan(namespace, name)
    rec = status.get("recommendation")
    _set(PLAN_FEASIBLE, (namespace, name), 1 if rec else 0)
    if rec:
        _set(RECOMMENDED_REPLICAS, (namespace, name, rec["gpuType"]), rec["replicas"])
        _set(RECOMMENDED_GPUS, (namespace, name, rec["gpuType"]), rec["gpus"])
        _set(RECOMMENDED_COST, (namespace, name), rec["cost"]["dollarsPerHour"])
        capacity = (rec.get("predicted") or {}).get("maxRequestsPerSecondPerReplica")
        if isinstance(capacity, int | float):
            _set(RECOMMENDED_TARGET_RPS, (namespace, name), per_replica_target(capacity, _min_headroom(spec)))
    for item in status.get("conditions") or []:
        _set(PLAN_CONDITION, (namespace, name, item["type"], item["status"], item.get("reason", "")), 1)
    observed = status.get("observed") or {}
    if observed:
        _set(OBSERVED_RATE, (namespace, name), observed.get("requestsPerSecond", 0.0))
        _latencies(OBSERVED_LATENCY, namespace, name, observed.get("latencyMs") or {}, 1e-3)
        current = observed.get("current") or {}
        if current:
            _set(CURRENT_REPLICAS, (namespace, name, current["gpuType"]), current["replicas"])
    prediction = status.get("prediction") or {}
    if prediction:
        _latencies(PREDICTED_LATENCY, namespace, name, prediction.get("latencyMs") or {}, 1e-3)
        _latencies(PREDICTION_ERROR, namespace, name, prediction.get("errorRatio") or {}, 1.0)
    calibration = status.get("calibration") or {}
    for factor in ("decode", "prefill"):
        if isinstance(calibration.get(factor), int | float):
            _set(CALIBRATION_FACTOR, (namespace, name, factor), calibration[factor])


def forget_plan(namespace: str, name: str) -> None:
    """Remove every series of a plan (it was deleted, or its status changed): those `record_plan` set."""
    for gauge, labels in _SERIES.pop((namespace, name), ()):
        try:
            gauge.remove(*labels)
        except KeyError:  # set twice (e.g. two conditions with equal labels), removed the first time
            pass


def record_conditions(counts: dict[tuple[str, str], int]) -> None:
    """Set inferplan_plans from (condition type, status) -> number of plans."""
    PLANS.clear()
    for (condition, status), count in counts.items():
        PLANS.labels(condition, status).set(count)


def record_inventory(gpus_by_type: dict[str, int]) -> None:
    CLUSTER_GPUS.clear()
    for gpu_type, count in gpus_by_type.items():
        CLUSTER_GPUS.labels(gpu_type).set(count)
