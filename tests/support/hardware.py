"""A step-model Hardware for tests of the performance model, the queueing model and the simulator: round
factors (80% of peak bandwidth, no overheads) so that expected values can be computed by hand."""

from __future__ import annotations

from inferplan.planner.architectures import resolve_model
from inferplan.planner.engines import engine_profile
from inferplan.planner.factors import EngineFactors, FamilyFactors
from inferplan.planner.gpus import resolve_gpu
from inferplan.planner.performance import Hardware, build_hardware
from inferplan.planner.precisions import weight_precision

FACTORS = EngineFactors(
    bandwidth_efficiency=0.8, decode_compute_efficiency=0.5, prefill_compute_efficiency=0.6,
    overlap_penalty=0.0, step_overhead_ms=0.0, sequence_overhead_ms=0.0, request_overhead_ms=0.0,
    quantized_bandwidth_scale=1.0, expert_quantized_bandwidth_scale=1.0,
    non_torch_gib=0.3, activation_scale=1.0,
)


def hardware(model: str = "meta-llama/Meta-Llama-3-8B", gpu: str = "NVIDIA-H100-80GB-HBM3", weights: str = "bf16",
             tp: int = 1, factors: EngineFactors = FACTORS) -> Hardware:
    return build_hardware(resolve_model(model), resolve_gpu(gpu), weight_precision(weights), 2.0,
                          engine_profile("vllm"), factors, FamilyFactors(), tp)
