"""The Grafana dashboard's per-plan queries against a real Prometheus (skipped without one, except in CI), over
what the operator really exports (`metrics.record_plan`, served as /metrics is).

A plan's series can come from two operator pods at once: during a rolling update, or from a peered replica that
worked and then stopped (it keeps serving the series it last set). The alert rules aggregate `by (namespace,
plan)` for that reason; every dashboard query over per-plan series must likewise show a plan exported twice as
it shows a plan exported once.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import generate_latest

from inferplan.operator import metrics
from tests.support.fixtures import PrometheusFactory
from tests.support.monitoring import dashboard_panels, load_dashboard
from tests.support.prometheus import serve_exposition

NAMESPACE = "dashboard-twice"
LATENCY_MS = {"ttft": {"p50": 80.0, "p90": 200.0, "p95": 300.0, "p99": 700.0},
              "tpot": {"p50": 30.0, "p90": 40.0, "p95": 45.0, "p99": 60.0},
              "e2e": {"p50": 6000.0, "p90": 12000.0, "p95": 15000.0, "p99": 25000.0}}
STATUS: dict[str, Any] = {
    "recommendation": {"gpuType": "L40S", "replicas": 3, "gpus": 6, "cost": {"dollarsPerHour": 11.7},
                       "predicted": {"maxRequestsPerSecondPerReplica": 12.0}},
    "conditions": [{"type": "Ready", "status": "True", "reason": "Planned"},
                   {"type": "Feasible", "status": "True", "reason": "Feasible"},
                   {"type": "MetricsAvailable", "status": "True", "reason": "SeriesFound"},
                   {"type": "PredictionAccurate", "status": "True", "reason": "Accurate"}],
    "observed": {"requestsPerSecond": 20.0, "latencyMs": LATENCY_MS, "current": {"gpuType": "L40S", "replicas": 2}},
    "prediction": {"latencyMs": LATENCY_MS,
                   "intervalMs": {m: {q: [v * 0.5, v * 2] for q, v in qs.items()} for m, qs in LATENCY_MS.items()},
                   "errorRatio": {m: {q: 0.1 for q in qs} for m, qs in LATENCY_MS.items()}},
    "calibration": {"decode": 0.9, "prefill": 0.8},
}


def _exposition(plan: str) -> bytes:
    """The operator's /metrics with `plan`'s series only (of the plans of NAMESPACE)."""
    lines = generate_latest(metrics.REGISTRY).decode().splitlines()
    kept = [line for line in lines
            if f'namespace="{NAMESPACE}"' not in line or f'plan="{plan}"' in line]
    return ("\n".join(kept) + "\n").encode()


@pytest.fixture
def operator_pods() -> Iterator[list[str]]:
    """Three operator pods' /metrics: the first exports plan "solo", the other two the same plan "twin"."""
    for plan in ("solo", "twin"):
        metrics.record_plan(NAMESPACE, plan, STATUS)
    servers = []
    try:
        for plan in ("solo", "twin", "twin"):
            body = _exposition(plan)
            httpd = serve_exposition(lambda body=body: body)
            servers.append(httpd)
        yield [f"127.0.0.1:{httpd.server_address[1]}" for httpd in servers]
    finally:
        for plan in ("solo", "twin"):
            metrics.forget_plan(NAMESPACE, plan)
        for httpd in servers:
            httpd.shutdown()
            httpd.server_close()


def _for_plan(expr: str, plan: str) -> str:
    """A dashboard expression for one plan of NAMESPACE at quantile 0.95."""
    expr = re.sub(r"\$\{?namespace(:\w+)?\}?", NAMESPACE, expr)
    expr = re.sub(r"\$\{?plan(:\w+)?\}?", plan, expr)
    expr = re.sub(r"\$\{?quantile(:\w+)?\}?", "0.95", expr)
    return re.sub(r"\$\{?(__rate_interval|__interval|__range)\}?", "5m", expr)


def _answer(result: list[dict[str, Any]], plan: str) -> list[tuple[tuple[tuple[str, str], ...], float]]:
    """The result with the plan's name taken out of its labels (plan, label_join's plan_ref), sorted."""
    out = []
    for series in result:
        labels = tuple(sorted((k, v.replace(plan, "PLAN")) for k, v in series["metric"].items()))
        out.append((labels, float(series["value"][1])))
    return sorted(out)


def test_a_plan_exported_by_two_operator_pods_shows_as_one(operator_pods: list[str],
                                                           prometheus: PrometheusFactory) -> None:
    """Each per-plan query gives for plan "twin" (exported by two pods) what it gives for "solo" (one pod). The
    stat panels "Recommended cost" and "Recommended GPUs" summed every series, so a plan exported twice cost twice
    as much there."""
    server = prometheus(operator_pods)
    server.wait_for_series(f'count(inferplan_plan_feasible{{namespace="{NAMESPACE}", plan="twin"}}) == 2')
    server.wait_for_series(f'inferplan_plan_feasible{{namespace="{NAMESPACE}", plan="solo"}}')
    queries = [(panel.get("title", ""), target["expr"]) for panel in dashboard_panels(load_dashboard())
               for target in panel.get("targets") or [] if "$plan" in target.get("expr", "")]
    assert len(queries) > 20
    different = []
    for title, expr in queries:
        solo = _answer(server.query(_for_plan(expr, "solo")), "solo")
        assert solo, f"{title}: {_for_plan(expr, 'solo')} returns nothing for an exported plan"
        twin = _answer(server.query(_for_plan(expr, "twin")), "twin")
        if twin != solo:
            different.append(f"{title}: {expr}: {twin} for a plan exported twice, {solo} once")
    assert not different, "\n".join(different)
