"""Efficiency factors: what fraction of the hardware peaks an engine achieves, fitted on measurements.

Factors are per engine, with a multiplier per GPU family; they are plain data in
`data/factors.json`, written by `inferplan calibrate` (procedure in docs/calibration.md) and never
chosen per measurement row.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from functools import cache
from importlib import resources
from typing import Any

from inferplan.planner.engines import base_line, engine_of_line, factor_key

ENGINE_FACTOR_NAMES = (
    "bandwidth_efficiency",       # achieved / peak memory bandwidth on weight and KV reads [0-1]
    "decode_compute_efficiency",  # achieved / peak tensor FLOPS on decode-step matmuls [0-1]
    "prefill_compute_efficiency", # achieved / peak tensor FLOPS on prefill [0-1]
    "overlap_penalty",            # share of the smaller of memory and compute time not hidden [0-1]
    "step_overhead_ms",           # per engine step: scheduling, kernel launches, sampling [ms]
    "sequence_overhead_ms",       # per running sequence per step: sampler, detokenise, bookkeeping [ms]
    "request_overhead_ms",        # per request on an online server: HTTP, tokenising, first stream chunk [ms]
    "quantized_bandwidth_scale",  # weight-only int4/int8 kernels (GPTQ, AWQ): dequantisation cost on bandwidth [0-1]
    "expert_quantized_bandwidth_scale",  # the same for MoE expert-only formats (MXFP4) on expert reads [0-1]
    "quantized_compute_scale",    # GPTQ/AWQ matmuls: dequantisation cost on tensor throughput (large batches) [0-1]
    "non_torch_gib",              # memory outside the PyTorch allocator: CUDA context, NCCL, cuBLAS [GiB]
    "activation_scale",           # profiled activation peak relative to the analytic estimate [-]
    "sm_stream_gb_s",             # most one SM streams from memory with the engine's own kernels [GB/s per SM]
)
# A per-SM rate no GPU in the catalog comes near (rated bandwidth / SMs is at most about 55 GB/s): no cap. It is
# the prior, and the value a factors file that predates the factor gets.
NO_SM_CAP_GB_S = 100.0
FAMILY_FACTOR_NAMES = (
    "bandwidth_scale",   # multiplies the engine's bandwidth efficiency on this GPU family [-]
    "compute_scale",     # multiplies the engine's compute efficiencies on this GPU family [-]
    "attention_scale",   # efficiency of the paged-attention KV reads relative to weight reads [-]
    "overhead_scale",    # multiplies the engine's per-step and per-sequence overheads on this family's
                         # software stack (kernel launches, graph capture: ROCm stacks without HIP graphs) [-]
)


@dataclass(frozen=True)
class EngineFactors:
    bandwidth_efficiency: float
    decode_compute_efficiency: float
    prefill_compute_efficiency: float
    overlap_penalty: float
    step_overhead_ms: float
    sequence_overhead_ms: float
    request_overhead_ms: float
    quantized_bandwidth_scale: float
    non_torch_gib: float
    activation_scale: float
    sm_stream_gb_s: float = NO_SM_CAP_GB_S
    expert_quantized_bandwidth_scale: float = 0.8
    quantized_compute_scale: float = 1.0


@dataclass(frozen=True)
class FamilyFactors:
    bandwidth_scale: float = 1.0
    compute_scale: float = 1.0
    attention_scale: float = 1.0
    overhead_scale: float = 1.0


@dataclass(frozen=True)
class FactorSet:
    engines: dict[str, EngineFactors]
    families: dict[str, FamilyFactors]
    default_engine: EngineFactors
    meta: dict[str, Any]
    # (engine, GPU key) -> that engine's factors on that GPU type, fitted online from a deployment's
    # observed latencies (inferplan.planner.online); they replace the engine's factors for that GPU only.
    overrides: dict[tuple[str, str], EngineFactors] = field(default_factory=dict)

    def engine(self, name: str) -> EngineFactors:
        """The factors of factor line `name` (`engines.factor_key`); a stack line without factors of its own
        (`vllm-rocm`) has its engine's (`vllm`), an engine without any the neutral prior."""
        return self.engines.get(name) or self.engines.get(base_line(name), self.default_engine)

    def engine_on(self, name: str, gpu_key: str, vendor: str) -> EngineFactors:
        """Engine `name`'s factors (its current release) on one GPU type of `vendor`: an online override where
        there is one, else its factor line on that vendor's software stack."""
        return self.overrides.get((name, gpu_key)) or self.engine(factor_key(name, None, vendor))

    def lines_measured_on(self, engine: str, family: str) -> dict[str, int]:
        """Every factor line of `engine` (its releases, its stacks; `factor_key`) with the measured lines on GPU
        `family` it was fitted on: what a plan's provenance cites."""
        counts = self.meta.get("rows_by_engine_family", {})
        return {line: int(by_family[family]) for line, by_family in sorted(counts.items())
                if engine_of_line(line) == engine and by_family.get(family)}

    def family(self, name: str) -> FamilyFactors:
        return self.families.get(name, FamilyFactors())

    def to_json(self) -> dict[str, Any]:
        def as_dict(obj: object) -> dict[str, float]:
            return {f.name: round(float(getattr(obj, f.name)), 5) for f in fields(obj)}  # type: ignore[arg-type]

        return {
            "meta": self.meta,
            "default_engine": as_dict(self.default_engine),
            "engines": {k: as_dict(v) for k, v in sorted(self.engines.items())},
            "families": {k: as_dict(v) for k, v in sorted(self.families.items())},
        }


def parse_factors(data: dict[str, Any]) -> FactorSet:
    """Build a FactorSet from its JSON form; a missing or non-positive factor is an error naming it."""

    def engine(name: str, raw: dict[str, Any]) -> EngineFactors:
        # Files written before these factors existed: no per-SM cap; one dequantisation scale for every format,
        # on bandwidth only.
        raw = {"sm_stream_gb_s": NO_SM_CAP_GB_S, "quantized_compute_scale": 1.0,
               "expert_quantized_bandwidth_scale": raw.get("quantized_bandwidth_scale", 0.8)} | raw
        missing = [f for f in ENGINE_FACTOR_NAMES if f not in raw]
        if missing:
            raise ValueError(f"factors for engine {name!r}: missing {', '.join(missing)}")
        values = {f: float(raw[f]) for f in ENGINE_FACTOR_NAMES}
        bad = [f for f, v in values.items() if v < 0 or (v == 0 and f.endswith(("efficiency", "scale")))]
        if bad:
            raise ValueError(f"factors for engine {name!r}: out of range: {', '.join(bad)}")
        return EngineFactors(**values)

    families = {
        name: FamilyFactors(**{f: float(raw.get(f, 1.0)) for f in FAMILY_FACTOR_NAMES})
        for name, raw in data.get("families", {}).items()
    }
    return FactorSet(
        engines={name: engine(name, raw) for name, raw in data["engines"].items()},
        families=families,
        default_engine=engine("default", data["default_engine"]),
        meta=dict(data.get("meta", {})),
    )


@cache
def load_factors() -> FactorSet:
    """The fitted factors shipped with the package."""
    text = resources.files("inferplan.planner").joinpath("data/factors.json").read_text(encoding="utf-8")
    return parse_factors(json.loads(text))
