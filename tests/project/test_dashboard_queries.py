"""The Grafana dashboard's per-plan queries against a real Prometheus (skipped without one, except in CI), over
what the operator really exports (`metrics.record_plan`, served as /metrics is).

A plan's series can come from two operator pods at once: during a rolling update, or from a peered replica that
worked and then stopped (it keeps serving the series it last set). The alert rules aggregate `by (namespace,
plan)` for that reason; every dashboard query over per-plan series must likewise show a plan exported twice as
it shows a plan exported once.

A plan is named by its namespace and name: two plans called `chat` in two namespaces are two plans. A row that
Grafana repeats for each plan must show one of them only, whatever the namespace and plan variables select.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import generate_latest

from inferplan.operator import metrics
from tests.support.fixtures import PrometheusFactory
from tests.support.monitoring import (
    ALL,
    dashboard_panels,
    interpolate,
    load_dashboard,
    render_legend,
    repeated_rows,
    variable_options,
    variables_by_name,
)
from tests.support.prometheus import PrometheusServer, serve_exposition

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


def _plan_values(server: PrometheusServer, dashboard: dict[str, Any], namespace: str,
                 plan: str) -> dict[str, str | tuple[str, str]]:
    """The variables' values in Grafana with one plan selected, at quantile 0.95: the namespace and plan
    variables, and each variable that a row repeats over at its one option for that plan."""
    values: dict[str, str | tuple[str, str]] = {"namespace": namespace, "plan": plan, "quantile": "0.95"}
    variables = variables_by_name(dashboard)
    for row, _panels in repeated_rows(dashboard):
        if row["repeat"] not in values:
            (values[row["repeat"]],) = variable_options(variables[row["repeat"]], dashboard, values, server.query)
    return values


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
    dashboard = load_dashboard()
    queries = [(panel.get("title", ""), target["expr"]) for panel in dashboard_panels(dashboard)
               for target in panel.get("targets") or [] if "$plan" in target.get("expr", "")]
    assert len(queries) > 20
    values = {plan: _plan_values(server, dashboard, NAMESPACE, plan) for plan in ("solo", "twin")}
    different = []
    for title, expr in queries:
        solo = _answer(server.query(interpolate(expr, dashboard, values["solo"])), "solo")
        assert solo, f"{title}: {interpolate(expr, dashboard, values['solo'])} returns nothing for an exported plan"
        twin = _answer(server.query(interpolate(expr, dashboard, values["twin"])), "twin")
        if twin != solo:
            different.append(f"{title}: {expr}: {twin} for a plan exported twice, {solo} once")
    assert not different, "\n".join(different)


# --- Two plans of the same name in two namespaces -----------------------------------------------------------

TEAM_A, TEAM_B = "dashboard-team-a", "dashboard-team-b"
SAME_NAMED = ((TEAM_A, "chat"), (TEAM_A, "embed"), (TEAM_B, "chat"))


def _scaled_status(scale: float) -> dict[str, Any]:
    """STATUS with every latency, its interval and the cost times `scale` (so that plans differ)."""
    latency = {m: {q: v * scale for q, v in qs.items()} for m, qs in LATENCY_MS.items()}
    recommendation = {**STATUS["recommendation"], "cost": {"dollarsPerHour": 11.7 * scale}}
    prediction = {**STATUS["prediction"], "latencyMs": latency,
                  "intervalMs": {m: {q: [v * 0.5, v * 2] for q, v in qs.items()} for m, qs in latency.items()}}
    observed = {**STATUS["observed"],
                "latencyMs": {m: {q: v * 1.1 for q, v in qs.items()} for m, qs in latency.items()}}
    return {**STATUS, "recommendation": recommendation, "prediction": prediction, "observed": observed}


def _labelled(line: str) -> tuple[str, str] | None:
    """The (namespace, plan) of an exposition line, or None for a line without them."""
    namespace, plan = re.search(r'namespace="([^"]*)"', line), re.search(r'plan="([^"]*)"', line)
    return (namespace[1], plan[1]) if namespace and plan else None


def _exposition_of(plans: set[tuple[str, str]]) -> bytes:
    """The operator's /metrics with the per-plan series of `plans` only (and every series without a plan)."""
    lines = generate_latest(metrics.REGISTRY).decode().splitlines()
    return ("\n".join(line for line in lines if _labelled(line) in plans | {None}) + "\n").encode()


