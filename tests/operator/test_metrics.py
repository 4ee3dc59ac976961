"""The operator's metrics: fixed names, one set of series per plan, gone when the plan is."""

from __future__ import annotations

from inferplan.deploy.autoscaling import per_replica_target
from inferplan.operator import metrics
from inferplan.planner.results import Candidate
from tests.support.plans import EXAMPLES, planned

STATUS = {"recommendation": {"gpuType": "L40S", "replicas": 3, "gpus": 6, "cost": {"dollarsPerHour": 11.7}}}


def sample(name: str, **labels: str) -> float | None:
    return metrics.REGISTRY.get_sample_value(name, labels)


def test_a_plan_exports_its_recommendation_and_forgets_it() -> None:
    metrics.record_plan("llm", "chat", STATUS)
    assert sample("inferplan_recommended_replicas", namespace="llm", plan="chat", gpu_type="L40S") == 3
    assert sample("inferplan_recommended_gpus", namespace="llm", plan="chat", gpu_type="L40S") == 6
    assert sample("inferplan_recommended_cost_dollars_per_hour", namespace="llm", plan="chat") == 11.7
    assert sample("inferplan_plan_feasible", namespace="llm", plan="chat") == 1
    # A new answer on another GPU type replaces the old series instead of adding to them.
    metrics.record_plan("llm", "chat", {"recommendation": {**STATUS["recommendation"], "gpuType": "L4"}})
    assert sample("inferplan_recommended_gpus", namespace="llm", plan="chat", gpu_type="L40S") is None
    metrics.record_plan("llm", "chat", {})
    assert sample("inferplan_plan_feasible", namespace="llm", plan="chat") == 0
    metrics.forget_plan("llm", "chat")
    assert sample("inferplan_plan_feasible", namespace="llm", plan="chat") is None


def test_plan_counts_and_cluster_gpus_are_replaced_whole() -> None:
    metrics.record_conditions({("Ready", "True"): 3, ("Ready", "False"): 1})
    metrics.record_conditions({("Ready", "True"): 2})
    assert sample("inferplan_plans", condition="Ready", status="True") == 2
    assert sample("inferplan_plans", condition="Ready", status="False") is None
    metrics.record_inventory({"H100-SXM5-80GB": 16})
    metrics.record_inventory({"L4": 8})
    assert sample("inferplan_cluster_gpus", gpu_type="H100-SXM5-80GB") is None
    assert sample("inferplan_cluster_gpus", gpu_type="L4") == 8


def test_forgetting_a_plan_touches_only_its_own_series() -> None:
    """Each plan's series are kept by plan, so removing one looks at no other plan's (the old removal scanned
    every series of every gauge: quadratic in plans over a fleet's deletions)."""
    status = {**STATUS, "conditions": [{"type": "Ready", "status": "True", "reason": "Planned"}],
              "observed": {"requestsPerSecond": 4.0, "latencyMs": {"ttft": {"p95": 120.0}},
                           "current": {"gpuType": "L40S", "replicas": 2}},
              "prediction": {"latencyMs": {"ttft": {"p95": 110.0}}, "errorRatio": {"ttft": {"p95": -0.08}}},
              "calibration": {"decode": 0.9, "prefill": 0.8}}
    for i in range(50):
        metrics.record_plan("many", f"p{i}", status)
    metrics.record_plan("many", "p7", status)  # recorded again: its series replaced, none kept twice
    assert len(metrics.PLAN_SERIES.plans[("many", "p7")]) == len(metrics.PLAN_SERIES.plans[("many", "p8")])
    metrics.forget_plan("many", "p7")
    assert ("many", "p7") not in metrics.PLAN_SERIES.plans
    for name, labels in (("inferplan_plan_feasible", {}), ("inferplan_observed_requests_per_second", {}),
                         ("inferplan_calibration_factor", {"factor": "decode"}),
                         ("inferplan_predicted_latency_seconds", {"metric": "ttft", "quantile": "0.95"})):
        assert sample(name, namespace="many", plan="p7", **labels) is None, name
        assert sample(name, namespace="many", plan="p8", **labels) is not None, name
    for i in range(50):
        metrics.forget_plan("many", f"p{i}")
    assert not any(key[0] == "many" for key in metrics.PLAN_SERIES.plans)
    assert sample("inferplan_plan_feasible", namespace="many", plan="p8") is None


