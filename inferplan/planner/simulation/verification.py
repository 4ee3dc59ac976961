"""Check a planned deployment with the simulator: serve the plan's workload on the recommended (or any)
candidate's replicas and compare the simulated latency percentiles with the analytic ones."""

from __future__ import annotations

import hashlib
import math
import pickle
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from functools import partial

import numpy as np

from inferplan.planner.catalog.engine_args import ROUTER_REPLICAS
from inferplan.planner.model.disaggregated import transfer_s
from inferplan.planner.model.factors import FactorSet
from inferplan.planner.model.serving import Traffic
from inferplan.planner.quantiles import QUANTILE_NAMES
from inferplan.planner.request import PlanRequest, SloTarget
from inferplan.planner.results import (
    Candidate,
    Infeasible,
    Percentiles,
    PlanResult,
    ShapeOption,
    headroom,
    replica_shape,
    rounded,
)
from inferplan.planner.search.advice import suggestions_for
from inferplan.planner.search.annotate import deployment_of, with_intervals, with_upper_cost
from inferplan.planner.search.core import (
    HIGH_VARIANCE_CV2,
    _replicas,
    candidate_slo_ratios,
    limit_words,
    miss_ms_text,
    ms_text,
    recording,
)
from inferplan.planner.search.plan import plan, with_replicas
from inferplan.planner.search.select import (
    by_cost,
    describe_shape,
    distinct,
    shape_layout_of,
    shape_lines,
    tag_candidates,
    undominated,
)
from inferplan.planner.simulation.simulate import (
    Latency,
    RequestTrace,
    SimulationResult,
    generate_workload,
    latency_stats,
    simulate,
    simulate_disaggregated,
    trace_workload,
)

QUANTILE_FIELDS = tuple((name, f"{name}_s") for name in QUANTILE_NAMES.values())  # result name, Latency field


def plan_workload(req: PlanRequest, requests: int, seed: int, max_model_len: int) -> RequestTrace:
    """`requests` requests of the plan's workload (rate, lognormal lengths, arrival CV^2), deterministic per
    seed. Lengths are cut so that prompt + output fits `max_model_len`, as the engine would enforce."""
    traffic = Traffic(req.prompt_mean, req.output_mean, req.prompt_cv, req.output_cv, req.arrival_cv2)
    generated = generate_workload(req.rate_rps, requests, traffic, seed)
    return fit_to_context(generated, max_model_len)


def fit_to_context(workload: RequestTrace, max_model_len: int) -> RequestTrace:
    prompts = np.minimum(workload.prompt_tokens, max_model_len - 1)
    outputs = np.maximum(np.minimum(workload.output_tokens, max_model_len - prompts), 1)
    return trace_workload(workload.arrival_s, prompts, outputs)


MAX_SIMULATED_REPLICAS = 16
"""A plan's workload spread over more replicas is simulated on this many at the same rate per replica: the
cost of a verification must not grow with the traffic (a huge rate would otherwise mean thousands of replica
objects). Spread over fewer replicas, each replica's share of a bursty stream keeps more of its bursts (a random
split of arrivals of CV^2 c over n replicas leaves each 1 + (c - 1) / n; a Poisson stream stays Poisson): the
check errs on the safe side."""

AGGREGATED_ROUTER = "random"
"""How requests reach aggregated replicas as rendered: a plain Service (a ClusterIP Service, a LeaderWorkerSet's
leaders behind one, KServe's RawDeployment Service) with no router of its own, so kube-proxy picks a replica for each
new connection at random (iptables and nftables modes; IPVS's round robin is per node and per connection, so many
clients over many nodes mix too). A random split of a Poisson stream is Poisson at each replica: nothing smooths it.
Disaggregated pools are routed by the rendered sglang-router (`simulate.simulate_disaggregated`, ROUTER_REPLICAS)."""


def simulated_rate(req: PlanRequest, candidate: Candidate) -> float:
    """The arrival rate [requests/s] `simulate_candidate` serves the plan's workload at: the plan's, scaled down
    with the replicas beyond MAX_SIMULATED_REPLICAS (of the larger pool for a disaggregated candidate)."""
    largest = max((r.replicas for r in candidate.roles), default=candidate.replicas)
    return req.rate_rps * min(1.0, MAX_SIMULATED_REPLICAS / largest)


