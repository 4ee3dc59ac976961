"""What the search adds to the candidates it shows, once chosen: their prediction intervals and, for a GPU nothing was
measured on, the cost if its steps are as slow as the held-out error says."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from inferplan.planner.catalog.checkpoints import checkpoint_precision
from inferplan.planner.catalog.engines import (
    ENGINES,
    EngineSettings,
    factor_key,
    per_rank_batches,
)
from inferplan.planner.catalog.gpus import load_gpu_catalog
from inferplan.planner.catalog.precisions import (
    kv_dtype_bytes,
)
from inferplan.planner.model.factors import FactorSet, load_factors
from inferplan.planner.model.intervals import DEFAULT_CONFIDENCE, load_intervals
from inferplan.planner.model.kernels import kernel_basis
from inferplan.planner.model.memory import (
    MemoryPlan,
    attention_weight_bytes,
    plan_memory_for_settings,
)
from inferplan.planner.model.performance import (
    Hardware,
    build_hardware,
    mla_dp_ratio,
    stack_hardware,
    with_dp_attention,
    with_expert_parallel,
    with_mtp,
)
from inferplan.planner.model.serving import (
    poisson_capacity,
    poisson_model,
)
from inferplan.planner.quantiles import QUANTILE_NAMES, QUANTILE_VALUES
from inferplan.planner.request import PlanRequest, SloTarget
from inferplan.planner.results import (
    Candidate,
    Intervals,
    PercentileIntervals,
    Percentiles,
    PlanResult,
    UpperCost,
    cents,
    rounded,
)
from inferplan.planner.search.core import (
    REPORT_SAMPLES,
    UNMEASURED_EVIDENCE,
    UNMEASURED_STEP_SLOWDOWN,
    _RateSearch,
    _replicas,
    _unmeasured_warning,
    candidate_slo_ratios,
    evidence_pools,
    gpu_price,
    interval_evidence,
    kv_hint,
    plan_evidence,
    slo_checks,
    traffic_of,
)
from inferplan.planner.search.grid import (
    _settings,
    checkpoint_of,
    link_domain_gpus,
    over_the_network,
    over_the_pipeline,
)


def _describe_slo(slo: SloTarget) -> str:
    return f"{slo.metric.upper()} {QUANTILE_NAMES[slo.quantile]}"


def with_upper_cost(req: PlanRequest, result: PlanResult) -> PlanResult:
    """`result` with its recommendation's upper cost (`Candidate.upper_cost`) where that rests on no measurement: the
    range then leads its warnings. A disaggregated pair's report states no one replica's capacity, so its slower
    pools are not planned (the mark and the warning still apply)."""
    rec = result.recommendation
    if rec is None or rec.measured or rec.roles:
        return result
    upper = _upper_cost(req, rec, rec.predicted.max_concurrency / rec.pipeline_parallel)
    engine, gpu = ENGINES[req.engine], load_gpu_catalog().get(rec.gpu_type)
    first = _unmeasured_warning(engine, gpu, kernel_basis(gpu).kind, upper)
    rest = [w for w in rec.warnings if not w.startswith("unmeasured: ")]
    return result.model_copy(update={"recommendation": rec.model_copy(update={
        "upper_cost": upper, "warnings": [first, *rest][:16]})})


def candidate_intervals(req: PlanRequest, candidate: Candidate, confidence: float = DEFAULT_CONFIDENCE) -> Intervals:
    """The intervals of `candidate`'s predicted latencies (`intervals.py`): read for its model kind, its engine's
    factor line on its GPU family, and whether that pair has measured lines (`provenance.measuredLines`); a
    disaggregated pair's TTFT and end-to-end time the union of both pools' (`evidence_pools`), its capacity and
    concurrency its decode pool's."""
    gpu = load_gpu_catalog().get(candidate.gpu_type)
    lines = int(candidate.provenance.get("measuredLines", "0"))
    table = load_intervals()

    def bounds(stats: Percentiles, metric: str) -> PercentileIntervals:
        def pair(q: str) -> list[float]:
            lows, highs = zip(*(table.interval(interval_evidence(req, pool_gpu, metric, QUANTILE_VALUES[q], pool_lines),
                                               getattr(stats, q), confidence)
                                for pool_gpu, pool_lines in evidence_pools(candidate, metric)), strict=True)
            return [rounded(min(lows)), rounded(max(highs))]
        return PercentileIntervals(p50=pair("p50"), p90=pair("p90"), p95=pair("p95"), p99=pair("p99"))

    def around(value: float, metric: str) -> list[float]:
        """The interval of a capacity or size `value` by scenario metric `metric`'s held-out errors."""
        evidence = plan_evidence(req, gpu, metric, lines)
        low, high = table.interval(evidence, value, confidence)
        return [rounded(low), rounded(high)]

    p = candidate.predicted
    return Intervals(ttft_ms=bounds(p.ttft_ms, "ttft"),
                     tpot_ms=None if p.tpot_ms is None else bounds(p.tpot_ms, "tpot"),  # no second token: none
                     e2e_ms=bounds(p.e2e_ms, "e2e"),
                     max_requests_per_second_per_replica=around(p.max_requests_per_second_per_replica,
                                                                 "requests_per_s"),
                     # The batch cap is a setting: only a KV-bound concurrency carries the KV model's error.
                     max_concurrency=(around(p.max_concurrency, "max_concurrency")
                                      if p.max_concurrency < candidate.max_batch else None))


