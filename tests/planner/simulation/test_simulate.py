"""The discrete-event simulator: determinism, conservation, KV accounting, traces, closed forms, and
agreement with the analytic single-stream model."""

from __future__ import annotations

import gc
import heapq
import json
import math
import tracemalloc
from dataclasses import dataclass, replace

import numpy as np
import pytest

from inferplan.planner.catalog.engines import Scheduling
from inferplan.planner.catalog.model_configs import resolve_model
from inferplan.planner.model.performance import (
    attention_flops,
    decode_step_s,
    prefill_compute_s_per_token,
    prefill_s,
    with_mtp,
)
from inferplan.planner.model.serving import Traffic, single_stream
from inferplan.planner.simulation import engine as engine_module
from inferplan.planner.simulation.engine import _StepModel
from inferplan.planner.simulation.simulate import (
    ROUTE_STREAM,
    SimulationResult,
    generate_workload,
    read_trace,
    routed,
    simulate,
    simulate_disaggregated,
    simulate_queue,
    trace_workload,
)
from tests.support.hardware import hardware, measured_hardware

HW = hardware()


def busy_workload(seed: int = 3, requests: int = 2000):
    return generate_workload(40.0, requests, Traffic(400, 150, prompt_cv=1.0, output_cv=1.0), seed=seed)


@pytest.mark.parametrize("build", [hardware, measured_hardware], ids=["round", "measured"])
def test_step_model_matches_decode_and_prefill_of_the_step_model(build) -> None:
    """The simulator's step times are the step model's: with round rates, and with measured ones (an overlap of
    memory and compute, prefill attention at its own rate, decode attention as a KV read only)."""
    for name in ("meta-llama/Meta-Llama-3-8B", "mistralai/Mixtral-8x7B-v0.1", "openai/gpt-oss-20b"):
        for tp in (1, 2):
            hw = build(name, tp=tp)
            model = _StepModel(hw)
            for batch, ctx in ((1, 100.0), (37, 2500.0), (256, 9000.0)):
                assert model.time(batch, ctx, 0, 0.0, batch) == pytest.approx(float(decode_step_s(hw, batch, ctx)))
            for prompt in (1, 700, 8000):
                compute = prompt * model.prefill_token_compute_s(prompt)
                assert model.time(0, 0.0, prompt, compute, 1) == pytest.approx(float(prefill_s(hw, prompt)))


def test_a_batch_above_the_engines_cuda_graphs_runs_eagerly_in_the_simulator_as_in_the_step_model() -> None:
    """Four sequences captured, a 20 ms eager step: a step of four decodes costs what it cost, one of five the eager
    time more, in the step model and in the simulator; eight requests decoding together pay it on every step, so their
    TPOT grows by about that much, and four do not pay it at all."""
    base = measured_hardware()
    hw = replace(base, graph_max_batch=4.0, eager_step_s=0.020)
    model, plain = _StepModel(hw), _StepModel(base)
    for batch in (1, 4):
        assert model.time(batch, 500.0, 0, 0.0, batch) == pytest.approx(plain.time(batch, 500.0, 0, 0.0, batch))
    for batch in (5, 64):
        assert float(decode_step_s(hw, batch, 500.0)) == pytest.approx(float(decode_step_s(base, batch, 500.0)) + 0.020)
        assert model.time(batch, 500.0, 0, 0.0, batch) == pytest.approx(float(decode_step_s(hw, batch, 500.0)))
        assert model.time(batch, 500.0, 300, 0.01, batch + 1) == pytest.approx(
            plain.time(batch, 500.0, 300, 0.01, batch + 1) + 0.020)
    for n, slower in ((4, False), (8, True)):
        w = trace_workload(np.zeros(n), np.full(n, 100), np.full(n, 200))
        eager = simulate(hw, w, chunk_tokens=8192)
        graphs = simulate(base, w, chunk_tokens=8192)
        assert eager.generated_tokens == graphs.generated_tokens == n * 200
        if slower:
            assert eager.tpot.mean_s == pytest.approx(graphs.tpot.mean_s + 0.020, rel=0.05)
        else:
            assert eager.tpot.mean_s == pytest.approx(graphs.tpot.mean_s, rel=1e-9)


def test_mtp_drafting_is_charged_per_token_emitted_in_the_simulator_as_in_the_step_model() -> None:
    """DeepSeek-V3 drafting 2 tokens a step and emitting 2.5: a decode-only step is the drafting step over 2.5, the
    analytic step's; a prompt in the step costs what it costs in the real drafting step (charged whole); and a
    served run's TPOT falls by the step model's ratio at the batches it runs while every token is still
    produced."""
    hw = measured_hardware("deepseek-ai/DeepSeek-V3", gpu="NVIDIA-H200", weights="fp8", tp=8)
    arch = resolve_model("deepseek-ai/DeepSeek-V3")
    drafting, real = with_mtp(hw, arch, 2, 2.5), with_mtp(hw, arch, 2, 1.0)
    view, step = _StepModel(drafting), _StepModel(real)
    for batch, ctx in ((1, 1000.0), (48, 3000.0), (256, 2000.0)):
        assert view.time(batch, ctx, 0, 0.0, batch) == pytest.approx(float(decode_step_s(drafting, batch, ctx)))
        assert view.time(batch, ctx, 0, 0.0, batch) == pytest.approx(step.time(batch, ctx, 0, 0.0, batch) / 2.5)
        prompt = 2048 * view.prefill_token_compute_s(2048)
        assert view.time(batch, ctx, 2048, prompt, batch + 1) - view.time(batch, ctx, 0, 0.0, batch) == pytest.approx(
            step.time(batch, ctx, 2048, prompt, batch + 1) - step.time(batch, ctx, 0, 0.0, batch))
    work = generate_workload(1.0, 200, Traffic(1000, 300), seed=5)
    plain = simulate(hw, work, max_batch=64, kv_tokens=400_000)
    drafted = simulate(drafting, work, max_batch=64, kv_tokens=400_000)
    assert drafted.generated_tokens == plain.generated_tokens
    # A few sequences run at a time at this load: the TPOT ratio is the step ratio between batch 1 and 8.
    low, high = (float(decode_step_s(drafting, b, 1150) / decode_step_s(hw, b, 1150)) for b in (1, 8))
    assert low <= drafted.tpot.mean_s / plain.tpot.mean_s <= high < 0.7


