"""A plan as one self-contained HTML page: the Pareto frontier as charts, the recommendation's simulated
latency distributions, the candidates in a table and the reasons the nearest others are infeasible.

The page loads nothing: CSS is inline, charts are inline SVG drawn here, there is no script (hover text is
SVG's own <title>), and a Content-Security-Policy forbids any fetch, so it can be attached to a pull request
or mailed and reads the same offline. Every string that comes from a plan is escaped, the output is ASCII,
and the same input gives the same bytes (no timestamps, fixed number formats), so a report can be diffed.
"""

from __future__ import annotations

import html
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from inferplan.planner.quantiles import QUANTILE_NAMES, percent_text
from inferplan.planner.request import PlanRequest, SloTarget
from inferplan.planner.results import Candidate, Infeasible, PlanResult, dollar_figure, per_hour, replica_shape
from inferplan.planner.simulation.simulate import SimulationResult
from inferplan.planner.simulation.verification import compare, scaled_words, simulated_rate
from inferplan.tables import (
    _ms,
    _slo_text,
    gpu_column,
    parallelism_column,
    role_column,
    slo_check_text,
    unmeasured_text,
)
from inferplan.version import planner_version

METRIC_NAMES = {"ttft": "TTFT", "tpot": "TPOT", "e2e": "end-to-end latency"}
DEFAULT_QUANTILE = 0.95  # a metric without an SLO is shown at p95, as the search and `inferplan plan` do

# Chart geometry [px of the SVG's viewBox].
WIDTH, HEIGHT = 540, 340
LEFT, RIGHT, TOP, BOTTOM = 70, 18, 22, 52
PLOT_W, PLOT_H = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
LIMIT_REACH = 3.0
"""An SLO limit or budget is drawn inside the chart when it is at most this many times the largest value
shown; farther out it would squeeze every point into a corner, so the caption states it instead."""
SECONDS_FROM_MS = 10_000  # a latency axis that reaches 10 s is labelled in seconds
CDF_POINTS = 201  # quantiles drawn per distribution: a smooth curve, a small file
CDF_TAIL = 0.999  # distributions are drawn up to this quantile (or the SLO limit); the caption names the rest


def render_report(request: PlanRequest, result: PlanResult, simulation: SimulationResult | None, *,
                  title: str) -> str:
    """The HTML page for `result`, the answer to `request`, with `simulation` of its recommendation (None:
    not simulated). Deterministic and ASCII; loads nothing when opened."""
    body = [
        f"<h1>{_e(title)}</h1>",
        _summary(request, result),
        _frontier_section(request, result),
        _candidates_section(request, result),
        _list_section("shapes", "Deployment shapes compared (cheapest of each)", result.shapes),
        _simulation_section(request, result, simulation),
        _recommendation_section(result.recommendation),
        _infeasible_section(result.infeasible),
        _list_section("suggestions", "What would make it feasible", result.suggestions),
        _list_section("warnings", "Warnings", result.warnings),
        _list_section("assumptions", "Assumed", result.assumptions),
        f'<footer>inferplan {_e(planner_version())}: <code>inferplan report</code>. Latencies at the '
        f"percentile named; costs in US$ per hour at the plan's prices.</footer>",
    ]
    page = "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        # Nothing may be fetched, and no script may run: the report is data, even if a string slipped through.
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; style-src \'unsafe-inline\'">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)}</title>",
        f"<style>{CSS}</style>",
        "</head>",
        "<body>",
        *(part for part in body if part),
        "</body>",
        "</html>",
        "",
    ])
    return page.encode("ascii", "xmlcharrefreplace").decode("ascii")


# --------------------------------------------------------------------------------------------------
# Text


def _e(text: object) -> str:
    """`text` escaped for HTML text and attribute values, non-ASCII as character references."""
    return html.escape(str(text), quote=True).encode("ascii", "xmlcharrefreplace").decode("ascii")


def _num(value: float) -> str:
    """A latency or cost for a table cell or label: three significant figures, at most two decimals."""
    if not math.isfinite(value):
        return "-"
    magnitude = abs(value)
    return f"{value:.0f}" if magnitude >= 100 else f"{value:.1f}" if magnitude >= 10 else f"{value:.2f}"


def _px(value: float) -> str:
    return f"{value:.1f}"


def _slo(req: PlanRequest, metric: str) -> SloTarget | None:
    return next((s for s in req.slos if s.metric == metric), None)


def _quantile(req: PlanRequest, metric: str) -> float:
    """The percentile a metric is judged at: its SLO's, else p95."""
    slo = _slo(req, metric)
    return slo.quantile if slo else DEFAULT_QUANTILE


def _predicted_ms(c: Candidate, metric: str, quantile: float) -> float:
    """`c`'s predicted `metric` at `quantile` [ms]; NaN where it has none (TPOT where no output has a second token),
    which a cell shows as "-"."""
    stats = {"ttft": c.predicted.ttft_ms, "tpot": c.predicted.tpot_ms, "e2e": c.predicted.e2e_ms}[metric]
    return math.nan if stats is None else float(getattr(stats, QUANTILE_NAMES[quantile]))


