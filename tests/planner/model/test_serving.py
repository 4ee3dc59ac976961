"""Latency under load in closed form: single stream, static batch and Poisson arrivals (bursts and closed
loops are simulated: tests/planner/simulation/test_simulate.py), and the vectorised Poisson model the search uses."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferplan.planner.catalog.engine_args import ROUTER_REPLICAS
from inferplan.planner.catalog.engines import ENGINES
from inferplan.planner.catalog.gpus import resolve_gpu
from inferplan.planner.catalog.model_configs import resolve_model
from inferplan.planner.catalog.precisions import weight_precision
from inferplan.planner.model.disaggregated import prefill_pool
from inferplan.planner.model.factors import load_factors
from inferplan.planner.model.performance import build_hardware, prefill_s, stack_hardware
from inferplan.planner.model.serving import (
    Traffic,
    lognormal_sample,
    normal_ppf,
    poisson,
    poisson_capacity,
    poisson_model,
    pool_arrival_cv2,
    replica_arrival_cv2,
    sample_quantiles,
    single_stream,
    static_batch,
)
from inferplan.planner.quantiles import QUANTILES
from inferplan.planner.request import BURSTINESS_ARRIVAL_CV2
from inferplan.planner.simulation.simulate import arrival_times, generate_workload, routed, simulate
from inferplan.planner.simulation.verification import AGGREGATED_ROUTER
from tests.support.hardware import hardware, measured_hardware

# Round rates (hand-checkable) and the rates the kernel tables give (with their overlap of memory and compute).
BOTH = pytest.mark.parametrize("hw", [hardware(), measured_hardware()], ids=["round", "measured"])


def test_normal_ppf_matches_known_quantiles() -> None:
    assert normal_ppf([0.5, 0.975, 0.99, 0.01]) == pytest.approx([0.0, 1.959964, 2.326348, -2.326348], abs=1e-6)


def test_lognormal_sample_keeps_mean_and_cap() -> None:
    u = (np.arange(1000) + 0.5) / 1000
    x = lognormal_sample(200.0, 1.0, u)
    assert x.mean() == pytest.approx(200.0, rel=0.02)
    assert np.std(x) / x.mean() == pytest.approx(1.0, rel=0.15)
    capped = lognormal_sample(200.0, 1.0, u, cap=1024.0)
    assert capped.max() <= 1024.0
    assert capped.mean() == pytest.approx(200.0, rel=0.01)
    assert lognormal_sample(200.0, 0.0, u) == pytest.approx(np.full(1000, 200.0))


@BOTH
def test_batch_one_tpot_equals_single_stream(hw) -> None:
    alone = single_stream(hw, 512, 256)
    batch1 = static_batch(hw, 1, 512, 256)
    assert batch1.tpot_mean == pytest.approx(alone.tpot_mean)
    assert batch1.e2e_mean == pytest.approx(alone.e2e_mean)


@BOTH
def test_static_batch_trades_latency_for_throughput(hw) -> None:
    small, large = static_batch(hw, 1, 128, 128), static_batch(hw, 64, 128, 128)
    assert large.tpot_mean > small.tpot_mean
    assert large.output_tokens_per_s > 10 * small.output_tokens_per_s


@BOTH
def test_poisson_at_low_rate_is_single_stream_plus_little_wait(hw) -> None:
    light = poisson(hw, 0.01, Traffic(512, 256), slots=256, chunk_tokens=2048.0)
    alone = single_stream(hw, 512, 256)
    assert float(light.ttft_q[0.5]) == pytest.approx(float(alone.ttft_mean), rel=0.25)
    assert float(light.tpot_q[0.5]) == pytest.approx(float(alone.tpot_mean), rel=0.1)
    assert not bool(light.overloaded)


@BOTH
def test_poisson_percentiles_are_ordered_and_grow_with_load(hw) -> None:
    rates = np.array([0.5, 2.0, 8.0])
    result = poisson(hw, rates, Traffic(300, 300, prompt_cv=1.0, output_cv=1.0), slots=256, chunk_tokens=2048.0)
    for stat in (result.ttft_q, result.tpot_q):
        values = np.array([stat[q] for q in QUANTILES])
        assert np.all(np.diff(values, axis=0) >= -1e-12)
    assert np.all(np.diff(result.tpot_mean) > 0)
    assert result.output_tokens_per_s == pytest.approx(rates * 300)


def test_poisson_above_capacity_is_flagged_and_queues() -> None:
    hw = hardware()
    result = poisson(hw, np.array([1.0, 500.0]), Traffic(1000, 1000, num_prompts=1000), slots=16, chunk_tokens=2048.0)
    assert list(result.overloaded) == [False, True]
    assert result.ttft_q[0.99][1] > 100 * result.ttft_q[0.99][0]
    assert result.output_tokens_per_s[1] < 500.0 * 1000


def test_a_replica_takes_no_more_prompts_than_its_step_budget_lets_through() -> None:
    """Each step carries at most the budget's prompt tokens and reads the weights and the routed experts once: a MoE
    replica of Qwen3-235B-A22B prefilling 4,875-token prompts through 512-token steps (ten steps a prompt, each
    mostly the experts' read) takes at most 512 / 4,875 prompts a step, whatever its slots. Its compute alone had
    let the analytic model plan 6.9 requests/s on one MI355X, where the chunks alone take 3.5 s a second."""
    arch = resolve_model("Qwen/Qwen3-235B-A22B-Instruct-2507")
    gpu = resolve_gpu("MI355X")
    hw = build_hardware(arch, gpu, weight_precision("fp8"), 1.0, ENGINES["tgi"], load_factors().engine("tgi"), 1)
    traffic = Traffic(4875.0, 3.0)
    step = float(prefill_s(hw, 4875.0, 1.0, 512.0)) / 10.0  # one of the prompt's ten chunks
    capacity = float(poisson_capacity(hw, traffic, 16.0, 512.0))
    assert capacity * 4875.0 * step <= 512.0 * (1.0 + 1e-9)
    assert capacity == pytest.approx(512.0 / 4875.0 * 10.0 / float(prefill_s(hw, 4875.0, 1.0, 512.0)), rel=1e-9)
    # A budget that takes a whole prompt a step lets the replica's compute set the rate again, well above.
    assert float(poisson_capacity(hw, traffic, 16.0, 8192.0)) > 2.0 * capacity


@settings(max_examples=40, deadline=None)
@given(rate=st.floats(0.05, 5.0), factor=st.floats(1.1, 3.0))
def test_higher_rate_never_lowers_tail_latency(rate: float, factor: float) -> None:
    hw = hardware()
    lo = poisson(hw, rate, Traffic(400, 300, prompt_cv=1.0, output_cv=1.0), slots=256, chunk_tokens=2048.0)
    hi = poisson(hw, rate * factor, Traffic(400, 300, prompt_cv=1.0, output_cv=1.0), slots=256, chunk_tokens=2048.0)
    assert float(hi.ttft_q[0.99]) >= float(lo.ttft_q[0.99]) * 0.999
    assert float(hi.tpot_mean) >= float(lo.tpot_mean) * 0.999


# The search's Poisson model must give the numbers the straightforward form gives, to the bit: it is only
# faster, not different.


def test_poisson_model_gives_what_poisson_gives() -> None:
    factors = load_factors()
    arch = resolve_model("meta-llama/Llama-3.1-8B-Instruct")
    gpus = [resolve_gpu(name) for name in ("NVIDIA-L4", "NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3")]
    hw = stack_hardware([build_hardware(arch, g, weight_precision("bf16"), 2.0, ENGINES["vllm"],
                                        factors.engine("vllm"), tp)
                         for g in gpus for tp in (1, 2)])
    slots = np.array([8.0, 64.0, 256.0, 32.0, 128.0, 512.0])
    capacity = poisson_capacity(hw, Traffic(700, 300, prefill_fraction=0.8), slots, 2048.0)
    rate = capacity * np.array([0.05, 0.4, 0.7, 0.9, 0.99, 1.2])
    traffic = Traffic(700, 300, 0.9, 0.6, 2.0, prefill_fraction=0.8)
    whole = poisson(hw, rate, traffic, slots, 2048.0, capacity=capacity, samples=64)
    model = poisson_model(hw, traffic, slots, 2048.0, capacity=capacity, samples=64)
    picked = np.array([5, 0, 3, 3])
    part = model.take(picked).quantiles(rate[picked], [("ttft", 0.99), ("e2e", 0.5), ("tpot", 0.9)])
    assert np.array_equal(part, [whole.ttft_q[0.99][picked], whole.e2e_q[0.5][picked], whole.tpot_q[0.9][picked]])
    reslotted = poisson_model(hw, traffic, 16.0, 2048.0, samples=64)
    again = reslotted.take(np.arange(6), slots, capacity).at(rate)
    assert np.array_equal(again.ttft_q[0.95], whole.ttft_q[0.95]) and np.array_equal(again.e2e_mean, whole.e2e_mean)
    samples = np.random.default_rng(0).lognormal(0.0, 1.0, (7, 64))
    for q, value in zip(QUANTILES, sample_quantiles(samples, QUANTILES), strict=True):
        assert np.array_equal(value, np.quantile(samples, q, axis=-1))


def test_a_replica_of_several_streams_is_that_many_queues_sharing_its_arrivals() -> None:
    """Pipeline parallelism: a replica of k streams (one batch in flight per stage) at k times a rate has the
    latencies of one stream at that rate, and k times its capacity, throughput and running sequences (above
    capacity, a finite run of k times the requests: each stream gets its share)."""
    factors = load_factors()
    arch = resolve_model("meta-llama/Llama-3.1-8B-Instruct")
    g = resolve_gpu("NVIDIA-H100-80GB-HBM3")
    hw = build_hardware(arch, g, weight_precision("bf16"), 2.0, ENGINES["vllm"], factors.engine("vllm"), 1, 2)
    one = poisson_capacity(hw, Traffic(700, 300), 32.0, 2048.0)
    assert poisson_capacity(hw, Traffic(700, 300), 32.0, 2048.0, 3.0) == pytest.approx(3 * one)
    traffic = Traffic(700, 300, 0.9, 0.6, 1.0)
    for share in (0.2, 0.8, 1.1):
        alone = poisson(hw, share * one, replace(traffic, num_prompts=1000), 32.0, 2048.0, samples=64)
        three = poisson(hw, 3 * share * one, replace(traffic, num_prompts=3000), 32.0, 2048.0, samples=64, streams=3)
        assert np.allclose(three.ttft_q[0.95], alone.ttft_q[0.95])
        assert np.allclose(three.tpot_q[0.5], alone.tpot_q[0.5])
        assert np.allclose(three.e2e_q[0.99], alone.e2e_q[0.99], rtol=1e-9)
        assert float(three.requests_per_s) == pytest.approx(3 * float(alone.requests_per_s))
        assert float(three.concurrency) == pytest.approx(3 * float(alone.concurrency))
        assert float(three.capacity) == pytest.approx(3 * float(alone.capacity))
    # The search's way: a model per shape, rows taken with their slots and (the replica's) capacity.
    model = poisson_model(stack_hardware([hw]), traffic, 32.0, 2048.0, samples=64, streams=np.array([3.0]))
    rows = model.take(np.zeros(2, dtype=int), np.full(2, 32.0), np.full(2, 3 * one))
    assert np.allclose(rows.quantiles(np.array([0.6 * one, 2.4 * one]), [("ttft", 0.9)])[0],
                       [poisson(hw, r, traffic, 32.0, 2048.0, samples=64).ttft_q[0.9] for r in (0.2 * one, 0.8 * one)])


def test_concurrency_is_little_fixed_point() -> None:
    # n = x (TTFT + O TPOT(n)) must hold at the n the queueing model uses, wherever one sequence or more runs.
    factors = load_factors()
    arch = resolve_model("meta-llama/Llama-3.1-8B-Instruct")
    gpus = [resolve_gpu(name) for name in ("NVIDIA-L4", "NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3")]
    hw = stack_hardware([build_hardware(arch, g, weight_precision(p), 2.0, ENGINES["vllm"], factors.engine("vllm"), tp)
                         for g in gpus for tp in (1, 2) for p in ("bf16", "int4-awq")])
    slots = np.full(12, 256.0)
    capacity = poisson_capacity(hw, Traffic(500, 250), slots, 2048.0)
    model = poisson_model(hw, Traffic(500, 250), slots, 2048.0, capacity=capacity, samples=64)
    for share in (0.1, 0.3, 0.6, 0.8, 0.95):
        x = capacity * share
        stretch = 1.0 - np.clip(x * model.prompt_work, 0.0, 0.95)
        n = model.at(x).concurrency
        latency = model.own_prefill + model.o * model.curve.at(n) / stretch
        busy = n > 1.0
        assert np.allclose(n[busy], (x * latency)[busy], rtol=1e-9)


def test_the_prompt_queue_of_a_replica_that_only_prefills_waits_as_simulated() -> None:
    # One output token per request under Poisson arrivals: the replica is a queue of prompts, a disaggregated
    # prefill pool (its model without the KV transfer, which the simulator does not add). The closed form's tails
    # must be the simulated engine's (which tests/planner/simulation/test_simulate.py holds to Pollaczek-Khinchine). The
    # wait of twice Pollaczek-Khinchine's that the model had until 2026-12-03 is 23% (p90) and 43% (p99) above it
    # at the lowest load here.
    hw = hardware("meta-llama/Llama-2-13b-hf", "NVIDIA-A100-SXM4-80GB", "bf16")
    pool = prefill_pool(hw, 1.0, 512.0, 128.0, 2048.0, 0.5, 1.0, 1.0, 400.0, 1024)
    model = replace(pool.model, num_prompts=np.full_like(pool.model.num_prompts, 20_000.0))  # the run's length
    for share in (0.3, 0.6, 0.8):
        rate = share / float(model.es)
        analytic = model.quantiles(rate, [("ttft", 0.9), ("ttft", 0.99)]).ravel()
        run = simulate(hw, generate_workload(rate, 20_000, Traffic(512, 1, prompt_cv=0.5), seed=3),
                       max_batch=128, kv_tokens=400_000, chunk_tokens=2048)
        simulated = np.array([run.ttft.p90_s, run.ttft.p99_s])
        assert analytic == pytest.approx(simulated, rel=0.12), (share, analytic, simulated)


def _gap_cv2(times: np.ndarray) -> float:
    gaps = np.diff(times)
    return float(gaps.var() / gaps.mean() ** 2)


@pytest.mark.parametrize("preset", sorted(BURSTINESS_ARRIVAL_CV2))
def test_a_replicas_arrival_cv2_is_what_the_deployed_routing_leaves_it(preset: str) -> None:
    # The analytic model's per-replica (per-stage) arrival CV^2 against the gaps the simulator routes to each replica
    # as deployed: a Service's kube-proxy at random over n replicas, a replica's pipeline stages in turn. Until
    # 2026-12-07 the model gave every replica the whole stream's CV^2: the steady preset's 0.25 where 2 replicas get
    # 0.625 and 16 get 0.95.
    c, n_requests = BURSTINESS_ARRIVAL_CV2[preset], 200_000
    times = arrival_times(np.random.default_rng(7), 1.0, n_requests, c)
    for replicas, stages in ((1, 1), (2, 1), (4, 1), (16, 1), (2, 2)):
        engine = routed(n_requests, replicas, AGGREGATED_ROUTER, seed=3, stages=stages)
        measured = np.mean([_gap_cv2(times[engine == k]) for k in range(replicas * stages)])
        assert float(replica_arrival_cv2(c, replicas, stages)) == pytest.approx(measured, rel=0.04, abs=0.01), (
            replicas, stages)


@pytest.mark.parametrize("cv2", [0.0, 0.1, 0.25, 0.5, 1.0, 4.0, 8.0])
def test_a_disaggregated_pools_replicas_get_arrivals_no_more_variable_than_the_bound(cv2: float) -> None:
    # ROUTER_REPLICAS sglang-routers, each round robin, one picked at random per request: a pool replica's gaps are
    # the whole stream's at one replica and tend to (r - 1) / (r + 1) at many (1/3 for two), above a steady stream's.
    n_requests = 200_000
    times = arrival_times(np.random.default_rng(7), 1.0, n_requests, cv2)
    bound = pool_arrival_cv2(cv2, ROUTER_REPLICAS)
    worst = 0.0
    for replicas in (1, 2, 4, 16, 64):
        engine = routed(n_requests, replicas, "round_robin", seed=3, fronts=ROUTER_REPLICAS)
        measured = float(np.mean([_gap_cv2(times[engine == k]) for k in range(replicas)]))
        worst = max(worst, measured)
        assert measured <= bound * 1.03 + 0.005, (replicas, measured, bound)
    assert worst == pytest.approx(bound, rel=0.06, abs=0.03)  # the bound is reached: the stream's, or 1/3


def test_a_running_count_that_the_eager_steps_keep_past_the_graphs_is_priced_as_simulated() -> None:
    """TGI captures CUDA graphs up to 32 sequences; above that a step runs eagerly and takes twice as long, so the
    sequences stay longer and more of them run: the count has a second, upper state. CodeLlama-34B in FP8 on one
    MI355X with 2,000-token prompts: at 10 and 10.5 requests/s the simulator's mean TPOT is 43 and 52 ms, and the
    mean-field count (19.9 sequences, the eager time weighted by a Poisson count's P(N > 32), 0.3%) had put it at 21
    and 22 ms; the running count's own birth-death distribution (`serving.GRAPH_REACH_SIGMAS`) puts it within 30%.
    Below the upper state (6 requests/s) the model is the mean-field one."""
    from inferplan.planner.request import resolve_plan
    from inferplan.planner.search.annotate import deployment_of
    from inferplan.planner.search.plan import plan
    from inferplan.planner.spec_parsing import parse_plan

    req = resolve_plan(parse_plan({
        "model": {"name": "codellama/CodeLlama-34b-hf", "precisions": ["fp8"]}, "engine": {"name": "tgi"},
        "workload": {"requestsPerSecond": "50", "promptTokens": {"mean": 2000, "p95": 6000},
                     "outputTokens": {"mean": 100, "p95": 200}},
        "slo": {"ttft": {"maxMs": 500, "percentile": "p90"}, "tpot": {"maxMs": 30, "percentile": "p95"}},
        "verify": False, "constraints": {"gpuTypes": ["MI355X"]}}))
    candidate = plan(req).recommendation
    assert candidate is not None
    deployed = deployment_of(req, candidate)
    hw, settings = deployed.hardware, deployed.settings
    assert hw.graph_max_batch == 32 and candidate.max_batch > 32
    traffic = Traffic(req.prompt_mean, req.output_mean, req.prompt_cv, req.output_cv)
    model = poisson_model(hw, traffic, candidate.max_batch, settings.step_tokens)
    for rate in (6.0, 10.0, 10.5):
        run = simulate(hw, generate_workload(rate, 12_000, traffic, seed=3), max_batch=candidate.max_batch,
                       kv_tokens=deployed.memory.kv_cache_tokens, chunk_tokens=settings.step_tokens,
                       policy=settings.scheduling)
        analytic = float(model.at(rate).tpot_mean)
        assert analytic == pytest.approx(run.tpot.mean_s, rel=0.3), (rate, analytic, run.tpot.mean_s)
