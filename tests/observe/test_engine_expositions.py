"""read_observation through a real Prometheus against expositions laid out as the engines themselves lay them out
(skipped without Prometheus, except in CI).

The stand-in of tests/support/engine_standin.py puts one set of constant labels on every series. The engines do
not: vLLM 0.11 (vllm/v1/metrics/loggers.py) labels its series `model_name` and `engine` (the engine index), but
its info gauge `vllm:cache_config_info` carries the CacheConfig's fields and `engine`, no `model_name`; SGLang
0.5 (sglang/srt/metrics/collector.py) labels the tokenizer's series `model_name` and the scheduler's gauges
`model_name`, `engine_type`, `tp_rank`, `pp_rank`. Each fake engine here serves such an exposition, its counters
growing at a fixed rate of identical requests, so that every figure read back is known exactly.
"""

from __future__ import annotations

import http.server
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import pytest

from inferplan.observe.engine_metrics import E2E_BUCKETS, SGLANG, TPOT_BUCKETS, TTFT_BUCKETS, VLLM
from inferplan.observe.observation import SETTLE_SECONDS, ObserveError, read_observation
from inferplan.observe.prometheus import PrometheusClient, PrometheusEndpoint
from tests.support.fixtures import PrometheusFactory
from tests.support.prometheus import serve_exposition

# SGLang 0.5.4's default buckets (TokenizerMetricsCollector).
SGLANG_TTFT = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
SGLANG_ITL = (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080, 0.100,
              0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000)
SGLANG_E2E = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200, 1800, 2400)

TTFT, ITL, E2E, PROMPT, OUTPUT = 0.07, 0.03, 6.0, 500, 200  # every request's
# vLLM's gaps between tokens as chunked prefill makes them: most steps decode only, the steps a prompt chunk shares
# are slower. Each request's mean time per output token (the TPOT the planner predicts, per request) is TPOT.
GAPS = ((0.02, OUTPUT - 1 - 20), (0.2, 20))
TPOT = sum(gap * count for gap, count in GAPS) / (OUTPUT - 1)


def _le(bound: float) -> str:
    """A bucket bound as prometheus_client writes it (`0.3`, `1.0`, `2560.0`)."""
    return repr(float(bound))


def _labels(labels: Mapping[str, str]) -> str:
    return ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))


def _histogram(name: str, labels: Mapping[str, str], buckets: Sequence[float],
               observed: Sequence[tuple[float, float]]) -> list[str]:
    """A histogram's lines after `count` observations of each (value, count)."""
    lines = [f"# TYPE {name} histogram"]
    for bound in buckets:
        below = sum(count for value, count in observed if value <= bound)
        lines.append(f"{name}_bucket{{{_labels({**labels, 'le': _le(bound)})}}} {float(below)}")
    total = float(sum(count for _, count in observed))
    lines.append(f"{name}_bucket{{{_labels({**labels, 'le': '+Inf'})}}} {total}")
    lines.append(f"{name}_count{{{_labels(labels)}}} {total}")
    lines.append(f"{name}_sum{{{_labels(labels)}}} {sum(value * count for value, count in observed)}")
    return lines


def _sample(kind: str, name: str, labels: Mapping[str, str], value: float) -> list[str]:
    return [f"# TYPE {name.removesuffix('_total')} {kind}", f"{name}{{{_labels(labels)}}} {float(value)}"]