def _metrics(req: PlanRequest, candidates: Sequence[Candidate]) -> list[str]:
    """The metrics charted for `candidates`: TTFT, TPOT unless none of them has one (no output with a second
    token), end-to-end latency when the plan sets an SLO on it."""
    tpot = not candidates or any(c.predicted.tpot_ms is not None for c in candidates)
    return ["ttft", *(["tpot"] if tpot else []), *(["e2e"] if _slo(req, "e2e") else [])]


def _shown(result: PlanResult) -> list[tuple[str, Candidate]]:
    """The candidates the report shows, each with its key: 'R' for the recommendation, '1'... for the
    alternatives in the plan's order (the key links a chart point to its table row)."""
    rec = [("R", result.recommendation)] if result.recommendation else []
    return rec + [(str(i), c) for i, c in enumerate(result.alternatives, 1)]


def _deployment(c: Candidate) -> str:
    if c.roles:  # disaggregated: each pool
        pools = c.pools()
        return f"{pools} ({c.precision}, KV {c.kv_cache_dtype}, decode max batch {c.max_batch})"
    stages = f", {c.pipeline_parallel} pipeline stages" if c.pipeline_parallel > 1 else ""
    return (f"{replica_shape(c.replicas, c.gpus_per_replica, c.gpu_type)} ({c.precision}, KV {c.kv_cache_dtype}, "
            f"max batch {c.max_batch}{stages})")


# --------------------------------------------------------------------------------------------------
# Summary


def _summary(req: PlanRequest, result: PlanResult) -> str:
    budget = f"; budget {per_hour(req.budget_usd_per_hour)}" if req.budget_usd_per_hour is not None else ""
    lines = [f'<p class="plan">{_e(req.served_model)} on {_e(req.engine)}: {req.rate_rps:g} requests/s, prompt '
             f"{req.prompt_mean:.0f} / output {req.output_mean:.0f} tokens (mean); SLO {_e(_slo_text(req))}"
             f"{_e(budget)}</p>"]
    c = result.recommendation
    if c is None:
        lines.append('<p class="verdict infeasible">No deployment meets every gate. The nearest infeasible candidates '
                     "and what would make the plan feasible are listed below.</p>")
    else:
        lines.append(f'<p class="verdict">Recommended: <b>{_e(_deployment(c))}</b> = {c.gpus} GPU(s), '
                     f"<b>{per_hour(c.cost.dollars_per_hour)}</b>, headroom {c.headroom:.0%}; "
                     f"{len(result.alternatives)} alternative(s) on the Pareto frontier.</p>")
        if not c.measured:  # beside the verdict: every figure of the page rests on it
            lines.append(f'<p class="flag">{_e(unmeasured_text(c))}</p>')
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------
# Chart frame: scales, axes, shading


def nice_ticks(top: float, count: int = 5) -> list[float]:
    """Ticks from 0 to at least `top` [> 0] at a step of 1, 2, 2.5 or 5 x 10^k, about `count` of them."""
    raw = top / count
    magnitude = 10.0 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1.0, 2.0, 2.5, 5.0, 10.0) if m * magnitude >= raw * (1 - 1e-9))
    steps = max(1, math.ceil(top / step - 1e-9))
    return [round(i * step, 12) for i in range(steps + 1)]


@dataclass(frozen=True)
class _Frame:
    """The plot area of a chart and the linear scales (from 0) that map data into it."""

    x_ticks: tuple[float, ...]
    y_ticks: tuple[float, ...]

    def x(self, value: float) -> float:
        return LEFT + min(value, self.x_ticks[-1]) / self.x_ticks[-1] * PLOT_W

    def y(self, value: float) -> float:
        return TOP + PLOT_H - min(value, self.y_ticks[-1]) / self.y_ticks[-1] * PLOT_H


def _reach(largest: float, limit: float | None) -> float:
    """The axis end: the largest value, and `limit` too where it is within LIMIT_REACH of it, plus a margin."""
    top = largest
    if limit is not None and (largest <= 0 or limit <= LIMIT_REACH * largest):
        top = max(top, limit)
    return (top if top > 0 else 1.0) * 1.08


def _inside(frame: _Frame, value: float | None, axis: str) -> bool:
    ticks = frame.x_ticks if axis == "x" else frame.y_ticks
    return value is not None and value < ticks[-1]


def _axes(frame: _Frame, x_label: str, y_label: str, y_format: Callable[[float], str]) -> list[str]:
    """Grid lines, tick labels (x ones in ms, or in s from 10 s; y ones written by `y_format`) and axis titles."""
    seconds = frame.x_ticks[-1] >= SECONDS_FROM_MS
    x_label = x_label.replace("[ms]", "[s]") if seconds else x_label
    parts = []
    for t in frame.x_ticks:
        x = _px(frame.x(t))
        parts.append(f'<line class="grid" x1="{x}" y1="{TOP}" x2="{x}" y2="{TOP + PLOT_H}"/>')
        parts.append(f'<text class="tick" x="{x}" y="{TOP + PLOT_H + 16}" text-anchor="middle">'
                     f"{round(t / 1000, 9) if seconds else t:g}</text>")
    for t in frame.y_ticks:
        y = _px(frame.y(t))
        parts.append(f'<line class="grid" x1="{LEFT}" y1="{y}" x2="{LEFT + PLOT_W}" y2="{y}"/>')
        parts.append(f'<text class="tick" x="{LEFT - 6}" y="{y}" dy="4" text-anchor="end">'
                     f"{_e(y_format(t))}</text>")
    parts += [
        f'<rect class="frame" x="{LEFT}" y="{TOP}" width="{PLOT_W}" height="{PLOT_H}"/>',
        f'<text class="axis-title" x="{LEFT + PLOT_W / 2:.1f}" y="{HEIGHT - 10}" text-anchor="middle">'
        f"{_e(x_label)}</text>",
        f'<text class="axis-title" transform="translate(16 {TOP + PLOT_H / 2:.1f}) rotate(-90)" '
        f'text-anchor="middle">{_e(y_label)}</text>',
    ]
    return parts