def simulated_replicas(candidate: Candidate) -> dict[str, int]:
    """The replicas `simulate_candidate` serves the plan's generated workload on (at `simulated_rate`), per pool:
    {"replicas": n} for aggregated replicas, {"prefill": n, "decode": m} for a disaggregated candidate. Where the
    largest pool is above MAX_SIMULATED_REPLICAS, it is simulated on that many and the others by the same factor,
    rounded down (at least 1: each replica serves at least its planned rate, so the check errs on the safe side).
    The scaling is in integers: in floats 49 x (16 / 49) rounds down to 15."""
    counts = {r.role: r.replicas for r in candidate.roles} or {"replicas": candidate.replicas}
    largest = max(counts.values())
    if largest <= MAX_SIMULATED_REPLICAS:
        return counts
    return {role: max(1, n * MAX_SIMULATED_REPLICAS // largest) for role, n in counts.items()}


def scaled_words(req: PlanRequest, candidate: Candidate) -> str:
    """Where `simulate_candidate` serves the plan's generated workload on fewer replicas than `candidate` has (above
    MAX_SIMULATED_REPLICAS), which ones and at what rate, in words ("16 of its 26 replicas at 12.31 requests/s, the
    plan's rate per replica"); "" where it serves them all. Its rates are those replicas', not the deployment's."""
    counts = simulated_replicas(candidate)
    full = {r.role: r.replicas for r in candidate.roles} or {"replicas": candidate.replicas}
    if counts == full:
        return ""
    pools = " and ".join(f"{counts[role]} of its {full[role]}{'' if role == 'replicas' else ' ' + role}"
                         for role in full)
    return f"{pools} replicas at {simulated_rate(req, candidate):.4g} requests/s, the plan's rate per replica"


def steady_state(result: SimulationResult, arrival_s: np.ndarray, warmup_s: float) -> SimulationResult:
    """`result` with its latency statistics over the requests that arrive in steady state only: after the
    first `warmup_s` seconds (the replicas start empty and fill) and before the last `warmup_s` seconds of
    arrivals (once arrivals stop, the batch drains and steps speed up). The per-request arrays stay whole.
    Where the window holds no request, `result` as it is."""
    start, end = float(arrival_s[0]) + warmup_s, float(arrival_s[-1]) - warmup_s
    inside = (arrival_s >= start) & (arrival_s <= end)
    if not inside.any():
        return result
    return replace(result, ttft=latency_stats(result.ttft_s[inside]), tpot=latency_stats(result.tpot_s[inside]),
                   e2e=latency_stats(result.e2e_s[inside]))


def backlog_share(result: SimulationResult, arrival_s: np.ndarray, warmup_s: float) -> float:
    """How far the replicas fell behind the arrivals in `steady_state`'s window: the growth over the window of the
    requests waiting for their first token (arrived, first token not yet out; a least-squares line through
    BACKLOG_POINTS counts, so that one burst at either end does not decide it), as a share of the requests that
    arrived in it. About 0 where the replicas keep up, whatever their latencies; (arrival rate - served rate) /
    arrival rate where they cannot, the queue then growing for as long as the arrivals go on. 0 where the window
    holds fewer than two requests."""
    start, end = float(arrival_s[0]) + warmup_s, float(arrival_s[-1]) - warmup_s
    arrived = int(np.count_nonzero((arrival_s >= start) & (arrival_s <= end)))
    if arrived < 2 or end <= start:
        return 0.0
    grid = np.linspace(start, end, BACKLOG_POINTS)
    waiting = (np.searchsorted(np.sort(arrival_s), grid, side="right")
               - np.searchsorted(np.sort(arrival_s + result.ttft_s), grid, side="right"))
    slope = np.polyfit(grid, waiting, 1)[0]
    return float(slope * (end - start) / arrived)


def simulate_candidate(req: PlanRequest, candidate: Candidate, *, requests: int = 20_000, seed: int = 0,
                       router: str = AGGREGATED_ROUTER, workload: RequestTrace | None = None,
                       factors: FactorSet | None = None, warmup_s: float = 0.0) -> SimulationResult:
    """Simulate `candidate`'s replicas serving the plan's workload (or `workload`, e.g. a replayed trace), routed as
    deployed: aggregated replicas by `router` (default AGGREGATED_ROUTER, a plain Service's), disaggregated pools as
    the rendered sglang-router spreads them (`router` does not apply). Beyond MAX_SIMULATED_REPLICAS replicas, that
    many serve the plan's rate scaled to them (not for a trace). `seed` draws the workload and a random router's
    choices. `warmup_s` > 0: the latency statistics are those of the steady state (`steady_state`)."""
    run, served = _simulation(req, candidate, requests=requests, seed=seed, router=router, workload=workload,
                              factors=factors)
    result = run()
    return steady_state(result, served.arrival_s, warmup_s) if warmup_s > 0 else result


def served_max_len(req: PlanRequest, candidate: Candidate, factors: FactorSet | None = None) -> int:
    """The longest request [tokens, prompt plus output] the simulated deployment serves whole: its max_model_len, the
    decode pool's for a disaggregated candidate (both pools run with the same). `simulate_candidate` fits longer ones
    to it (`fit_to_context`); the engine would refuse them."""
    if candidate.roles:
        decode = next(r for r in candidate.roles if r.role == "decode")
        candidate = candidate.model_copy(update={
            "gpu_type": decode.gpu_type, "gpus_per_replica": decode.gpus_per_replica, "max_batch": decode.max_batch,
            "replicas": decode.replicas, "data_parallel_attention": decode.data_parallel_attention,
            "expert_parallel": decode.expert_parallel})
    return deployment_of(req, candidate, factors).settings.max_model_len


Simulation = partial[SimulationResult]
"""A simulator call with its arguments, not yet run."""


def _simulation(req: PlanRequest, candidate: Candidate, *, requests: int, seed: int, router: str,
                workload: RequestTrace | None, factors: FactorSet | None) -> tuple[Simulation, RequestTrace]:
    """`simulate_candidate`'s run (not yet run) and the requests it serves."""
    if candidate.roles:
        return _simulate_disaggregated(req, candidate, requests=requests, seed=seed, workload=workload,
                                       factors=factors)
    deployment = deployment_of(req, candidate, factors)
    max_len = deployment.settings.max_model_len
    replicas = candidate.replicas
    if workload is None:
        req = replace(req, rate_rps=simulated_rate(req, candidate))
        replicas = simulated_replicas(candidate)["replicas"]
    served = plan_workload(req, requests, seed, max_len) if workload is None else fit_to_context(workload, max_len)
    # A replica of pp pipeline stages serves as pp engines of its stages' steps, each with 1/pp of its batch cap
    # and KV pool (one batch in flight per stage; the engine's pool is shared, so one stream's share is at least a
    # whole sequence), its stages taking the requests the router sends it in turn.
    pp = candidate.pipeline_parallel
    kv_tokens = max(deployment.memory.kv_cache_tokens // pp, max_len + 1)
    # No queue and KV series (series_points=0): nothing here reads them, and sampling them was about 6% of a run.
    return partial(simulate, deployment.hardware, served, replicas=replicas * pp, series_points=0,
                   max_batch=max(candidate.max_batch // pp, 1), kv_tokens=kv_tokens,
                   chunk_tokens=deployment.settings.step_tokens, router=router,
                   policy=deployment.settings.scheduling, prefix_hit_rate=req.prefix_hit_rate, route_seed=seed,
                   stages=1 if router == "least_outstanding" else pp), served


def _simulate_disaggregated(req: PlanRequest, candidate: Candidate, *, requests: int, seed: int,
                            workload: RequestTrace | None, factors: FactorSet | None
                            ) -> tuple[Simulation, RequestTrace]:
    """`simulate_candidate` of a disaggregated candidate: its prefill and decode pools
    (`simulate.simulate_disaggregated`), each pool at most MAX_SIMULATED_REPLICAS replicas (`simulated_replicas`)."""
    pools = {r.role: r for r in candidate.roles}
    built = {role: deployment_of(req, candidate.model_copy(update={
        "gpu_type": r.gpu_type, "gpus_per_replica": r.gpus_per_replica, "max_batch": r.max_batch,
        "replicas": r.replicas, "data_parallel_attention": r.data_parallel_attention,
        "expert_parallel": r.expert_parallel}), factors) for role, r in pools.items()}
    prefill, decode = built["prefill"], built["decode"]
    max_len = decode.settings.max_model_len
    counts = {role: r.replicas for role, r in pools.items()}
    if workload is None:
        req = replace(req, rate_rps=simulated_rate(req, candidate))
        counts = simulated_replicas(candidate)
    served = plan_workload(req, requests, seed, max_len) if workload is None else fit_to_context(workload, max_len)
    transfer = transfer_s(prefill.hardware, pools["decode"].gpus_per_replica, served.prompt_tokens,
                          req.network_gbps)
    return partial(
        simulate_disaggregated, prefill.hardware, decode.hardware, served, transfer, prefill_replicas=counts["prefill"],
        decode_replicas=counts["decode"], prefill_max_batch=pools["prefill"].max_batch,
        decode_max_batch=pools["decode"].max_batch, prefill_kv_tokens=prefill.memory.kv_cache_tokens,
        decode_kv_tokens=decode.memory.kv_cache_tokens, chunk_tokens=prefill.settings.step_tokens,
        policy=decode.settings.scheduling, prefix_hit_rate=req.prefix_hit_rate, routers=ROUTER_REPLICAS,
        route_seed=seed), served


@dataclass(frozen=True)
class Comparison:
    metric: str        # ttft | tpot | e2e
    quantile: str      # p50 | p90 | p95 | p99
    analytic_ms: float
    simulated_ms: float

    @property
    def ratio(self) -> float:
        """simulated / analytic (above 1: the analytic model was optimistic)."""
        return self.simulated_ms / self.analytic_ms if self.analytic_ms else float("nan")


def compare(candidate: Candidate, result: SimulationResult) -> list[Comparison]:
    """Analytic versus simulated percentiles of TTFT, TPOT and end-to-end latency; no TPOT rows where either has
    no TPOT (no request with a second token: `Predicted.tpot_ms` None, the simulation's statistics NaN)."""
    rows = []
    for metric, analytic, simulated in (("ttft", candidate.predicted.ttft_ms, result.ttft),
                                        ("tpot", candidate.predicted.tpot_ms, result.tpot),
                                        ("e2e", candidate.predicted.e2e_ms, result.e2e)):
        if analytic is None or _simulated(simulated) is None:
            continue
        for name, field in QUANTILE_FIELDS:
            rows.append(Comparison(metric, name, float(getattr(analytic, name)),
                                   float(getattr(simulated, field)) * 1e3))
    return rows


VERIFY_REQUESTS = 5_000  # per candidate, in steady state: enough for a stable p99 at a few hundred ms per candidate
# A pass this close to a target (a share of it) is confirmed on CONFIRM_REQUESTS in steady state (what
# `inferplan simulate` serves in all): a p95 of 5,000 requests is a little noisy where outputs are long, and under
# bursty arrivals a longer run meets more bursts (moe-qwen3-30b-a3b's 2 x H100: TPOT p95 38.0 ms on 5,000, 40.2 ms
# on 20,000 against 40 ms; the margin was 3% until then).
EDGE = 0.06
CONFIRM_REQUESTS = 20_000
# A judged run that preempted filled a replica's KV pool: from there a replica's queue hangs on how many long
# prompts meet in it, and one run's tail swings widely however far it passes. Such a pass is confirmed on
# CONFIRM_SEEDS runs of CONFIRM_REQUESTS in steady state (seeds seed, seed + 1, ...) and the worst of them is judged
# (`_worst`). llama-4-scout-h100's 3 x 2 H100 passed 5,666 requests (31 preemptions, every pool full) at a TTFT p95
# of 1,630 ms against 3,000 ms; on 20,000 in steady state seeds 0-7 gave 2,682 / 2,703 / 6,192 / 1,683 / 1,840 /
# 2,649 / 3,788 / 1,608 ms (`inferplan simulate` of 60,000, seed 0: 3,019 ms). Three seeds: the worst of three
# misses where a quarter of the runs do in 58% of draws (1 - 0.75^3), and a run that does not preempt costs nothing
# more (of the 25 examples' verifications only that one's passing run preempted).
CONFIRM_SEEDS = 3
# Replicas start empty: the running batch, and with it the step time, grows for about one request lifetime, and
# shrinks again once arrivals stop. Verification serves WARMUP_LIFETIMES x the candidate's analytic e2e p95 of
# arrivals before and after the requests it judges (`steady_state`), at most MAX_VERIFY_REQUESTS requests in all.
# Without it, a plan with 2,000-token outputs (Qwen3-32B on SGLang at 20 requests/s, examples/platform/) was
# verified at TPOT p95 26.8 ms on 5,000 requests that never reached the planned output rate; served long
# enough, its recommendation ran at 37 ms against a 30 ms target.
WARMUP_LIFETIMES = 1.0
# The running batch of long requests changes slowly: over one lifetime its percentiles move by several percent
# (the same plan's TPOT p95 over ten consecutive 360-second spans of 40,000 requests: 29.2-32.0 ms). The
# requests judged therefore span at least JUDGED_LIFETIMES x the warm-up, whatever their count.
JUDGED_LIFETIMES = 10.0
MAX_VERIFY_REQUESTS = 60_000
# A verified deployment must keep up with its arrivals, whatever its SLOs: served for a finite run, replicas that fall
# behind meet a lax TTFT target (or none) while their queue grows, which in service it does without end. A run whose
# waiting requests grew by more than MAX_BACKLOG of the requests it judged (`backlog_share`) misses. Fuzzed plans
# with a TPOT target only or a 60 s TTFT target (110 of them, 5,000 requests judged): a recommended 16 x 2 B200 of
# Mixtral-8x22B on TensorRT-LLM at 100 requests/s (1,000-token outputs) fell behind by 3.9% (TTFT p90 20 s on
# 5,000 requests, its queue growing 4 requests a second) and passed; every other one within 0.1% of 0.
MAX_BACKLOG = 0.01
BACKLOG_POINTS = 256
MAX_REPLICA_STEPS = 3    # a candidate missing an SLO in simulation is tried with up to this many more replica steps
# A verified candidate's capacity (maxRequestsPerSecondPerReplica, what its headroom and the rendered autoscaler's
# per-replica target read) is the analytic one only where the simulator holds every SLO there too; else the rate
# between the planned one (which held) and it is bisected this many times: to 1/16 of the gap, about 1% of the
# capacity for the examples. The analytic capacity ran ahead of the simulator by up to 20%: the autoscaler of
# rag-70b-long-prompt (3 x 2 MI300X) targeted 1.55 requests/s per replica, where its simulated TPOT p95 was 68 ms
# against 60 ms, so it let latency break before it scaled out.
CAPACITY_STEPS = 4


@dataclass(frozen=True)
class _Judged:
    """What verification judges of a run (`_judged`): its latency statistics in steady state and its preemptions."""

    ttft: Latency
    tpot: Latency
    e2e: Latency
    preemptions: int
    backlog: float  # `backlog_share` of the steady state


_JUDGED: ContextVar[dict[bytes, _Judged] | None] = ContextVar("inferplan_judged_runs", default=None)
"""The runs the planning under way has judged (`remembering_runs`), by their inputs."""


@contextmanager
def remembering_runs() -> Iterator[None]:
    """Within it, `_judged` gives a run with the same inputs as an earlier one that one's figures without running it
    again: a plan's suggestions verify again candidates that another change or SLO target simulated already (the same
    deployment and workload, judged against other targets), and each capacity bisection of a candidate starts at the
    same rate. The simulator is deterministic, so they are the figures a new run gives. An outer one's runs are
    shared; they go when the outermost ends."""
    if _JUDGED.get() is not None:
        yield
        return
    token = _JUDGED.set({})
    try:
        yield
    finally:
        _JUDGED.reset(token)


def _judged(req: PlanRequest, candidate: Candidate, requests: int, seed: int, factors: FactorSet | None) -> _Judged:
    """`simulate_candidate` of `requests` generated requests in steady state (`warmup_s`), as verification judges it;
    within `remembering_runs`, once per distinct simulator call (by a digest of its arguments' pickle: arrays by
    their bytes)."""
    run, served = _simulation(req, candidate, requests=requests, seed=seed, router=AGGREGATED_ROUTER, workload=None,
                              factors=factors)
    warm = warmup_s(candidate)
    runs = _JUDGED.get()
    key = b""
    if runs is not None:
        key = hashlib.sha256(pickle.dumps((run.func.__qualname__, run.args, run.keywords, warm), protocol=5)).digest()
        if key in runs:
            return runs[key]
    result = run()
    backlog = backlog_share(result, served.arrival_s, warm)
    if warm > 0:
        result = steady_state(result, served.arrival_s, warm)
    judged = _Judged(result.ttft, result.tpot, result.e2e, result.preemptions, backlog)
    if runs is not None:
        runs[key] = judged
    return judged


def should_verify(req: PlanRequest, default: bool = True) -> bool:
    """Whether to verify `req`'s candidates in the simulator: the plan's `verify` when set; otherwise yes
    for traffic whose arrival (or service) CV^2 is at least HIGH_VARIANCE_CV2, where the analytic TTFT tail
    is known to be optimistic (bench/report_tails.py: up to 3x at p99 for CV^2 4 at 0.9 utilisation, 5-8x
    for CV^2 8 from 0.8), and `default` (the caller's setting: on unless turned off) otherwise."""
    if req.verify is not None:
        return req.verify
    variable = req.arrival_cv2 >= HIGH_VARIANCE_CV2 or (req.service_cv2 or 0.0) >= HIGH_VARIANCE_CV2
    return default or variable


def _values(req: PlanRequest, sim: _Judged, ratios: Sequence[float]) -> list[tuple[SloTarget, float, float]]:
    """Each SLO with `sim`'s value at its percentile [s] and the most it may be at the plan's confidence [s] (the
    target over the candidate's bound ratio, `candidate_slo_ratios`)."""
    stats = {"ttft": sim.ttft, "tpot": sim.tpot, "e2e": sim.e2e}
    return [(slo, float(getattr(stats[slo.metric], f"p{round(slo.quantile * 100)}_s")), slo.max_s / ratio)
            for slo, ratio in zip(req.slos, ratios, strict=True)]


Miss = tuple[SloTarget | None, float, float]
"""What a simulated run misses: an SLO at the plan's confidence, (SLO, simulated value, its limit) [s]; or, with
None for the SLO, the arrivals: (None, the run's `backlog_share`, MAX_BACKLOG)."""


def _misses(req: PlanRequest, sim: _Judged, ratios: Sequence[float]) -> list[Miss]:
    """What `sim` misses: the SLOs at the plan's confidence (NaN counts as a miss), then the arrivals where its
    replicas fell behind them by more than MAX_BACKLOG."""
    misses: list[Miss] = [(slo, value, limit) for slo, value, limit in _values(req, sim, ratios)
                          if not value <= limit]
    if sim.backlog > MAX_BACKLOG:
        misses.append((None, sim.backlog, MAX_BACKLOG))
    return misses


def _missed_words(req: PlanRequest, miss: Miss, target: str = "") -> tuple[str, str]:
    """A miss in words: what was missed ("TTFT p95", "the arrival rate") and by how much ("2130 ms > 2000 ms" and
    `target`, as `_miss_words`; "the queue grew by 3.9% of the requests that arrived, more than 1%: ...")."""
    slo, value, limit = miss
    if slo is None:
        return "the arrival rate", (f"the queue grew by {value:.1%} of the requests that arrived, more than "
                                    f"{limit:.0%}: the replicas fall behind")
    return f"{slo.metric.upper()} p{round(slo.quantile * 100)}", _miss_words(req, slo, value, limit, target)


def _on_the_edge(req: PlanRequest, sim: _Judged, ratios: Sequence[float]) -> bool:
    """Whether `sim` meets every SLO but one within EDGE of its limit."""
    return any(value > (1.0 - EDGE) * limit for _, value, limit in _values(req, sim, ratios))


def _miss_words(req: PlanRequest, slo: SloTarget, value: float, limit: float, target: str = "") -> str:
    """'{value} ms > {target} ms{target}', or with a plan confidence what the target allows there (`limit_words`)."""
    shown = miss_ms_text(req, slo, value, limit, f"{value * 1e3:.0f}")
    if req.confidence is None:
        return f"{shown} ms > {ms_text(slo.max_s)} ms{target}"
    return f"{shown} ms > {limit_words(req, slo, limit)}"


def warmup_s(candidate: Candidate) -> float:
    """How long verification lets `candidate`'s replicas fill before (and drain after) the requests it judges [s]."""
    return WARMUP_LIFETIMES * candidate.predicted.e2e_ms.p95 / 1e3


def steady_requests(req: PlanRequest, candidate: Candidate, judged: int) -> int:
    """Requests to simulate so that about `judged` of them, and at least JUDGED_LIFETIMES warm-ups' worth, arrive in
    steady state (at most MAX_VERIFY_REQUESTS in all)."""
    rate, warm = simulated_rate(req, candidate), warmup_s(candidate)
    judged = max(judged, math.ceil(JUDGED_LIFETIMES * warm * rate))
    return min(judged + math.ceil(2 * warm * rate), MAX_VERIFY_REQUESTS)


def _worst(req: PlanRequest, sims: Sequence[_Judged], ratios: Sequence[float]) -> _Judged:
    """The run of `sims` nearest to (or furthest over) an SLO limit: the largest share of its limit any SLO takes
    (NaN counts as over every limit)."""
    def share(sim: _Judged) -> float:
        if sim.backlog > MAX_BACKLOG:
            return math.inf
        return max(math.inf if math.isnan(value) else value / limit for _, value, limit in _values(req, sim, ratios))
    return max(sims, key=share)


def _simulate_verdict(req: PlanRequest, candidate: Candidate, judged: int, seed: int, factors: FactorSet | None
                      ) -> tuple[_Judged, list[Miss], str]:
    """`candidate` simulated with `judged` requests in steady state: where that run passes but preempted, the worst
    of CONFIRM_SEEDS runs of CONFIRM_REQUESTS; where it passes on the edge, one run of CONFIRM_REQUESTS. The
    simulation (its statistics of the steady state), what it misses (`_misses`) and the requests it served, in
    words."""
    def run(judged: int, seed: int) -> tuple[_Judged, int]:
        requests = steady_requests(req, candidate, judged)
        return _judged(req, candidate, requests, seed, factors), requests
    ratios = candidate_slo_ratios(req, candidate)
    sim, requests = run(judged, seed)
    misses = _misses(req, sim, ratios)
    if not misses and sim.preemptions > 0:
        runs = [run(max(judged, CONFIRM_REQUESTS), seed + k)[0] for k in range(CONFIRM_SEEDS)]
        sim, requests = _worst(req, runs, ratios), steady_requests(req, candidate, max(judged, CONFIRM_REQUESTS))
        return sim, _misses(req, sim, ratios), (f"the worst of {CONFIRM_SEEDS} runs of {requests} simulated requests"
                                                 " each, as the first run preempted")
    if not misses and judged < CONFIRM_REQUESTS and _on_the_edge(req, sim, ratios):
        sim, requests = run(CONFIRM_REQUESTS, seed)
        misses = _misses(req, sim, ratios)
    return sim, misses, f"{requests} simulated requests"


def _holds(req: PlanRequest, candidate: Candidate, rate: float, judged: int, seed: int,
           factors: FactorSet | None) -> bool:
    """Whether `candidate` holds every SLO at the plan's confidence serving `rate` [requests/s, the deployment's] in
    one run of `judged` requests in steady state, without preempting. One run, not `_simulate_verdict`'s
    confirmations: a capacity bisection walks to the edge, where every step would be confirmed on 20,000 requests
    (three runs where the pool filled). A run that preempted counts as a miss: a KV pool that fills at the target is
    not a rate the autoscaler should wait for."""
    loaded = replace(req, rate_rps=rate)
    sim = _judged(loaded, candidate, steady_requests(loaded, candidate, judged), seed, factors)
    return sim.preemptions == 0 and not _misses(loaded, sim, candidate_slo_ratios(req, candidate))


def keeps_min_headroom(req: PlanRequest, candidate: Candidate, judged: int, seed: int,
                       factors: FactorSet | None = None) -> bool:
    """Whether `simulated_capacity` leaves the plan's minHeadroom of it unused at the plan's rate (the replicas need
    none added), asked with one run instead of the bisection: at the lowest of the bisection's points at or above
    the rate that leaves it (the plan's rate / (1 - minHeadroom)). The simulator's verdict falls as the rate rises,
    so the bisection ends at or above that point where, and only where, the replicas hold every SLO there (`_holds`);
    at the planned rate (a minHeadroom of 0) they do without a run, as the bisection takes it."""
    low, top, replicas = _capacity_bracket(req, candidate)
    needed = req.rate_rps / (1.0 - req.min_headroom) / replicas
    if needed <= low:
        return True
    if needed > top:
        return False
    for _ in range(CAPACITY_STEPS):
        middle = (low + top) / 2
        low, top = (low, middle) if middle >= needed else (middle, top)
    return _holds(req, candidate, top * replicas, judged, seed, factors)


def _capacity_bracket(req: PlanRequest, candidate: Candidate) -> tuple[float, float, int]:
    """`simulated_capacity`'s bisection bracket: the lowest rate (the planned one, which `candidate` held) and the
    highest (its analytic capacity), per replica for aggregated replicas, and the replicas that serve one rate:
    for a disaggregated candidate the whole deployment's rates, and 1."""
    if candidate.roles:
        return req.rate_rps, candidate.max_requests_per_second(), 1
    p = candidate.predicted
    return p.requests_per_second_per_replica, p.max_requests_per_second_per_replica, candidate.replicas


def simulated_capacity(req: PlanRequest, candidate: Candidate, judged: int, seed: int,
                       factors: FactorSet | None = None) -> float:
    """The highest rate per replica [requests/s] at which `candidate`'s replicas hold every SLO in simulation (one run
    of `judged` requests at the plan's confidence, without preempting), at most its analytic capacity
    (`maxRequestsPerSecondPerReplica`): that one where it holds, else found by bisection (CAPACITY_STEPS) between the
    planned rate per replica, which `candidate` held, and it. For a disaggregated candidate the same of the whole
    deployment [requests/s], both pools loaded together: between the plan's rate and the lower pool's replicas x
    capacity (`Candidate.max_requests_per_second`)."""
    low, top, replicas = _capacity_bracket(req, candidate)

    def holds(rate: float) -> bool:
        return _holds(req, candidate, rate * replicas, judged, seed, factors)

    if top <= low or holds(top):
        return top
    for _ in range(CAPACITY_STEPS):
        middle = (low + top) / 2
        low, top = (middle, top) if holds(middle) else (low, middle)
    return low


def with_capacity(req: PlanRequest, candidate: Candidate, capacity: float) -> Candidate:
    """`candidate` whose capacity per replica is `capacity` [requests/s] (its headroom with it). For a disaggregated
    candidate `capacity` is the deployment's (`simulated_capacity`): each pool's capacity per replica is at most that
    over its replicas, so the lower pool's replicas x capacity is `capacity`; its own capacity is the decode pool's."""
    if not candidate.roles:
        return candidate.model_copy(update={
            "predicted": candidate.predicted.model_copy(update={
                "max_requests_per_second_per_replica": rounded(capacity)}),
            "headroom": rounded(max(0.0, headroom(req.rate_rps, candidate.replicas * capacity)))})
    roles = [r.model_copy(update={"max_requests_per_second_per_replica": rounded(
        min(r.max_requests_per_second_per_replica, capacity / r.replicas))}) for r in candidate.roles]
    decode = next(r for r in roles if r.role == "decode")
    pair = candidate.model_copy(update={"roles": roles, "predicted": candidate.predicted.model_copy(update={
        "max_requests_per_second_per_replica": decode.max_requests_per_second_per_replica})})
    return pair.model_copy(update={"headroom": rounded(max(0.0, headroom(req.rate_rps,
                                                                        pair.max_requests_per_second())))})


def _simulated(latency: Latency) -> Percentiles | None:
    """`latency`'s percentiles [ms]; None where it has none (`latency_stats` of no finite value: NaN), as the TPOT
    of a run in which no request generated a second token."""
    if any(math.isnan(getattr(latency, field)) for _, field in QUANTILE_FIELDS):
        return None
    return Percentiles(**{name: rounded(getattr(latency, field) * 1e3) for name, field in QUANTILE_FIELDS})


def verify_plan(req: PlanRequest, result: PlanResult, *, requests: int = VERIFY_REQUESTS, seed: int = 0,
                factors: FactorSet | None = None, capacities: bool = True) -> PlanResult:
    """Find the cheapest shown candidate that meets every SLO in the simulator and recommend it.

    The candidates are simulated cheapest first. One that misses an SLO is tried again with more replicas (up
    to MAX_REPLICA_STEPS steps of about 10%, within the plan's limits); one that still misses moves to
    `infeasible` (gate "verify"); one that passes gets its simulated percentiles (provenance "simulated").
    Simulation stops once no candidate left costs less than one that passed (the budget: usually one or two
    simulations), so the alternatives after that keep their analytic figures and provenance. A pass whose run
    preempted is confirmed on CONFIRM_SEEDS runs of CONFIRM_REQUESTS, judged by the worst (whose percentiles it then
    carries); another within EDGE of a target on one run of CONFIRM_REQUESTS. The cheapest that passed (ties by
    headroom) is the recommendation.

    Each that passes gets its simulated capacity (`simulated_capacity`) and, where that leaves less than the plan's
    minHeadroom, more replicas. With `capacities` False (what a suggestion asks: does the changed plan give a
    deployment that meets every SLO, and which) a candidate whose replicas hold every SLO at the rate that leaves
    minHeadroom (`keeps_min_headroom`, one run) keeps its analytic capacity and headroom: only one that does not
    is bisected as above."""
    kept: list[Candidate] = []
    analytic: list[Candidate] = []
    dropped: list[Infeasible] = []
    missed: dict[str, str] = {}  # a shown candidate's words -> what it missed in simulation as shown
    shown = [c for c in [result.recommendation, *result.alternatives] if c is not None]
    for first in sorted(shown, key=by_cost):
        if kept and first.cost.dollars_per_hour >= min(c.cost.dollars_per_hour for c in kept):
            analytic.append(first)
            continue
        candidate: Candidate | None = first
        first_misses: list[Miss] | None = None
        for _ in range(MAX_REPLICA_STEPS + 1):
            assert candidate is not None
            sim, misses, served = _simulate_verdict(req, candidate, requests, seed, factors)
            if first_misses is None:
                first_misses = misses
                if misses:
                    what, words = _missed_words(req, misses[0])
                    missed[describe_shape(first)] = (f"verify: {describe_shape(first)} misses {what} in simulation "
                                                     f"({words})")
            if not misses:
                break
            more = with_replicas(req, candidate, candidate.replicas + max(1, math.ceil(candidate.replicas / 10)))
            if more is None:
                break
            candidate = more
        assert candidate is not None
        capacity_words = ""
        if not misses:
            point = (candidate.max_requests_per_second() if candidate.roles
                     else candidate.predicted.max_requests_per_second_per_replica)
            capacity = (point if not capacities and keeps_min_headroom(req, candidate, requests, seed, factors)
                        else simulated_capacity(req, candidate, requests, seed, factors))
            if capacity < point:
                candidate = with_capacity(req, candidate, capacity)
                unit = "requests/s" if candidate.roles else "requests/s per replica"
                capacity_words = (f"the simulator holds every SLO up to {rounded(capacity):g} {unit}, not the "
                                  f"analytic {rounded(point):g}")
                needed = 0 if candidate.roles else int(_replicas(req, np.array([capacity]))[0])
                if candidate.roles and candidate.headroom < req.min_headroom:
                    # A pair's pools are sized by its own search, not scaled here (`with_replicas`).
                    dropped.append(_dropped(candidate, f"{capacity_words}: below the plan's minHeadroom "
                                                       f"{req.min_headroom:.0%} at {req.rate_rps:g} requests/s"))
                    continue
                if needed > candidate.replicas:
                    more = with_replicas(req, candidate, needed)
                    if more is None:
                        dropped.append(_dropped(candidate, f"{capacity_words}: {needed} replicas keep the plan's "
                                                           f"minHeadroom {req.min_headroom:.0%}, more than its "
                                                           "limits allow"))
                        continue
                    capacity_words = (f"{needed} replicas, not {candidate.replicas}, keep the plan's minHeadroom "
                                      f"{req.min_headroom:.0%}: {capacity_words}")
                    candidate = more
                    sim, misses, served = _simulate_verdict(req, candidate, requests, seed, factors)
        if misses:
            what, words = _missed_words(req, misses[0], " target")
            shape = replica_shape(candidate.replicas, candidate.gpus_per_replica, candidate.gpu_type)
            dropped.append(_dropped(candidate, f"simulated, {shape} misses {what}: {words} ({served})"
                                    if misses[0][0] is None else f"simulated {what} of {shape} is {words} ({served})"))
            continue
        predicted = candidate.predicted.model_copy(update={
            "ttft_ms": _simulated(sim.ttft), "tpot_ms": _simulated(sim.tpot), "e2e_ms": _simulated(sim.e2e)})
        warnings = list(candidate.warnings)
        if first_misses:
            what, words = _missed_words(req, first_misses[0])
            at = (f"they miss {what} in simulation ({words})" if first_misses[0][0] is None
                  else f"the simulated {what} is {words}")
            warnings.append(f"{candidate.replicas} replicas, not the {first.replicas} the analytic model gives: at "
                            f"{first.replicas} {at}")
        if capacity_words:
            warnings.append(capacity_words)
        kept.append(candidate.model_copy(update={
            "predicted": predicted, "provenance": candidate.provenance | {"predicted": "simulated"},
            "warnings": warnings[:16]}))
    kept = sorted(kept, key=by_cost)  # the recommendation is the cheapest verified one
    # An alternative left unsimulated is shown with its analytic numbers, which the search (unconfirmed: the
    # simulator is the arbiter) may have put just over a target: shown, it must meet each by them.
    analytic = [c for c in analytic if meets_its_numbers(req, c)]
    # Each shows other numbers than the search compared (simulated, or at more replicas): one another shown one now
    # beats on every column is off the frontier. The recommendation stays: only an unverified one could beat it.
    ordered = kept[:1] + sorted(kept[1:] + analytic, key=by_cost)
    front = ordered[:1] + [c for c in undominated(req, ordered) if c is not ordered[0]]
    kept = tag_candidates(req, distinct(req, front))
    warnings = list(result.warnings)
    if not kept and dropped:
        warnings.append("no shown candidate meets every SLO in simulation; see infeasible (gate verify)")
    rec = kept[0] if kept else None
    options = [_option_verified(option, kept, missed) for option in result.shape_options]
    return with_intervals(req, with_upper_cost(req, result.model_copy(update={
        "recommendation": rec, "alternatives": kept[1:], "infeasible": [*dropped, *result.infeasible][:20],
        "warnings": warnings, "shapes": shape_lines(options, rec) if options else result.shapes,
        "shape_options": options})))


def _dropped(candidate: Candidate, reason: str) -> Infeasible:
    """`candidate` as an infeasible row of the verify gate, for `reason`."""
    return Infeasible(gpu_type=candidate.gpu_type, gpus_per_replica=candidate.gpus_per_replica,
                      precision=candidate.precision, kv_cache_dtype=candidate.kv_cache_dtype,
                      max_batch=candidate.max_batch, pipeline_parallel=candidate.pipeline_parallel,
                      data_parallel_attention=candidate.data_parallel_attention,
                      expert_parallel=candidate.expert_parallel, gate="verify", reason=reason)


def meets_its_numbers(req: PlanRequest, candidate: Candidate) -> bool:
    """Whether `candidate`'s shown percentiles meet each SLO of `req` within its limit at the plan's confidence
    (the target over the candidate's bound ratio, `candidate_slo_ratios`; the target itself without one)."""
    p = candidate.predicted
    stats = {"ttft": p.ttft_ms, "tpot": p.tpot_ms, "e2e": p.e2e_ms}
    for slo, ratio in zip(req.slos, candidate_slo_ratios(req, candidate), strict=True):
        shown = stats[slo.metric]
        if shown is not None and getattr(shown, QUANTILE_NAMES[slo.quantile]) > slo.max_s * 1e3 / ratio:
            return False
    return True


def _option_verified(option: ShapeOption, kept: list[Candidate], missed: dict[str, str]) -> ShapeOption:
    """A shape's option after verification: the cheapest of the candidates still shown of its shape (verified,
    or left analytic after the simulation budget) and of the search's own option unless that one missed in
    simulation, first in the recommendation's order (`select.by_cost`: cost as shown, headroom, fewer GPUs) except
    that the recommendation comes first of its cost, as the search names it for its shape (`_compare_shapes`);
    where none is left, the miss."""
    def key(c: Candidate) -> tuple[float, bool, float, int]:
        cost, spare, gpus = by_cost(c)
        return cost, c is not kept[0], spare, gpus

    choices = [(key(c), {"cost": c.cost.dollars_per_hour, "words": describe_shape(c), "headroom": c.headroom,
                         "gpus": c.gpus}) for c in kept if shape_layout_of(c) == option.layout]
    if option.cost is not None and option.words is not None and option.words not in missed:
        choices.append(((rounded(option.cost), True, -option.headroom, option.gpus), {}))
    if choices:  # of equal keys the first: a shown one before the search's own
        _, chosen = min(choices, key=lambda choice: choice[0])
        return option.model_copy(update={**chosen, "miss": None})
    if option.words in missed:
        return option.model_copy(update={"cost": None, "words": None, "miss": missed[option.words]})
    return option


def planned(req: PlanRequest, factors: FactorSet | None = None, *, verify_default: bool = True) -> PlanResult:
    """The plan's answer as `inferplan plan` and the operator give it: the candidates verified in the simulator
    when `should_verify(req, verify_default)` says so (the search then leaves the rows it shows to the
    simulator), else the analytic answer, whose rows shown each meet every SLO by their own numbers. Without a
    recommendation, the suggestions are each judged the same way (`search.suggestions_for`), each deployment with the
    replicas that keep minHeadroom in simulation but without its capacity bisected (`verify_plan(capacities=False)`)."""
    # The count bounds of all of it (the search, the replicas added, the suggestions), and its runs judged once each.
    with recording() as counted, remembering_runs():
        if should_verify(req, verify_default):
            def answer(changed: PlanRequest, capacities: bool = False) -> PlanResult:
                # A suggestion's deployment keeps minHeadroom in simulation; only the plan's own answer shows (and
                # renders) the simulated capacity of each it verified.
                return verify_plan(changed, plan(changed, factors, suggest=False, confirm=False), factors=factors,
                                   capacities=capacities)

            result = answer(req, capacities=True)
            if result.recommendation is None:  # also where the simulator dropped every candidate the search found
                result = result.model_copy(update={"suggestions": suggestions_for(req, answer, factors)})
        else:
            result = plan(req, factors)
    return result.model_copy(update={"count_bounds": counted.bounds()})


__all__ = [
    "AGGREGATED_ROUTER",
    "Comparison",
    "Percentiles",
    "compare",
    "fit_to_context",
    "meets_its_numbers",
    "plan_workload",
    "planned",
    "scaled_words",
    "should_verify",
    "simulate_candidate",
    "simulated_rate",
    "simulated_replicas",
    "steady_requests",
    "steady_state",
    "verify_plan",
    "warmup_s",
]
