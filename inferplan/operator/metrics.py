"""The operator's Prometheus metrics. Names are fixed: dashboards and alert rules depend on them."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

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
PLAN_FEASIBLE = Gauge("inferplan_plan_feasible", "1 when the plan has a feasible recommendation, else 0.",
                      ["namespace", "plan"], registry=REGISTRY)
CLUSTER_GPUS = Gauge("inferplan_cluster_gpus", "Allocatable GPUs on schedulable, ready nodes, by type.",
                     ["gpu_type"], registry=REGISTRY)

_PER_PLAN = (RECOMMENDED_REPLICAS, RECOMMENDED_GPUS)


def record_plan(namespace: str, name: str, status: dict) -> None:
    """Export one plan's recommendation; the previous series of the plan are replaced."""
    forget_plan(namespace, name)
    rec = status.get("recommendation")
    PLAN_FEASIBLE.labels(namespace, name).set(1 if rec else 0)
    if rec:
        RECOMMENDED_REPLICAS.labels(namespace, name, rec["gpuType"]).set(rec["replicas"])
        RECOMMENDED_GPUS.labels(namespace, name, rec["gpuType"]).set(rec["gpus"])
        RECOMMENDED_COST.labels(namespace, name).set(rec["cost"]["dollarsPerHour"])


def forget_plan(namespace: str, name: str) -> None:
    """Remove every series of a plan (it was deleted, or its GPU type changed)."""
    for gauge in _PER_PLAN:
        for labels in [key for key in list(gauge._metrics) if key[:2] == (namespace, name)]:
            gauge.remove(*labels)
    for gauge in (RECOMMENDED_COST, PLAN_FEASIBLE):
        if (namespace, name) in gauge._metrics:
            gauge.remove(namespace, name)


def record_conditions(counts: dict[tuple[str, str], int]) -> None:
    """Set inferplan_plans from (condition type, status) -> number of plans."""
    PLANS.clear()
    for (condition, status), count in counts.items():
        PLANS.labels(condition, status).set(count)


def record_inventory(gpus_by_type: dict[str, int]) -> None:
    CLUSTER_GPUS.clear()
    for gpu_type, count in gpus_by_type.items():
        CLUSTER_GPUS.labels(gpu_type).set(count)