def _shade_right(frame: _Frame, limit: float, label: str, band: str) -> list[str]:
    """The region right of `limit` on the x axis (over an SLO) shaded and called `band`, the limit line
    labelled above the plot."""
    x = frame.x(limit)
    width = LEFT + PLOT_W - x
    anchor = "end" if x > LEFT + PLOT_W * 0.7 else "middle"
    parts = [
        f'<rect class="over-slo" x="{_px(x)}" y="{TOP}" width="{_px(width)}" height="{PLOT_H}"/>',
        f'<line class="limit" x1="{_px(x)}" y1="{TOP}" x2="{_px(x)}" y2="{TOP + PLOT_H}"/>',
        f'<text class="limit-label" x="{_px(x)}" y="{TOP - 6}" text-anchor="{anchor}">{_e(label)}</text>',
    ]
    if width >= 16:  # room for the word, written down the shaded band
        parts.append(f'<text class="shade-label" transform="translate({_px(x + width / 2 + 4)} '
                     f'{TOP + PLOT_H / 2:.1f}) rotate(-90)" text-anchor="middle">{_e(band)}</text>')
    return parts


def _shade_top(frame: _Frame, limit: float, label: str) -> list[str]:
    """The region above `limit` on the y axis (over budget), shaded and labelled, with the limit line."""
    y = frame.y(limit)
    return [
        f'<rect class="over-budget" x="{LEFT}" y="{TOP}" width="{PLOT_W}" height="{_px(y - TOP)}"/>',
        f'<line class="budget" x1="{LEFT}" y1="{_px(y)}" x2="{LEFT + PLOT_W}" y2="{_px(y)}"/>',
        f'<text class="budget-label" x="{LEFT + 6}" y="{_px(y - 5)}">{_e(label)}</text>',
    ]


def _svg(parts: Sequence[str], *, kind: str, metric: str, label: str) -> str:
    return "\n".join([
        f'<svg class="chart {kind}" data-metric="{metric}" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" '
        f'height="{HEIGHT}" role="img" aria-label="{_e(label)}" xmlns="http://www.w3.org/2000/svg">',
        *parts,
        "</svg>",
    ])


def _empty_chart(kind: str, metric: str, message: str) -> str:
    """A chart with nothing to plot says so in its plot area."""
    return _svg([
        f'<rect class="frame" x="{LEFT}" y="{TOP}" width="{PLOT_W}" height="{PLOT_H}"/>',
        f'<text class="empty" x="{LEFT + PLOT_W / 2:.1f}" y="{TOP + PLOT_H / 2:.1f}" text-anchor="middle">'
        f"{_e(message)}</text>",
    ], kind=kind, metric=metric, label=message)


def _figure(svg: str, caption: str) -> str:
    return f"<figure>\n{svg}\n<figcaption>{caption}</figcaption>\n</figure>"


# --------------------------------------------------------------------------------------------------
# Pareto frontier: cost against latency


