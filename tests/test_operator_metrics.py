"""The operator's metrics: fixed names, one set of series per plan, gone when the plan is."""

from __future__ import annotations

from inferplan.operator import metrics

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
