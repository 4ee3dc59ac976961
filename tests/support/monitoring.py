"""The PromQL in the monitoring assets: the Grafana dashboard (deploy/grafana/) and the Prometheus rules
(deploy/prometheus/), as plain PromQL that tests can check with promtool or run against a live Prometheus.

Grafana variables in dashboard expressions are replaced so that each expression is valid PromQL and selects
every plan: `$namespace`, `$plan` and `$quantile` (also `${namespace}`, `${plan:regex}`, `[[plan]]`) become `.+`
(they only appear inside regex matchers, `namespace=~"$namespace"`), `${plan_ref:raw}` (the per-plan row's label
matchers, `namespace="NS",plan="NAME"`, last in a selector) becomes `namespace=~".+", plan=~".+"`, and
`$__rate_interval`, `$__interval` and `$__range` become `5m`. `${datasource}` is only a panel's data source, never
part of an expression.

`interpolate` and `variable_options` instead do what Grafana does for given variable values, for tests that run
the queries of one row or one plan against a Prometheus.
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
ROW_MATCHERS_VARIABLE = re.compile(r"\$\{plan_ref:raw\}")
"""The per-plan row's variable, written raw: its value is the row's label matchers (`namespace="NS",plan="NAME"`)."""
_INTERVAL_VARIABLE = re.compile(r"\$\{(__rate_interval|__interval|__range)\}|\$(__rate_interval|__interval|__range)\b")
_QUERY_RESULT = re.compile(r"^\s*query_result\(\s*(?P<expr>.*)\)\s*$", re.DOTALL)
_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(?P<selector>.*?)\s*,\s*(?P<label>\w+)\s*\)\s*$", re.DOTALL)

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENTIFIER = re.compile(r"(?<![\w:.])([A-Za-z_:][\w:]*)(?![\w:])(?!\s*\()")
_KEYWORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool", "and", "or",
                       "unless", "atan2", "inf", "nan", "Inf", "NaN"})


def to_promql(expr: str) -> str:
    """A dashboard expression with the Grafana variables replaced (see the module doc)."""
    expr = ROW_MATCHERS_VARIABLE.sub('namespace=~".+", plan=~".+"', expr)
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


def dashboard_variable_queries(dashboard: dict[str, Any] | None = None) -> list[tuple[str, str]]:
    """(variable name, raw expression) of each query variable of the form `query_result(EXPRESSION)`."""
    queries = []
    for variable in (dashboard or load_dashboard()).get("templating", {}).get("list", []):
        query = variable.get("query")
        query = query.get("query", "") if isinstance(query, dict) else query or ""
        if variable.get("type") == "query" and (match := _QUERY_RESULT.match(query)):
            queries.append((variable["name"], match["expr"]))
    return queries


def dashboard_expressions() -> list[tuple[str, str]]:
    """(panel title, PromQL) of every panel target, variables substituted, in dashboard order; then
    ("variable NAME", selector) for the selector of each `label_values` template variable and ("variable NAME",
    expression) for the expression of each `query_result` one."""
    dashboard = load_dashboard()
    expressions = [(panel.get("title", ""), to_promql(target["expr"]))
                   for panel in dashboard_panels(dashboard) for target in panel.get("targets") or []
                   if target.get("expr")]
    expressions += [(f"variable {name}", to_promql(selector))
                    for name, selector in dashboard_variable_selectors(dashboard)]
    expressions += [(f"variable {name}", to_promql(expr)) for name, expr in dashboard_variable_queries(dashboard)]
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


# --- Grafana's interpolation, for running a dashboard's queries as Grafana would -------------------------------

ALL = "$__all"
"""A variable at "All" (Grafana's value for it), in the values given to `interpolate` and `variable_options`."""

_GRAFANA_VARIABLE = re.compile(r"\$\{(?P<braced>\w+)(?::(?P<format>\w+))?\}"
                               r"|\[\[(?P<old>\w+)(?::(?P<oldformat>\w+))?\]\]|\$(?P<plain>\w+)")
_INTERVALS = {"__rate_interval": "5m", "__interval": "5m", "__range": "5m"}


def _prometheus_regex_escape(value: str) -> str:
    """Grafana's Prometheus data source's escape of a multi-value or include-All variable's value in a query
    (prometheusSpecialRegexEscape): the value is written into a regex matcher's string."""
    return re.sub(r"[$^*{}\[\]'+?.()|]", lambda match: "\\\\" + match[0], value.replace("\\", "\\\\\\\\"))


def variables_by_name(dashboard: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {variable["name"]: variable for variable in dashboard.get("templating", {}).get("list", [])}


def interpolate(text: str, dashboard: dict[str, Any], values: dict[str, str | tuple[str, str]],
                query: bool = True) -> str:
    """`text` with the dashboard's variables replaced as Grafana replaces them, in a Prometheus query (`query`)
    or in a title or legend.

    `values` maps a variable to its value in this row or panel: a string, a (value, text) option, or ALL (its
    `allValue`, not escaped). In a query a value is escaped as the Prometheus data source does (regex-escaped
    for a multi-value or include-All variable); the formats `raw`, `text` and `regex` are honoured. Grafana's
    interval variables become 5m; anything else (e.g. label_replace's `$1`) is left as it is.
    """
    variables = variables_by_name(dashboard)

    def replace(match: re.Match[str]) -> str:
        name = match["braced"] or match["old"] or match["plain"]
        fmt = match["format"] or match["oldformat"]
        if name in _INTERVALS:
            return _INTERVALS[name]
        if name not in values:
            return match[0]
        given = values[name]
        value, text = given if isinstance(given, tuple) else (given, given)
        variable = variables.get(name, {})
        if value == ALL:
            if fmt == "text":
                return "All"
            if variable.get("allValue") is None:
                raise ValueError(f"variable {name} at All without an allValue")
            return str(variable["allValue"])
        if fmt == "text":
            return text
        if fmt == "raw" or not query:
            return value
        if fmt == "regex":
            return re.sub(r"[\\^$*+?.()|\[\]{}/]", lambda m: "\\" + m[0], value)
        if variable.get("multi") or variable.get("includeAll"):
            return _prometheus_regex_escape(value)
        return value.replace("\\", "\\\\").replace("'", "\\\\'")

    return _GRAFANA_VARIABLE.sub(replace, text)


def render_legend(legend: str, labels: dict[str, str]) -> str:
    """A series' name from its (already interpolated) legend format: `{{label}}` replaced by the label's value;
    without a legend, the series' labels as Grafana writes them."""
    if not legend:
        return "{" + ", ".join(f'{key}="{value}"' for key, value in sorted(labels.items())) + "}"
    return re.sub(r"\{\{\s*(.+?)\s*\}\}", lambda match: labels.get(match[1], ""), legend)


def _js_regex(pattern: str) -> re.Pattern[str]:
    """A variable's regex (`/PATTERN/FLAGS`, as Grafana writes it) in Python's dialect (named groups)."""
    match = re.fullmatch(r"/(.*)/([gimsuy]*)", pattern, re.DOTALL)
    body, flags = (match[1], match[2]) if match else (pattern, "")
    return re.compile(body.replace("(?<", "(?P<").replace("(?P<=", "(?<=").replace("(?P<!", "(?<!"),
                      re.IGNORECASE if "i" in flags else 0)


def variable_options(variable: dict[str, Any], dashboard: dict[str, Any], values: dict[str, str | tuple[str, str]],
                     run_query: Any) -> list[tuple[str, str]]:
    """The (value, text) options Grafana gives a query or custom variable, its query run by `run_query(expr)`
    (Prometheus' instant query: the API's result list) with the other variables at `values`.

    `label_values(SELECTOR, LABEL)` is the label's values on the series the selector matches;
    `query_result(EXPR)` renders each series of EXPR as Grafana does (`name{l1="v1",l2="v2"} value ms`). Then
    the variable's regex applies as in Grafana: named groups `value` and `text`, or the first group, or the
    whole; options are unique by value and sorted by text where `sort` is set.
    """
    query = variable.get("query")
    query = query.get("query", "") if isinstance(query, dict) else query or ""
    items: list[str]
    if variable.get("type") == "custom":
        items = [item.strip() for item in query.split(",")]
    elif match := _LABEL_VALUES.match(query):
        selector = interpolate(match["selector"], dashboard, values)
        label = match["label"]
        items = [series["metric"][label] for series in run_query(f"group by ({label}) ({selector})")
                 if label in series["metric"]]
    elif match := _QUERY_RESULT.match(query):
        items = []
        for series in run_query(interpolate(match["expr"], dashboard, values)):
            labels = dict(series["metric"])
            name = labels.pop("__name__", "")
            rendered = ",".join(f'{key}="{value}"' for key, value in labels.items())
            items.append(f"{name}{{{rendered}}} {series['value'][1]} {int(float(series['value'][0]) * 1000)}")
    else:
        raise ValueError(f"variable {variable['name']}: query {query!r} not understood")
    regex = _js_regex(variable["regex"]) if variable.get("regex") else None
    options: list[tuple[str, str]] = []
    for item in items:
        value = text = item
        if regex is not None:
            found = regex.search(item)
            if found is None:
                continue
            groups = found.groupdict()
            if groups.get("value") or groups.get("text"):
                value = groups.get("value") or groups["text"]
                text = groups.get("text") or groups["value"]
            elif found.groups():
                value = text = found[1]
        if value not in [option[0] for option in options]:
            options.append((value, text))
    if variable.get("sort") in (1, 2):
        options.sort(key=lambda option: option[1], reverse=variable["sort"] == 2)
    return options


def repeated_rows(dashboard: dict[str, Any] | None = None) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """Each row that repeats (`repeat`: a variable), with the panels it repeats: its own `panels` when
    collapsed, else the dashboard's panels after it up to the next row."""
    panels = (dashboard or load_dashboard()).get("panels") or []
    rows = []
    for index, panel in enumerate(panels):
        if panel.get("type") != "row" or not panel.get("repeat"):
            continue
        inside = list(panel.get("panels") or [])
        if not panel.get("collapsed"):
            for following in panels[index + 1:]:
                if following.get("type") == "row":
                    break
                inside.append(following)
        rows.append((panel, inside))
    return rows