def frontier_in_plane(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both x and y (lower is better), by increasing x: the
    frontier as seen in one chart (the search's frontier has more dimensions, so some shown points lie off it)."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], points[i][1]))
    kept: list[int] = []
    for i in order:
        if not kept or points[i][1] < points[kept[-1]][1]:
            kept.append(i)
    return kept


def _staircase(frame: _Frame, points: Sequence[tuple[float, float]]) -> str:
    """The 2-D frontier as a step line: from each point right to the next one's latency, then down."""
    kept = [points[i] for i in frontier_in_plane(points)]
    if len(kept) < 2:
        return ""
    coords = [f"{_px(frame.x(kept[0][0]))},{_px(frame.y(kept[0][1]))}"]
    for (_, y0), (x1, y1) in itertools.pairwise(kept):
        coords += [f"{_px(frame.x(x1))},{_px(frame.y(y0))}", f"{_px(frame.x(x1))},{_px(frame.y(y1))}"]
    return f'<polyline class="frontier-line" points="{" ".join(coords)}"/>'


def _point(frame: _Frame, key: str, c: Candidate, latency_ms: float, metric_label: str) -> str:
    """One candidate: a circle (class `point`, data attributes naming it, hover text); its label is placed
    with the others' (`_point_labels`)."""
    recommended = key == "R"
    x, y = frame.x(latency_ms), frame.y(c.cost.dollars_per_hour)
    role = "recommendation" if recommended else "alternative"
    hover = (f"{'recommended' if recommended else f'alternative {key}'}: {_deployment(c)}; "
             f"{per_hour(c.cost.dollars_per_hour)}; {metric_label} {_ms(latency_ms)}")
    return (f'<circle class="point {role}" cx="{_px(x)}" cy="{_px(y)}" r="{_radius(key)}" '
            f'data-candidate="{key}" data-role="{role}" data-gpu="{_e(c.gpu_type)}" '
            f'data-tp="{c.gpus_per_replica}" data-replicas="{c.replicas}" data-batch="{c.max_batch}" '
            f'data-precision="{_e(c.precision)}" data-cost-per-hour="{c.cost.dollars_per_hour:g}" '
            f'data-latency-ms="{latency_ms:g}"><title>{_e(hover)}</title></circle>')


def _radius(key: str) -> int:
    return 7 if key == "R" else 5


LABEL_CHAR_W = 7.0  # [px] an 11px label character, bold included, at most this wide
LABEL_ASCENT, LABEL_DESCENT = 10.0, 3.0  # [px] above and below a label's baseline
SAME_SPOT = 4.0  # [px] alternatives whose points are closer than this share one label ("2, 3")


def label_box(x: float, y: float, anchor: str, text: str) -> tuple[float, float, float, float]:
    """The box (left, top, right, bottom) [px] a point label of `text` at (`x`, `y`) with `anchor` covers."""
    width = len(text) * LABEL_CHAR_W
    left = x - width if anchor == "end" else x - width / 2 if anchor == "middle" else x
    return left, y - LABEL_ASCENT, left + width, y + LABEL_DESCENT


def _overlap(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> float:
    return max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))


def _covered(box: tuple[float, float, float, float], obstacles: Sequence[tuple[float, float, float, float]]) -> float:
    """How much of `box` other labels and points cover, and (twice counted) lies outside the plot [px^2]."""
    outside = (box[2] - box[0]) * (box[3] - box[1]) - _overlap(box, (LEFT, TOP, LEFT + PLOT_W, TOP + PLOT_H))
    return sum(_overlap(box, other) for other in obstacles) + 2 * outside


def _point_labels(points: Sequence[tuple[str, float, float]]) -> list[str]:
    """A label for each point (key, x, y) [px], placed where it covers no other label or point and stays in
    the plot: above right of its point if free, else the first free spot around it, else the least covered
    one. The recommendation is labelled "recommended"; alternatives at the same spot share one label ("2, 3")."""
    groups: list[tuple[list[str], float, float]] = []
    for key, x, y in points:
        group = next((g for g in groups if key != "R" and "R" not in g[0]
                      and math.hypot(g[1] - x, g[2] - y) < SAME_SPOT), None)
        if group is None:
            groups.append(([key], x, y))
        else:
            group[0].append(key)
    obstacles = [(x - _radius(k), y - _radius(k), x + _radius(k), y + _radius(k)) for k, x, y in points]
    labels = []
    for keys, x, y in groups:
        r = _radius(keys[0])
        text = "recommended" if keys == ["R"] else ", ".join(keys)
        spots = [(x + r + 1, y - r - 1, "start"), (x - r - 1, y - r - 1, "end"), (x + r + 1, y + r + 10, "start"),
                 (x - r - 1, y + r + 10, "end"), (x + r + 3, y + 4, "start"), (x - r - 3, y + 4, "end"),
                 (x, y - r - 3, "middle"), (x, y + r + 12, "middle")]
        spots += [(sx, sy - 12 if sy < y else sy + 12, anchor) for sx, sy, anchor in spots if sy != y + 4]  # farther
        covered = [_covered(label_box(sx, sy, anchor, text), obstacles) for sx, sy, anchor in spots]
        x_text, y_text, anchor = spots[covered.index(min(covered))]  # the first of the least covered spots
        obstacles.append(label_box(x_text, y_text, anchor, text))
        role = "recommendation" if keys == ["R"] else "alternative"
        labels.append(f'<text class="point-label {role}" x="{_px(x_text)}" y="{_px(y_text)}" '
                      f'text-anchor="{anchor}" data-candidates="{" ".join(keys)}">{text}</text>')
    return labels


def _band(frame: _Frame, key: str, c: Candidate, metric: str, quantile: float) -> list[str]:
    """The interval of a candidate's predicted `metric` at `quantile` as a bar through its point (class `band`),
    cut at the chart's right edge; nothing where the candidate states no interval."""
    bounds = None if c.predicted.intervals is None else getattr(c.predicted.intervals, f"{metric}_ms")
    if bounds is None:
        return []
    low, high = getattr(bounds, QUANTILE_NAMES[quantile])
    y = _px(frame.y(c.cost.dollars_per_hour))
    share = percent_text(c.predicted.confidence or 0.8)
    return [f'<line class="band" x1="{_px(frame.x(low))}" y1="{y}" x2="{_px(frame.x(high))}" y2="{y}" '
            f'data-candidate="{key}" data-low-ms="{low:g}" data-high-ms="{high:g}">'
            f"<title>{share} interval: {_ms(low)} to {_ms(high)}</title></line>"]


def frontier_chart(req: PlanRequest, result: PlanResult, metric: str) -> str:
    """Cost [$/h] against `metric` [ms] at its SLO percentile, one point per candidate shown, the region
    beyond the SLO limit (and above the budget) shaded."""
    quantile, slo = _quantile(req, metric), _slo(req, metric)
    metric_label = f"{METRIC_NAMES[metric]} {QUANTILE_NAMES[quantile]}"
    shown = [(key, c) for key, c in _shown(result) if math.isfinite(_predicted_ms(c, metric, quantile))]
    if not shown:
        return _figure(_empty_chart("frontier", metric, "No feasible deployment: nothing to plot"),
                       _e(f"Cost against {metric_label}: no candidate meets every gate."))
    points = [(_predicted_ms(c, metric, quantile), c.cost.dollars_per_hour) for _, c in shown]
    limit_ms = slo.max_s * 1e3 if slo else None
    budget = req.budget_usd_per_hour
    frame = _Frame(tuple(nice_ticks(_reach(max(p[0] for p in points), limit_ms))),
                   tuple(nice_ticks(_reach(max(p[1] for p in points), budget))))
    parts = _axes(frame, f"{metric_label} [ms]", "cost [$/h]", lambda t: f"${t:g}")
    if _inside(frame, limit_ms, "x"):
        parts += _shade_right(frame, limit_ms, f"SLO {_ms(limit_ms)}", "infeasible")
    if _inside(frame, budget, "y"):
        parts += _shade_top(frame, budget, f"over budget ({per_hour(budget)})")
    parts.append(_staircase(frame, points))
    for key, c in shown:
        parts += _band(frame, key, c, metric, quantile)
    for (key, c), (latency, _) in zip(shown, points, strict=True):
        parts.append(_point(frame, key, c, latency, metric_label))
    parts += _point_labels([(key, frame.x(latency), frame.y(cost)) for (key, _), (latency, cost) in
                            zip(shown, points, strict=True)])
    caption = _frontier_caption(metric_label, limit_ms, budget, frame)
    if any(c.predicted.intervals is not None for _, c in shown):
        caption += _e(" Bars: where the measured value falls with the stated probability (80% unless the plan "
                      "says otherwise), from the planner's held-out errors; cut at the right edge.")
    return _figure(_svg(parts, kind="frontier", metric=metric, label=f"cost against {metric_label}"), caption)


def _frontier_caption(metric_label: str, limit_ms: float | None, budget: float | None, frame: _Frame) -> str:
    notes = [f"Cost against predicted {metric_label}; the dashed line joins the points no other shown point "
             f"beats on both."]
    if limit_ms is None:
        notes.append(f"The plan sets no {metric_label.split()[0]} SLO.")
    elif not _inside(frame, limit_ms, "x"):
        notes.append(f"The SLO limit ({_ms(limit_ms)}) lies beyond the right edge: every point meets it.")
    if budget is not None and not _inside(frame, budget, "y"):
        notes.append(f"The budget ({per_hour(budget)}) lies above the top edge.")
    return _e(" ".join(notes))


def _frontier_section(req: PlanRequest, result: PlanResult) -> str:
    charts = "\n".join(frontier_chart(req, result, metric)
                       for metric in _metrics(req, [c for _, c in _shown(result)]))
    keys = [("rec", "recommendation"), ("alt", "alternative (number = row in the table)"),
            ("slo", "beyond the SLO: infeasible"),
            *([("bud", "over budget")] if req.budget_usd_per_hour is not None else [])]
    legend = " ".join(f'<span class="key {css}"></span> {text}' for css, text in keys)
    legend_line = f'<p class="legend">{legend}</p>\n' if _shown(result) else ""
    return f'<section id="frontier">\n<h2>Pareto frontier</h2>\n{legend_line}<div class="charts">\n{charts}\n' \
           f"</div>\n</section>"


# --------------------------------------------------------------------------------------------------
# Simulated latency distributions


def cdf_chart(req: PlanRequest, simulation: SimulationResult, planned: Candidate, metric: str) -> str:
    """The share of simulated requests at or below each latency [ms], with the SLO limit (region beyond it
    shaded) and the SLO's percentile marked where the simulated curve crosses it."""
    samples = {"ttft": simulation.ttft_s, "tpot": simulation.tpot_s, "e2e": simulation.e2e_s}[metric]
    values_ms = np.sort(samples[np.isfinite(samples)]) * 1e3
    quantile, slo = _quantile(req, metric), _slo(req, metric)
    name = f"{METRIC_NAMES[metric]} {QUANTILE_NAMES[quantile]}"
    if not len(values_ms):
        return _figure(_empty_chart("distribution", metric, "No samples"),
                       _e(f"Simulated {METRIC_NAMES[metric]}: no request has a finite value."))
    limit_ms = slo.max_s * 1e3 if slo else None
    tail = float(np.quantile(values_ms, CDF_TAIL))
    frame = _Frame(tuple(nice_ticks(_reach(tail, limit_ms))), (0.0, 0.25, 0.5, 0.75, 1.0))
    parts = _axes(frame, f"simulated {METRIC_NAMES[metric]} [ms]", "requests at or below", lambda t: f"{t:.0%}")
    if _inside(frame, limit_ms, "x"):
        parts += _shade_right(frame, limit_ms, f"SLO {_ms(limit_ms)}", "over the SLO")
    simulated_ms = float(np.quantile(values_ms, quantile))
    parts += [_cdf_curve(frame, values_ms), *_percentile_marker(frame, simulated_ms, quantile)]
    caption = _cdf_caption(name, values_ms, simulated_ms, _predicted_ms(planned, metric, quantile), limit_ms, frame)
    return _figure(_svg(parts, kind="distribution", metric=metric, label=f"simulated {name} distribution"),
                   caption)


def _cdf_curve(frame: _Frame, values_ms: np.ndarray) -> str:
    """The empirical distribution of the sorted `values_ms` as a line, up to the chart's right edge (the
    tail beyond it is counted in the caption, not drawn; the line ends at the share of requests within it)."""
    probabilities = np.linspace(0.0, 1.0, CDF_POINTS)
    curve = np.quantile(values_ms, probabilities)
    edge = frame.x_ticks[-1]
    inside = curve <= edge
    xs, ps = [float(x) for x in curve[inside]], [float(p) for p in probabilities[inside]]
    if not inside.all():
        xs.append(edge)
        ps.append(np.count_nonzero(values_ms <= edge) / len(values_ms))
    coords = " ".join(f"{_px(frame.x(x))},{_px(frame.y(p))}" for x, p in zip(xs, ps, strict=True))
    return f'<polyline class="cdf" points="{coords}"/>'


def _percentile_marker(frame: _Frame, value_ms: float, quantile: float) -> list[str]:
    """A horizontal line at `quantile` and a marker where the curve crosses it, labelled with its value."""
    x, y = frame.x(value_ms), frame.y(quantile)
    name = QUANTILE_NAMES[quantile]
    anchor, dx = ("end", -8) if x > LEFT + PLOT_W * 0.6 else ("start", 8)
    return [
        f'<line class="quantile" x1="{LEFT}" y1="{_px(y)}" x2="{LEFT + PLOT_W}" y2="{_px(y)}"/>',
        f'<line class="quantile" x1="{_px(x)}" y1="{_px(y)}" x2="{_px(x)}" y2="{TOP + PLOT_H}"/>',
        f'<circle class="marker" cx="{_px(x)}" cy="{_px(y)}" r="5" data-quantile="{name}" data-ms="{value_ms:.3f}">'
        f"<title>simulated {name}: {_ms(value_ms)}</title></circle>",
        f'<text class="marker-label" x="{_px(x + dx)}" y="{_px(y + 16)}" text-anchor="{anchor}">'
        f"{name} {_ms(value_ms)}</text>",
    ]


def _cdf_caption(name: str, values_ms: np.ndarray, simulated_ms: float, planned_ms: float,
                 limit_ms: float | None, frame: _Frame) -> str:
    over = f"limit {_ms(limit_ms)}" if limit_ms is not None else "no SLO on it"
    notes = [f"{len(values_ms)} simulated requests: {name} {_ms(simulated_ms)} (planned {_ms(planned_ms)}; {over})."]
    beyond = int(np.count_nonzero(values_ms > frame.x_ticks[-1]))
    if beyond:
        notes.append(f"{beyond} slowest beyond the right edge (longest {_ms(float(values_ms[-1]))}).")
    if limit_ms is not None and not _inside(frame, limit_ms, "x"):
        notes.append("The SLO limit lies beyond the right edge.")
    return _e(" ".join(notes))


def _simulation_section(req: PlanRequest, result: PlanResult, simulation: SimulationResult | None) -> str:
    head = '<section id="simulation">\n<h2>Simulated latency of the recommendation</h2>'
    c = result.recommendation
    if c is None:
        return f'{head}\n<p class="none">No recommendation to simulate.</p>\n</section>'
    if simulation is None:
        return f'{head}\n<p class="none">Not simulated.</p>\n</section>'
    charts = "\n".join(cdf_chart(req, simulation, c, metric) for metric in _metrics(req, [c]))
    scaled = scaled_words(req, c)
    summary = (f"<p>{len(simulation.ttft_s)} requests of the plan's workload on {_e(_deployment(c))}"
               f"{_e(f' (simulated on {scaled})') if scaled else ''}: "
               f"{simulation.output_tokens_per_s:.0f} output tokens/s, {simulation.preemptions} preemption(s).</p>")
    summary += "".join(f'\n<p class="flag">{_e(flag)}</p>' for flag in simulation_flags(req, c, simulation))
    return f'{head}\n{summary}\n<div class="charts">\n{charts}\n</div>\n{_comparison_table(c, simulation)}\n' \
           f"</section>"


STEADY_SHARE = 0.9
"""A simulated run whose output rate stays below this share of the planned one ended before the replicas filled."""


def simulation_flags(req: PlanRequest, c: Candidate, simulation: SimulationResult) -> list[str]:
    """What a reader of the simulated run must not miss: each SLO it misses at its percentile, and a run too short
    to reach the planned output rate (its percentiles then describe replicas still filling: optimistic)."""
    stats = {"ttft": simulation.ttft, "tpot": simulation.tpot, "e2e": simulation.e2e}
    flags = []
    for slo in req.slos:
        name = f"p{round(slo.quantile * 100)}"
        value_ms = float(getattr(stats[slo.metric], f"{name}_s")) * 1e3
        if not value_ms <= slo.max_s * 1e3:
            flags.append(f"MISSED: simulated {slo.metric.upper()} {name} {_ms(value_ms)} > {_ms(slo.max_s * 1e3)} "
                         "target.")
    planned = simulated_rate(req, c) * req.output_mean
    if simulation.output_tokens_per_s < STEADY_SHARE * planned:
        flags.append(f"NOT STEADY: the run produced {simulation.output_tokens_per_s:,.0f} output tokens/s of the "
                     f"{planned:,.0f} planned for the replicas simulated; it ended before they filled, so its "
                     "percentiles are optimistic. Simulate more requests (--requests).")
    return flags


def _comparison_table(c: Candidate, simulation: SimulationResult) -> str:
    rows = [[r.metric, r.quantile, _num(r.analytic_ms), _num(r.simulated_ms),
             f"{r.ratio:.2f}" if math.isfinite(r.ratio) else "-"] for r in compare(c, simulation)]
    return _table(["metric", "percentile", "planned [ms]", "simulated [ms]", "simulated / planned"], rows,
                  "comparison", numeric=(2, 3, 4))


# --------------------------------------------------------------------------------------------------
# Tables and lists


NUMERIC_CELL = ' class="num"'


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], css_class: str, numeric: Sequence[int] = (),
           raw: Sequence[int] = (), row_classes: Sequence[str] = (), notes: Sequence[str] = ()) -> str:
    """A table; cells are escaped except the columns in `raw` (built here from escaped parts). A row with a
    class in `row_classes` carries it; a row with a text in `notes` is followed by a full-width line of it."""
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = []
    for n, row in enumerate(rows):
        cells = "".join(f"<td{NUMERIC_CELL if i in numeric else ''}>{cell if i in raw else _e(cell)}</td>"
                        for i, cell in enumerate(row))
        row_class = row_classes[n] if n < len(row_classes) else ""
        body.append(f'<tr class="{row_class}">{cells}</tr>' if row_class else f"<tr>{cells}</tr>")
        if n < len(notes) and notes[n]:
            body.append(f'<tr class="{(row_class + " note-row").strip()}"><td></td>'
                        f'<td colspan="{len(header) - 1}">{_e(notes[n])}</td></tr>')
    return f'<table class="{css_class}">\n<thead><tr>{head}</tr></thead>\n<tbody>\n' + "\n".join(body) + \
        "\n</tbody>\n</table>"


