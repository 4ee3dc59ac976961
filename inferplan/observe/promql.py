"""PromQL built from a plan's spec, and Prometheus' histogram maths done on the client.

Everything a plan contributes to a query is a label matcher's name (validated by the spec's pattern, and
checked again here) or value (escaped here), so no spec value can change the shape of a query. Histograms are
fetched as their per-bucket rates (`sum by (le) (rate(..._bucket[w]))`) and the quantiles computed here,
exactly as `histogram_quantile` does, so that the bucket around each quantile (the resolution of the figure)
is known too.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_DURATION = re.compile(r"^[1-9][0-9]{0,4}(s|m|h)$")


def escape_label_value(value: str) -> str:
    """A PromQL double-quoted string literal for `value` (backslash, quote and newline escaped)."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return f'"{escaped}"'


def matchers(selector: Mapping[str, str]) -> str:
    """`a="x",b="y"`: exact-match label matchers, sorted by name; a bad label name raises ValueError."""
    parts = []
    for name in sorted(selector):
        if not _LABEL_NAME.match(name) or name == "__name__":
            raise ValueError(f"not a label name: {name!r}")
        parts.append(f"{name}={escape_label_value(selector[name])}")
    return ",".join(parts)


def _check(names: Sequence[str], window: str) -> None:
    if not names:
        raise ValueError("no metric name")
    for name in names:
        if not _METRIC_NAME.match(name):
            raise ValueError(f"not a metric name: {name!r}")
    if not _DURATION.match(window):
        raise ValueError(f"not a duration: {window!r}")


def _first_of(expressions: list[str]) -> str:
    """The first expression with data: `(a) or (b)`. With `by` clauses equal, `or` keeps a's series and adds
    only b's with label sets a lacks, so a deployment exporting both old and new names is not counted twice."""
    return " or ".join(f"({e})" for e in expressions) if len(expressions) > 1 else expressions[0]


def bucket_rates(names: Sequence[str], selector: Mapping[str, str], window: str) -> str:
    """Per-bucket rates of a histogram, summed over the selected series: one series per `le`."""
    _check(names, window)
    sel = matchers(selector)
    return _first_of([f"sum by (le) (rate({name}_bucket{{{sel}}}[{window}]))" for name in names])


def total_rate(names: Sequence[str], selector: Mapping[str, str], window: str, suffix: str = "") -> str:
    """`sum(rate(NAME{suffix}[w]))` over the selected series (counters; `_count` / `_sum` of histograms)."""
    _check(names, window)
    sel = matchers(selector)
    return _first_of([f"sum(rate({name}{suffix}{{{sel}}}[{window}]))" for name in names])


def total_increase(names: Sequence[str], selector: Mapping[str, str], window: str, suffix: str = "") -> str:
    """`sum(increase(NAME{suffix}[w]))`: how many events the window holds."""
    _check(names, window)
    sel = matchers(selector)
    return _first_of([f"sum(increase({name}{suffix}{{{sel}}}[{window}]))" for name in names])


GAUGE_POINTS = 100
"""Instants over the window at which a gauge's total (or mean) over the selected series is sampled and averaged:
a subquery step of window / GAUGE_POINTS, at least 1 s (finer than any scrape interval a window of 5m or less is
used with)."""


def _over_window(window: str) -> str:
    """The subquery range `[w:step]` that samples a window GAUGE_POINTS times."""
    amount, unit = int(window[:-1]), window[-1]
    seconds = amount * {"s": 1, "m": 60, "h": 3600}[unit]
    return f"[{window}:{max(1, seconds // GAUGE_POINTS)}s]"


def gauge_sum(names: Sequence[str], selector: Mapping[str, str], window: str) -> str:
    """The selected series' sum (all replicas together), averaged over the window: a pod replaced within the
    window (a rollout, an eviction: new series, the old ones ended) counts for the time it ran, not as one more
    replica, as a sum of each series' own average would. Instants at which no series is there (every pod gone)
    are not averaged in."""
    _check(names, window)
    sel = matchers(selector)
    return _first_of([f"avg_over_time(sum({name}{{{sel}}}){_over_window(window)})" for name in names])


