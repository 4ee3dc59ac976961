"""The latency percentiles the planner, the status and the engines' histograms speak of: one home for their
values and names (p50, p90, p95, p99)."""

from __future__ import annotations

QUANTILE_NAMES: dict[float, str] = {0.5: "p50", 0.9: "p90", 0.95: "p95", 0.99: "p99"}
"""Quantile -> its name in specs, results and statuses."""
QUANTILES: tuple[float, ...] = tuple(QUANTILE_NAMES)
QUANTILE_VALUES: dict[str, float] = {name: q for q, name in QUANTILE_NAMES.items()}
"""Name (p50, ...) -> quantile."""
