"""The discrete-event simulator: determinism, conservation, KV accounting, traces, closed forms, and
agreement with the analytic single-stream model."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from inferplan.planner.performance import decode_step_s, prefill_s
from inferplan.planner.serving import single_stream
from inferplan.planner.simulate import (
    _StepModel,
    generate_workload,
    read_trace,
    simulate,
    simulate_queue,
    trace_workload,
)
from tests.test_performance import hardware

HW = hardware()


def busy_workload(seed: int = 3, requests: int = 2000):
    return generate_workload(40.0, requests, 400, 150, prompt_cv=1.0, output_cv=1.0, seed=seed)


def test_step_model_matches_decode_and_prefill_of_the_step_model() -> None:
    for name in ("meta-llama/Meta-Llama-3-8B", "mistralai/Mixtral-8x7B-v0.1", "openai/gpt-oss-20b"):
        for tp in (1, 2):
            hw = hardware(name, tp=tp)
            model = _StepModel(hw)
            for batch, ctx in ((1, 100.0), (37, 2500.0), (256, 9000.0)):
                assert model.time(batch, ctx, 0, 0.0, batch) == pytest.approx(float(decode_step_s(hw, batch, ctx)))
            for prompt in (1, 700, 8000):
                compute = prompt * model.prefill_token_compute_s(prompt)
                assert model.time(0, 0.0, prompt, compute, 1) == pytest.approx(float(prefill_s(hw, prompt)))


def test_same_seed_same_result_other_seed_differs() -> None:
    a = simulate(HW, busy_workload(3), max_batch=32, kv_tokens=20_000)
    b = simulate(HW, busy_workload(3), max_batch=32, kv_tokens=20_000)
    c = simulate(HW, busy_workload(4), max_batch=32, kv_tokens=20_000)
    np.testing.assert_array_equal(a.e2e_s, b.e2e_s)
    np.testing.assert_array_equal(a.ttft_s, b.ttft_s)
    assert a.preemptions == b.preemptions
    assert not np.array_equal(a.e2e_s, c.e2e_s)


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
    ('{"t": -1, "prompt": 3, "output": 3}', '"t"'),
    ("not json", "not JSON"),
    ('{"t": 0.1, "prompt": 3, "output": 3}', "earlier"),
])
def test_bad_trace_line_is_named(tmp_path, line: str, message: str) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_text('{"t": 0.5, "prompt": 10, "output": 3}\n\n' + line + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=f"trace.jsonl:3: .*{message}"):
        read_trace(path)


def test_gamma_arrivals_have_the_requested_rate_and_cv2() -> None:
    w = generate_workload(10.0, 100_000, 100, 10, arrival_cv2=4.0, seed=5)
    gaps = np.diff(w.arrival_s)
    assert gaps.mean() == pytest.approx(0.1, rel=0.03)
    assert gaps.var() / gaps.mean() ** 2 == pytest.approx(4.0, rel=0.1)
    lengths = generate_workload(10.0, 100_000, 500, 200, prompt_cv=1.5, seed=5).prompt_tokens
    assert lengths.mean() == pytest.approx(500, rel=0.03)
    assert lengths.std() / lengths.mean() == pytest.approx(1.5, rel=0.1)


# Closed forms, from one seeded run each. Over seeds, the mean wait of 400k requests scatters by about
# 1.5% (M/M/1 at rho 0.7) and 0.5% (M/D/1); M/M/4 at rho 0.8 scatters by 3-5% even at 400k, so it runs
# 1M requests with a 5% tolerance. Arrivals and service times use different seeds: numpy draws gamma(1)
# and exponential variates from the same stream, and one seed for both correlates them.
N = 400_000


def poisson_arrivals(rate: float, seed: int = 11, requests: int = N) -> np.ndarray:
    return generate_workload(rate, requests, 1, 1, seed=seed).arrival_s


def test_mm1_mean_wait() -> None:
    mu, rho = 1.0, 0.7
    lam = rho * mu
    r = simulate_queue(poisson_arrivals(lam), lambda rng, n: rng.exponential(1 / mu, n))
    assert r.wait_mean_s == pytest.approx(rho / (mu - lam), rel=0.03)
    assert r.utilisation == pytest.approx(rho, rel=0.02)


def test_md1_mean_wait() -> None:
    mu, rho = 1.0, 0.7
    r = simulate_queue(poisson_arrivals(rho * mu), lambda rng, n: np.full(n, 1 / mu))
    assert r.wait_mean_s == pytest.approx(rho / (2 * mu * (1 - rho)), rel=0.03)


def erlang_c_wait(lam: float, mu: float, c: int) -> float:
    a = lam / mu
    rho = a / c
    top = a**c / math.factorial(c) / (1 - rho)
    p_wait = top / (sum(a**k / math.factorial(k) for k in range(c)) + top)
    return p_wait / (c * mu - lam)


def test_mmc_mean_wait_erlang_c() -> None:
    mu, c, rho = 1.0, 4, 0.8
    lam = rho * c * mu
    r = simulate_queue(poisson_arrivals(lam, requests=1_000_000), lambda rng, n: rng.exponential(1 / mu, n),
                       servers=c)
    assert r.wait_mean_s == pytest.approx(erlang_c_wait(lam, mu, c), rel=0.05)


def test_separate_queues_wait_longer_than_one_shared_queue() -> None:
    mu, c, rho = 1.0, 4, 0.8
    arrivals = poisson_arrivals(rho * c * mu)[:50_000]
    service = lambda rng, n: rng.exponential(1 / mu, n)  # noqa: E731
    central = simulate_queue(arrivals, service, c).wait_mean_s
    shortest = simulate_queue(arrivals, service, c, "least_outstanding").wait_mean_s
    split = simulate_queue(arrivals, service, c, "round_robin").wait_mean_s
    assert central < shortest < split


def test_low_load_single_replica_matches_single_stream() -> None:
    w = generate_workload(0.5, 400, 1000, 200, seed=2)
    r = simulate(HW, w, chunk_tokens=math.inf)
    analytic = single_stream(HW, 1000, 200)
    assert r.ttft.p50_s == pytest.approx(float(analytic.ttft_mean), rel=0.10)
    assert r.tpot.p50_s == pytest.approx(float(analytic.tpot_mean), rel=0.10)
    assert r.preemptions == 0