def test_step_model_charges_prefill_attention_at_the_attention_rate_only() -> None:
    """Halving the prefill-attention rate slows a long prompt by its attention time and leaves decode steps (whose
    attention is a KV read) and the GEMM part of the prompt alone."""
    hw = measured_hardware()
    slow = replace(hw, attention_flops_s=hw.attention_flops_s / 2)
    base_model, slow_model = _StepModel(hw), _StepModel(slow)
    for batch, ctx in ((1, 100.0), (64, 8000.0)):
        assert slow_model.time(batch, ctx, 0, 0.0, batch) == base_model.time(batch, ctx, 0, 0.0, batch)
    prompt = 16000
    extra = prompt * (slow_model.prefill_token_compute_s(prompt) - base_model.prefill_token_compute_s(prompt))
    attention = float(attention_flops(hw, prompt / 2)) * prompt / hw.attention_flops_s
    assert extra == pytest.approx(attention, rel=1e-9)
    assert float(prefill_s(slow, prompt)) > float(prefill_s(hw, prompt))


def test_same_seed_same_result_other_seed_differs() -> None:
    a = simulate(HW, busy_workload(3), max_batch=32, kv_tokens=20_000)
    b = simulate(HW, busy_workload(3), max_batch=32, kv_tokens=20_000)
    c = simulate(HW, busy_workload(4), max_batch=32, kv_tokens=20_000)
    np.testing.assert_array_equal(a.e2e_s, b.e2e_s)
    np.testing.assert_array_equal(a.ttft_s, b.ttft_s)
    assert a.preemptions == b.preemptions
    assert not np.array_equal(a.e2e_s, c.e2e_s)


def test_a_run_leaves_the_garbage_collector_as_it_found_it() -> None:
    workload = busy_workload(3, requests=200)
    assert gc.isenabled()
    simulate(HW, workload, max_batch=32, kv_tokens=20_000)
    assert gc.isenabled()
    gc.disable()
    try:
        simulate(HW, workload, max_batch=32, kv_tokens=20_000, router="least_outstanding")
        assert not gc.isenabled()
    finally:
        gc.enable()


@pytest.mark.parametrize("router", ["round_robin", "least_outstanding"])
def test_every_request_completes_once_and_tokens_are_conserved(router: str) -> None:
    w = busy_workload()
    r = simulate(HW, w, replicas=3, max_batch=16, kv_tokens=8_000, chunk_tokens=512, router=router)
    assert np.all(np.isfinite(r.e2e_s)) and np.all(r.ttft_s > 0)
    assert np.all(r.e2e_s >= r.ttft_s)
    assert r.generated_tokens == int(w.output_tokens.sum())
    assert set(np.unique(r.replica)) == {0, 1, 2}
    assert len(r.replica) == len(w)
    assert r.output_tokens_per_s == pytest.approx(w.output_tokens.sum() / r.duration_s)
    for series in r.series:
        assert 0 < len(series.t_s) <= 2 * 256 and np.all(np.diff(series.t_s) >= 0)


def test_kv_cache_is_never_exceeded_and_preemption_only_when_it_runs_out() -> None:
    w = busy_workload()
    plenty = simulate(HW, w, max_batch=32, kv_tokens=1_000_000)
    assert plenty.preemptions == 0
    assert plenty.kv_tokens_max[0] < 1_000_000
    tiny = simulate(HW, w, max_batch=32, kv_tokens=6_000)
    assert tiny.preemptions > 0 and tiny.preempted.sum() == tiny.preemptions
    assert tiny.kv_tokens_max[0] <= 6_000
    assert tiny.generated_tokens == int(w.output_tokens.sum())
    assert max(s.kv_tokens.max() for s in tiny.series) <= 6_000
    # Preempted requests recompute their prefill, so they finish later than with room to spare.
    assert tiny.e2e.mean_s > plenty.e2e.mean_s


@pytest.mark.parametrize("router", ["round_robin", "least_outstanding"])
def test_memory_grows_with_numpy_results_not_python_objects(router: str, monkeypatch) -> None:
    # Requests are Python objects only while in flight or in the chunk being routed: what grows with the
    # run is the numpy results (under 100 bytes per request here); Python lists per request cost over 200.
    # Small chunks keep the runs short (tracemalloc slows the loop a hundredfold).
    monkeypatch.setattr(engine_module, "CHUNK", 128)
    simulate(HW, generate_workload(20.0, 300, Traffic(300, 100, 1.0, 1.0), seed=1), replicas=2)  # one-time allocations
    peaks = []
    for n in (800, 2400):
        w = generate_workload(20.0, n, Traffic(300, 100, 1.0, 1.0), seed=1)
        tracemalloc.start()
        simulate(HW, w, replicas=2, max_batch=64, kv_tokens=200_000, router=router)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    assert (peaks[1] - peaks[0]) / 1600 < 150


def test_queue_length_counts_only_requests_that_arrived() -> None:
    # At low load nobody waits: requests routed ahead of their arrival are not in the queue.
    r = simulate(HW, generate_workload(0.5, 300, Traffic(500, 50), seed=2), replicas=2)
    assert all(s.queue_length.max() == 0 for s in r.series)
    assert all(s.kv_tokens.max() > 0 for s in r.series)


@pytest.mark.parametrize("router", ["round_robin", "least_outstanding"])
def test_a_run_without_series_gives_the_same_figures(router: str) -> None:
    workload = busy_workload(5, requests=1500)
    kept = simulate(HW, workload, replicas=2, max_batch=32, kv_tokens=20_000, router=router)
    none = simulate(HW, workload, replicas=2, max_batch=32, kv_tokens=20_000, router=router, series_points=0)
    assert all(len(s.t_s) == len(s.queue_length) == len(s.kv_tokens) == 0 for s in none.series)
    assert all(len(s.t_s) > 0 for s in kept.series)
    for field in ("ttft_s", "tpot_s", "e2e_s", "replica", "preempted", "busy_s", "kv_tokens_max"):
        np.testing.assert_array_equal(getattr(kept, field), getattr(none, field))
    assert (kept.preemptions, kept.generated_tokens, kept.duration_s) == (none.preemptions, none.generated_tokens,
                                                                        none.duration_s)


def test_a_request_that_can_never_fit_is_rejected() -> None:
    w = trace_workload([0.0], [5000], [10])
    with pytest.raises(ValueError, match="kv_tokens"):
        simulate(HW, w, kv_tokens=4000)


