"""The PromQL in the monitoring assets: the Grafana dashboard (deploy/grafana/) and the Prometheus rules
(deploy/prometheus/), as plain PromQL that tests can check with promtool or run against a live Prometheus.

Grafana variables in dashboard expressions are replaced so that each expression is valid PromQL and selects
every plan: `$namespace`, `$plan` and `$quantile` (also `${namespace}`, `${plan:regex}`, `[[plan]]`) become `.+`
(they only appear inside regex matchers, `namespace=~"$namespace"`), and `$__rate_interval`, `$__interval` and
`$__range` become `5m`. `${datasource}` is only a panel's data source, never part of an expression.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "grafana" / "inferplan-dashboard.json"
RULES = REPO / "deploy" / "prometheus" / "inferplan-rules.yaml"
RULES_TESTS = REPO / "deploy" / "prometheus" / "inferplan-rules.test.yaml"

SELECTION_VARIABLE = re.compile(r"\$\{(namespace|plan|quantile)(?::\w+)?\}|\$(namespace|plan|quantile)\b"
                                r"|\[\[(namespace|plan|quantile)\]\]")
"""A reference to the dashboard's namespace, plan or quantile variable, in any of Grafana's syntaxes."""
_INTERVAL_VARIABLE = re.compile(r"\$\{(__rate_interval|__interval|__range)\}|\$(__rate_interval|__interval|__range)\b")
_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(?P<selector>.*?)\s*,\s*(?P<label>\w+)\s*\)\s*$", re.DOTALL)

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENTIFIER = re.compile(r"(?<![\w:.])([A-Za-z_:][\w:]*)(?![\w:])(?!\s*\()")
_KEYWORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool", "and", "or",
                       "unless", "atan2", "inf", "nan", "Inf", "NaN"})


def to_promql(expr: str) -> str:
    """A dashboard expression with the Grafana variables replaced (see the module doc)."""
    return _INTERVAL_VARIABLE.sub("5m", SELECTION_VARIABLE.sub(".+", expr))


def load_dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text(encoding="ascii"))


def dashboard_panels(dashboard: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every panel, rows included, with the panels nested in collapsed rows, in dashboard order."""
    found: list[dict[str, Any]] = []

    def walk(panels: list[dict[str, Any]]) -> None:
        for panel in panels:
            found.append(panel)
            walk(panel.get("panels") or [])

    walk((dashboard or load_dashboard()).get("panels") or [])
    return found


def dashboard_variable_selectors(dashboard: dict[str, Any] | None = None) -> list[tuple[str, str]]:
    """(variable name, raw selector) of each query variable of the form `label_values(SELECTOR, LABEL)`."""
    selectors = []
    for variable in (dashboard or load_dashboard()).get("templating", {}).get("list", []):
        query = variable.get("query")
        query = query.get("query", "") if isinstance(query, dict) else query or ""
        if variable.get("type") == "query" and (match := _LABEL_VALUES.match(query)):
            selectors.append((variable["name"], match["selector"]))
    return selectors


def dashboard_expressions() -> list[tuple[str, str]]:
    """(panel title, PromQL) of every panel target, variables substituted, in dashboard order; then
    ("variable NAME", selector) for the selector of each `label_values` template variable."""
    dashboard = load_dashboard()
    expressions = [(panel.get("title", ""), to_promql(target["expr"]))
                   for panel in dashboard_panels(dashboard) for target in panel.get("targets") or []
                   if target.get("expr")]
    expressions += [(f"variable {name}", to_promql(selector))
                    for name, selector in dashboard_variable_selectors(dashboard)]
    return expressions


def load_rules() -> dict[str, Any]:
    return yaml.safe_load(RULES.read_text(encoding="ascii"))


def rule_expressions() -> list[tuple[str, str]]:
    """(alert or record name, PromQL) of every rule in the rules file, in file order."""
    return [(rule.get("alert") or rule["record"], rule["expr"].strip())
            for group in load_rules()["groups"] for rule in group["rules"]]


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects (not function names, keywords, label names or values).

    A small tokenizer, enough for the expressions here: strings, label matchers, range and subquery brackets,
    grouping label lists and offsets are removed, then every identifier that is not called is a metric name.
    Selectors by `{__name__=...}` are not understood.
    """
    text = _STRING.sub('""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = _GROUPING.sub(" ", text)
    text = re.sub(r"\boffset\s+-?\w+", " ", text)
    return {name for name in _IDENTIFIER.findall(text) if name not in _KEYWORDS}
