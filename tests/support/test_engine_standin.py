"""The serving-engine stand-in (tests/support/engine_standin.py): its sampler, its exposition, and what a real
Prometheus makes of it (tests/support/prometheus.py; skipped without Prometheus, except in CI)."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from inferplan.observe.engine_metrics import E2E_BUCKETS, SGLANG, TPOT_BUCKETS, TTFT_BUCKETS, VLLM, token_buckets
from tests.support.engine_standin import (
    LatencyDistribution,
    RequestSampler,
    StandinConfig,
    StandinMetrics,
    SyntheticRequest,
    standin_config,
)
from tests.support.fixtures import PrometheusFactory, StandinFactory
from tests.support.prometheus import PrometheusError, PrometheusServer, promql_string

TTFT = {0.5: 0.12, 0.9: 0.35, 0.95: 0.6, 0.99: 1.8}
TPOT = {0.5: 0.04, 0.9: 0.08, 0.95: 0.12, 0.99: 0.3}
E2E = {0.5: 4.0, 0.9: 9.0, 0.95: 13.0, 0.99: 35.0}
ODD_VALUE = 'quote " backslash \\ newline \n end'


# --- the sampler ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("quantiles", [TTFT, TPOT, E2E, {0.1: 1.0, 0.5: 1.5, 0.999: 90.0}])
def test_sampler_reproduces_the_configured_quantiles(quantiles: dict[float, float]) -> None:
    dist = LatencyDistribution(quantiles)
    n = 200_000
    samples = dist.sample(np.random.default_rng(7), n)
    for p, value in quantiles.items():
        assert dist.quantile(p) == pytest.approx(value, rel=1e-12)
        assert dist.cdf(value) == pytest.approx(p, abs=1e-12)
        # The fraction of draws at or below the p-quantile is Binomial(n, p) / n: standard deviation
        # sqrt(p (1 - p) / n), at most 0.0011 here. 5 sigma (seeded, so deterministic anyway) leaves no room for a
        # wrong knot: neighbouring knots differ by at least 0.04 in p, i.e. more than 35 sigma.
        assert abs(np.mean(samples <= value) - p) <= 5 * math.sqrt(p * (1 - p) / n), (p, value)
    low, high = dist.bounds
    assert low <= samples.min() and samples.max() <= high


def test_sampler_is_lognormal_when_the_knots_are() -> None:
    median, sigma = 0.2, 0.6
    lognormal = {p: median * math.exp(sigma * z) for p, z in ((0.5, 0.0), (0.9, 1.2815515655446004),
                                                              (0.99, 2.3263478740408408))}
    dist = LatencyDistribution(lognormal)
    for p, z in ((0.01, -2.3263478740408408), (0.25, -0.6744897501960817), (0.999, 3.090232306167813)):
        assert dist.quantile(p) == pytest.approx(median * math.exp(sigma * z), rel=1e-9)


def test_sampler_tails_are_capped() -> None:
    dist = LatencyDistribution(TTFT)
    low, high = dist.bounds
    assert 0 < low < TTFT[0.5] and TTFT[0.99] < high < TTFT[0.99] * (TTFT[0.99] / TTFT[0.95]) ** 2.1
    assert dist.cdf(low / 2) == 0.0 and dist.cdf(high) == 1.0
    assert dist.quantile(1 - 1e-9) == pytest.approx(high)


@pytest.mark.parametrize("quantiles", [{0.5: 1.0}, {0.5: 1.0, 0.9: 1.0}, {0.5: 2.0, 0.9: 1.0}, {0.0: 1.0, 0.5: 2.0},
                                       {0.5: -1.0, 0.9: 1.0}, {"0.5": 1.0, "0.50": 2.0}])
def test_sampler_rejects_bad_quantiles(quantiles: dict[float, float]) -> None:
    with pytest.raises(ValueError):
        LatencyDistribution(quantiles)


def test_request_sampler_token_means() -> None:
    config = StandinConfig.from_dict(standin_config(prompt_tokens={"mean": 800, "cv": 0.5},
                                                    output_tokens={"mean": 150, "cv": 0}))
    sampler = RequestSampler(config)
    rng = np.random.default_rng(3)
    requests = [sampler.draw(rng) for _ in range(20_000)]
    prompts = np.array([r.prompt_tokens for r in requests])
    # standard error of the mean 800 * 0.5 / sqrt(20000) = 2.8 tokens; rounding moves the mean by < 0.5
    assert abs(prompts.mean() - 800) < 5 * 2.8 + 0.5
    assert np.std(prompts) / prompts.mean() == pytest.approx(0.5, rel=0.05)
    assert {r.output_tokens for r in requests} == {150}


# --- the configuration ---------------------------------------------------------------------------------------

def test_config_round_trips_and_validates() -> None:
    data = standin_config(family="sglang", names="legacy", labels={"model_name": ODD_VALUE},
                          requests_per_second=3, latency={"ttft": TTFT}, cache_config=None, seed=5)
    assert data["latency"]["ttft"] == {"0.5": 0.12, "0.9": 0.35, "0.95": 0.6, "0.99": 1.8}
    assert StandinConfig.from_dict(data).to_dict() == data
    assert StandinConfig.from_dict(data).latency["tpot"] == StandinConfig().latency["tpot"]
    for bad in ({"family": "tgi"}, {"names": "old"}, {"labels": {"le": "x"}}, {"labels": {"bad-name": "x"}},
                {"labels": {"finished_reason": "x"}}, {"requestsPerSecond": -1}, {"kvCacheUsage": 1.5},
                {"latency": {"itl": TTFT}}, {"promptTokens": {"mean": 0}}, {"requestPerSecond": 1}):
        with pytest.raises(ValueError):
            StandinConfig.from_dict(bad)


# --- the exposition, without Prometheus ----------------------------------------------------------------------

def _families(config: dict) -> dict[str, object]:
    metrics = StandinMetrics(StandinConfig.from_dict(config))
    metrics.observe(SyntheticRequest(prompt_tokens=100, output_tokens=20, ttft=0.3, tpot=0.05, e2e=2.0))
    text = metrics.exposition().decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


def test_exposition_vllm_current_names_and_labels() -> None:
    families = _families(standin_config(labels={"model_name": "m", "note": ODD_VALUE}, running=7, waiting=2,
                                        kv_cache_usage=0.25, cache_config={"numGpuBlocks": 1234, "blockSize": 16}))
    for names in (VLLM.ttft, VLLM.tpot, VLLM.e2e, VLLM.prompt_tokens, VLLM.output_tokens):
        assert names[0] in families
    assert VLLM.tpot[-1] not in families and VLLM.kv_usage[-1] not in families
    ttft = families[VLLM.ttft[0]]
    bounds = [float(s.labels["le"]) for s in ttft.samples if s.name.endswith("_bucket")]
    assert bounds == [*TTFT_BUCKETS, math.inf]
    prompt = families[VLLM.prompt_tokens[0]]
    assert [float(s.labels["le"]) for s in prompt.samples if s.name.endswith("_bucket")][:-1] == list(
        map(float, token_buckets(32768)))
    assert all(s.labels["note"] == ODD_VALUE and s.labels["model_name"] == "m" for f in families.values()
               for s in f.samples)
    values = {s.name: s for f in families.values() for s in f.samples}
    assert values["vllm:num_requests_running"].value == 7 and values["vllm:num_requests_waiting"].value == 2
    assert values["vllm:kv_cache_usage_perc"].value == 0.25
    info = values["vllm:cache_config_info"]
    assert (info.labels["num_gpu_blocks"], info.labels["block_size"], info.value) == ("1234", "16", 1)
    success = values["vllm:request_success_total"]
    assert (success.labels["finished_reason"], success.value) == ("stop", 1)
    assert values["vllm:prompt_tokens_total"].value == 100 and values["vllm:generation_tokens_total"].value == 20


def test_exposition_legacy_and_sglang_names() -> None:
    legacy = _families(standin_config(names="legacy"))
    assert "vllm:time_per_output_token_seconds" in legacy and "vllm:gpu_cache_usage_perc" in legacy
    assert "vllm:inter_token_latency_seconds" not in legacy and "vllm:kv_cache_usage_perc" not in legacy
    both = _families(standin_config(names="both"))
    assert {VLLM.tpot[0], VLLM.tpot[-1], VLLM.kv_usage[0], VLLM.kv_usage[-1]} <= set(both)
    sglang = _families(standin_config(family="sglang"))
    assert {SGLANG.ttft[0], SGLANG.tpot[0], SGLANG.e2e[0], SGLANG.running[0], SGLANG.waiting[0],
            SGLANG.kv_usage[0], "sglang:num_requests"} <= set(sglang)
    assert not any(name.startswith("vllm:") for name in sglang)
    assert "sglang:request_prompt_tokens" not in sglang  # SGLang has no per-request token histograms


# --- through a real Prometheus -------------------------------------------------------------------------------

def _bracket(dist: LatencyDistribution, q: float, bounds: Sequence[float], n: float) -> tuple[float, float]:
    """Where histogram_quantile(q) may land given n observations: between the highest bucket bound that is
    certainly below the q-quantile and the lowest that is certainly above it.

    The empirical fraction at or below a bound b is Binomial(n, F(b)) / n, standard deviation
    sqrt(F (1 - F) / n); "certainly" is 4 standard deviations, plus 0.002: all bucket series share their sample
    times, so rate() extrapolates them alike, except where its zero-point limit applies to a bucket that was
    still empty at the window's start (only the rarest ones, F(b) n well below 1). histogram_quantile
    interpolates linearly inside the bucket where the rank q*n falls, so its result lies between the two bounds.
    """
    def margin(b: float) -> float:
        f = dist.cdf(b)
        return 4 * math.sqrt(f * (1 - f) / n) + 0.002

    low = max([0.0] + [b for b in bounds if dist.cdf(b) + margin(b) < q])
    high = min([b for b in bounds if dist.cdf(b) - margin(b) >= q], default=bounds[-1])
    return low, high


def _first_sample_time(prom: PrometheusServer, selector: str) -> float:
    (series,) = prom.query(f"{selector}[5m]")
    return float(series["values"][0][0])


def test_through_prometheus(engine_standin: StandinFactory, prometheus: PrometheusFactory) -> None:
    rps = 100.0
    current = engine_standin(standin_config(
        labels={"model_name": "llama-3-8b", "namespace": "serving"}, requests_per_second=rps,
        latency={"ttft": TTFT, "tpot": TPOT, "e2e": E2E}, running=12, waiting=3, kv_cache_usage=0.42,
        cache_config={"numGpuBlocks": 4321, "blockSize": 16}, seed=11))
    legacy = engine_standin(standin_config(names="legacy", labels={"model_name": "legacy", "note": ODD_VALUE},
                                           requests_per_second=2, kv_cache_usage=0.77, seed=12))
    prom = prometheus([current, legacy], scrape_interval="1s")

    sel = '{model_name="llama-3-8b"}'
    prom.wait_for_series(f"vllm:e2e_request_latency_seconds_count{sel}", timeout_s=25)
    prom.wait_for_series('vllm:time_per_output_token_seconds_count{model_name="legacy"}', timeout_s=10)

    # Names: current ones from one stand-in, legacy ones from the other, and nothing else.
    assert prom.value(f"vllm:kv_cache_usage_perc{sel}") == 0.42
    assert prom.value(f"vllm:num_requests_running{sel}") == 12 and prom.value(f"vllm:num_requests_waiting{sel}") == 3
    assert prom.query(f"vllm:gpu_cache_usage_perc{sel}") == []
    assert prom.query(f"vllm:time_per_output_token_seconds_count{sel}") == []
    assert prom.query('vllm:inter_token_latency_seconds_count{model_name="legacy"}') == []
    assert prom.query('vllm:kv_cache_usage_perc{model_name="legacy"}') == []
    (info,) = prom.query(f"vllm:cache_config_info{sel}")
    assert (info["metric"]["num_gpu_blocks"], info["metric"]["block_size"]) == ("4321", "16")
    (success,) = prom.query(f"vllm:request_success_total{sel}")
    assert success["metric"]["finished_reason"] == "stop" and success["metric"]["namespace"] == "serving"

    # A label value with a quote, a backslash and a newline survives the exposition, the scrape and a query.
    (odd,) = prom.query(f"vllm:gpu_cache_usage_perc{{note={promql_string(ODD_VALUE)}}}")
    assert odd["metric"]["note"] == ODD_VALUE and float(odd["value"][1]) == 0.77

    # rate() over 30 s needs 30 s of samples: wait (no assertion on time) until the first one is that old.
    first = _first_sample_time(prom, f"vllm:e2e_request_latency_seconds_count{sel}")
    while time.time() < first + 31:
        time.sleep(0.25)

    # Request rate: the count in 30 s is Poisson(30 rps), standard deviation sqrt(30 rps); 4 of them, plus 5 %
    # for rate()'s extrapolation to the window's edges (up to half a scrape interval each side).
    at = time.time()  # both rates over the same window: a scrape landing between two queries would shift it
    observed_rps = prom.value(f"sum(rate(vllm:e2e_request_latency_seconds_count{sel}[30s]))", at)
    assert abs(observed_rps - rps) <= 4 * math.sqrt(rps * 30) / 30 + 0.05 * rps, observed_rps
    # the stand-in increments both counters together under one lock: every scrape sees them equal
    assert prom.value(f"sum(rate(vllm:request_success_total{sel}[30s]))", at) == pytest.approx(observed_rps, rel=1e-9)

    # Quantiles from the histograms land in (or next to) the configured quantile's bucket.
    n = prom.value(f"sum(increase(vllm:time_to_first_token_seconds_count{sel}[30s]))")
    assert n > 0.7 * rps * 30
    for metric, quantiles, bounds in (("vllm:time_to_first_token_seconds", TTFT, TTFT_BUCKETS),
                                      (VLLM.tpot[0], TPOT, TPOT_BUCKETS),  # what the stand-in exports
                                      ("vllm:e2e_request_latency_seconds", E2E, E2E_BUCKETS)):
        dist = LatencyDistribution(quantiles)
        for q, configured in quantiles.items():
            observed = prom.value(f"histogram_quantile({q}, sum by (le) (rate({metric}_bucket{sel}[30s])))")
            low, high = _bracket(dist, q, bounds, n)
            assert low <= configured <= high
            assert low <= observed <= high, (metric, q, configured, observed, (low, high))

    current.stop()
    assert current.exit_code == 0  # SIGTERM stops it cleanly

    # An outage: stopped, Prometheus is unreachable; started again it answers on the same URL.
    url = prom.url
    prom.stop()
    with pytest.raises(PrometheusError) as outage:
        prom.query("vector(1)")
    assert outage.value.kind == "unreachable"
    prom.start()
    assert prom.url == url and prom.value("vector(1)") == 1