def test_chunked_prefill_splits_a_prompt_over_steps() -> None:
    # 400 tokens in 100-token chunks: four memory-bound steps, each reading the weights.
    w = trace_workload([0.0], [400], [2])
    whole = simulate(HW, w, chunk_tokens=math.inf)
    chunked = simulate(HW, w, chunk_tokens=100)
    assert whole.ttft_s[0] == pytest.approx(float(prefill_s(HW, 400)))
    assert chunked.ttft_s[0] == pytest.approx(float(prefill_s(HW, 400, 1, 100)))
    assert chunked.ttft_s[0] > 2 * whole.ttft_s[0]


def test_a_data_parallel_attention_rank_prefills_its_own_request_and_the_step_waits_for_it() -> None:
    """With data-parallel attention a prompt's attention runs on its request's rank alone: one request served alone
    gets its first token after the analytic model's prefill of it on that layout (`prefill_s`), later than the same
    replica spreading it; tp prompts arriving together, one on each rank, take one step as long as spread."""
    hw = hardware("meta-llama/Meta-Llama-3-8B", tp=4)
    dp = replace(hw, dp_ranks=4.0)
    one = trace_workload([0.0], [2000], [2])
    alone = simulate(dp, one, chunk_tokens=math.inf)
    assert alone.ttft_s[0] == pytest.approx(float(prefill_s(dp, 2000)), rel=1e-9)
    spread = simulate(hw, one, chunk_tokens=math.inf).ttft_s[0]
    assert alone.ttft_s[0] - spread == pytest.approx(
        2000 * float(prefill_compute_s_per_token(dp, 2000) - prefill_compute_s_per_token(hw, 2000)), rel=1e-9)
    assert alone.ttft_s[0] > 1.3 * spread
    four = trace_workload([0.0] * 4, [2000] * 4, [2] * 4)
    together = simulate(dp, four, chunk_tokens=math.inf)
    assert together.ttft_s == pytest.approx(simulate(hw, four, chunk_tokens=math.inf).ttft_s, rel=1e-9)


def test_burst_beyond_the_kv_cache_queues_first_tokens_and_levels_throughput() -> None:
    def burst(n: int, kv_tokens: int) -> SimulationResult:
        return simulate(HW, trace_workload(np.zeros(n), np.full(n, 1024), np.full(n, 1024)), max_batch=256,
                        kv_tokens=kv_tokens, chunk_tokens=2048)

    fits = burst(50, 1_000_000)
    queued = burst(500, 50 * 2100)  # about 50 sequences of 2048 tokens at once
    assert queued.ttft.mean_s > 5 * fits.ttft.mean_s
    assert queued.ttft.p99_s > queued.ttft.p50_s
    more = burst(1000, 50 * 2100)
    assert more.output_tokens_per_s == pytest.approx(queued.output_tokens_per_s, rel=0.1)


def test_closed_loop_sends_each_request_when_the_clients_last_one_completes() -> None:
    n, clients = 60, 3
    w = trace_workload(np.zeros(n), np.full(n, 300), np.full(n, 50))
    result = simulate(HW, w, max_batch=64, clients=clients)
    sent = result.e2e_s  # measured from each request's send time
    done = np.zeros(n)
    # Request i + clients is sent when request i completes: its completion is the sum of the latencies before it.
    for i in range(n):
        done[i] = (done[i - clients] if i >= clients else 0.0) + sent[i]
    assert result.duration_s == pytest.approx(done.max(), rel=1e-9)
    assert np.all(w.arrival_s == 0.0)  # the caller's workload is not modified
    # At most `clients` in flight: with identical requests the clients stay in step, as a repeated batch of 3.
    batch = simulate(HW, trace_workload(np.zeros(clients), np.full(clients, 300), np.full(clients, 50)), max_batch=64)
    assert result.e2e.mean_s == pytest.approx(batch.e2e.mean_s, rel=1e-6)
    assert result.output_tokens_per_s == pytest.approx(clients * 50 / batch.e2e_s.max(), rel=0.01)


def test_one_client_is_served_alone() -> None:
    w = trace_workload(np.zeros(5), [100, 2000, 50, 800, 300], [20, 5, 60, 10, 30])
    result = simulate(HW, w, clients=1, chunk_tokens=math.inf)
    for i in range(5):
        alone = simulate(HW, trace_workload([0.0], [w.prompt_tokens[i]], [w.output_tokens[i]]), chunk_tokens=math.inf)
        assert result.e2e_s[i] == pytest.approx(alone.e2e_s[0], rel=1e-9)


def test_prefill_first_pauses_decode_and_mixed_steps_do_not() -> None:
    # One request decoding when a long prompt arrives: prefill first serves the newcomer sooner and stalls the
    # running one for the whole prefill; a mixed step decodes it alongside (vLLM V1).
    w = trace_workload([0.0, 0.05], [100, 4000], [200, 10])
    mixed = simulate(HW, w, chunk_tokens=8192, policy=Scheduling(mixed=True))
    first = simulate(HW, w, chunk_tokens=8192, policy=Scheduling(mixed=False))
    assert first.ttft_s[1] < mixed.ttft_s[1]
    assert first.tpot_s[0] > mixed.tpot_s[0]
    assert first.generated_tokens == mixed.generated_tokens == 210


def test_multi_step_scheduling_admits_at_the_end_of_a_run_of_decode_steps() -> None:
    # One request decoding when a second arrives: with the scheduler run once per 15 decode steps the newcomer
    # waits for the run to end, up to 15 steps; the steps themselves cost what they cost without it.
    hw = replace(HW, step_overhead_s=0.004, sequence_overhead_s=0.0001)
    w = trace_workload([0.0, 0.0301], [100, 100], [400, 10])
    each = simulate(hw, w, chunk_tokens=8192, policy=Scheduling(mixed=False, chunked=False))
    multi = simulate(hw, w, chunk_tokens=8192, policy=Scheduling(mixed=False, chunked=False, steps_per_schedule=15))
    model = _StepModel(hw)
    step = model.time(1, 300.0, 0, 0.0, 1)
    assert each.ttft_s[1] < 2 * step + model.time(0, 0.0, 100, 100 * model.prefill_token_compute_s(100), 1)
    assert multi.ttft_s[1] > each.ttft_s[1] + 3 * step  # the run it arrived in ends first
    assert multi.ttft_s[1] < each.ttft_s[1] + 16 * step
    assert multi.e2e_s[0] == pytest.approx(each.e2e_s[0], rel=1e-9)  # one prefill step either way
    assert multi.generated_tokens == each.generated_tokens == 410


def _burst_of_twelve(policy: Scheduling | None = None) -> SimulationResult:
    """Twelve 500 + 500-token requests at once on a KV cache that holds three whole sequences."""
    n = 12
    w = trace_workload(np.zeros(n), np.full(n, 500), np.full(n, 500))
    return simulate(HW, w, kv_tokens=3 * 1000 + 500, max_batch=64, chunk_tokens=8192, policy=policy)


