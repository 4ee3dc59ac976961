"""The metric names serving engines export, per engine family, and the bucket bounds vLLM uses.

Each metric lists its names newest first: a deployment exports one of them (or, across an upgrade, both); the
queries take the first that has data (PromQL `or`). Histograms are named without the `_bucket` / `_sum` /
`_count` suffix.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineMetrics:
    """Names of one engine family's series; each a tuple of names, the current one first."""

    family: str
    ttft: tuple[str, ...]                # histogram [s]: time to first token, one observation per request
    tpot: tuple[str, ...]                # histogram [s]: time per output token, per request where the engine
                                         # exports that (what the planner predicts), else per token (inter-token)
    e2e: tuple[str, ...]                 # histogram [s]: end-to-end request latency
    prompt_tokens: tuple[str, ...]       # histogram [tokens] per request (empty: not exported)
    output_tokens: tuple[str, ...]       # histogram [tokens] per request (empty: not exported)
    prompt_tokens_total: tuple[str, ...]   # counter [tokens]
    output_tokens_total: tuple[str, ...]   # counter [tokens]
    running: tuple[str, ...]             # gauge: requests in the running batch
    waiting: tuple[str, ...]             # gauge: requests waiting for admission
    kv_usage: tuple[str, ...]            # gauge: fraction of the KV cache in use, 0-1
    cache_config: tuple[str, ...]        # info gauge with labels num_gpu_blocks, block_size (empty: none)


VLLM = EngineMetrics(
    family="vllm",
    ttft=("vllm:time_to_first_token_seconds",),
    # Per request (0.11 on: one observation per request, its decode time over its tokens after the first), the
    # TPOT the planner predicts and SLOs state; older vLLM has only the gaps between tokens, one observation per
    # token (both names), whose upper percentiles are the steps that carry a prompt chunk, not a request's TPOT.
    tpot=("vllm:request_time_per_output_token_seconds", "vllm:inter_token_latency_seconds",
          "vllm:time_per_output_token_seconds"),
    e2e=("vllm:e2e_request_latency_seconds",),
    prompt_tokens=("vllm:request_prompt_tokens",),
    output_tokens=("vllm:request_generation_tokens",),
    prompt_tokens_total=("vllm:prompt_tokens_total",),
    output_tokens_total=("vllm:generation_tokens_total",),
    running=("vllm:num_requests_running",),
    waiting=("vllm:num_requests_waiting",),
    kv_usage=("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    cache_config=("vllm:cache_config_info",),
)

SGLANG = EngineMetrics(
    family="sglang",
    ttft=("sglang:time_to_first_token_seconds",),
    tpot=("sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"),  # per token only
    e2e=("sglang:e2e_request_latency_seconds",),
    prompt_tokens=(),
    output_tokens=(),
    prompt_tokens_total=("sglang:prompt_tokens_total",),
    output_tokens_total=("sglang:generation_tokens_total",),
    running=("sglang:num_running_reqs",),
    waiting=("sglang:num_queue_reqs",),
    kv_usage=("sglang:token_usage",),
    cache_config=(),
)

FAMILIES: dict[str, EngineMetrics] = {"vllm": VLLM, "sglang": SGLANG}

# vLLM's histogram bounds (vllm/v1/metrics/loggers.py), so that a stand-in and the resolution-aware comparison
# see what a real deployment exports.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0, 160.0, 640.0, 2560.0)
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
                80.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
               480.0, 960.0, 1920.0, 7680.0)


def token_buckets(max_model_len: int) -> tuple[int, ...]:
    """vLLM's 1-2-5 buckets for per-request token counts, up to `max_model_len`."""
    bounds: list[int] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_model_len:
                return tuple(bounds)
            bounds.append(value)
        exponent += 1