def _percentiles_cell(c: Candidate, metric: str, quantile: float) -> str:
    """p50 / p90 / p95 / p99 [ms], the SLO's percentile in bold."""
    cells = []
    for q in QUANTILE_NAMES:
        text = _num(_predicted_ms(c, metric, q))
        cells.append(f"<b>{text}</b>" if q == quantile else text)
    return " / ".join(cells)


def _candidates_section(req: PlanRequest, result: PlanResult) -> str:
    head = '<section id="candidates">\n<h2>Recommendation and alternatives</h2>'
    shown = _shown(result)
    if not shown:
        return f'{head}\n<p class="none">No candidate meets every gate.</p>\n</section>'
    header = ["#", "GPU", "TP", "replicas", "batch", "precision / KV", "$/h", "$/M tokens",
              *(f"{METRIC_NAMES[m].split()[0]} [ms] p50 / p90 / p95 / p99" for m in ("ttft", "tpot", "e2e")),
              "headroom", "predicted by"]
    # A disaggregated row: "prefill / decode" in the GPU, TP, replicas and batch columns.
    rows = [["rec." if key == "R" else key, gpu_column(c), parallelism_column(c),
             role_column(c, "replicas"), role_column(c, "max_batch"), f"{c.precision} / {c.kv_cache_dtype}",
             f"{c.cost.dollars_per_hour:.2f}", dollar_figure(c.cost.dollars_per_million_tokens),
             *(_percentiles_cell(c, m, _quantile(req, m)) for m in ("ttft", "tpot", "e2e")),
             f"{c.headroom:.0%}", c.provenance.get("predicted", "")] for key, c in shown]
    whys = [c.why + (f" [{', '.join(c.tags)}]" if c.tags else "") for _, c in shown]
    note = ("<p class=\"note\">Bold: the percentile each metric's SLO is set at (p95 where it has none). "
            "Predicted by: the simulator, or the analytic model with calibrated or extrapolated factors. "
            "The line under each row says why it is shown [and its tags].</p>")
    table = _table(header, rows, "candidates", numeric=(2, 3, 4, 6, 7, 8, 9, 10, 11), raw=(8, 9, 10),
                   row_classes=["recommendation" if key == "R" else "" for key, _ in shown], notes=whys)
    return f'{head}\n<div class="scroll">\n{table}\n</div>\n{note}\n</section>'


