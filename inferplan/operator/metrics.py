"""The operator's Prometheus metrics. Names are fixed: dashboards and alert rules depend on them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from inferplan.deploy.autoscaling import per_replica_target
from inferplan.planner.quantiles import QUANTILE_NAMES
from inferplan.planner.spec import Constraints

REGISTRY = CollectorRegistry(auto_describe=True)
_SERVED_PORTS: set[int] = set()  # where this process serves REGISTRY (`serve`)


def serve(port: int) -> None:
    """Serve REGISTRY at http://0.0.0.0:PORT/metrics (0: not at all), once per process and port: the server
    belongs to the process, not to one kopf run (`main.run` runs kopf again after a watch answered 404, and
    /metrics stays up meanwhile)."""
    if not port or port in _SERVED_PORTS:
        return
    from prometheus_client import start_http_server

    start_http_server(port, registry=REGISTRY)
    _SERVED_PORTS.add(port)


RECONCILE_DURATION = Histogram(
    "inferplan_reconcile_duration_seconds", "Time to plan one InferenceCapacityPlan and build its status.",
    registry=REGISTRY, buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
RECONCILE_ERRORS = Counter(
    "inferplan_reconcile_errors_total", "Reconciles that ended in an error (bad spec or unexpected failure).",
    ["reason"], registry=REGISTRY,
)
PLANS = Gauge("inferplan_plans", "Plans by condition and its status.", ["condition", "status"], registry=None)
Row = tuple[int, tuple[str, ...], float]
"""One series of a plan: its family (`PlanSeries.family`), its label values after namespace and plan, its value."""


class PlanSeries:
    """The per-plan gauges (labels start with namespace and plan), kept as plain tuples and made into samples
    only when /metrics is scraped.

    prometheus_client keeps a child object with its own lock and value per series: about 8 KiB per plan for
    the ten or so series a plan has, 80 MiB at 10,000 plans. Here a plan's series are one tuple of (family,
    the labels after namespace and plan, value) rows, the label tuples shared between plans: about 1 KiB.
    Setting a plan's series replaces them whole and forgetting a plan removes its entry, each in constant time
    whatever the number of plans.
    """

    def __init__(self) -> None:
        self.families: list[tuple[str, str, tuple[str, ...]]] = []  # (name, help, labels after namespace, plan)
        self.plans: dict[tuple[str, str], tuple[Row, ...]] = {}
        self._labels: dict[tuple[str, ...], tuple[str, ...]] = {}  # one shared tuple per label combination

    def family(self, name: str, documentation: str, labels: Sequence[str] = ()) -> int:
        """Declare a gauge family; its index is what the rows of `set_plan` name it by."""
        self.families.append((name, documentation, tuple(labels)))
        return len(self.families) - 1

    def set_plan(self, namespace: str, name: str, rows: Iterable[Row]) -> None:
        """Replace the series of plan `namespace/name` by `rows`; a plan without rows has none."""
        shared = self._labels
        kept = tuple((family, shared.setdefault(labels, labels), float(value)) for family, labels, value in rows)
        if kept:
            self.plans[(namespace, name)] = kept
        else:
            self.plans.pop((namespace, name), None)

    def forget(self, namespace: str, name: str) -> None:
        self.plans.pop((namespace, name), None)

    def describe(self) -> list[GaugeMetricFamily]:
        return [GaugeMetricFamily(name, documentation, labels=["namespace", "plan", *labels])
                for name, documentation, labels in self.families]

    def collect(self) -> list[GaugeMetricFamily]:
        families = self.describe()
        for (namespace, name), rows in list(self.plans.items()):
            for family, labels, value in rows:
                families[family].add_metric([namespace, name, *labels], value)
        return families


PLAN_SERIES = PlanSeries()
RECOMMENDED_REPLICAS = PLAN_SERIES.family("inferplan_recommended_replicas", "Replicas of the recommendation.",
                                          ["gpu_type"])
RECOMMENDED_GPUS = PLAN_SERIES.family("inferplan_recommended_gpus", "GPUs of the recommendation.", ["gpu_type"])
RECOMMENDED_COST = PLAN_SERIES.family("inferplan_recommended_cost_dollars_per_hour",
                                      "Cost of the recommendation [USD/h].")
RECOMMENDED_TARGET_RPS = PLAN_SERIES.family(
    "inferplan_recommended_requests_per_second_per_replica",
    "Request rate one replica of the recommendation should carry: its SLO capacity less the plan's minHeadroom, "
    "the target inferplan render gives an HPA or KEDA [requests/s].")
PLAN_FEASIBLE = PLAN_SERIES.family("inferplan_plan_feasible",
                                   "1 when the plan has a feasible recommendation, else 0.")
CLUSTER_GPUS = Gauge("inferplan_cluster_gpus", "Allocatable GPUs on schedulable, ready nodes, by type.",
                     ["gpu_type"], registry=None)
RECONCILE_ERRORS.labels("Unexpected")  # exported at 0 from the start, so that rate() sees the first one
_LATENCY_LABELS = ["metric", "quantile"]
PREDICTED_LATENCY = PLAN_SERIES.family("inferplan_predicted_latency_seconds",
                                       "Latency predicted for the observed workload on the current deployment.",
                                       _LATENCY_LABELS)
OBSERVED_LATENCY = PLAN_SERIES.family("inferplan_observed_latency_seconds",
                                      "Latency observed (engine histograms through Prometheus) over the plan's "
                                      "window.", _LATENCY_LABELS)
PREDICTED_LATENCY_LOW = PLAN_SERIES.family(
    "inferplan_predicted_latency_low_seconds",
    "Low end of the prediction interval around the predicted latency (the recommendation's interval at its "
    "confidence, as ratios to its prediction, narrowed by the deployment's own errors once it has enough; "
    "status.prediction.intervalMs): where one is stated.", _LATENCY_LABELS)
PREDICTED_LATENCY_HIGH = PLAN_SERIES.family(
    "inferplan_predicted_latency_high_seconds",
    "High end of the prediction interval around the predicted latency (status.prediction.intervalMs): where one is "
    "stated.", _LATENCY_LABELS)
PREDICTION_ERROR = PLAN_SERIES.family("inferplan_prediction_error_ratio",
                                      "(predicted - observed) / observed latency.", _LATENCY_LABELS)
OBSERVED_RATE = PLAN_SERIES.family("inferplan_observed_requests_per_second",
                                   "Request rate observed over the plan's window.")
CURRENT_REPLICAS = PLAN_SERIES.family("inferplan_current_replicas", "Replicas of the deployment being observed.",
                                      ["gpu_type"])
CALIBRATION_FACTOR = PLAN_SERIES.family("inferplan_calibration_factor",
                                        "Online calibration multiplier on the catalog's efficiency (1 = "
                                        "uncalibrated).", ["factor"])
PLAN_CONDITION = PLAN_SERIES.family("inferplan_plan_condition",
                                    "1 for each condition's current status and reason of a plan.",
                                    ["condition", "status", "reason"])


class WhileWorking:
    """The collectors of this replica's view of the plans and the cluster, exported only while it works.

    With peering, kopf pauses the watches of a replica that waits for a peer: it gets no events, so the series it
    exported when it last worked would stay as they were beside the working replica's (a deleted plan's, a
    condition long resolved), and the alerts and the dashboard, which take the max over the operator's pods,
    would read them."""

    def __init__(self, *collectors: Collector) -> None:
        self.collectors = collectors
        self.working = True

    def describe(self) -> list[Metric]:
        return [family for collector in self.collectors for family in collector.describe()]

    def collect(self) -> list[Metric]:
        if not self.working:
            return []
        return [family for collector in self.collectors for family in collector.collect()]


VIEW = WhileWorking(PLANS, CLUSTER_GPUS, PLAN_SERIES)
REGISTRY.register(VIEW)  # after PLAN_SERIES's families: the registry reads their names to refuse duplicates

_QUANTILES = {name: str(q) for q, name in QUANTILE_NAMES.items()}  # p50 -> "0.5", the label value


def _latencies(family: int, table: dict, scale: float) -> list[Row]:
    return [(family, (metric, _QUANTILES[percentile]), value * scale)
            for metric, quantiles in (table or {}).items()
            for percentile, value in (quantiles or {}).items()
            if percentile in _QUANTILES and isinstance(value, int | float)]


def _bounds(low: int, high: int, table: dict, scale: float) -> list[Row]:
    """The rows of a [low, high] table by metric and percentile (`status.prediction.intervalMs`)."""
    rows: list[Row] = []
    for metric, quantiles in (table or {}).items():
        for percentile, bounds in (quantiles or {}).items():
            if percentile in _QUANTILES and isinstance(bounds, list) and len(bounds) == 2 and all(
                    isinstance(value, int | float) for value in bounds):
                labels = (metric, _QUANTILES[percentile])
                rows += [(low, labels, bounds[0] * scale), (high, labels, bounds[1] * scale)]
    return rows


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
    rec = status.get("recommendation")
    rows: list[Row] = [(PLAN_FEASIBLE, (), 1 if rec else 0)]
    if rec:
        rows += [(RECOMMENDED_REPLICAS, (rec["gpuType"],), rec["replicas"]),
                 (RECOMMENDED_GPUS, (rec["gpuType"],), rec["gpus"]),
                 (RECOMMENDED_COST, (), rec["cost"]["dollarsPerHour"])]
        capacity = (rec.get("predicted") or {}).get("maxRequestsPerSecondPerReplica")
        if isinstance(capacity, int | float):
            rows.append((RECOMMENDED_TARGET_RPS, (), per_replica_target(capacity, _min_headroom(spec))))
    seen: set[tuple[str, ...]] = set()
    for item in status.get("conditions") or []:
        labels = (item["type"], item["status"], item.get("reason", ""))
        if labels not in seen:  # a series once, however often a (malformed) status lists it
            seen.add(labels)
            rows.append((PLAN_CONDITION, labels, 1))
    observed = status.get("observed") or {}
    if observed:
        rows.append((OBSERVED_RATE, (), observed.get("requestsPerSecond", 0.0)))
        rows += _latencies(OBSERVED_LATENCY, observed.get("latencyMs") or {}, 1e-3)
        current = observed.get("current") or {}
        if current:
            rows.append((CURRENT_REPLICAS, (current["gpuType"],), current["replicas"]))
    prediction = status.get("prediction") or {}
    if prediction:
        rows += _latencies(PREDICTED_LATENCY, prediction.get("latencyMs") or {}, 1e-3)
        rows += _bounds(PREDICTED_LATENCY_LOW, PREDICTED_LATENCY_HIGH, prediction.get("intervalMs") or {}, 1e-3)
        rows += _latencies(PREDICTION_ERROR, prediction.get("errorRatio") or {}, 1.0)
    calibration = status.get("calibration") or {}
    for factor in ("decode", "prefill"):
        if isinstance(calibration.get(factor), int | float):
            rows.append((CALIBRATION_FACTOR, (factor,), calibration[factor]))
    PLAN_SERIES.set_plan(namespace, name, rows)


def forget_plan(namespace: str, name: str) -> None:
    """Remove every series of a plan (it was deleted)."""
    PLAN_SERIES.forget(namespace, name)


def record_conditions(counts: dict[tuple[str, str], int]) -> None:
    """Set inferplan_plans from (condition type, status) -> number of plans."""
    PLANS.clear()
    for (condition, status), count in counts.items():
        PLANS.labels(condition, status).set(count)


def record_inventory(gpus_by_type: dict[str, int]) -> None:
    CLUSTER_GPUS.clear()
    for gpu_type, count in gpus_by_type.items():
        CLUSTER_GPUS.labels(gpu_type).set(count)