@dataclass
class FakeEngine:
    """One engine process's /metrics: `family` "vllm" (engine index 0) or "sglang" (TP rank 0), serving
    `model`; `requests_per_second` identical requests (TTFT, ITL, E2E, PROMPT, OUTPUT) from its start."""

    family: str
    model: str
    requests_per_second: float = 20.0
    running: float = 5.0
    waiting: float = 1.0
    kv_usage: float = 0.25
    num_gpu_blocks: int = 20000
    started: float = field(default_factory=time.monotonic)
    serving: bool = True  # False: the pod is gone (its scrape finds no series, which Prometheus then marks stale)

    def exposition(self) -> str:
        if not self.serving:
            return ""
        n = float(int(self.requests_per_second * (time.monotonic() - self.started)))
        lines: list[str] = []
        if self.family == "vllm":
            own = {"model_name": self.model, "engine": "0"}
            lines += _sample("gauge", "vllm:num_requests_running", own, self.running)
            lines += _sample("gauge", "vllm:num_requests_waiting", own, self.waiting)
            lines += _sample("gauge", "vllm:kv_cache_usage_perc", own, self.kv_usage)
            lines += _sample("counter", "vllm:prompt_tokens_total", own, n * PROMPT)
            lines += _sample("counter", "vllm:generation_tokens_total", own, n * OUTPUT)
            lines += _sample("counter", "vllm:request_success_total", {**own, "finished_reason": "stop"}, n)
            gaps = [(gap, n * count) for gap, count in GAPS]  # observed per token after the first
            lines += _histogram("vllm:time_to_first_token_seconds", own, TTFT_BUCKETS, [(TTFT, n)])
            lines += _histogram("vllm:time_per_output_token_seconds", own, TPOT_BUCKETS, gaps)  # deprecated in 0.11
            lines += _histogram("vllm:inter_token_latency_seconds", own, TPOT_BUCKETS, gaps)
            lines += _histogram("vllm:request_time_per_output_token_seconds", own, TPOT_BUCKETS, [(TPOT, n)])
            lines += _histogram("vllm:e2e_request_latency_seconds", own, E2E_BUCKETS, [(E2E, n)])
            cache = {"block_size": "16", "cache_dtype": "auto", "enable_prefix_caching": "True", "engine": "0",
                     "gpu_memory_utilization": "0.9", "num_cpu_blocks": "None",
                     "num_gpu_blocks": str(self.num_gpu_blocks), "swap_space": "4"}
            lines += _sample("gauge", "vllm:cache_config_info", cache, 1.0)
        else:
            own = {"model_name": self.model}
            scheduler = {**own, "engine_type": "unified", "tp_rank": "0", "pp_rank": "0"}
            lines += _sample("gauge", "sglang:num_running_reqs", scheduler, self.running)
            lines += _sample("gauge", "sglang:num_queue_reqs", scheduler, self.waiting)
            lines += _sample("gauge", "sglang:token_usage", scheduler, self.kv_usage)
            lines += _sample("counter", "sglang:prompt_tokens_total", own, n * PROMPT)
            lines += _sample("counter", "sglang:generation_tokens_total", own, n * OUTPUT)
            lines += _sample("counter", "sglang:num_requests_total", own, n)
            lines += _histogram("sglang:time_to_first_token_seconds", own, SGLANG_TTFT, [(TTFT, n)])
            lines += _histogram("sglang:inter_token_latency_seconds", own, SGLANG_ITL, [(ITL, n * (OUTPUT - 1))])
            lines += _histogram("sglang:e2e_request_latency_seconds", own, SGLANG_E2E, [(E2E, n)])
        return "\n".join(lines) + "\n"


@pytest.fixture
def fake_engines() -> Iterator[list[tuple[FakeEngine, str]]]:
    """Start FakeEngines with `serve(engine) -> "127.0.0.1:PORT"`; all stopped at teardown."""
    servers: list[http.server.ThreadingHTTPServer] = []

    class Started(list):
        def serve(self, engine: FakeEngine) -> str:
            httpd = serve_exposition(lambda: engine.exposition().encode())
            servers.append(httpd)
            target = f"127.0.0.1:{httpd.server_address[1]}"
            self.append((engine, target))
            return target

    try:
        yield Started()
    finally:
        for httpd in servers:
            httpd.shutdown()
            httpd.server_close()


