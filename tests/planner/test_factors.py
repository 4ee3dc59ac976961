"""The model's factors (inferplan/planner/factors.py): the shipped file and its parser."""

from __future__ import annotations

from dataclasses import replace

import pytest

from inferplan.planner.factors import NO_SM_CAP_GB_S, load_factors, parse_factors


def test_shipped_factors_round_trip_through_json() -> None:
    shipped = load_factors()
    assert parse_factors(shipped.to_json()) == replace(shipped, meta=shipped.to_json()["meta"])


def test_a_missing_factor_is_an_error_naming_it() -> None:
    data = load_factors().to_json()
    del data["engines"]["vllm"]["step_overhead_ms"]
    with pytest.raises(ValueError, match=r"vllm.*step_overhead_ms"):
        parse_factors(data)


def test_a_file_from_before_the_per_sm_rate_and_the_format_split_reads_as_it_did() -> None:
    """No per-SM cap, no dequantisation cost on compute, and its one dequantisation scale for every format."""
    data = load_factors().to_json()
    for raw in [data["default_engine"], *data["engines"].values()]:
        for name in ("sm_stream_gb_s", "expert_quantized_bandwidth_scale", "quantized_compute_scale"):
            del raw[name]
    data["engines"]["sglang"]["quantized_bandwidth_scale"] = 0.3
    parsed = parse_factors(data)
    assert {f.sm_stream_gb_s for f in parsed.engines.values()} == {NO_SM_CAP_GB_S}
    assert {f.quantized_compute_scale for f in parsed.engines.values()} == {1.0}
    assert parsed.engine("sglang").expert_quantized_bandwidth_scale == 0.3


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