def gauge_mean(names: Sequence[str], selector: Mapping[str, str], window: str) -> str:
    """The mean over the selected series (engines), averaged over the window (each series weighs for the time it
    ran)."""
    _check(names, window)
    sel = matchers(selector)
    return _first_of([f"avg_over_time(avg({name}{{{sel}}}){_over_window(window)})" for name in names])


def sample_count(names: Sequence[str], selector: Mapping[str, str], window: str, suffix: str = "") -> str:
    """`sum(count_over_time(NAME{suffix}[w]))`: how many samples the selected series have in the window (a
    series needs two for rate() and increase())."""
    _check(names, window)
    sel = matchers(selector)
    return _first_of([f"sum(count_over_time({name}{suffix}{{{sel}}}[{window}]))" for name in names])


def label_values(names: Sequence[str], selector: Mapping[str, str], window: str, label: str,
                 suffix: str = "") -> str:
    """One series per value of `label` that the selected series carry in the window (`count by (label)`)."""
    _check(names, window)
    if not _LABEL_NAME.match(label):
        raise ValueError(f"not a label name: {label!r}")
    sel = matchers(selector)
    return _first_of([f"count by ({label}) (count_over_time({name}{suffix}{{{sel}}}[{window}]))" for name in names])


def info_counts(names: Sequence[str], selector: Mapping[str, str], labels: Sequence[str],
                targets_of: Sequence[str]) -> str:
    """How many series of an info metric (e.g. vLLM's cache_config_info) carry each combination of `labels`,
    counting those of the scrape targets (`job`, `instance`) where series `targets_of` match `selector`. The
    selector is not applied to the info metric itself: it need not carry the labels the engine's other series
    do (vLLM's cache_config_info has no `model_name`)."""
    _check(names, "1m")
    _check(targets_of, "1m")
    for label in labels:
        if not _LABEL_NAME.match(label):
            raise ValueError(f"not a label name: {label!r}")
    sel = matchers(selector)
    by = ", ".join(labels)
    targets = " or ".join(f"{name}{{{sel}}}" for name in targets_of)
    return _first_of([f"count by ({by}) ({name} and on (job, instance) ({targets}))" for name in names])


# ----------------------------------------------------------------------------------------------------------
# Histogram quantiles on the client


@dataclass(frozen=True)
class Quantile:
    """A quantile of a histogram: the value Prometheus' histogram_quantile gives, and the bucket it lies in
    (`low` < true quantile <= `high`; the interpolated `value` is only as good as that bracket)."""

    value: float
    low: float
    high: float


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> Quantile | None:
    """Prometheus' histogram_quantile for one histogram given as (upper bound `le`, cumulative count or rate)
    pairs, in any order; None when it has no observations or no +Inf bucket. The first bucket's lower bound
    is 0 (for a positive upper bound), and a quantile in the +Inf bucket is the highest finite bound."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile must be in [0, 1], got {q}")
    ordered = sorted((float(le), float(count)) for le, count in buckets)
    if not ordered or not math.isinf(ordered[-1][0]):
        return None
    # Cumulative counts of a rate() can be slightly non-monotonic (scrapes of different buckets at different
    # times); Prometheus fixes that the same way.
    fixed: list[tuple[float, float]] = []
    running = 0.0
    for le, count in ordered:
        running = max(running, count)
        fixed.append((le, running))
    total = fixed[-1][1]
    if total <= 0 or len(fixed) < 2:
        return None
    rank = q * total
    index = next(i for i, (_, count) in enumerate(fixed) if count >= rank)
    if index == len(fixed) - 1:  # in the +Inf bucket
        top = fixed[-2][0]
        return Quantile(top, top, math.inf)
    high, count_high = fixed[index]
    if index == 0:
        low, count_low = (0.0, 0.0) if high > 0 else (high, 0.0)
    else:
        low, count_low = fixed[index - 1]
    if high == low or count_high == count_low:
        return Quantile(high, low, high)
    value = low + (high - low) * (rank - count_low) / (count_high - count_low)
    return Quantile(value, low, high)
