"""The model's factors (inferplan/planner/model/factors.py): the shipped file and its parser."""

from __future__ import annotations

from dataclasses import fields, replace

import pytest

from inferplan.planner.calibration.calibrate import BOUNDS, engine_targets
from inferplan.planner.model.factors import (
    ENGINE_FACTOR_NAMES,
    NO_SM_CAP_GB_S,
    EngineFactors,
    load_factors,
    parse_factors,
)


def test_shipped_factors_round_trip_through_json() -> None:
    shipped = load_factors()
    assert parse_factors(shipped.to_json()) == replace(shipped, meta=shipped.to_json()["meta"])


def test_a_missing_factor_is_an_error_naming_it() -> None:
    data = load_factors().to_json()
    del data["engines"]["vllm"]["step_overhead_ms"]
    with pytest.raises(ValueError, match=r"vllm.*step_overhead_ms"):
        parse_factors(data)


def test_a_file_from_before_the_kernel_tables_reads_its_engine_terms_only() -> None:
    """A factors file of the efficiency model: its efficiencies, dequantisation scales and GPU-family corrections
    are not read (the kernel tables replace them), the terms it lacks take their defaults (no per-SM cap, the
    kernels' own speed, no harness time), and its engine terms are read as they are."""
    shipped = load_factors()
    data = shipped.to_json()
    old_terms = {"bandwidth_efficiency": 0.8, "decode_compute_efficiency": 0.5, "prefill_compute_efficiency": 0.6,
                 "overlap_penalty": 0.1, "quantized_bandwidth_scale": 0.7}
    for raw in [data["default_engine"], *data["engines"].values()]:
        for name in ("sm_stream_gb_s", "decode_speed", "prefill_speed"):
            del raw[name]
        raw.update(old_terms)
    data["families"] = {"hopper": {"bandwidth_scale": 0.9, "compute_scale": 1.1}}
    del data["harness_ms"]
    parsed = parse_factors(data)
    assert {f.sm_stream_gb_s for f in parsed.engines.values()} == {NO_SM_CAP_GB_S}
    assert {(f.decode_speed, f.prefill_speed) for f in parsed.engines.values()} == {(1.0, 1.0)}
    assert parsed.harness_ms == {}
    assert not hasattr(parsed, "families") and {f.name for f in fields(EngineFactors)} == set(ENGINE_FACTOR_NAMES)
    for name, engine in parsed.engines.items():
        expected = replace(shipped.engine(name), sm_stream_gb_s=NO_SM_CAP_GB_S, decode_speed=1.0, prefill_speed=1.0)
        assert _close(engine, expected), name


def _close(a: EngineFactors, b: EngineFactors) -> bool:
    return all(getattr(a, f.name) == pytest.approx(getattr(b, f.name), abs=1e-5) for f in fields(EngineFactors))


@pytest.mark.parametrize(("where", "value", "match"), [
    ("decode_speed", 0.0, r"vllm.*decode_speed"),
    ("prefill_speed", 0.0, r"vllm.*prefill_speed"),
    ("sequence_overhead_ms", -0.1, r"vllm.*sequence_overhead_ms"),
    ("harness", -5.0, r"harness_ms.*dstackai"),
    # JSON as Python writes it takes NaN and Infinity: a plan with them found every latency "nan ms".
    ("step_overhead_ms", float("nan"), r"vllm.*out of range: step_overhead_ms"),
    ("non_torch_gib", float("inf"), r"vllm.*out of range: non_torch_gib"),
    ("harness", float("nan"), r"harness_ms.*dstackai"),
])
def test_a_term_out_of_range_is_an_error_naming_it(where: str, value: float, match: str) -> None:
    data = load_factors().to_json()
    if where == "harness":
        data["harness_ms"]["dstackai"] = value
    else:
        data["engines"]["vllm"][where] = value
    with pytest.raises(ValueError, match=match):
        parse_factors(data)


def test_every_shipped_fitted_term_is_inside_its_bounds_and_on_one_only_where_that_is_its_prior() -> None:
    """`calibrate.BOUNDS`: a fitted term that ends on a bound is a defect to look into, unless the bound is the
    term's prior (no per-SM cap for an engine whose rows do not bind one; no harness time for a source whose
    online rows show none). The terms not fitted keep the prior's values."""
    shipped = load_factors()
    prior = shipped.default_engine
    for line, engine in shipped.engines.items():
        targets = engine_targets(line)
        for name in targets:
            lo, hi = BOUNDS[name]
            value = getattr(engine, name)
            assert lo <= value <= hi, (line, name, value)
            if value in (lo, hi):
                assert value == getattr(prior, name), (line, name, value)
        for name in ("request_overhead_ms", "decode_speed", "prefill_speed"):
            assert getattr(engine, name) == getattr(prior, name), (line, name)
        if "sm_stream_gb_s" not in targets:
            assert engine.sm_stream_gb_s == NO_SM_CAP_GB_S, line
    lo, hi = BOUNDS["harness_ms"]
    for source, ms in shipped.harness_ms.items():
        assert lo <= ms < hi, (source, ms)


def test_a_stack_line_without_factors_has_its_engines_and_one_with_factors_its_own() -> None:
    shipped = load_factors()
    vllm = shipped.engine("vllm")
    without = replace(shipped, engines={k: v for k, v in shipped.engines.items() if k != "vllm-rocm"})
    assert without.engine("vllm-rocm") == vllm
    assert without.engine_on("vllm", "AMD-Instinct-MI300X", "amd") == vllm
    assert without.engine("no-such-engine-rocm") == shipped.default_engine
    rocm = replace(vllm, step_overhead_ms=vllm.step_overhead_ms * 3)
    with_own = replace(shipped, engines=shipped.engines | {"vllm-rocm": rocm})
    assert with_own.engine_on("vllm", "AMD-Instinct-MI300X", "amd") == rocm
    assert with_own.engine_on("vllm", "NVIDIA-H100-80GB-HBM3", "nvidia") == vllm


def test_every_shipped_line_is_one_an_engine_is_predicted_with() -> None:
    shipped = load_factors()
    assert shipped.unknown_lines() == []
    odd = replace(shipped, engines={**shipped.engines, "vLLM": shipped.engine("vllm"),
                                    "sglang-v0-rocm": shipped.engine("sglang")})
    assert odd.unknown_lines() == ["sglang-v0-rocm", "vLLM"]