@pytest.fixture
def same_named_plans() -> Iterator[list[str]]:
    """Two operator pods' /metrics: the first exports the plans of SAME_NAMED (chat in two namespaces, with
    different figures), the second TEAM_B's chat again (a rolling update)."""
    for index, (namespace, plan) in enumerate(SAME_NAMED):
        metrics.record_plan(namespace, plan, _scaled_status(1.0 + index))
    servers = []
    try:
        for exported in (set(SAME_NAMED), {(TEAM_B, "chat")}):
            servers.append(serve_exposition(lambda exported=exported: _exposition_of(exported)))
        yield [f"127.0.0.1:{httpd.server_address[1]}" for httpd in servers]
    finally:
        for namespace, plan in SAME_NAMED:
            metrics.forget_plan(namespace, plan)
        for httpd in servers:
            httpd.shutdown()
            httpd.server_close()


SELECTIONS = [  # the namespace and plan variables, and the plans Grafana must then give a row each
    ({"namespace": ALL, "plan": ALL}, set(SAME_NAMED)),
    ({"namespace": ALL, "plan": "chat"}, {(TEAM_A, "chat"), (TEAM_B, "chat")}),
    ({"namespace": TEAM_B, "plan": ALL}, {(TEAM_B, "chat")}),
]


def test_each_repeated_row_shows_one_plan_of_one_namespace(same_named_plans: list[str],
                                                           prometheus: PrometheusFactory) -> None:
    """Grafana repeats a row for each option of its `repeat` variable, and runs the row's queries with that
    option. With plan `chat` in two namespaces, each row's queries must return the series of one namespace's
    `chat` only, each plan must get one row, and no panel may show two series of one name (the latency band is
    drawn between the series named by `fillBelowTo`). The dashboard repeated its latency row by plan name: with
    the namespace variable at All the `chat` row showed both plans, two series "predicted", two "interval low"."""
    server = prometheus(same_named_plans)
    server.wait_for_series(f'count(inferplan_plan_feasible{{namespace="{TEAM_B}", plan="chat"}}) == 2')
    for namespace, plan in SAME_NAMED:
        server.wait_for_series(f'inferplan_predicted_latency_high_seconds{{namespace="{namespace}", plan="{plan}"}}')
    dashboard = load_dashboard()
    variables = variables_by_name(dashboard)
    rows = repeated_rows(dashboard)
    assert rows, "no repeated row"
    assert any(target["expr"] for _row, panels in rows for panel in panels for target in panel.get("targets") or [])
    problems = []
    for selection, expected in SELECTIONS:
        selected = {**selection, "quantile": "0.95"}
        for row, panels in rows:
            name = row["repeat"]
            shown: list[tuple[str, str]] = []
            options = variable_options(variables[name], dashboard, selected, server.query)
            if selected.get(name, ALL) != ALL:  # a row repeats for the selected options, for all at All
                options = [option for option in options if option[0] == selected[name]]
            for option in options:
                values = {**selected, name: option}
                title = interpolate(row["title"], dashboard, values, query=False)
                where = f"{selection}: row {title!r} ({name}={option[0]})"
                plans = set()
                for panel in panels:
                    names = []
                    for target in panel.get("targets") or []:
                        expr = interpolate(target["expr"], dashboard, values)
                        result = server.query(expr)
                        if not result:
                            problems.append(f"{where}: {expr} returns nothing")
                        legend = interpolate(target.get("legendFormat") or "", dashboard, values, query=False)
                        for series in result:
                            labels = series["metric"]
                            if "namespace" not in labels or "plan" not in labels:
                                problems.append(f"{where}: {expr} returns {labels}, not which plan it is")
                                continue
                            plans.add((labels["namespace"], labels["plan"]))
                            names.append(render_legend(legend, labels))
                    twice = sorted({n for n in names if names.count(n) > 1})
                    if twice:
                        problems.append(f"{where}: panel {panel.get('title')!r} has two series named {twice}")
                if len(plans) != 1:
                    problems.append(f"{where}: shows the plans {sorted(plans)}, not one")
                    continue
                ((namespace, plan),) = plans
                if f"{namespace}/{plan}" not in title:
                    problems.append(f"{where}: the title does not name {namespace}/{plan}")
                shown.append((namespace, plan))
            if sorted(shown) != sorted(expected):
                problems.append(f"{selection}: rows repeated by {name} show {sorted(shown)}, not each of "
                                f"{sorted(expected)} once")
    assert not problems, "\n".join(problems)
