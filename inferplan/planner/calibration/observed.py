"""Predictions for what a deployment is doing now, and how far they are from what it was observed to do.

Like is compared with like: the prediction is made for the *observed* workload (rate and mean lengths measured
over the window) on the *current* deployment (GPU type, replicas, tensor-parallel size, precision, KV dtype,
batch cap, step token budget, memory share, context length), not for the plan's declared workload or its
recommendation.

Observed latency quantiles come from engine histograms, so each is only known to lie in a bucket
(`low`, `high`]; the interpolated value can be off by up to the bucket's width. The error ratio reported is
(predicted - observed) / observed with the interpolated value, as dashboards show it; whether the prediction
is accurate is judged on the smallest error the histogram allows (`resolved_error_ratio`): against the bucket
edge nearest to the prediction, and zero for a prediction inside the observed bucket.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from inferplan.planner.model.factors import FactorSet, load_factors
from inferplan.planner.model.serving import poisson, poisson_capacity, running_context
from inferplan.planner.quantiles import QUANTILE_NAMES, QUANTILES
from inferplan.planner.request import PlanRequest
from inferplan.planner.search.annotate import deployment_of
from inferplan.planner.search.core import REPORT_SAMPLES, traffic_of

METRICS = ("ttft", "tpot", "e2e")


@dataclass(frozen=True)
class CurrentShape:
    """The deployment serving now (attribute names as on a Candidate, so `search.deployment_of` builds it)."""

    gpu_type: str
    replicas: int
    gpus_per_replica: int
    precision: str
    kv_cache_dtype: str
    max_batch: int
    data_parallel_attention: bool = False  # SGLang's --enable-dp-attention, vLLM's data-parallel ranks with experts
    expert_parallel: bool = False          # SGLang's --ep-size with DeepEP (with data-parallel attention)
    pipeline_parallel: int = 1             # stages; gpus_per_replica counts all of them
    data_parallel: int = 1                 # vLLM's ranks with expert parallelism, each max_batch (per_rank_batches)
    release: str | None = None             # the engine release it runs (None: the plan's, as a plan is predicted)
    max_num_batched_tokens: int | None = None  # its step token budget (None: the plan's, `running_request`)
    chunked_prefill: bool | None = None    # chunked prefill on or off (None: the plan's)
    memory_fraction: float | None = None   # its memory share, as `EngineSettings.memory_fraction` (None: the plan's)
    max_model_len: int | None = None       # its context length (None: the plan's)


@dataclass(frozen=True)
class ObservedWorkload:
    """The traffic measured over a window; a length without a measurement keeps the declared one."""

    requests_per_second: float
    prompt_mean: float | None = None
    output_mean: float | None = None
    prompt_cv: float | None = None
    output_cv: float | None = None


def with_workload(req: PlanRequest, observed: ObservedWorkload) -> PlanRequest:
    """`req` with the observed rate and lengths (what the current deployment was predicted for)."""
    def positive(value: float | None, default: float) -> float:
        return value if value is not None and math.isfinite(value) and value > 0 else default

    return dataclasses.replace(
        req,
        rate_rps=positive(observed.requests_per_second, req.rate_rps),
        prompt_mean=positive(observed.prompt_mean, req.prompt_mean),
        output_mean=positive(observed.output_mean, req.output_mean),
        prompt_cv=positive(observed.prompt_cv, req.prompt_cv),
        output_cv=positive(observed.output_cv, req.output_cv),
    )


def planning_request(req: PlanRequest, observed: ObservedWorkload | None) -> tuple[PlanRequest, str | None]:
    """The request to plan with and a note on what it is based on. With `workload.source: observed` and an
    observation, the observed rate and mean lengths, but never a rate below `observedFloor` x the declared one;
    otherwise `req` unchanged (note None)."""
    if req.workload_source != "observed" or observed is None:
        return req, None
    floor = req.observed_floor * req.rate_rps
    planned = with_workload(req, dataclasses.replace(observed, prompt_cv=None, output_cv=None))
    if planned.rate_rps < floor:
        planned = dataclasses.replace(planned, rate_rps=floor)
        note = (f"planned for the observed workload at the floor rate {floor:.4g} req/s (observedFloor "
                f"{req.observed_floor:g} x declared {req.rate_rps:g}); observed {observed.requests_per_second:.4g}")
    else:
        note = f"planned for the observed workload: {planned.rate_rps:.4g} req/s"
    return planned, note


@dataclass(frozen=True)
class CurrentPrediction:
    """Latency quantiles [s] predicted for the current deployment under a workload, and its utilisation."""

    latency: dict[str, dict[float, float]]
    mean: dict[str, float]
    utilization: float
    overloaded: bool


def running_request(req: PlanRequest, shape: CurrentShape) -> PlanRequest:
    """`req` with the step token budget, chunking, memory share and context length `shape` runs with where it states
    them, so that the engine settings built from it (`deployment_of`: its KV pool among them) are the running
    deployment's, as a plan stating them would be."""
    def own(value: Any, planned: Any) -> Any:
        return planned if value is None else value

    return dataclasses.replace(
        req,
        max_num_batched_tokens=own(shape.max_num_batched_tokens, req.max_num_batched_tokens),
        chunked_prefill=own(shape.chunked_prefill, req.chunked_prefill),
        memory_fraction=own(shape.memory_fraction, req.memory_fraction),
        max_model_len=own(shape.max_model_len, req.max_model_len),
    )