def test_what_vllm_and_sglang_export_is_read_whole(fake_engines, prometheus: PrometheusFactory) -> None:
    """Two vLLM replicas of one model and an SGLang one, as the engines label their series. The KV blocks are the
    replicas' together, read from `vllm:cache_config_info` although it has no `model_name` label (it was read
    with the selector's matchers, so a `model_name` selector found none; and two replicas of the same size were
    counted once)."""
    targets = [fake_engines.serve(FakeEngine("vllm", "llama")), fake_engines.serve(FakeEngine("vllm", "llama")),
               fake_engines.serve(FakeEngine("sglang", "qwen", num_gpu_blocks=0))]
    server = prometheus(targets)
    # Every target's samples span the whole window, which ends SETTLE_SECONDS before now (a window only partly
    # covered gives rate() a lower figure).
    span = 10 + round(SETTLE_SECONDS) + 1
    server.wait_for_series(f'count(count_over_time({{__name__=~".+:e2e_request_latency_seconds_count"}}[{span}s]) '
                           f'>= {span}) >= 3', timeout_s=60)
    client = PrometheusClient(PrometheusEndpoint("main", server.url))

    llama = read_observation(client, VLLM, {"model_name": "llama"}, "10s", min_requests=10)
    assert llama.kv_blocks == 2 * 20000 and llama.block_size == 16
    assert llama.running == pytest.approx(2 * 5.0) and llama.waiting == pytest.approx(2 * 1.0)
    assert llama.kv_usage == pytest.approx(0.25)
    assert llama.requests_per_second == pytest.approx(2 * 20.0, rel=0.1)
    # One instant for every query: the token counters' rate over the request rate is each request's 500 / 200
    # exactly, and the requests in the window are the rate times the window (with a query each at its own "now",
    # a scrape between two of them made the mean 501.6 tokens).
    assert llama.requests_in_window == pytest.approx(llama.requests_per_second * 10)
    assert llama.prompt_mean == pytest.approx(PROMPT) and llama.output_mean == pytest.approx(OUTPUT)
    assert llama.latency_mean == pytest.approx({"ttft": TTFT, "tpot": TPOT, "e2e": E2E})
    assert (llama.latency["ttft"][0.5].low, llama.latency["ttft"][0.5].high) == (0.06, 0.08)
    # TPOT percentiles over requests, as the planner predicts them (vllm:request_time_per_output_token_seconds),
    # not over the gaps between tokens, whose p95 and p99 are the steps that carry a prompt chunk (0.2 s).
    for q in (0.5, 0.9, 0.95, 0.99):
        assert (llama.latency["tpot"][q].low, llama.latency["tpot"][q].high) == (0.025, 0.05), q
    assert (llama.latency["e2e"][0.9].low, llama.latency["e2e"][0.9].high) == (5.0, 10.0)

    qwen = read_observation(client, SGLANG, {"model_name": "qwen"}, "10s", min_requests=10)
    assert qwen.kv_blocks is None and qwen.block_size is None  # SGLang has no cache_config_info
    assert qwen.running == pytest.approx(5.0) and qwen.waiting == pytest.approx(1.0)
    assert qwen.kv_usage == pytest.approx(0.25)
    assert qwen.prompt_mean == pytest.approx(PROMPT) and qwen.output_mean == pytest.approx(OUTPUT)
    assert qwen.latency_mean == pytest.approx({"ttft": TTFT, "tpot": ITL, "e2e": E2E})
    assert (qwen.latency["ttft"][0.5].low, qwen.latency["ttft"][0.5].high) == (0.0, 0.1)
    assert (qwen.latency["tpot"][0.5].low, qwen.latency["tpot"][0.5].high) == (0.025, 0.03)


def test_a_pod_replaced_within_the_window_counts_for_the_time_it_ran(
        fake_engines, prometheus: PrometheusFactory) -> None:
    """A rollout or an eviction replaces a pod: the new pod's series are new series, and the old pod's end within
    the window. The running and waiting requests are those of all replicas together, averaged over the window: they
    were the sum of each series' own average, so two replicas, one of them replaced within the window, read as three
    (12 running where 8 ran at every instant), and the waiting per replica that keeps calibration from fitting
    prefill speed read half as high again."""
    steady = FakeEngine("vllm", "llama", running=4.0, waiting=2.0, kv_usage=0.25)
    leaving = FakeEngine("vllm", "llama", running=4.0, waiting=2.0, kv_usage=0.25)
    arriving = FakeEngine("vllm", "llama", running=4.0, waiting=2.0, kv_usage=0.25, serving=False)
    targets = [fake_engines.serve(engine) for engine in (steady, leaving, arriving)]
    server = prometheus(targets)
    window = 20
    span = window + round(SETTLE_SECONDS) + 1
    samples = 'count_over_time(vllm:e2e_request_latency_seconds_count{{instance="{}"}}[{}s])'
    server.wait_for_series(f"{samples.format(targets[1], span)} >= {span}", timeout_s=60)
    leaving.serving, arriving.started, arriving.serving = False, time.monotonic(), True
    # The replacement about half-way through the window that ends SETTLE_SECONDS before now.
    server.wait_for_series(f"{samples.format(targets[2], span)} >= {window // 2}", timeout_s=60)
    client = PrometheusClient(PrometheusEndpoint("main", server.url))

    llama = read_observation(client, VLLM, {"model_name": "llama"}, f"{window}s", min_requests=10)
    assert server.query(f"{samples.format(targets[1], window + round(SETTLE_SECONDS))} >= 3")  # the old pod's too
    assert llama.running == pytest.approx(2 * 4.0, abs=1.0)
    assert llama.waiting == pytest.approx(2 * 2.0, abs=0.5)
    assert llama.kv_usage == pytest.approx(0.25)
    assert llama.requests_per_second == pytest.approx(2 * 20.0, rel=0.15)


