"""Step-model Hardware for tests of the performance model, the queueing model and the simulator.

`hardware` gives a deployment whose rates are round shares of its GPU's rated figures (80% of the memory bandwidth
on weights, experts and KV; half the 16-bit tensor peak at decode, 0.6 of it at prefill and in prefill attention;
no overlap of memory and compute time; no engine overheads), so that expected values can be computed by hand. Its
sizes (bytes and FLOPs per token, layers, experts, all-reduces) are the model's, from `build_hardware`, and so are
its links. `measured_hardware` is the same deployment with the rates `build_hardware` reads from the kernel tables.
"""

from __future__ import annotations

from dataclasses import replace

from inferplan.planner.catalog.engines import engine_profile
from inferplan.planner.catalog.gpus import resolve_gpu
from inferplan.planner.catalog.model_configs import resolve_model
from inferplan.planner.catalog.precisions import weight_precision
from inferplan.planner.model.factors import EngineFactors
from inferplan.planner.model.performance import Hardware, build_hardware

# No engine time on top of the kernels: expected step times are the kernels' alone.
FACTORS = EngineFactors(step_overhead_ms=0.0, sequence_overhead_ms=0.0, request_overhead_ms=0.0,
                        non_torch_gib=0.3, activation_scale=1.0, eager_layer_ms=0.0)

BANDWIDTH_SHARE = 0.8  # of the rated memory bandwidth, on weights, experts and KV
DECODE_SHARE = 0.5     # of the 16-bit tensor peak, on a decode token's FLOPs
PREFILL_SHARE = 0.6    # ... on a prompt token's FLOPs and on prefill attention


def measured_hardware(model: str = "meta-llama/Meta-Llama-3-8B", gpu: str = "NVIDIA-H100-80GB-HBM3",
                      weights: str = "bf16", tp: int = 1, factors: EngineFactors = FACTORS, engine: str = "vllm",
                      kv_bytes: float = 2.0, pp: int = 1) -> Hardware:
    """The deployment as the planner builds it: rates from the measured kernel tables."""
    return build_hardware(resolve_model(model), resolve_gpu(gpu), weight_precision(weights), kv_bytes,
                          engine_profile(engine), factors, tp, pp)


def hardware(model: str = "meta-llama/Meta-Llama-3-8B", gpu: str = "NVIDIA-H100-80GB-HBM3", weights: str = "bf16",
             tp: int = 1, factors: EngineFactors = FACTORS) -> Hardware:
    """The deployment with round rates (module docstring); `factors` give its engine overheads."""
    spec = resolve_gpu(gpu)
    bandwidth = spec.memory_bandwidth_gb_s * 1e9 * BANDWIDTH_SHARE
    peak = spec.fp16_tflops * 1e12
    return replace(measured_hardware(model, gpu, weights, tp, factors),
                   bandwidth_bytes_s=bandwidth, expert_bandwidth_bytes_s=bandwidth, kv_bandwidth_bytes_s=bandwidth,
                   decode_flops_s=peak * DECODE_SHARE, prefill_flops_s=peak * PREFILL_SHARE,
                   attention_flops_s=peak * PREFILL_SHARE, overlap_penalty=0.0)