def with_intervals(req: PlanRequest, result: PlanResult) -> PlanResult:
    """`result` with the prediction intervals of its recommendation and alternatives (`Predicted.intervals`) and
    each SLO judged at the plan's confidence (`Predicted.slo_checks`): worked out once on the candidates shown, not
    in the search. Without a plan confidence they are stated at DEFAULT_CONFIDENCE."""
    confidence = DEFAULT_CONFIDENCE if req.confidence is None else req.confidence

    def add(c: Candidate) -> Candidate:
        return c.model_copy(update={"predicted": c.predicted.model_copy(update={
            "intervals": candidate_intervals(req, c, confidence), "confidence": confidence,
            "slo_checks": slo_checks(req, c)})})

    rec = result.recommendation
    return result.model_copy(update={"recommendation": add(rec) if rec is not None else None,
                                     "alternatives": [add(c) for c in result.alternatives]})


_STEP_RATES = ("bandwidth_bytes_s", "expert_bandwidth_bytes_s", "kv_bandwidth_bytes_s", "decode_flops_s",
               "prefill_flops_s", "attention_flops_s", "link_bytes_s")


_STEP_TIMES = ("link_latency_s", "link_knee_s_per_byte", "step_overhead_s", "sequence_overhead_s",
               "stage_send_latency_s", "stage_send_s_per_token", "moe_floor_s", "expert_s_per_token", "eager_step_s")


def slower_steps(hw: Hardware, factor: float | NDArray[np.float64]) -> Hardware:
    """`hw` with every step (decode, prefill chunk, all-reduce, stage send, the engine's CPU time) `factor` times
    as long: each rate divided by it, each time multiplied. The per-request time, part of no step, is kept."""
    return replace(hw, **{name: getattr(hw, name) / factor for name in _STEP_RATES},
                   **{name: getattr(hw, name) * factor for name in _STEP_TIMES})


def _upper_cost(req: PlanRequest, c: Candidate, slots: float) -> UpperCost:
    """What aggregated candidate `c` (`slots` running sequences a stream) needs if every step takes
    UNMEASURED_STEP_SLOWDOWN times as long: the highest rate a replica then sustains within every SLO and the
    utilisation cap, by the search's rate search on the report's sample, and the replicas (at least `c`'s), GPUs
    and cost of that rate; none where an SLO is missed even at light load. The deployment is rebuilt with the
    shipped engine terms (`deployment_of`): a plan made with other factors (`--factors`, an observed calibration)
    gets its upper cost from the shipped ones."""
    slowdown = UNMEASURED_STEP_SLOWDOWN
    deployment = deployment_of(req, c)
    hw = stack_hardware([slower_steps(deployment.hardware, slowdown)])
    pp = c.pipeline_parallel
    fraction, chunk = 1.0 - req.prefix_hit_rate, deployment.settings.chunk_tokens
    per_stream = np.array([slots])
    traffic = traffic_of(req, fraction, c.replicas, pp)  # its replicas' arrivals (an upper cost may need more)
    capacity = poisson_capacity(hw, traffic, per_stream, chunk, pp)
    model = poisson_model(hw, traffic, per_stream, chunk, capacity=capacity, samples=REPORT_SAMPLES,
                          streams=np.array([pp]))
    wanted = [(s.metric, s.quantile) for s in req.slos]
    targets = (np.array([s.max_s for s in req.slos]) / np.array(candidate_slo_ratios(req, c)))[:, None]
    light = model.quantiles(capacity * 1e-4, wanted)
    if not np.all(light <= targets):
        worst = int(np.argmax(light[:, 0] / targets[:, 0]))
        slo = req.slos[worst]
        return UpperCost(step_slowdown=slowdown, evidence=UNMEASURED_EVIDENCE,
                         missed=f"{_describe_slo(slo)} <= {slo.max_s * 1e3:.0f} ms ({light[worst, 0] * 1e3:.0f} ms "
                                "at light load" + ("" if req.confidence is None else
                                                   f", {targets[worst, 0] * 1e3:.0f} ms allowed at confidence "
                                                   f"{req.confidence:g}") + ")")
    row = np.zeros(1, dtype=np.intp)
    rates = _RateSearch(lambda at: model.take(at, per_stream[at], capacity[at]), capacity, req.max_utilization,
                        wanted, targets, np.max(np.log(light / targets), axis=0))
    at_cap, cap_margin = rates.at_cap(row)
    best = capacity * req.max_utilization if at_cap[0] else rates.refine(row, cap_margin)
    if not best[0] > 0:
        return UpperCost(step_slowdown=slowdown, evidence=UNMEASURED_EVIDENCE,
                         missed=f"max utilization {req.max_utilization:g}")
    replicas = max(int(_replicas(req, best)[0]), c.replicas)
    gpus = replicas * c.gpus_per_replica
    return UpperCost(step_slowdown=slowdown, evidence=UNMEASURED_EVIDENCE, replicas=replicas, gpus=gpus,
                     dollars_per_hour=cents(gpus * gpu_price(req, load_gpu_catalog().get(c.gpu_type))))