def test_vllm_v1_admits_on_the_first_chunk_and_preempts_the_last_admitted_whose_evicted_chunks_are_computed_again(
) -> None:
    """Two 3,000-token prompts at once, a 1,000-token budget, a KV cache of 4,100 tokens. On the whole prompt the
    second waits for the first to finish. vLLM V1 admits it as soon as its first chunk (the 999 tokens the first's
    decode leaves of the budget) fits, so the two share the cache; its next chunk does not fit, so it is preempted;
    while the first decodes 400 tokens its cached chunk is partly evicted (4,100 - 3,400 = 700 tokens stay), and
    once readmitted it computes the rest of its prompt, the evicted 299 tokens again, but not the 700 kept."""
    w = trace_workload([0.0, 0.0], [3000, 3000], [400, 50])
    on_prompt = simulate(HW, w, kv_tokens=4100, chunk_tokens=1000, policy=Scheduling())
    by_chunk = simulate(HW, w, kv_tokens=4100, chunk_tokens=1000, policy=Scheduling(admit_first_chunk=True))
    assert on_prompt.preemptions == 0 and on_prompt.kv_tokens_max[0] == 3400  # one at a time
    assert 4000 < by_chunk.kv_tokens_max[0] <= 4100  # both held at once, never more than the cache
    assert by_chunk.preemptions == 1 and list(by_chunk.preempted) == [0, 1]
    assert by_chunk.e2e_s[0] > on_prompt.e2e_s[0]  # the first's decode shared a step with the lost chunk
    assert by_chunk.busy_s[0] > on_prompt.busy_s[0]  # the lost chunk is charged
    after = float(by_chunk.ttft_s[1] - by_chunk.e2e_s[0])  # its prefill once the first finished
    assert float(prefill_s(HW, 3000 - 999)) < after < float(prefill_s(HW, 3000 - 600))
    assert after < float(on_prompt.ttft_s[1] - on_prompt.e2e_s[0])
    assert by_chunk.generated_tokens == on_prompt.generated_tokens == 450


@pytest.mark.parametrize("chunk", [256, 1000, 4096])
def test_a_kv_starved_burst_admitted_by_first_chunk_serves_every_request(chunk: int) -> None:
    """A burst of 80 prompts of up to 3,500 tokens on a cache of 4,000: admitted by their first chunk most do not
    fit whole, so requests are preempted part-way through their prompts and during decode; the run still ends with
    every request served and every output token produced, the cache never overfilled."""
    rng = np.random.default_rng(7)
    n = 80
    prompt, output = rng.integers(200, 3500, n), rng.integers(1, 400, n)
    w = trace_workload(np.sort(rng.uniform(0.0, 0.5, n)), prompt, output)
    result = simulate(HW, w, kv_tokens=4000, max_batch=64, chunk_tokens=chunk,
                      policy=Scheduling(admit_first_chunk=True))
    assert np.isfinite(result.e2e_s).all() and np.isfinite(result.ttft_s).all()
    assert result.generated_tokens == int(output.sum())
    assert result.preemptions > 0
    assert result.kv_tokens_max[0] <= 4000


@pytest.mark.parametrize("policy", [
    Scheduling(admit_first_chunk=True), Scheduling(), Scheduling(mixed=False),
    Scheduling(mixed=False, estimate_output=True), Scheduling(reserve_output=True)],
    ids=["vllm-v1", "mixed", "prefill-first", "sglang", "reserve"])
def test_a_tiny_budget_runs_each_prompt_in_jumps_of_chunks_as_it_runs_step_by_step(policy: Scheduling,
                                                                                    monkeypatch) -> None:
    """Prompts of up to 20,000 tokens through a 64-token budget (and a batch that takes it all with decode), on a
    cache that preempts: a run of identical steps takes one pass of the loop, as one jump from JUMP_MIN_STEPS steps on
    and step by step below (the arithmetic of a pass per step); the run serves every request with the latencies of
    the runs stepped (JUMP_MIN_STEPS out of reach). A burst of 100,000-token prompts through a 16-token budget had
    run a pass per chunk (31M passes for 5,000 of them)."""
    rng = np.random.default_rng(11)
    n = 120
    w = trace_workload(np.sort(rng.uniform(0.0, 3.0, n)), rng.integers(1, 20_000, n), rng.integers(1, 300, n))

    def run() -> SimulationResult:
        return simulate(HW, w, kv_tokens=60_000, max_batch=96, chunk_tokens=64, policy=policy,
                        series_points=1_000_000)

    jumped = run()
    monkeypatch.setattr(engine_module, "JUMP_MIN_STEPS", 10**18)
    stepped = run()
    assert jumped.generated_tokens == stepped.generated_tokens == int(w.output_tokens.sum())
    assert np.isfinite(jumped.e2e_s).all()
    assert jumped.kv_tokens_max[0] <= 60_000
    np.testing.assert_allclose(jumped.ttft_s, stepped.ttft_s, rtol=1e-6)
    np.testing.assert_allclose(jumped.e2e_s, stepped.e2e_s, rtol=1e-6)
    # Every pass of the loop is sampled here (the series never fills): far fewer passes than chunks.
    chunks = int(w.prompt_tokens.sum()) // 64
    assert len(jumped.series[0].t_s) < chunks / 10
    assert len(stepped.series[0].t_s) < chunks / 10


def test_a_burst_of_long_prompts_through_a_16_token_budget_takes_a_few_passes_per_prompt() -> None:
    """50 prompts of 100,000 tokens at once, a 16-token budget (312,500 chunks): a few passes of the loop each."""
    n = 50
    w = trace_workload(np.zeros(n), np.full(n, 100_000), np.full(n, 10))
    result = simulate(HW, w, kv_tokens=1_000_000, chunk_tokens=16, policy=Scheduling(admit_first_chunk=True),
                      series_points=1_000_000)
    assert result.generated_tokens == 10 * n
    assert np.isfinite(result.e2e_s).all()
    assert len(result.series[0].t_s) < 20 * n


