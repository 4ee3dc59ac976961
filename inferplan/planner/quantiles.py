"""The latency percentiles the planner, the status and the engines' histograms speak of: one home for their
values and names (p50, p90, p95, p99), and the normal quantile function their samples are drawn with."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

QUANTILE_NAMES: dict[float, str] = {0.5: "p50", 0.9: "p90", 0.95: "p95", 0.99: "p99"}
"""Quantile -> its name in specs, results and statuses."""
QUANTILES: tuple[float, ...] = tuple(QUANTILE_NAMES)
QUANTILE_VALUES: dict[str, float] = {name: q for q, name in QUANTILE_NAMES.items()}
"""Name (p50, ...) -> quantile."""


def percent_text(probability: float) -> str:
    """A probability as the percentage a plan states it with: "80%" for 0.8, "97.5%" for 0.975 (not rounded to a
    whole percent, which would print a confidence the plan did not ask for)."""
    return f"{round(probability * 100, 6):g}%"


def normal_ppf(p: ArrayLike) -> NDArray[np.float64]:
    """Inverse standard normal CDF (Acklam's rational approximation, relative error < 1.2e-9)."""
    p = np.clip(np.asarray(p, dtype=float), 1e-12, 1 - 1e-12)
    a = (-3.969683028665376e01, 2.209460984245205e02, -2.759285104469687e02, 1.383577518672690e02,
         -3.066479806614716e01, 2.506628277459239e00)
    b = (-5.447609879822406e01, 1.615858368580409e02, -1.556989798598866e02, 6.680131188771972e01,
         -1.328068155288572e01)
    c = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e00, -2.549732539343734e00,
         4.374664141464968e00, 2.938163982698783e00)
    d = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00, 3.754408661907416e00)
    low = 0.02425
    q = np.sqrt(-2 * np.log(np.where(p < low, p, 1 - p)))
    tail = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) / (
        (((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1
    )
    r = (p - 0.5) ** 2
    mid = (p - 0.5) * (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) / (
        ((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1
    )
    return np.where(p < low, tail, np.where(p > 1 - low, -tail, mid))
