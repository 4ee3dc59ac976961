"""The Grafana dashboard and the Prometheus rules: valid (checked by promtool), their alerts unit-tested
(`promtool test rules`), and built only from series the operator exports.

promtool comes with Prometheus (`apt-get install -y --no-install-recommends prometheus`). Without it the
promtool tests are skipped, except in CI (`CI=true`), where they must run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from inferplan.operator import metrics
from tests.support.monitoring import (
    DASHBOARD,
    REPO,
    ROW_MATCHERS_VARIABLE,
    RULES,
    RULES_TESTS,
    SELECTION_VARIABLE,
    dashboard_expressions,
    dashboard_panels,
    dashboard_variable_queries,
    dashboard_variable_selectors,
    load_dashboard,
    load_rules,
    metric_names,
    repeated_rows,
    rule_expressions,
    to_promql,
)

REQUIRED_ALERTS = {"InferplanPredictionDrift", "InferplanPlanInfeasible", "InferplanMetricsMissing",
                   "InferplanReconcileErrors"}
RUNBOOK = "docs/operator.md#alerts"


def exported_series() -> dict[str, tuple[str, ...]]:
    """Series name -> label names, for every series the operator exports (histogram and counter series by
    their suffixed names: `_bucket`, `_count`, `_sum`, `_total`, `_created`)."""
    # The registry's collector -> series names map is what prometheus_client checks duplicates against.
    series = {name: tuple(getattr(collector, "_labelnames", ()))
              for collector, names in metrics.REGISTRY._collector_to_names.items() for name in names}
    return series


def _skip_or_fail(reason: str) -> None:
    """Skip locally; in CI (CI=true) a missing prerequisite fails the run."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: the monitoring assets must be checked, not skipped)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        _skip_or_fail("promtool not installed; apt-get install -y --no-install-recommends prometheus")
    return str(path)