def test_a_kv_cache_overfilled_by_an_accounting_error_stops_the_loop_with_an_error(monkeypatch) -> None:
    """The loop never overfills its cache; where its accounting is wrong and it does (a first token left uncounted
    made a decode jump negative and the loop spin without end), it stops with an error naming the overfill. Here a
    preemption that frees a million tokens too few."""
    preempt = engine_module._preempt_last

    def frees_too_little(*args, **kwargs):
        kv, context, req = preempt(*args, **kwargs)
        return kv - 1_000_000, context, req

    monkeypatch.setattr(engine_module, "_preempt_last", frees_too_little)
    with pytest.raises(ValueError, match="overfilled its KV cache"):
        _burst_of_twelve()


def test_reserving_the_output_never_preempts_and_admits_fewer() -> None:
    on_prompt = _burst_of_twelve()
    reserved = _burst_of_twelve(Scheduling(chunked=False, reserve_output=True))
    assert on_prompt.preemptions > 0
    assert reserved.preemptions == 0
    assert reserved.kv_tokens_max.max() <= 3 * 1000
    assert np.all(np.isfinite(reserved.e2e_s))


def test_sglangs_estimate_admits_by_the_output_and_counts_the_running_at_its_ratio() -> None:
    """SGLang admits a request when its prompt and whole output fit next to the running requests' remaining
    output times the new-token ratio (0.7 at first, falling with each decode step): a burst's first requests are
    admitted as the output reservation admits them, where admitting on the prompt takes in more; a request
    arriving once the running ones have decoded a while joins them, where the full reservation makes it wait for
    one to finish."""
    on_prompt = _burst_of_twelve()
    estimated = _burst_of_twelve(Scheduling(mixed=False, estimate_output=True))
    assert np.sum(on_prompt.ttft_s < 0.5) > 3  # prompts fit seven at once
    assert np.all(estimated.ttft_s[:3] < 0.5)
    assert estimated.ttft_s[3] >= float(estimated.e2e_s[:3].min())  # the fourth waits for one to finish
    assert np.all(np.isfinite(estimated.e2e_s))

    # Two 100 + 1000-token requests fill 2,200 of 2,500 tokens; a third arrives after 400 decode steps, when
    # 2 x 500 tokens are held and 2 x 600 remain, at a ratio of 0.7 - 400 x 0.001 = 0.3: 1,000 + 360 + 1,100 fits.
    alone = simulate(HW, trace_workload([0.0, 0.0], [100, 100], [1000, 1000]), kv_tokens=2500, chunk_tokens=8192)
    later = float(alone.ttft_s[0] + 400 * alone.tpot_s[0])
    w = trace_workload([0.0, 0.0, later], [100, 100, 100], [1000, 1000, 1000])
    estimated = simulate(HW, w, kv_tokens=2500, chunk_tokens=8192, policy=Scheduling(mixed=False, estimate_output=True))
    reserved = simulate(HW, w, kv_tokens=2500, chunk_tokens=8192,
                        policy=Scheduling(chunked=False, reserve_output=True))
    first_done = float(min(reserved.e2e_s[:2]))
    assert reserved.ttft_s[2] >= first_done - later  # waits for a running request to finish
    assert estimated.ttft_s[2] < 0.1 * (first_done - later)  # joins the running two


def test_sglang_retracts_the_fewest_generated_longest_prompt_to_the_back_and_admits_only_once_one_leaves() -> None:
    """SGLang (`ScheduleBatch.retract_decode`, `Scheduler.update_running_batch`, `batch_is_full` in 0.5.3): a
    100 + 2,000-token request has decoded 600 tokens (ratio 0.098) when three 600-token requests arrive; two are
    admitted (837 + 900 + 700 < 2,600), the third does not fit and is not looked at again while none leaves the
    batch. At 500 more steps the cache (2,600) runs out: the one with the fewest tokens generated and, of those, the
    longest prompt (the 300-token one, not the last admitted) is retracted to the back of the queue, behind the
    one still waiting."""
    policy = Scheduling(mixed=False, estimate_output=True)
    alone = simulate(HW, trace_workload([0.0], [100], [2000]), kv_tokens=2600, chunk_tokens=8192, policy=policy)
    later = float(alone.ttft_s[0] + 600 * alone.tpot_s[0])
    w = trace_workload([0.0, later, later, later], [100, 300, 100, 100], [2000, 600, 600, 600])
    r = simulate(HW, w, kv_tokens=2600, chunk_tokens=8192, policy=policy)
    assert r.preempted[1] >= 1 and r.preempted[2] == 0  # the longer prompt, admitted first
    assert r.ttft_s[1] == r.ttft_s[2] < 0.1 < r.ttft_s[3]  # the third waits for a request to leave
    assert r.e2e_s[1] > r.ttft_s[3]  # readmitted after the one that waited
    assert r.generated_tokens == 2000 + 3 * 600


def test_unchunked_prompts_go_whole_into_a_later_step() -> None:
    # A budget of 1000 tokens and two 600-token prompts: chunked, the second starts in the first step; whole,
    # it waits for the next step.
    w = trace_workload([0.0, 0.0], [600, 600], [5, 5])
    chunked = simulate(HW, w, chunk_tokens=1000, policy=Scheduling(chunked=True))
    whole = simulate(HW, w, chunk_tokens=1000, policy=Scheduling(chunked=False))
    assert whole.ttft_s[0] < chunked.ttft_s[1]
    assert whole.ttft_s[1] > whole.ttft_s[0]
    assert whole.ttft_s[0] == pytest.approx(float(prefill_s(HW, 600)), rel=1e-9)


def test_trace_replay_reproduces_arrival_times(tmp_path) -> None:
    rows = [{"t": 0.0, "prompt": 100, "output": 20}, {"t": 0.5, "prompt": 300, "output": 5},
            {"t": 0.5, "prompt": 50, "output": 1}, {"t": 7.25, "prompt": 1000, "output": 40}]
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n", encoding="utf-8")
    w = read_trace(path)
    np.testing.assert_array_equal(w.arrival_s, [0.0, 0.5, 0.5, 7.25])
    np.testing.assert_array_equal(w.prompt_tokens, [100, 300, 50, 1000])
    r = simulate(HW, w)
    # The last request arrives long after the others finished: served alone, its TTFT is its own prefill.
    assert r.ttft_s[3] == pytest.approx(float(prefill_s(HW, 1000)), rel=0.01)
    assert np.all(r.ttft_s > 0) and np.isnan(r.tpot_s[2])