def _status(candidate: Candidate) -> dict:
    return {"recommendation": candidate.model_dump(by_alias=True, mode="json"), "conditions": []}


def test_the_operator_exports_the_per_replica_target() -> None:
    _, candidate = planned(EXAMPLES[0])
    metrics.record_plan("serving", "chat", _status(candidate), {"constraints": {"minHeadroom": "0.2"}})
    value = metrics.REGISTRY.get_sample_value("inferplan_recommended_requests_per_second_per_replica",
                                              {"namespace": "serving", "plan": "chat"})
    assert value == per_replica_target(candidate.predicted.max_requests_per_second_per_replica, 0.2)
    metrics.record_plan("serving", "chat", _status(candidate))  # no spec: the default minHeadroom, 0.05
    value = metrics.REGISTRY.get_sample_value("inferplan_recommended_requests_per_second_per_replica",
                                              {"namespace": "serving", "plan": "chat"})
    assert value == per_replica_target(candidate.predicted.max_requests_per_second_per_replica, 0.05)
    metrics.forget_plan("serving", "chat")
    assert metrics.REGISTRY.get_sample_value("inferplan_recommended_requests_per_second_per_replica",
                                             {"namespace": "serving", "plan": "chat"}) is None


def test_a_condition_listed_twice_is_one_series() -> None:
    """The exposition must not repeat a series: Prometheus rejects a scrape that does."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    ready = {"type": "Ready", "status": "True", "reason": "Planned"}
    metrics.record_plan("twice", "chat", {**STATUS, "conditions": [ready, dict(ready)]})
    families = {f.name: f for f in text_string_to_metric_families(generate_latest(metrics.REGISTRY).decode())}
    samples = [s for s in families["inferplan_plan_condition"].samples if s.labels.get("namespace") == "twice"]
    assert [s.labels for s in samples] == [{"namespace": "twice", "plan": "chat", "condition": "Ready",
                                            "status": "True", "reason": "Planned"}]
    metrics.forget_plan("twice", "chat")


def test_the_prediction_interval_is_exported_where_the_status_states_one() -> None:
    """status.prediction.intervalMs becomes a low and a high gauge per metric and percentile, labelled as the
    predicted latency; a percentile without an interval has neither, and a status without one drops them."""
    prediction = {"latencyMs": {"ttft": {"p95": 110.0}, "tpot": {"p95": 20.0}},
                  "intervalMs": {"ttft": {"p95": [55.0, 800.0]}}, "confidence": 0.8}
    metrics.record_plan("band", "chat", {**STATUS, "prediction": prediction})
    labels = {"namespace": "band", "plan": "chat", "metric": "ttft", "quantile": "0.95"}
    assert sample("inferplan_predicted_latency_seconds", **labels) == 0.11
    assert sample("inferplan_predicted_latency_low_seconds", **labels) == 0.055
    assert sample("inferplan_predicted_latency_high_seconds", **labels) == 0.8
    tpot = {**labels, "metric": "tpot"}
    assert sample("inferplan_predicted_latency_seconds", **tpot) == 0.02
    assert sample("inferplan_predicted_latency_low_seconds", **tpot) is None
    assert sample("inferplan_predicted_latency_high_seconds", **tpot) is None
    metrics.record_plan("band", "chat", {**STATUS, "prediction": {"latencyMs": prediction["latencyMs"]}})
    assert sample("inferplan_predicted_latency_low_seconds", **labels) is None
    assert sample("inferplan_predicted_latency_seconds", **labels) == 0.11
    metrics.forget_plan("band", "chat")
