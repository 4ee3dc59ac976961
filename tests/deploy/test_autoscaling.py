"""inferplan.deploy.autoscaling: replica bounds and the per-replica target from the plan, and the HPA and KEDA
objects built on them (the operator's gauge of the same target: tests/operator/test_metrics.py)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from inferplan.deploy.autoscaling import (
    adapter_metric,
    autoscaling,
    hand_replicas_to_autoscaler,
    keda_query,
    per_replica_target,
    prometheus_adapter_rules,
    replica_bounds,
    target_requests_per_second,
    target_running,
)
from inferplan.deploy.manifests import render
from inferplan.observe.engine_metrics import FAMILIES
from inferplan.planner.spec import PlanRequest
from tests.support.plans import EXAMPLES, over_two_nodes, planned
from tests.support.schemas import assert_valid

CHAT = EXAMPLES[0]  # vLLM, 2 replicas of one L40S at 10 of 14.05 requests/s each, minHeadroom 0.05
SGLANG = next(p for p in EXAMPLES if p.stem == "moe-qwen3-30b-a3b")
# ScaledObject fields from @kubernetes-models/keda 2.0.0 (keda.sh/v1alpha1/ScaledObjectSpec.d.ts, ScaleTriggers.d.ts)
KEDA_SPEC_FIELDS = {"advanced", "cooldownPeriod", "fallback", "idleReplicaCount", "initialCooldownPeriod",
                    "maxReplicaCount", "minReplicaCount", "pollingInterval", "scaleTargetRef", "triggers"}
KEDA_TRIGGER_FIELDS = {"authenticationRef", "metadata", "metricType", "name", "type", "useCachedMetrics"}


def with_limits(request: PlanRequest, **changes: object) -> PlanRequest:
    return dataclasses.replace(request, **changes)


def test_the_target_is_the_slo_capacity_less_the_plans_headroom() -> None:
    request, candidate = planned(CHAT)
    capacity = candidate.predicted.max_requests_per_second_per_replica
    assert target_requests_per_second(request, candidate) == pytest.approx(capacity * (1 - request.min_headroom), 1e-3)
    assert per_replica_target(10.0, 0.2) == 8.0
    # At the declared rate the autoscaler asks for no more replicas than the plan recommends.
    assert -(-request.rate_rps // target_requests_per_second(request, candidate)) <= candidate.replicas
    running = target_running(request, candidate)
    planned_running = candidate.predicted.utilization * candidate.predicted.max_concurrency
    assert planned_running < running <= candidate.predicted.max_concurrency  # more load, more running sequences


def test_bounds_floor_is_min_replicas_and_cap_the_tightest_limit() -> None:
    request, candidate = planned(CHAT)
    bounds = replica_bounds(request, candidate)
    assert (bounds.min, bounds.max) == (min(request.min_replicas, candidate.replicas), 2 * candidate.replicas)
    assert replica_bounds(with_limits(request, max_replicas=7), candidate).max == 7
    price = request.prices.get(candidate.gpu_type) or candidate.cost.dollars_per_hour / candidate.gpus
    budget = with_limits(request, max_replicas=50, budget_usd_per_hour=5.5 * price * candidate.gpus_per_replica)
    assert replica_bounds(budget, candidate).max == 5
    assert replica_bounds(budget, candidate).max_from == "constraints.budgetDollarsPerHour"
    assert replica_bounds(with_limits(request, max_gpus=3), candidate).max == max(3, candidate.replicas)
    assert replica_bounds(with_limits(request, min_replicas=1), candidate).min == 1


def test_hpa_scales_the_deployment_on_the_adapter_metric() -> None:
    request, candidate = planned(CHAT)
    (hpa,) = autoscaling(request, candidate, name="chat", namespace="serving", kind="hpa")
    assert_valid(hpa)
    spec = hpa["spec"]
    assert spec["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "chat"}
    bounds = replica_bounds(request, candidate)
    assert (spec["minReplicas"], spec["maxReplicas"]) == (bounds.min, bounds.max)
    (metric,) = spec["metrics"]
    assert metric["pods"]["metric"]["name"] == adapter_metric("vllm") == "vllm_requests_per_second"
    milli = round(target_requests_per_second(request, candidate) * 1000)
    assert metric["pods"]["target"] == {"type": "AverageValue", "averageValue": f"{milli}m"}
    assert spec["behavior"]["scaleDown"]["stabilizationWindowSeconds"] >= 300


def test_the_adapter_rule_serves_the_engines_own_series() -> None:
    for engine, family in FAMILIES.items():
        rules = prometheus_adapter_rules(engine)["rules"]
        served = {rule["name"]["as"]: rule for rule in rules}
        assert served.keys() == {adapter_metric(engine), adapter_metric(engine, "concurrency")}
        assert served[adapter_metric(engine)]["seriesQuery"].startswith(f"{family.e2e[0]}_count{{")
        assert served[adapter_metric(engine, "concurrency")]["seriesQuery"].startswith(f"{family.running[0]}{{")
        for rule in rules:
            assert "<<.LabelMatchers>>" in rule["metricsQuery"] and "<<.GroupBy>>" in rule["metricsQuery"]


def test_keda_queries_the_engines_request_counter_at_the_given_prometheus() -> None:
    request, candidate = planned(SGLANG)
    (scaled,) = autoscaling(request, candidate, name="qwen", namespace="serving", kind="keda",
                            prometheus_url="http://prom.example:9090")
    spec = scaled["spec"]
    assert scaled["apiVersion"] == "keda.sh/v1alpha1" and set(spec) <= KEDA_SPEC_FIELDS
    (trigger,) = spec["triggers"]
    assert set(trigger) <= KEDA_TRIGGER_FIELDS and trigger["type"] == "prometheus"
    assert all(isinstance(v, str) for v in trigger["metadata"].values())  # KEDA's metadata is map[string]string
    assert trigger["metadata"]["serverAddress"] == "http://prom.example:9090"
    query = trigger["metadata"]["query"]
    assert query == ('sum(rate(sglang:e2e_request_latency_seconds_count{namespace="serving",'
                     'pod=~"qwen-[a-z0-9]+-[a-z0-9]+"}[2m]))')
    assert float(trigger["metadata"]["threshold"]) == target_requests_per_second(request, candidate)
    bounds = replica_bounds(request, candidate)
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (bounds.min, bounds.max)
    assert "running" in keda_query("vllm", "concurrency", None, "x-.*") and "namespace" not in keda_query(
        "vllm", "concurrency", None, "x-.*")


def test_autoscalers_target_the_workload_each_target_renders() -> None:
    request, candidate = planned(CHAT)
    (hpa,) = autoscaling(request, candidate, name="chat", kind="hpa", target="kserve")
    assert hpa["spec"]["scaleTargetRef"]["name"] == "chat-predictor"  # KServe's raw-mode Deployment
    wide_request, wide = over_two_nodes(next(p for p in EXAMPLES if p.stem == "batch-70b-open-gpus"))
    (keda,) = autoscaling(wide_request, wide, name="big", kind="keda")
    assert keda["spec"]["scaleTargetRef"]["kind"] == "LeaderWorkerSet"


def test_engines_without_known_metrics_and_unknown_kinds_are_refused() -> None:
    request, candidate = planned(next(p for p in EXAMPLES if p.stem == "tgi-mistral-7b"))
    with pytest.raises(ValueError, match="sglang, vllm"):
        autoscaling(request, candidate, name="tgi", kind="hpa")
    request, candidate = planned(CHAT)
    with pytest.raises(ValueError, match="hpa, keda"):
        autoscaling(request, candidate, name="chat", kind="vpa")
    with pytest.raises(ValueError, match="requests, concurrency"):
        autoscaling(request, candidate, name="chat", metric="latency")


def test_an_autoscaled_workload_leaves_replicas_to_the_autoscaler() -> None:
    request, candidate = planned(CHAT)
    objects = render(request, candidate, name="chat")
    bounds = replica_bounds(request, candidate)
    handed = hand_replicas_to_autoscaler(objects, bounds)
    assert "replicas" not in next(o for o in handed if o["kind"] == "Deployment")["spec"]
    assert next(o for o in objects if o["kind"] == "Deployment")["spec"]["replicas"] == candidate.replicas  # a copy
    (isvc,) = hand_replicas_to_autoscaler(render(request, candidate, name="chat", target="kserve"), bounds)
    assert isvc["spec"]["predictor"]["minReplicas"] == bounds.min
    assert json.dumps(handed)  # still plain data


def test_docs_show_the_adapter_rule_the_code_builds() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "deploy.md").read_text(encoding="utf-8")
    for rule in prometheus_adapter_rules("vllm")["rules"]:
        assert rule["seriesQuery"] in text and rule["name"]["as"] in text and rule["metricsQuery"] in text