@pytest.mark.parametrize(("line", "message"), [
    ('{"t": 1, "prompt": 10}', "keys"),
    ('{"t": 1, "prompt": 0, "output": 3}', "prompt"),
    ('{"t": 1, "prompt": 10000000000000000000000, "output": 3}', "prompt"),
    ('{"t": 1, "prompt": 4611686018427387904, "output": 4611686018427387904}', "prompt"),
    ('{"t": -1, "prompt": 3, "output": 3}', '"t"'),
    ('{"t": 1' + "0" * 400 + ', "prompt": 3, "output": 3}', '"t"'),
    ("not json", "not JSON"),
    ('{"t": 1' + "0" * 5000 + ', "prompt": 3, "output": 3}', "not JSON"),
    ('{"t": 0.1, "prompt": 3, "output": 3}', "earlier"),
    ('{"t": 1, "prompt": 3, "output": 3, "t": 2}', "given twice"),
    ('[1, 2, 3]', "keys"),
])
def test_bad_trace_line_is_named(tmp_path, line: str, message: str) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_text('{"t": 0.5, "prompt": 10, "output": 3}\n\n' + line + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=f"trace.jsonl:3: .*{message}"):
        read_trace(path)


def test_a_trace_in_epoch_times_is_served_as_the_same_trace_from_zero(tmp_path) -> None:
    """Absolute times (epoch seconds, or milliseconds and nanoseconds an export wrote as its "t") serve as the
    trace from its first line: large times left as they are swallow a latency's digits (at 1e18 the float step is
    128, and every TTFT came out 0)."""
    near, far = tmp_path / "near.jsonl", tmp_path / "far.jsonl"
    offsets = [(0, 100, 20), (0, 300, 5), (1, 50, 30), (3, 1000, 40)]
    near.write_text("".join(json.dumps({"t": t, "prompt": p, "output": o}) + "\n" for t, p, o in offsets))
    far.write_text("".join(json.dumps({"t": 10**18 + t, "prompt": p, "output": o}) + "\n" for t, p, o in offsets))
    w = read_trace(far)
    np.testing.assert_array_equal(w.arrival_s, [0.0, 0.0, 1.0, 3.0])
    expected, got = simulate(HW, read_trace(near)), simulate(HW, w)
    np.testing.assert_array_equal(got.ttft_s, expected.ttft_s)
    np.testing.assert_array_equal(got.e2e_s, expected.e2e_s)
    assert got.output_tokens_per_s == expected.output_tokens_per_s > 0


def test_a_trace_not_in_utf8_is_an_error_naming_its_line(tmp_path) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_bytes(b'{"t": 0.5, "prompt": 10, "output": 3}\n{"t": 1, "prompt": 10, "output": 3, "x": "\xe9"}\n')
    with pytest.raises(ValueError, match=r"trace\.jsonl:2: not UTF-8 text"):
        read_trace(path)


def test_a_trace_saved_with_a_byte_order_mark_is_read(tmp_path) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_text('{"t": 0.5, "prompt": 10, "output": 3}\r\n{"t": 1, "prompt": 20, "output": 4}\r\n',
                    encoding="utf-8-sig")
    w = read_trace(path)
    np.testing.assert_array_equal(w.prompt_tokens, [10, 20])
    np.testing.assert_array_equal(w.output_tokens, [3, 4])


def test_gamma_arrivals_have_the_requested_rate_and_cv2() -> None:
    w = generate_workload(10.0, 100_000, Traffic(100, 10, arrival_cv2=4.0), seed=5)
    gaps = np.diff(w.arrival_s)
    assert gaps.mean() == pytest.approx(0.1, rel=0.03)
    assert gaps.var() / gaps.mean() ** 2 == pytest.approx(4.0, rel=0.1)
    lengths = generate_workload(10.0, 100_000, Traffic(500, 200, prompt_cv=1.5), seed=5).prompt_tokens
    assert lengths.mean() == pytest.approx(500, rel=0.03)
    assert lengths.std() / lengths.mean() == pytest.approx(1.5, rel=0.1)


# Closed forms at 100k requests. The plain mean wait of one run of 100k requests scatters too much to
# test against 3%: over 30 seeds its standard deviation is 2.3% (M/M/1 at rho 0.7), 1.6% (M/D/1 at 0.6)
# and 4.4% (M/M/4 at 0.8). Each check therefore uses a control variate: a second queue fed the same
# arrivals (and the same service draws), whose mean wait has a closed form too, computed by the reference
# recursion below, not by the simulator. Its error from its own closed form has expectation zero, so
# subtracting beta times it keeps the estimate unbiased, and since it moves with the simulated queue's
# error (correlation 0.93-0.995) it takes most of the scatter away: the standard deviation over 30 seeds
# drops to 0.2-0.6%, the largest error to 1.3% (`python bench/bench_simulate.py --spread 30`). beta is the
# regression slope of the two over 40 batches of the run. The controls' closed forms differ from the
# checked ones by 8-25%, so a simulator serving the control's queue would fail, and one that got the waits
# wrong is not corrected, as the control never sees its output: each check also runs with the simulator's
# service 3% slower than the theory's, and must fail then.

N = 100_000
SLOWER = 1.03  # a simulator whose service takes 3% too long; every check must notice


def poisson_arrivals(rate: float, seed: int = 11, requests: int = N) -> np.ndarray:
    return generate_workload(rate, requests, Traffic(1, 1), seed=seed).arrival_s


def reference_waits(arrival: np.ndarray, service: np.ndarray, servers: int = 1) -> np.ndarray:
    """FIFO waits of a queue of `servers` servers: each request takes the server that frees first
    (Kiefer-Wolfowitz; Lindley's recursion for one server). Independent of the simulator's code."""
    free = [0.0] * servers
    waits = np.empty(len(arrival))
    for i, (a, s) in enumerate(zip(arrival.tolist(), service.tolist(), strict=True)):
        f = heapq.heappop(free)
        start = a if a > f else f
        waits[i] = start - a
        heapq.heappush(free, start + s)
    return waits


def pollaczek_khinchine(rate: float, service_mean: float, service_second_moment: float) -> float:
    """Mean wait of M/G/1."""
    return rate * service_second_moment / (2.0 * (1.0 - rate * service_mean))


def erlang_c_wait(lam: float, mu: float, c: int) -> float:
    """Mean wait of M/M/c."""
    a = lam / mu
    rho = a / c
    top = a**c / math.factorial(c) / (1 - rho)
    p_wait = top / (sum(a**k / math.factorial(k) for k in range(c)) + top)
    return p_wait / (c * mu - lam)


@dataclass(frozen=True)
class WaitCheck:
    raw: float         # simulated mean wait / theory - 1
    controlled: float  # the same corrected by the control variate


