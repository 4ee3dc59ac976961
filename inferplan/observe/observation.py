"""What a deployment did over a window, read through Prometheus: request rate, mean lengths, latency
quantiles (with their bucket brackets), running and waiting requests, KV cache use."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from inferplan.observe import promql
from inferplan.observe.engine_metrics import EngineMetrics
from inferplan.observe.prometheus import PrometheusClient, PrometheusError, Sample
from inferplan.planner.quantiles import QUANTILES

LATENCY_METRICS = ("ttft", "tpot", "e2e")


SETTLE_SECONDS = 5.0
"""How far before Prometheus' "now" an observation is evaluated: a sample is stamped with the time its scrape
started but can be read only once the scrape is in, so later queries at one instant close to "now" could still
see samples the earlier ones did not."""


MAX_MODELS_NAMED = 5
"""The most model names a SeveralModels message lists."""


class ObserveError(Exception):
    """No usable observation; `reason` is the MetricsAvailable condition's reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Observation:
    window: str
    requests_per_second: float
    requests_in_window: float
    prompt_mean: float | None   # from the token counters (exact); the declared spread is kept: per-request
    output_mean: float | None   # token histograms have 1-2-5 buckets, too coarse for a CV
    latency: dict[str, dict[float, promql.Quantile]] = field(default_factory=dict)  # metric -> q -> seconds
    latency_mean: dict[str, float] = field(default_factory=dict)  # metric -> exact mean [s] (_sum / _count)
    running: float | None = None
    waiting: float | None = None
    kv_usage: float | None = None
    kv_blocks: int | None = None
    block_size: int | None = None


def _scalar(samples: list[Sample]) -> float | None:
    values = [v for _, v in samples if math.isfinite(v)]
    return values[0] if values else None


def _buckets(samples: list[Sample]) -> list[tuple[float, float]]:
    buckets = []
    for labels, value in samples:
        try:
            le = float(labels.get("le", ""))
        except ValueError:
            continue
        if math.isfinite(value):
            buckets.append((le, value))
    return buckets


def read_observation(client: PrometheusClient, names: EngineMetrics, selector: Mapping[str, str], window: str,
                     min_requests: int) -> Observation:
    """Query everything for one deployment, every query at one instant (Prometheus' `time()` when the observation
    starts, less SETTLE_SECONDS), so that its figures (a rate and the rate it is divided by, a count and its rate)
    come from the same samples even where a scrape lands between two queries. Raises ObserveError:
    PrometheusUnreachable / PrometheusBadResponse (the query failed), NoMatchingSeries (nothing matches the
    selector), TooFewSamples (series match, but none has the two samples in the window that rate() needs),
    SeveralModels (the series that match carry several `model_name`s: several deployments' figures together),
    InsufficientTraffic (fewer than `min_requests` requests completed in the window)."""
    at: float | None = None

    def query(expr: str) -> list[Sample]:
        try:
            return client.query(expr, at)
        except PrometheusError as exc:
            raise ObserveError(exc.reason, str(exc)) from None

    now = _scalar(query("time()"))  # Prometheus' clock, not ours: a skewed one would move the window
    at = None if now is None else now - SETTLE_SECONDS
    completed = query(promql.total_increase(names.e2e, selector, window, "_count"))
    if not completed:
        labels = ", ".join(f"{k}={v!r}" for k, v in sorted(selector.items()))
        if _scalar(query(promql.sample_count(names.e2e, selector, window, "_count"))):
            raise ObserveError("TooFewSamples", f"{names.e2e[0]} series match {labels} in Prometheus "
                                                f"{client.endpoint.name!r}, but none has two samples in the last "
                                                f"{window}, which rate() needs: make observe.window at least twice "
                                                "the scrape interval (or wait: the engine may have just started)")
        raise ObserveError("NoMatchingSeries", f"no {names.e2e[0]} series match {labels} in Prometheus "
                                               f"{client.endpoint.name!r}")
    models = sorted({labels.get("model_name", "") for labels, _ in
                     query(promql.label_values(names.e2e, selector, window, "model_name", "_count"))} - {""})
    if len(models) > 1:  # another Deployment's traffic would be added in, and judged against this model's prediction
        labels = ", ".join(f"{k}={v!r}" for k, v in sorted(selector.items()))
        shown = ", ".join(repr(m) for m in models[:MAX_MODELS_NAMED]) + (", ..." if len(models) > MAX_MODELS_NAMED
                                                                          else "")
        raise ObserveError("SeveralModels", f"the {names.e2e[0]} series that match {labels} in Prometheus "
                                            f"{client.endpoint.name!r} are of {len(models)} models ({shown}): "
                                            "their figures would be added together; add the model_name of the "
                                            "current deployment to observe.selector")
    count = _scalar(completed) or 0.0
    if count < min_requests:
        raise ObserveError("InsufficientTraffic", f"{count:.0f} requests completed in the last {window}, fewer "
                                                  f"than the {min_requests} needed (observe.minRequests)")
    rate = _scalar(query(promql.total_rate(names.e2e, selector, window, "_count"))) or 0.0

    def mean_tokens(counter: tuple[str, ...]) -> float | None:
        tokens = _scalar(query(promql.total_rate(counter, selector, window)))
        return tokens / rate if tokens is not None and rate > 0 else None

    latency: dict[str, dict[float, promql.Quantile]] = {}
    latency_mean: dict[str, float] = {}
    for metric in LATENCY_METRICS:
        histogram = getattr(names, metric)
        buckets = _buckets(query(promql.bucket_rates(histogram, selector, window)))
        quantiles = {q: promql.histogram_quantile(q, buckets) for q in QUANTILES}
        found = {q: value for q, value in quantiles.items() if value is not None}
        if found:
            latency[metric] = found
        total = _scalar(query(promql.total_rate(histogram, selector, window, "_sum")))
        events = _scalar(query(promql.total_rate(histogram, selector, window, "_count")))
        if total is not None and events and events > 0 and total >= 0:
            latency_mean[metric] = total / events

    blocks = block_size = None
    if names.cache_config:  # one series per engine (replica, or data-parallel rank) of the selected targets
        info = query(promql.info_counts(names.cache_config, selector, ("num_gpu_blocks", "block_size"),
                                        [f"{name}_count" for name in names.e2e]))
        try:
            blocks = sum(int(labels["num_gpu_blocks"]) * round(engines) for labels, engines in info) or None
            block_size = int(info[0][0]["block_size"]) if info else None
        except (KeyError, ValueError, OverflowError):
            blocks = block_size = None
    return Observation(
        window=window,
        requests_per_second=rate,
        requests_in_window=count,
        prompt_mean=mean_tokens(names.prompt_tokens_total),
        output_mean=mean_tokens(names.output_tokens_total),
        latency=latency,
        latency_mean=latency_mean,
        running=_scalar(query(promql.gauge_sum(names.running, selector, window))),
        waiting=_scalar(query(promql.gauge_sum(names.waiting, selector, window))),
        kv_usage=_scalar(query(promql.gauge_mean(names.kv_usage, selector, window))),
        kv_blocks=blocks,
        block_size=block_size,
    )
