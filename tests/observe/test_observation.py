"""read_observation through a real Prometheus (skipped without one, except in CI): the current and the older
vLLM metric names, SGLang's names, and the reasons an observation cannot be used."""

from __future__ import annotations

import pytest

from inferplan.observe.engine_metrics import SGLANG, VLLM
from inferplan.observe.observation import SETTLE_SECONDS, ObserveError, read_observation
from inferplan.observe.prometheus import PrometheusClient, PrometheusEndpoint
from tests.support.engine_standin import standin_config
from tests.support.fixtures import PrometheusFactory, StandinFactory

LATENCY = {"ttft": {"0.5": 0.08, "0.9": 0.2, "0.95": 0.3, "0.99": 0.7},
           "tpot": {"0.5": 0.03, "0.9": 0.04, "0.95": 0.045, "0.99": 0.06},
           "e2e": {"0.5": 6.0, "0.9": 12.0, "0.95": 15.0, "0.99": 25.0}}


def test_every_name_generation_is_read_and_bad_selectors_are_told(engine_standin: StandinFactory,
                                                                  prometheus: PrometheusFactory) -> None:
    standins = {
        "current": engine_standin(standin_config(labels={"model_name": "current"}, requests_per_second=40,
                                                 latency=LATENCY)),
        "legacy": engine_standin(standin_config(labels={"model_name": "legacy"}, names="legacy",
                                                requests_per_second=40, latency=LATENCY)),
        "sglang": engine_standin(standin_config(labels={"model_name": "sglang"}, family="sglang",
                                                requests_per_second=40, latency=LATENCY)),
        "idle": engine_standin(standin_config(labels={"model_name": "idle"}, requests_per_second=0)),
    }
    server = prometheus(list(standins.values()))
    # Two scrapes of the idle one too: with one, rate() has no data and the reason is TooFewSamples. An observation
    # is evaluated SETTLE_SECONDS before Prometheus' now: the waits look at that window.
    offset = f"offset {round(SETTLE_SECONDS)}s"
    server.wait_for_series('count_over_time({model_name="idle", __name__="vllm:e2e_request_latency_seconds_count"}'
                           f'[30s] {offset}) >= 2', timeout_s=60)
    for name in ("current", "legacy", "sglang"):  # two scrapes at least 20 requests apart: rate() has data
        server.wait_for_series(f'increase({{model_name="{name}", __name__=~".+e2e_request_latency_seconds_count"}}'
                               f'[30s] {offset}) > 20', timeout_s=60)
    client = PrometheusClient(PrometheusEndpoint("main", server.url))
    for name, names in (("current", VLLM), ("legacy", VLLM), ("sglang", SGLANG)):
        found = read_observation(client, names, {"model_name": name}, "30s", min_requests=10)
        assert found.requests_per_second > 0 and found.requests_in_window >= 10, name
        assert set(found.latency) == {"ttft", "tpot", "e2e"}, name
        # The configured TPOT p50 (30 ms) lies in the (25, 50] ms bucket vLLM uses.
        assert found.latency["tpot"][0.5].low == 0.025 and found.latency["tpot"][0.5].high == 0.05, name
        assert found.latency_mean["tpot"] == pytest.approx(0.03, rel=0.25), name
        assert found.prompt_mean and found.output_mean and found.running is not None, name
        assert found.kv_usage is not None, name
    assert read_observation(client, VLLM, {"model_name": "current"}, "30s", 10).kv_blocks == 20000
    with pytest.raises(ObserveError) as missing:
        read_observation(client, VLLM, {"model_name": "nobody"}, "30s", min_requests=10)
    assert missing.value.reason == "NoMatchingSeries" and "nobody" in str(missing.value)
    with pytest.raises(ObserveError) as idle:
        read_observation(client, VLLM, {"model_name": "idle"}, "30s", min_requests=10)
    assert idle.value.reason == "InsufficientTraffic"
    server.stop()
    with pytest.raises(ObserveError) as down:
        read_observation(client, VLLM, {"model_name": "current"}, "30s", min_requests=10)
    assert down.value.reason == "PrometheusUnreachable" and server.url not in str(down.value)