def wait_check(waits: np.ndarray, theory: float, control_waits: np.ndarray, control_theory: float,
               batches: int = 40) -> WaitCheck:
    raw = waits.mean() / theory - 1.0
    control = control_waits.mean() / control_theory - 1.0
    x = control_waits.reshape(batches, -1).mean(axis=1) / control_theory
    y = waits.reshape(batches, -1).mean(axis=1) / theory
    beta = np.cov(x, y)[0, 1] / np.var(x, ddof=1)
    return WaitCheck(float(raw), float(raw - beta * control))


def exponential_draws(rate: float, seed: int, n: int = N) -> tuple[np.ndarray, np.ndarray]:
    """Poisson arrivals at `rate` and n uniforms for the service times, from one seed."""
    rng = np.random.default_rng(seed)
    return np.cumsum(rng.exponential(1.0 / rate, n)), rng.random(n)


def mm1_case(seed: int = 0, slower: float = 1.0) -> WaitCheck:
    """M/M/1 at rho 0.7; control: M/M/2 with two servers at half speed, same arrivals and draws."""
    mu, rho = 1.0, 0.7
    lam = rho * mu
    arrival, u = exponential_draws(lam, seed)
    service = -np.log1p(-u) / mu
    r = simulate_queue(arrival, lambda rng, n: service * slower)
    return wait_check(r.wait_s, rho / (mu - lam), reference_waits(arrival, 2 * service, 2),
                      erlang_c_wait(lam, mu / 2, 2))


def md1_case(seed: int = 0, slower: float = 1.0) -> WaitCheck:
    """M/D/1 at rho 0.6; control: M/G/1 with service uniform on [0.5, 1.5] / mu, same arrivals."""
    mu, rho = 1.0, 0.6
    lam = rho * mu
    arrival, u = exponential_draws(lam, seed)
    r = simulate_queue(arrival, lambda rng, n: np.full(n, slower / mu))
    return wait_check(r.wait_s, pollaczek_khinchine(lam, 1 / mu, 1 / mu**2),
                      reference_waits(arrival, (0.5 + u) / mu), pollaczek_khinchine(lam, 1 / mu, (1 + 1 / 12) / mu**2))


def mmc_case(seed: int = 0, slower: float = 1.0) -> WaitCheck:
    """M/M/4 at rho 0.8 (one shared queue); control: M/M/1 with one server 4x as fast, same draws."""
    mu, c, rho = 1.0, 4, 0.8
    lam = rho * c * mu
    arrival, u = exponential_draws(lam, seed)
    service = -np.log1p(-u) / mu
    r = simulate_queue(arrival, lambda rng, n: service * slower, servers=c)
    return wait_check(r.wait_s, erlang_c_wait(lam, mu, c), reference_waits(arrival, service / c),
                      rho / (c * mu * (1 - rho)))


@pytest.mark.parametrize("slower", [1.0, SLOWER])
def test_mm1_mean_wait(slower: float) -> None:
    check = mm1_case(slower=slower)
    assert (abs(check.controlled) < 0.03) == (slower == 1.0), check


@pytest.mark.parametrize("slower", [1.0, SLOWER])
def test_md1_mean_wait(slower: float) -> None:
    check = md1_case(slower=slower)
    assert (abs(check.controlled) < 0.03) == (slower == 1.0), check


@pytest.mark.parametrize("slower", [1.0, SLOWER])
def test_mmc_mean_wait_erlang_c(slower: float) -> None:
    check = mmc_case(slower=slower)
    assert (abs(check.controlled) < 0.03) == (slower == 1.0), check


def test_queue_utilisation_is_the_offered_load() -> None:
    arrival, u = exponential_draws(0.7, 1, 50_000)
    r = simulate_queue(arrival, lambda rng, n: -np.log1p(-u))
    assert r.utilisation == pytest.approx(0.7, rel=0.03)
    np.testing.assert_allclose(r.wait_s, reference_waits(arrival, -np.log1p(-u)), atol=1e-9)


# The engine simulator itself: with batch 1, whole prompts and room in the KV cache, a replica serves one
# request at a time for a service time fixed by its lengths (its prefill step, then one jump over its
# other output tokens), so it is an M/G/1 queue, and M/D/1 for fixed lengths.

PROMPT, OUTPUT = 200, 20


def engine_service_s(prompt: int, output: int) -> float:
    """A lone request's service on HW with batch 1, from the step model (not from the simulator)."""
    model = _StepModel(HW)
    s = model.time(0, 0.0, prompt, prompt * model.prefill_token_compute_s(prompt), 1)
    if output > 1:
        k = output - 1
        s += k * model.time(1, prompt + 1 + (k - 1) / 2.0, 0, 0.0, 1)
    return s


def engine_waits(arrival: np.ndarray, prompt: np.ndarray, output: np.ndarray, service: np.ndarray) -> np.ndarray:
    r = simulate(HW, trace_workload(arrival, prompt, output), max_batch=1, chunk_tokens=math.inf)
    return r.e2e_s - _StepModel(HW).request_overhead_s - service


def test_engine_service_time_is_the_step_model() -> None:
    for prompt, output in ((PROMPT, OUTPUT), (1000, 1), (50, 300)):
        alone = simulate(HW, trace_workload([0.0], [prompt], [output]), max_batch=1, chunk_tokens=math.inf)
        service = alone.e2e_s[0] - _StepModel(HW).request_overhead_s
        assert service == pytest.approx(engine_service_s(prompt, output), rel=1e-12)


def engine_md1_case(seed: int = 1, slower: float = 1.0) -> WaitCheck:
    """simulate() as M/D/1 at rho 0.6 (fixed lengths); control as in md1_case. `slower`: the theory
    believes the service is that much faster than the simulator's."""
    service = engine_service_s(PROMPT, OUTPUT)
    assumed = service / slower
    rho = 0.6
    lam = rho / assumed
    arrival, u = exponential_draws(lam, seed)
    fixed = np.full(N, 1, dtype=np.int64)
    waits = engine_waits(arrival, fixed * PROMPT, fixed * OUTPUT, np.full(N, service))
    return wait_check(waits, pollaczek_khinchine(lam, assumed, assumed**2),
                      reference_waits(arrival, (0.5 + u) * assumed),
                      pollaczek_khinchine(lam, assumed, (1 + 1 / 12) * assumed**2))