def predict_current(req: PlanRequest, shape: CurrentShape, factors: FactorSet | None = None) -> CurrentPrediction:
    """Predict `shape` serving `req`'s workload (spread evenly over its replicas), as the search would, run by
    `shape.release` where it names one (`deployment_of`) with its step budget, chunking, memory share and context
    length (`running_request`)."""
    factors = factors or load_factors()
    req = running_request(req, shape)
    deployment = deployment_of(req, shape, factors, shape.data_parallel, shape.release)  # type: ignore[arg-type]
    hw = deployment.hardware
    p, o = req.prompt_mean, req.output_mean
    pp = shape.pipeline_parallel  # one stream per stage (search._Rows)
    context = float(running_context(p, o, req.output_cv))
    batch = float(deployment.settings.max_num_seqs)  # the instance's: max_batch x its data-parallel ranks
    slots = max(min(batch, deployment.memory.kv_cache_tokens / context) / pp, 1.0)
    chunk = deployment.settings.chunk_tokens
    fraction = 1.0 - req.prefix_hit_rate
    traffic = traffic_of(req, fraction, shape.replicas, pp)
    capacity = float(np.asarray(poisson_capacity(hw, traffic, slots, chunk, pp)))
    rate = req.rate_rps / shape.replicas
    result = poisson(hw, rate, traffic, slots, chunk, capacity=capacity, samples=REPORT_SAMPLES, streams=pp)
    table = {"ttft": result.ttft_q, "tpot": result.tpot_q, "e2e": result.e2e_q}
    latency = {metric: {q: float(np.asarray(values[q])) for q in QUANTILES} for metric, values in table.items()}
    mean = {"ttft": float(np.asarray(result.ttft_mean)), "tpot": float(np.asarray(result.tpot_mean)),
            "e2e": float(np.asarray(result.e2e_mean))}
    return CurrentPrediction(latency, mean, rate / capacity if capacity > 0 else math.inf,
                             bool(np.asarray(result.overloaded)))


@dataclass(frozen=True)
class Discrepancy:
    """Predicted versus observed for one metric and quantile."""

    metric: str
    quantile: float
    predicted_s: float
    observed_s: float
    low_s: float       # the observed bucket: the true quantile lies in (low, high]
    high_s: float

    @property
    def error_ratio(self) -> float:
        """(predicted - observed) / observed, with the interpolated observed value."""
        return (self.predicted_s - self.observed_s) / self.observed_s

    @property
    def resolved_error_ratio(self) -> float:
        """The smallest error consistent with the histogram: the true quantile lies somewhere in the bucket
        (low, high], so the error is at least that against the bucket edge nearest to the prediction; 0 for a
        prediction inside the bucket."""
        if self.predicted_s > self.high_s:
            return (self.predicted_s - self.high_s) / self.high_s
        if self.predicted_s < self.low_s:
            return (self.predicted_s - self.low_s) / self.low_s
        return 0.0

    def describe(self) -> str:
        bucket = f"bucket {self.low_s * 1e3:.0f}-{self.high_s * 1e3:.0f} ms" if math.isfinite(self.high_s) \
            else f"bucket above {self.low_s * 1e3:.0f} ms"
        return (f"{self.metric.upper()} {QUANTILE_NAMES[self.quantile]} predicted {self.predicted_s * 1e3:.0f} ms, "
                f"observed {self.observed_s * 1e3:.0f} ms ({bucket}): error {self.error_ratio:+.0%}")


def compare(predicted: Mapping[str, Mapping[float, float]],
            observed: Mapping[str, Mapping[float, tuple[float, float, float]]]) -> list[Discrepancy]:
    """Discrepancies for every (metric, quantile) both sides have; `observed` maps to (value, low, high) [s].
    Observed values that are zero or not finite are skipped (nothing to divide by)."""
    out = []
    for metric in METRICS:
        for q in QUANTILES:
            if q not in predicted.get(metric, {}) or q not in observed.get(metric, {}):
                continue
            value, low, high = observed[metric][q]
            if not (math.isfinite(value) and value > 0):
                continue
            out.append(Discrepancy(metric, q, float(predicted[metric][q]), value, low, high))
    return out


def worst(discrepancies: list[Discrepancy]) -> Discrepancy | None:
    """The discrepancy with the largest error beyond its bucket (ties: the largest raw error)."""
    if not discrepancies:
        return None
    return max(discrepancies, key=lambda d: (abs(d.resolved_error_ratio), abs(d.error_ratio)))