def run_promtool(promtool: str, *args: str | Path) -> str:
    done = subprocess.run([promtool, *map(str, args)], capture_output=True, text=True, timeout=300, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"promtool {' '.join(map(str, args))} failed:\n{output}"
    return output


# --- Prometheus rules -------------------------------------------------------------------------------------


def test_rules_pass_promtool_check(promtool: str) -> None:
    output = run_promtool(promtool, "check", "rules", RULES)
    assert f"SUCCESS: {len(rule_expressions())} rules found" in output


def test_rules_pass_their_unit_tests(promtool: str) -> None:
    run_promtool(promtool, "test", "rules", RULES_TESTS)


def alerts() -> list[dict]:
    return [rule for group in load_rules()["groups"] for rule in group["rules"] if "alert" in rule]


def test_every_alert_has_for_severity_annotations_and_the_runbook() -> None:
    names = [rule["alert"] for rule in alerts()]
    assert REQUIRED_ALERTS <= set(names)
    assert len(names) == len(set(names))
    for rule in alerts():
        name, expr = rule["alert"], rule["expr"]
        assert re.fullmatch(r"\d+[smh]", str(rule.get("for", ""))), name
        assert rule["labels"]["severity"] in {"info", "warning", "critical"}, name
        annotations = rule["annotations"]
        assert annotations["summary"].strip() and annotations["description"].strip(), name
        assert annotations["runbook_url"] == RUNBOOK, name
        if re.search(r"\bby \(namespace, plan\)", expr):  # a per-plan alert names its plan
            for key in ("summary", "description"):
                assert "$labels.namespace" in annotations[key] and "$labels.plan" in annotations[key], (name, key)


def test_no_rule_depends_on_the_scrape_job() -> None:
    for name, expr in rule_expressions():
        assert not re.search(r"\b(job|instance)\s*(=|!=|=~|!~)", expr), name


def test_every_alert_is_tested_firing_and_silent() -> None:
    """The unit tests show each alert firing somewhere, and silent somewhere."""
    cases: dict[str, set[bool]] = {}
    for test in yaml.safe_load(RULES_TESTS.read_text(encoding="ascii"))["tests"]:
        for case in test.get("alert_rule_test") or []:
            cases.setdefault(case["alertname"], set()).add(bool(case.get("exp_alerts")))
    for rule in alerts():
        assert cases.get(rule["alert"]) == {True, False}, rule["alert"]


# --- Grafana dashboard ------------------------------------------------------------------------------------


def test_dashboard_identity_and_template_variables() -> None:
    dashboard = load_dashboard()
    assert dashboard["uid"] == "inferplan"
    assert dashboard["title"] == "inferplan: predicted vs observed"
    assert dashboard["schemaVersion"] >= 36
    variables = {variable["name"]: variable for variable in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("namespace", "plan"):
        variable = variables[name]
        assert variable["type"] == "query"
        assert variable["multi"] is True and variable["includeAll"] is True
        assert variable["datasource"]["uid"] == "${datasource}"
    selectors = dict(dashboard_variable_selectors(dashboard))
    assert set(selectors) == {"namespace", "plan"}
    assert all(metric_names(to_promql(selector)) == {"inferplan_plan_feasible"} for selector in selectors.values())
    assert 'namespace=~"$namespace"' in selectors["plan"]  # plans of the selected namespaces


def test_every_panel_has_the_datasource_and_every_target_an_expression() -> None:
    panels = dashboard_panels()
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    queried = [panel for panel in panels if panel["type"] != "row"]
    assert queried
    for panel in queried:
        title = panel.get("title")
        assert title and "gridPos" in panel
        assert panel.get("datasource") == {"type": "prometheus", "uid": "${datasource}"}, title
        assert panel.get("targets"), title
        for target in panel["targets"]:
            assert target.get("datasource") == {"type": "prometheus", "uid": "${datasource}"}, title
            assert target.get("expr", "").strip(), title
            assert "datasource" not in target["expr"], title


def test_dashboard_has_the_panels_the_issue_asks_for() -> None:
    used = {name for _, expr in dashboard_expressions() for name in metric_names(expr)}
    for name in ("inferplan_predicted_latency_seconds", "inferplan_observed_latency_seconds",
                 "inferplan_prediction_error_ratio", "inferplan_observed_requests_per_second",
                 "inferplan_recommended_replicas", "inferplan_current_replicas",
                 "inferplan_recommended_cost_dollars_per_hour", "inferplan_plan_feasible", "inferplan_plan_condition",
                 "inferplan_calibration_factor", "inferplan_reconcile_duration_seconds_count",
                 "inferplan_reconcile_duration_seconds_bucket", "inferplan_reconcile_errors_total",
                 "inferplan_predicted_latency_low_seconds", "inferplan_predicted_latency_high_seconds"):
        assert name in used, name
    latency = "\n".join(expr for _, expr in dashboard_expressions() if "_latency_seconds" in expr)
    for metric in ("ttft", "tpot", "e2e"):
        assert f'metric="{metric}"' in latency, metric


def test_the_latency_panels_draw_the_predicted_band_with_the_observed_line() -> None:
    """Each per-plan latency panel (TTFT, TPOT, E2E) fills between the prediction interval's low and high series
    (Grafana's fillBelowTo, which needs fixed series names: one plan and one quantile, the `quantile` variable, per
    panel) and draws the predicted and observed lines of the same metric and quantile."""
    dashboard = load_dashboard()
    variables = {variable["name"]: variable for variable in dashboard["templating"]["list"]}
    quantile = variables["quantile"]
    assert quantile["type"] == "custom" and quantile["multi"] is False and quantile["includeAll"] is False
    offered = [option["value"] for option in quantile["options"]]
    assert offered == quantile["query"].split(",") == ["0.5", "0.9", "0.95", "0.99"]  # the exported label values
    assert quantile["current"]["value"] in offered
    series = {"inferplan_predicted_latency_seconds": "predicted", "inferplan_observed_latency_seconds": "observed",
              "inferplan_predicted_latency_low_seconds": "low", "inferplan_predicted_latency_high_seconds": "high"}
    banded = set()
    for panel in dashboard_panels(dashboard):
        targets = panel.get("targets") or []
        if not any("inferplan_predicted_latency_high_seconds" in target["expr"] for target in targets):
            continue
        roles: dict[str, dict] = {}  # role -> target
        metrics_drawn = set()
        for target in targets:
            (name,) = metric_names(to_promql(target["expr"]))
            roles[series[name]] = target
            metrics_drawn |= set(re.findall(r'metric="(\w+)"', target["expr"]))
            assert 'quantile=~"$quantile"' in target["expr"], (panel["title"], target["expr"])
        assert set(roles) == {"predicted", "observed", "low", "high"}, panel["title"]
        for role in ("low", "high"):  # fillBelowTo names a series, and Grafana does not interpolate it
            assert not re.search(r"\{\{|\$", roles[role]["legendFormat"]), "fillBelowTo needs a fixed series name"
        (metric,) = metrics_drawn
        fills = {}  # refId -> the series name its fill reaches down to
        for override in panel["fieldConfig"]["overrides"]:
            matcher = override["matcher"]
            assert matcher["id"] in ("byFrameRefID", "byName"), (panel["title"], matcher)
            matched = [target["refId"] for target in targets
                       if target["refId" if matcher["id"] == "byFrameRefID" else "legendFormat"] == matcher["options"]]
            assert len(matched) == 1, (panel["title"], matcher)
            for prop in override["properties"]:
                if prop["id"] == "custom.fillBelowTo":
                    fills[matched[0]] = prop["value"]
        assert fills == {roles["high"]["refId"]: roles["low"]["legendFormat"]}, panel["title"]
        banded.add(metric)
    assert banded == {"ttft", "tpot", "e2e"}


def test_selection_variables_appear_only_in_regex_matchers() -> None:
    for panel in dashboard_panels():
        for target in panel.get("targets") or []:
            expr = target["expr"]
            references = len(SELECTION_VARIABLE.findall(expr))
            in_regex = len(re.findall(r'=~"[^"]*(?:' + SELECTION_VARIABLE.pattern + r')[^"]*"', expr))
            assert references == in_regex, (panel["title"], expr)
            # The row's matchers (namespace="NS",plan="NAME"): raw, last in a selector, in its repeated row only.
            rows = len(ROW_MATCHERS_VARIABLE.findall(expr))
            assert rows == len(re.findall(r', \$\{plan_ref:raw\}\}', expr)), (panel["title"], expr)
            assert expr.count("plan_ref") == rows + expr.count('"plan_ref"'), (panel["title"], expr)
    for title, expr in dashboard_expressions():
        assert "$" not in expr and "[[" not in expr, (title, expr)


def test_the_latency_row_repeats_once_per_namespace_and_plan() -> None:
    """The per-plan latency row repeats over `plan_ref`, one option per (namespace, plan) the namespace and plan
    variables select (text NS/NAME, value the label matchers `namespace="NS",plan="NAME"`), not over the plan
    variable: plan names repeat across namespaces. Every query of the row selects its plan by both labels, and
    every series says which plan it is (in its legend; the band's two series, whose names fillBelowTo refers to,
    in the panel's title). tests/project/test_dashboard_queries.py runs the rows against a Prometheus."""
    dashboard = load_dashboard()
    variable = {variable["name"]: variable for variable in dashboard["templating"]["list"]}["plan_ref"]
    assert variable["type"] == "query" and variable["datasource"]["uid"] == "${datasource}"
    assert variable["hide"] == 2 and variable["multi"] is True and variable["includeAll"] is True
    assert variable["current"]["value"] == ["$__all"]
    (query,) = [expr for name, expr in dashboard_variable_queries(dashboard) if name == "plan_ref"]
    assert variable["definition"] == variable["query"]
    for part in ('namespace=~"$namespace"', 'plan=~"$plan"', "max by (namespace, plan)",
                 'label_join(', '"plan_ref", "/", "namespace", "plan")'):
        assert part in query, part
    assert "(?<value>namespace=" in variable["regex"] and '(?<text>' in variable["regex"]
    rows = repeated_rows(dashboard)
    assert [row["repeat"] for row, _panels in rows] == ["plan_ref"]
    (row, panels), = rows
    assert "${plan_ref:text}" in row["title"]
    assert len(panels) == 3
    for panel in panels:
        assert "${plan_ref:text}" in panel["title"], panel["title"]
        fixed = set()  # the band's series names: what a fill reaches down to, and the series that fills
        for override in panel["fieldConfig"]["overrides"]:
            for prop in override["properties"]:
                if prop["id"] == "custom.fillBelowTo":
                    fixed |= {prop["value"]} | {target["legendFormat"] for target in panel["targets"]
                                                if override["matcher"]["options"] == target["refId"]}
        for target in panel["targets"]:
            selectors = re.findall(r"inferplan_\w+\{[^}]*\}\}?", target["expr"])
            assert selectors and all(s.endswith(", ${plan_ref:raw}}") for s in selectors), target["expr"]
            legend = target["legendFormat"]
            assert "{{namespace}}/{{plan}}" in legend or legend in fixed, (panel["title"], legend)
    for panel in dashboard_panels(dashboard):  # outside the row the variable has no single value
        if panel not in panels and panel is not row:
            assert not re.search(r"\$\{?plan_ref", json.dumps(panel)), panel.get("title")


def test_per_plan_metrics_are_filtered_on_the_selected_namespace_and_plan() -> None:
    per_plan = {name for name, labels in exported_series().items() if {"namespace", "plan"} <= set(labels)}
    for panel in dashboard_panels():
        for target in panel.get("targets") or []:
            expr = target["expr"]
            for name in metric_names(to_promql(expr)) & per_plan:
                for match in re.finditer(rf"(?<![\w:]){name}(?![\w:])(\s*\{{[^}}]*\}})?", expr):
                    matchers = match[1] or ""
                    assert 'namespace=~"$namespace"' in matchers and 'plan=~"$plan"' in matchers, (
                        panel["title"], expr)


def test_dashboard_expressions_are_valid_promql(promtool: str, tmp_path: Path) -> None:
    expressions = dashboard_expressions()
    rules = {"groups": [{"name": "dashboard", "rules": [{"record": f"dashboard:expression_{index}", "expr": expr}
                                                        for index, (_, expr) in enumerate(expressions)]}]}
    path = tmp_path / "dashboard-rules.yaml"
    path.write_text(yaml.safe_dump(rules, sort_keys=False), encoding="ascii")
    listing = "\n".join(f"{index}: {title}: {expr}" for index, (title, expr) in enumerate(expressions))
    done = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, f"{done.stdout}{done.stderr}\nexpressions:\n{listing}"
    assert f"SUCCESS: {len(expressions)} rules found" in done.stdout


def test_every_metric_used_is_one_the_operator_exports() -> None:
    exported = set(exported_series())
    for title, expr in dashboard_expressions() + rule_expressions():
        names = metric_names(expr)
        assert names, (title, expr)
        assert names <= exported, (title, sorted(names - exported))
    # Also names outside expressions: annotation queries of the rules, anything else in the dashboard.
    for path in (DASHBOARD, RULES):
        mentioned = set(re.findall(r"(?<![\w:])inferplan_[a-z0-9_]+", path.read_text(encoding="ascii")))
        assert mentioned <= exported, (path.name, sorted(mentioned - exported))


def test_metric_names_parser() -> None:
    assert metric_names('sum by (le) (rate(a_bucket{x="y{z}", le!="0.5"}[5m])) / on (b) group_left c') == {
        "a_bucket", "c"}
    assert metric_names("histogram_quantile(0.95, x) > 1e3 and y offset 15m unless z[5m:1m] or vector(0)") == {
        "x", "y", "z"}
    assert metric_names('count(m == bool 1) without (instance) or absent(n{a=~"$plan"})') == {"m", "n"}
    assert to_promql('rate(m{plan=~"$plan", namespace=~"${namespace}"}[$__rate_interval])') == (
        'rate(m{plan=~".+", namespace=~".+"}[5m])')


def test_the_metrics_missing_runbook_names_every_reason_that_fires_it() -> None:
    """Every MetricsAvailable=False reason of docs/observe.md but InsufficientTraffic fires InferplanMetricsMissing;
    its runbook named four of the seven, so an SRE paged for UnsupportedEngine found no word on what to do."""
    observe = (REPO / "docs" / "observe.md").read_text(encoding="utf-8")
    table = observe.split("| status | reason | when |", 1)[1].split("\n\n", 1)[0]
    reasons = {reason for line in table.splitlines() if line.startswith("| False |")
               for reason in re.findall(r"`(\w+)`", line.split("|")[2])}
    assert {"PrometheusUnreachable", "UnsupportedEngine"} <= reasons
    operator = (REPO / "docs" / "operator.md").read_text(encoding="utf-8")
    runbook = operator.split("### InferplanMetricsMissing", 1)[1].split("###", 1)[0]
    assert sorted(reason for reason in reasons if f"`{reason}`" not in runbook) == []


def test_the_reconcile_errors_alert_and_runbook_name_every_failure_counted_as_unexpected() -> None:
    """The alert's description named "planning failed" only, its runbook "observing failed" too, while the operator
    counts three failures under reason="Unexpected" (each logged with its traceback); and the dashboard drew the rate
    of errors in the unit `short`, not operations per second, as the reconcile rate beside it."""
    source = (REPO / "inferplan" / "operator" / "controller.py").read_text(encoding="utf-8")
    logged = re.findall(r'RECONCILE_ERRORS\.labels\("Unexpected"\)\.inc\(\)\n\s*self\.logger\.exception\("([a-z ]+'
                        r' failed):', source)
    assert len(logged) == source.count('RECONCILE_ERRORS.labels("Unexpected")') == 3
    alert = next(rule for rule in alerts() if rule["alert"] == "InferplanReconcileErrors")
    operator = (REPO / "docs" / "operator.md").read_text(encoding="utf-8")
    runbook = operator.split("### InferplanReconcileErrors", 1)[1].split("###", 1)[0]
    for message in logged:
        assert f'"{message}"' in alert["annotations"]["description"], message
        assert f'"{message}"' in runbook, message
    assert "while planning" not in alert["annotations"]["summary"]
    panel = next(p for p in dashboard_panels(load_dashboard()) if p["title"].startswith("Reconcile errors per second"))
    assert panel["fieldConfig"]["defaults"]["unit"] == "ops"