def engine_mg1_case(seed: int = 1, slower: float = 1.0) -> WaitCheck:
    """simulate() as M/G/1 at rho 0.6, outputs uniform on 1..40 tokens; control as in md1_case, from the
    uniforms that drew the lengths. Pollaczek-Khinchine with the exact moments of the service over the
    40 lengths."""
    lengths = np.arange(1, 41)
    services = np.array([engine_service_s(PROMPT, int(o)) for o in lengths])
    assumed = services / slower
    mean, second = assumed.mean(), (assumed**2).mean()
    rho = 0.6
    lam = rho / mean
    arrival, u = exponential_draws(lam, seed)
    index = (u * len(lengths)).astype(np.int64)
    waits = engine_waits(arrival, np.full(N, PROMPT), lengths[index], services[index])
    return wait_check(waits, pollaczek_khinchine(lam, mean, second), reference_waits(arrival, (0.5 + u) * mean),
                      pollaczek_khinchine(lam, mean, (1 + 1 / 12) * mean**2))


@pytest.mark.parametrize("slower", [1.0, SLOWER])
def test_engine_md1_mean_wait(slower: float) -> None:
    check = engine_md1_case(slower=slower)
    assert (abs(check.controlled) < 0.03) == (slower == 1.0), check


@pytest.mark.parametrize("slower", [1.0, SLOWER])
def test_engine_mg1_mean_wait_pollaczek_khinchine(slower: float) -> None:
    check = engine_mg1_case(slower=slower)
    assert (abs(check.controlled) < 0.03) == (slower == 1.0), check


def test_separate_queues_wait_longer_than_one_shared_queue() -> None:
    mu, c, rho = 1.0, 4, 0.8
    arrivals = poisson_arrivals(rho * c * mu)[:50_000]
    service = lambda rng, n: rng.exponential(1 / mu, n)  # noqa: E731
    central = simulate_queue(arrivals, service, c).wait_mean_s
    shortest = simulate_queue(arrivals, service, c, "least_outstanding").wait_mean_s
    split = simulate_queue(arrivals, service, c, "round_robin").wait_mean_s
    assert central < shortest < split


def test_low_load_single_replica_matches_single_stream() -> None:
    w = generate_workload(0.5, 400, Traffic(1000, 200), seed=2)
    r = simulate(HW, w, chunk_tokens=math.inf)
    analytic = single_stream(HW, 1000, 200)
    assert r.ttft.p50_s == pytest.approx(float(analytic.ttft_mean), rel=0.10)
    assert r.tpot.p50_s == pytest.approx(float(analytic.tpot_mean), rel=0.10)
    assert r.preemptions == 0


def test_a_front_end_serves_at_most_its_serial_share_one_request_at_a_time() -> None:
    """A per-request overhead passed through a front end: alone, a request pays all of it either way; in a burst,
    the requests queue only for the share served one at a time (`front_end_max_s`), the rest is a delay each
    pays in parallel."""
    hw = replace(HW, request_overhead_s=0.05)

    def served(n: int, cap: float) -> SimulationResult:
        return simulate(hw, trace_workload(np.zeros(n), np.full(n, 16), np.full(n, 2)), max_batch=256,
                        kv_tokens=1_000_000, front_end=True, front_end_max_s=cap)

    alone_serial, alone_capped = served(1, math.inf), served(1, 0.005)
    assert alone_capped.ttft.mean_s == pytest.approx(alone_serial.ttft.mean_s, rel=1e-9)
    assert alone_serial.ttft.mean_s >= 0.05
    serial, capped = served(200, math.inf), served(200, 0.005)
    assert serial.ttft.p99_s >= 0.98 * 200 * 0.05  # the last ones waited for every one before them
    assert capped.ttft.p99_s < 200 * 0.005 + 0.05 + 1.0 and capped.ttft.p99_s > 0.9 * 200 * 0.005


def test_a_random_router_splits_a_poisson_stream_into_poisson_streams_and_round_robin_smooths_it() -> None:
    """A random split (a plain Service) leaves each replica's gaps as variable as the stream's (CV^2 1 for Poisson);
    round robin over n replicas sums n gaps (CV^2 1/n)."""
    arrival = generate_workload(10.0, 40_000, Traffic(100, 10), seed=1).arrival_s
    for router, expected in (("random", 1.0), ("round_robin", 0.25)):
        replica = routed(len(arrival), 4, router, seed=2)
        for r in range(4):
            gaps = np.diff(arrival[replica == r])
            assert gaps.var() / gaps.mean() ** 2 == pytest.approx(expected, rel=0.1), router
    assert routed(12, 4, "random", seed=2).tolist() == routed(12, 4, "random", seed=2).tolist()
    with pytest.raises(ValueError, match="in advance"):
        routed(3, 2, "least_outstanding")


def test_routers_behind_a_service_each_keep_their_own_turn_and_stages_take_a_replica_s_requests_in_turn() -> None:
    fronts = np.random.default_rng((ROUTE_STREAM, 7)).integers(2, size=1000)  # the router each request reaches
    replica = routed(1000, 3, "round_robin", seed=7, fronts=2)
    for f in (0, 1):  # each router's requests go 0, 1, 2, 0, 1, 2, ... from its own first one
        mine = replica[fronts == f]
        assert mine.tolist() == (np.arange(len(mine)) % 3).tolist()
    assert not np.array_equal(replica, np.arange(1000) % 3)
    # Two stages a replica: the router picks the replica, its stages alternate over what it gets.
    engines = routed(1000, 3, "random", seed=1, stages=2)
    picked = routed(1000, 3, "random", seed=1)
    assert (engines // 2).tolist() == picked.tolist()
    for r in range(3):
        stages = engines[picked == r] % 2
        assert stages.tolist() == (np.arange(len(stages)) % 2).tolist()


def test_disaggregated_pools_are_routed_on_arrival_by_the_routers_turns() -> None:
    """sglang-router picks a request's prefill and decode replicas when it arrives (it sends the request to both):
    the decode replica is the router's turn in arrival order, whatever order the prefills finish in."""
    w = generate_workload(20.0, 3000, Traffic(2000, 50, prompt_cv=1.5, output_cv=0.5), seed=3)
    transfer = np.full(len(w), 0.002)
    kwargs = dict(prefill_replicas=2, decode_replicas=3, prefill_max_batch=64, decode_max_batch=64,
                  prefill_kv_tokens=400_000, decode_kv_tokens=400_000, chunk_tokens=2048)
    one = simulate_disaggregated(HW, HW, w, transfer, **kwargs)
    assert one.replica.tolist() == (np.arange(len(w)) % 3).tolist()
    two = simulate_disaggregated(HW, HW, w, transfer, **kwargs, routers=2, route_seed=5)
    assert two.replica.tolist() == routed(len(w), 3, "round_robin", seed=5, fronts=2).tolist()