@dataclass(frozen=True)
class Deployment:
    """What the search evaluated for one candidate: the hardware, the engine settings and the memory plan
    (KV capacity) of one replica. Rebuilt from a candidate by `deployment_of`, e.g. to simulate it."""

    hardware: Hardware
    settings: EngineSettings
    memory: MemoryPlan


def deployment_of(req: PlanRequest, candidate: Candidate, factors: FactorSet | None = None,
                  data_parallel: int = 1, release: str | None = None) -> Deployment:
    """The deployment behind `candidate` of `req`, built as the search built it. `data_parallel`: the attention
    ranks that each schedule their own batch of `candidate.max_batch` (vLLM's `--data-parallel-size` with expert
    parallelism, which the search never plans: a running deployment's), as `per_rank_batches` counts them.
    `release`: the engine release a running deployment runs, whose scheduling, sampler profile, factor line and
    CUDA graphs it is predicted with (vLLM 0.6.3: V0's); None: a plan's, the current release line with the CUDA
    graphs of `req.engine_release` (docs/engines.md)."""
    factors = factors or load_factors()
    engine = ENGINES[req.engine]
    gpu = load_gpu_catalog().get(candidate.gpu_type)
    precision = checkpoint_precision(candidate.precision, req.served_model)
    checkpoint = checkpoint_of(req, candidate.precision, gpu)
    kv_bytes = kv_dtype_bytes(candidate.kv_cache_dtype, candidate.precision, req.engine, kv_hint(checkpoint))
    settings = _settings(req, engine, candidate.max_batch, release)
    if data_parallel > 1:
        settings = per_rank_batches(settings, data_parallel)
    engine_factors = factors.engine(factor_key(engine.name, release))
    pp = candidate.pipeline_parallel
    tp = candidate.gpus_per_replica // pp
    memory = plan_memory_for_settings(req.arch, gpu, precision, kv_bytes, engine, [settings], engine_factors,
                                      tp, pp, dp_attention=candidate.data_parallel_attention,
                                      mtp=req.mtp_draft_tokens > 0)[0]
    hardware = build_hardware(req.arch, gpu, precision, kv_bytes, engine,
                              factors.engine_on(engine.name, gpu.key, gpu.vendor, release), tp, pp,
                              release or req.engine_release,
                              settings.step_tokens)
    domain = link_domain_gpus(req, gpu)
    if tp > domain:
        hardware = over_the_network(hardware, np.array(True), req.network_gbps)
    if pp > 1:
        hardware = over_the_pipeline(hardware, req.network_gbps, np.array(tp * pp > domain))
    if candidate.data_parallel_attention:
        hardware = with_dp_attention(hardware, np.array(True), attention_weight_bytes(req.arch, precision),
                                     mla_dp_ratio(req.arch, gpu, engine.name, kv_bytes, tp))
    if candidate.expert_parallel:
        hardware = with_expert_parallel(hardware, np.array(True), req.arch, np.array(domain))
    if req.mtp_draft_tokens:
        hardware = with_mtp(hardware, req.arch, req.mtp_draft_tokens, req.mtp_tokens_per_step)
    return Deployment(hardware, settings, memory)