def _recommendation_section(c: Candidate | None) -> str:
    if c is None:
        return ""
    items = [
        ("deployment", _e(f"{_deployment(c)} = {c.gpus} GPU(s)")),
        ("cost", _e(f"{per_hour(c.cost.dollars_per_hour)}, ${dollar_figure(c.cost.dollars_per_million_tokens)} "
                    "per million output tokens")),
        ("load", _e(f"utilization {c.predicted.utilization:.2f}, headroom {c.headroom:.0%}, "
                    f"{c.predicted.output_tokens_per_second:g} output tokens/s")),
        *((("SLOs by held-out error", _e(slo_check_text(c))),) if c.predicted.slo_checks else ()),
        ("node selector", _e(", ".join(f"{k}={v}" for k, v in c.node_selector.items()))),
        ("checkpoint", f"<code>{_e(c.checkpoint)}</code>"),
        ("command", f"<pre>{_e(' '.join([c.engine_command or '', *c.engine_args]).strip())}</pre>"),
        *((f"file {name}", f"<pre>{_e(text)}</pre>") for name, text in c.engine_files.items()),
        *(("because", _e(note)) for note in c.engine_notes),
        ("provenance", _e(", ".join(f"{k} {v}" for k, v in c.provenance.items()))),
        *(("warning", _e(w)) for w in c.warnings),
    ]
    rows = "\n".join(f"<dt>{_e(name)}</dt><dd>{value}</dd>" for name, value in items)
    return f'<section id="recommendation">\n<h2>The recommendation in detail</h2>\n<dl>\n{rows}\n</dl>\n</section>'