def test_a_selector_that_matches_two_models_is_told_not_added_up(fake_engines, prometheus: PrometheusFactory) -> None:
    """Two Deployments in the namespace serve different models, and observe.selector names only what they share
    (here the scrape job, as `namespace` would be): their requests, latencies and KV blocks were added together,
    `MetricsAvailable` True, and judged against one model's prediction. Such a selector is now SeveralModels,
    naming the models; a selector with the model_name reads that model alone."""
    targets = [fake_engines.serve(FakeEngine("vllm", "llama")), fake_engines.serve(FakeEngine("vllm", "qwen"))]
    server = prometheus(targets)
    span = 10 + round(SETTLE_SECONDS) + 1
    server.wait_for_series(f'count(count_over_time(vllm:e2e_request_latency_seconds_count[{span}s]) >= {span}) >= 2',
                           timeout_s=60)
    client = PrometheusClient(PrometheusEndpoint("main", server.url))
    with pytest.raises(ObserveError) as both:
        read_observation(client, VLLM, {"job": "engine"}, "10s", min_requests=10)
    assert both.value.reason == "SeveralModels"
    assert "2 models ('llama', 'qwen')" in str(both.value) and "model_name" in str(both.value)
    llama = read_observation(client, VLLM, {"job": "engine", "model_name": "llama"}, "10s", min_requests=10)
    assert llama.requests_per_second == pytest.approx(20.0, rel=0.1) and llama.kv_blocks == 20000


def test_a_window_shorter_than_two_scrapes_is_told_from_a_selector_that_matches_nothing(
        fake_engines, prometheus: PrometheusFactory) -> None:
    """Series that match but have fewer than the two samples in the window that rate() needs (a window shorter
    than twice the scrape interval, or an engine just started) are TooFewSamples, saying what to change: they
    were NoMatchingSeries, which sent the user to check a selector that was right."""
    server = prometheus([fake_engines.serve(FakeEngine("vllm", "llama"))], scrape_interval="2s")
    span = 10 + round(SETTLE_SECONDS) + 1
    server.wait_for_series(f'count_over_time(vllm:e2e_request_latency_seconds_count{{model_name="llama"}}[{span}s]) '
                           f'>= {span // 2 - 1}', timeout_s=60)
    client = PrometheusClient(PrometheusEndpoint("main", server.url))
    # Scraped every 2 s, a 2 s window holds one sample (two only where it begins on a scrape's millisecond).
    reasons = []
    for _ in range(3):
        try:
            read_observation(client, VLLM, {"model_name": "llama"}, "2s", min_requests=1)
            reasons.append("observed")
        except ObserveError as exc:
            reasons.append(exc.reason)
            if exc.reason == "TooFewSamples":
                assert "model_name='llama'" in str(exc) and "twice the scrape interval" in str(exc)
    assert "TooFewSamples" in reasons and "NoMatchingSeries" not in reasons, reasons
    with pytest.raises(ObserveError) as nobody:
        read_observation(client, VLLM, {"model_name": "nobody"}, "2s", min_requests=1)
    assert nobody.value.reason == "NoMatchingSeries"
    assert read_observation(client, VLLM, {"model_name": "llama"}, "10s", min_requests=1).requests_in_window > 0
