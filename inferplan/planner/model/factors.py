"""Engine factors: what an engine adds on top of its kernels, fitted on measurements.

The kernel times of a step are measured per GPU (`inferplan.planner.model.kernels`) and never fitted. What is fitted
(`inferplan calibrate`, docs/calibration.md) is per engine release line: its per-step and per-sequence CPU time, its
memory outside the allocator and its activation peak, and for engines with their own weight kernels their per-SM
streaming rate; plus, per scenario source and engine line, what that measurement's harness adds to TTFT. Plain data in
`data/factors.json`, never chosen per measurement row.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields
from functools import cache
from importlib import resources
from typing import Any

from inferplan.planner.catalog.engines import ENGINES, FACTOR_LINES, base_line, engine_of_line, factor_key

ENGINE_FACTOR_NAMES = (
    "step_overhead_ms",           # per engine step: scheduling, launches, sampling, Python [ms]
    "sequence_overhead_ms",       # per running sequence per step: sampler, detokenise, bookkeeping [ms]
    "request_overhead_ms",        # per request on an online server: tokenising, scheduling, first chunk [ms];
                                  # a sourced assumption (ENGINE_REQUEST_OVERHEAD_MS), never fitted
    "non_torch_gib",              # memory outside the PyTorch allocator: CUDA context, NCCL, cuBLAS [GiB]
    "activation_scale",           # profiled activation peak relative to the analytic estimate [-]
    "sm_stream_gb_s",             # most one SM streams from memory with the engine's own kernels [GB/s per SM]
    "eager_layer_ms",             # per layer of a step whose batch is above the engine's largest CUDA graph [ms]
    "decode_speed",               # observed decode speed over the kernel model's on one deployment (online only) [-]
    "prefill_speed",              # the same for prefill [-]
)
# Terms the offline fit (`calibrate`) moves: engine terms only. The kernel times under them are measured
# (`inferplan.planner.model.kernels`) and never fitted; `decode_speed` and `prefill_speed` belong to online calibration
# of one running deployment, `request_overhead_ms` is a sourced assumption.
FITTED_ENGINE_FACTORS = ("step_overhead_ms", "sequence_overhead_ms", "non_torch_gib", "activation_scale",
                         "sm_stream_gb_s", "eager_layer_ms")
# A per-SM rate no GPU in the catalog comes near (rated bandwidth / SMs is at most about 55 GB/s): no cap. It is
# the prior, and the value a factors file that predates the factor gets.
NO_SM_CAP_GB_S = 100.0
# The prior of `eager_layer_ms`: a decoder layer run eagerly launches some 10-20 kernels (norms, the GEMMs, rotary
# embedding, attention, activation, all-reduces at TP > 1) from Python, each with the framework's per-module work
# around it, 0.1-0.2 ms a layer, which a captured CUDA graph replays in one launch. An assumption (nothing published
# measures it per engine), fitted per engine line like the other CPU times; 0.2 was chosen over 0.1 by leave one
# source out (docs/calibration.md: worst source 42.7% against 44.9%). The value a factors file without the term gets.
EAGER_LAYER_PRIOR_MS = 0.2


@dataclass(frozen=True)
class EngineFactors:
    step_overhead_ms: float
    sequence_overhead_ms: float
    request_overhead_ms: float
    non_torch_gib: float
    activation_scale: float
    sm_stream_gb_s: float = NO_SM_CAP_GB_S
    eager_layer_ms: float = EAGER_LAYER_PRIOR_MS
    decode_speed: float = 1.0
    prefill_speed: float = 1.0


def harness_key(source: str, line: str) -> str:
    """The key of a harness time in `FactorSet.harness_ms`: the scenario source and the engine line it measured."""
    return f"{source}/{line}"


def _median(values: list[float]) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])


@dataclass(frozen=True)
class FactorSet:
    engines: dict[str, EngineFactors]
    default_engine: EngineFactors
    meta: dict[str, Any]
    # What a measurement's harness adds to every online TTFT it measures [ms]: the benchmark client (tokenising,
    # HTTP, streaming) and the server front end as that source deployed it, keyed `source/engine line`
    # (`harness_key`); part of the measurement, fitted per source and engine line, never charged to plans.
    harness_ms: dict[str, float] = field(default_factory=dict)
    # (engine, GPU key) -> that engine's factors on that GPU type, fitted online from a deployment's
    # observed latencies (inferplan.planner.calibration.online); they replace the engine's factors for that GPU only.
    overrides: dict[tuple[str, str], EngineFactors] = field(default_factory=dict)

    def harness_for(self, source: str, line: str) -> float:
        """The harness time of `source` measuring engine line `line`: fitted, or for a pair the factors were not
        fitted on (a user's own file, a held-out source) what a typical client and front end add: the median over
        the fitted sources of that engine line, at most the median over all of them (a harness is the
        measurement's, its client and endpoint: the two or three sources of a line that happened to measure through
        heavy clients do not set it for one not seen), the latter where no source measured the line. Chosen by
        leave-one-source-out (docs/calibration.md): DO-Solutions and sgl-project better, dennislee22 0.02 points
        worse."""
        key = harness_key(source, line)
        if key in self.harness_ms:
            return self.harness_ms[key]
        typical = _median(list(self.harness_ms.values()))
        same = [v for k, v in self.harness_ms.items() if k.rsplit("/", 1)[-1] == line]
        return min(_median(same), typical) if same else typical

    def engine(self, name: str) -> EngineFactors:
        """The factors of factor line `name` (`engines.factor_key`); a stack line without factors of its own
        (`vllm-rocm`) has its engine's (`vllm`), an engine without any the neutral prior."""
        return self.engines.get(name) or self.engines.get(base_line(name), self.default_engine)

    def engine_on(self, name: str, gpu_key: str, vendor: str, version: str | None = None) -> EngineFactors:
        """Engine `name`'s factors at `version` (None: its current release) on one GPU type of `vendor`: an online
        override where there is one, else the version's factor line on that vendor's software stack."""
        return self.overrides.get((name, gpu_key)) or self.engine(factor_key(name, version, vendor))

    def lines_measured_on(self, engine: str, family: str) -> dict[str, int]:
        """Every factor line of `engine` (its releases, its stacks; `factor_key`) with the measured lines on GPU
        `family` it was fitted on: what a plan's provenance cites."""
        counts = self.meta.get("rows_by_engine_family", {})
        return {line: int(by_family[family]) for line, by_family in sorted(counts.items())
                if engine_of_line(line) == engine and by_family.get(family)}

    def unknown_lines(self) -> list[str]:
        """The engine lines of `engines` no engine of the catalog is predicted with (`engines.factor_key`): a
        misspelt name (`vLLM`) or a line of another version of inferplan. Their factors are never read."""
        known = set(ENGINES) | {older for _, _, older in FACTOR_LINES.values()}
        return [line for line in sorted(self.engines) if base_line(line) not in known]

    def to_json(self) -> dict[str, Any]:
        def as_dict(obj: object) -> dict[str, float]:
            return {f.name: round(float(getattr(obj, f.name)), 5) for f in fields(obj)}  # type: ignore[arg-type]

        return {
            "meta": self.meta,
            "default_engine": as_dict(self.default_engine),
            "engines": {k: as_dict(v) for k, v in sorted(self.engines.items())},
            "harness_ms": {k: round(v, 3) for k, v in sorted(self.harness_ms.items())},
        }


def parse_factors(data: dict[str, Any]) -> FactorSet:
    """Build a FactorSet from its JSON form; a missing or negative factor is an error naming it. Factors of the
    earlier model (efficiencies, GPU-family corrections) are not read: the kernel tables replace them."""

    def engine(name: str, raw: dict[str, Any]) -> EngineFactors:
        raw = {"sm_stream_gb_s": NO_SM_CAP_GB_S, "eager_layer_ms": EAGER_LAYER_PRIOR_MS, "decode_speed": 1.0,
               "prefill_speed": 1.0} | raw
        missing = [f for f in ENGINE_FACTOR_NAMES if f not in raw]
        if missing:
            raise ValueError(f"factors for engine {name!r}: missing {', '.join(missing)}")
        not_numbers = [f for f in ENGINE_FACTOR_NAMES if isinstance(raw[f], bool) or
                       not isinstance(raw[f], (int, float))]
        if not_numbers:
            raise ValueError(f"factors for engine {name!r}: not a number: {', '.join(not_numbers)}")
        values = {f: float(raw[f]) for f in ENGINE_FACTOR_NAMES}
        bad = [f for f, v in values.items()
               if not math.isfinite(v) or v < 0 or (v == 0 and f.endswith(("scale", "speed", "gb_s")))]
        if bad:
            raise ValueError(f"factors for engine {name!r}: out of range: {', '.join(bad)}")
        return EngineFactors(**values)

    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object with 'engines' and 'default_engine', got {type(data).__name__}")
    for key in ("engines", "default_engine"):
        if not isinstance(data.get(key), dict):
            raise ValueError(f"{key!r} must be a JSON object" if key in data else f"missing {key!r}")
    for name, raw in data["engines"].items():
        if not isinstance(raw, dict):
            raise ValueError(f"factors for engine {name!r}: expected a JSON object of factors")
    if not isinstance(data.get("harness_ms", {}), dict) or \
            any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in data.get("harness_ms", {}).values()):
        raise ValueError("'harness_ms' must map each source and engine line to a number of ms")
    meta = data.get("meta", {})
    counts = meta.get("rows_by_engine_family", {}) if isinstance(meta, dict) else None
    if not isinstance(counts, dict) or any(
            not isinstance(by_family, dict) or any(isinstance(n, bool) or not isinstance(n, int) or n < 0
                                                   for n in by_family.values()) for by_family in counts.values()):
        raise ValueError("'meta' must be a JSON object whose 'rows_by_engine_family' maps each engine line to a "
                         "count of measured lines per GPU family")
    harness = {str(k): float(v) for k, v in data.get("harness_ms", {}).items()}
    negative = sorted(k for k, v in harness.items() if not math.isfinite(v) or v < 0)
    if negative:
        raise ValueError(f"harness_ms for {negative[0]!r}: must be a finite number of ms, not negative")
    return FactorSet(
        engines={name: engine(name, raw) for name, raw in data["engines"].items()},
        default_engine=engine("default", data["default_engine"]),
        meta=dict(meta),
        harness_ms=harness,
    )


@cache
def load_factors() -> FactorSet:
    """The fitted factors shipped with the package."""
    text = resources.files("inferplan.planner").joinpath("data/factors.json").read_text(encoding="utf-8")
    return parse_factors(json.loads(text))