def _infeasible_section(infeasible: Sequence[Infeasible]) -> str:
    if not infeasible:
        return ""
    rows = []
    for i in infeasible:
        batch = f", max batch {i.max_batch}" if i.max_batch is not None else ""
        reason = _e(i.reason) + "".join(f'<br><span class="also">also {_e(a)}</span>' for a in i.also)
        layout = f", {i.layout(with_kv=False)}" if i.layout(with_kv=False) else ""
        rows.append([i.gate, f"{i.gpu_type} x{i.gpus_per_replica} ({i.precision}, KV {i.kv_cache_dtype}{batch}"
                             f"{layout})", reason])
    table = _table(["gate", "candidate", "reason"], rows, "infeasible", raw=(2,))
    return f'<section id="infeasible">\n<h2>Nearest infeasible candidates</h2>\n{table}\n</section>'


def _list_section(section_id: str, heading: str, items: Sequence[str]) -> str:
    if not items:
        return ""
    entries = "\n".join(f"<li>{_e(item)}</li>" for item in items)
    return f'<section id="{section_id}">\n<h2>{_e(heading)}</h2>\n<ul>\n{entries}\n</ul>\n</section>'


CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;margin:24px auto;
max-width:1240px;padding:0 16px;color:#1d2330;line-height:1.4}
h1{font-size:1.5em;margin-bottom:.2em}h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #d8dce3}
.plan{color:#4a5262;margin-top:0}.verdict{background:#eef4fc;border-left:4px solid #1f5fbf;padding:8px 12px}
.verdict.infeasible{background:#fcefee;border-left-color:#b03030}
.charts{display:flex;flex-wrap:wrap;gap:16px}figure{margin:0;flex:1 1 480px;max-width:560px}
svg.chart{width:100%;height:auto;display:block;font-size:12px}
figcaption{font-size:.85em;color:#4a5262;margin-top:4px}
.grid{stroke:#e6e9ee;stroke-width:1}.frame{fill:none;stroke:#9aa1ad;stroke-width:1}
.tick{fill:#4a5262}.axis-title{fill:#1d2330;font-size:13px}
.over-slo{fill:#f3c9c9;fill-opacity:.55}.limit{stroke:#b03030;stroke-width:1.5;stroke-dasharray:6 4}
.limit-label{fill:#b03030;font-size:11px}.shade-label{fill:#b03030;font-size:11px;fill-opacity:.8}
.over-budget{fill:#f6dfb3;fill-opacity:.6}.budget{stroke:#a0661a;stroke-width:1.5;stroke-dasharray:6 4}
.budget-label{fill:#a0661a;font-size:11px}
.frontier-line{fill:none;stroke:#6b7382;stroke-width:1.2;stroke-dasharray:3 3}
line.band{stroke:#1f5fbf;stroke-opacity:.3;stroke-width:6;stroke-linecap:round}
circle.point.alternative{fill:#2a9d8f;stroke:#fff;stroke-width:1}
circle.point.recommendation{fill:#1f5fbf;stroke:#0b2a5c;stroke-width:2}
.point-label{font-size:11px;fill:#1d2330}.point-label.recommendation{font-weight:bold;fill:#1f5fbf}
.cdf{fill:none;stroke:#1f5fbf;stroke-width:2}.quantile{stroke:#6b7382;stroke-width:1;stroke-dasharray:2 3}
circle.marker{fill:#fff;stroke:#1f5fbf;stroke-width:2}.marker-label{font-size:11px;font-weight:bold;fill:#1f5fbf}
.empty{fill:#b03030;font-size:14px}
.legend{font-size:.9em;color:#4a5262}.key{display:inline-block;width:12px;height:12px;vertical-align:middle;
margin-left:10px;border-radius:6px}.key.rec{background:#1f5fbf}.key.alt{background:#2a9d8f}
.key.slo{background:#f3c9c9;border-radius:0}.key.bud{background:#f6dfb3;border-radius:0}
table{border-collapse:collapse;font-size:.85em;margin:8px 0}th,td{border:1px solid #d8dce3;padding:4px 6px;
vertical-align:top;text-align:left}th{background:#f3f5f8}td.num{text-align:right;white-space:nowrap}
table.candidates{font-size:.8em}table.candidates td,table.candidates th{padding:3px 4px}
table.candidates td{white-space:nowrap}
table.candidates tr.note-row td{white-space:normal}
tr.recommendation td{background:#eef4fc}
tr.note-row td{color:#4a5262;border-top:none;padding-top:0}.scroll{overflow-x:auto}.also{color:#4a5262}
.note,.none,footer{font-size:.85em;color:#4a5262}.flag{font-weight:bold;color:#a4262c}
dl{display:grid;grid-template-columns:max-content 1fr;
gap:4px 12px}dt{font-weight:bold}dd{margin:0}pre{white-space:pre-wrap;word-break:break-all;margin:0;
background:#f3f5f8;padding:4px 6px}footer{margin-top:2em;border-top:1px solid #d8dce3;padding-top:6px}
""".strip()
