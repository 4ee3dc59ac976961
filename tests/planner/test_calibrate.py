"""The factor fit: it recovers factors that generated the data, and keeps engines without data at the prior."""

from __future__ import annotations

import json
from dataclasses import replace
from importlib import resources
from pathlib import Path

import pytest

from inferplan.planner.calibrate import calibrate, identifiable_families, row_line, source_weights, tied_lines
from inferplan.planner.factors import NO_SM_CAP_GB_S, FactorSet, FamilyFactors, load_factors
from inferplan.planner.gpus import resolve_gpu
from inferplan.planner.predict import predict_scenarios
from inferplan.planner.scenarios import Scenario, read_scenarios


def synthetic(published: Path, truth: FactorSet) -> list:
    """Published vLLM single-stream and static-batch rows with values replaced by `truth`'s predictions."""
    rows = [r for r in read_scenarios(published).scenarios
            if r.engine == "vllm" and not r.suspect and r.load.kind in ("single", "static_batch")][:40]
    predicted = predict_scenarios(rows, truth)
    return [r.model_copy(update={"value": p.predicted}) for r, p in zip(rows, predicted, strict=True)
            if p.predicted]


def test_fit_recovers_the_bandwidth_efficiency_that_made_the_data(published_scenarios: Path) -> None:
    shipped = load_factors()
    prior = replace(shipped, engines={}, families={})
    made = replace(prior.default_engine, bandwidth_efficiency=0.62)
    truth = replace(prior, engines={"vllm": made, "vllm-v0": made})  # both release lines of vLLM
    rows = synthetic(published_scenarios, truth)
    assert len(rows) >= 20
    fitted = calibrate(rows, prior, sweeps=4)
    assert fitted.loss_after < fitted.loss_before
    lines = [line for line, n in fitted.rows_by_engine.items() if n >= 10]
    assert lines
    for line in lines:
        assert fitted.factors.engine(line).bandwidth_efficiency == pytest.approx(0.62, rel=0.1), line


def test_engines_without_rows_keep_their_factors(published_scenarios: Path) -> None:
    shipped = load_factors()
    rows = [r for r in read_scenarios(published_scenarios).scenarios if r.engine == "llama.cpp"][:10]
    fitted = calibrate(rows, shipped, sweeps=1)
    assert fitted.factors.engine("vllm") == shipped.engine("vllm")
    assert set(fitted.rows_by_engine) == {"llama.cpp"}


def test_a_family_seen_through_one_line_keeps_its_corrections_at_one_and_that_line_carries_it(
        published_scenarios: Path) -> None:
    """CDNA3 is measured with vLLM on ROCm only (Argonne's 2024 runs, the V0 line): its corrections and that
    line's factors cannot be told apart, so the fit moves the line, keeps CDNA3's corrections at 1.0 and leaves
    vLLM's CUDA lines alone."""
    shipped = load_factors()
    prior = replace(shipped, engines={}, families={})
    rows = [r for r in read_scenarios(published_scenarios).scenarios if r.engine == "vllm" and not r.suspect
            and r.gpu == "AMD-Instinct-MI300X" and r.load.kind == "static_batch" and r.published]
    assert len(rows) >= 10 and {row_line(r) for r in rows} == {"vllm-v0-rocm"}
    truth = replace(prior, engines={"vllm-v0-rocm": replace(prior.default_engine, bandwidth_efficiency=0.45)})
    predicted = predict_scenarios(rows, truth)
    rows = [r.model_copy(update={"value": p.predicted}) for r, p in zip(rows, predicted, strict=True) if p.predicted]
    assert identifiable_families(rows, {"vllm-v0-rocm"}) == set()
    fitted = calibrate(rows, replace(prior, families={"cdna3": replace(shipped.family("cdna3"), compute_scale=0.7)}),
                       sweeps=2).factors
    assert fitted.family("cdna3") == FamilyFactors()
    assert fitted.engine("vllm-v0-rocm").bandwidth_efficiency == pytest.approx(0.45, rel=0.1)
    assert not {"vllm", "vllm-v0"} & set(fitted.engines)


def test_a_stack_line_takes_its_engines_memory_factors(published_scenarios: Path) -> None:
    rows = [r for r in read_scenarios(published_scenarios).scenarios
            if r.engine == "vllm" and not r.suspect and r.gpu and r.load.kind == "static_batch"
            and r.gpu.startswith(("AMD", "NVIDIA-H100"))]
    fitted = calibrate(rows, load_factors(), sweeps=1).factors
    rocm, cuda = fitted.engine("vllm-v0-rocm"), fitted.engine("vllm-v0")
    assert "vllm-v0-rocm" in fitted.engines and rocm != cuda
    assert (rocm.non_torch_gib, rocm.activation_scale) == (cuda.non_torch_gib, cuda.activation_scale)


def test_fit_finds_a_per_sm_cap_with_the_bandwidth_efficiency_it_comes_with(published_scenarios: Path) -> None:
    """llama.cpp's rows span GDDR cards (few GB/s per SM) and HBM cards (many): data made with a cap of 9 GB/s per
    SM and 0.85 of the rated bandwidth is fitted back to both, which no one-factor move from the prior (no cap,
    0.8) reaches; an engine that uses vendor kernels gets no cap fitted."""
    shipped = load_factors()
    prior = replace(shipped, engines={}, families={})
    rows = [r for r in read_scenarios(published_scenarios).scenarios if r.engine == "llama.cpp" and not r.suspect]
    assert {resolve_gpu(r.gpu).key for r in rows} >= {"A100-SXM4-80GB", "H100-PCIe-80GB", "RTX-3090", "RTX-4090"}
    truth = replace(prior, engines={"llama.cpp": replace(prior.default_engine, bandwidth_efficiency=0.85,
                                                         sm_stream_gb_s=9.0)})
    predicted = predict_scenarios(rows, truth)
    rows = [r.model_copy(update={"value": p.predicted}) for r, p in zip(rows, predicted, strict=True) if p.predicted]
    fitted = calibrate(rows, prior, sweeps=2).factors.engine("llama.cpp")
    assert fitted.sm_stream_gb_s == pytest.approx(9.0, rel=0.15)
    assert fitted.bandwidth_efficiency == pytest.approx(0.85, rel=0.1)
    vllm_rows = synthetic(published_scenarios, prior)
    assert calibrate(vllm_rows, prior, sweeps=1).factors.engine("vllm").sm_stream_gb_s == NO_SM_CAP_GB_S


def test_rows_of_an_expert_only_format_move_only_its_own_dequantisation_scale(published_scenarios: Path) -> None:
    """SGLang's only quantised rows are gpt-oss in MXFP4 (latency-under-load.jsonl). Made with experts read at 0.4
    of the engine's bandwidth (its 16-bit rows at the prior), they move the expert-format scale most of the way
    there (the prior pulls the rest with this few rows), and the scale of weight-only formats of the linear layers
    (AWQ, GPTQ), which no row measures, keeps the prior."""
    shipped = load_factors()
    prior = replace(shipped, engines={}, families={})
    load = published_scenarios.parent / "latency-under-load.jsonl"
    if not load.is_file():
        pytest.skip(f"{load} not found")
    rows = [r for r in read_scenarios(load).scenarios if r.engine == "sglang" and r.gpu.startswith("NVIDIA-H100")
            and r.metric in ("output_tps_total", "tpot_ms_p50", "ttft_ms_p50")]  # 16-bit rows pin the rest
    assert {r.weights for r in rows} >= {"mxfp4", "bf16"}
    truth = replace(prior, engines={"sglang": replace(prior.default_engine, expert_quantized_bandwidth_scale=0.4)})
    predicted = predict_scenarios(rows, truth)
    rows = [r.model_copy(update={"value": p.predicted}) for r, p in zip(rows, predicted, strict=True) if p.predicted]
    fitted = calibrate(rows, prior, sweeps=2).factors.engine("sglang")
    assert fitted.expert_quantized_bandwidth_scale == pytest.approx(0.4, rel=0.25)
    assert fitted.quantized_bandwidth_scale == prior.default_engine.quantized_bandwidth_scale


def test_the_dequantisation_scale_is_one_value_for_an_engines_release_lines(published_scenarios: Path) -> None:
    """vLLM's V0 and V1 lines dequantise GPTQ/AWQ with the same kernels: QwenLM's V0 single-stream rows (16-bit,
    GPTQ, AWQ), made with the quantised weights read at 0.55 of the 16-bit bandwidth, set the scale of both lines
    (V1 has 16-bit rows only here), and a ROCm line keeps its own."""
    assert tied_lines({"vllm", "vllm-v0", "vllm-v0-rocm", "sglang"}) == {"vllm": ["vllm", "vllm-v0"],
                                                                          "sglang": ["sglang"]}
    shipped = load_factors()
    prior = replace(shipped, engines={}, families={})
    scenarios = read_scenarios(published_scenarios).scenarios
    v0 = [r for r in scenarios if not r.suspect and row_line(r) == "vllm-v0" and r.load.kind == "single"
          and "qwen" in r.id.lower() and r.weights in ("bf16", "int4-awq", "int4-gptq", "int8-gptq")]
    v1 = [r for r in scenarios if not r.suspect and row_line(r) == "vllm" and r.metric == "decode_tps_single"]
    assert {r.weights for r in v0} >= {"bf16", "int4-awq"} and len(v1) >= 3
    made = replace(prior.default_engine, quantized_bandwidth_scale=0.55)
    truth = replace(prior, engines={"vllm": made, "vllm-v0": made})
    rows = v0 + v1
    rows = [r.model_copy(update={"value": p.predicted}) for r, p in zip(rows, predict_scenarios(rows, truth),
                                                                        strict=True) if p.predicted]
    fitted = calibrate(rows, prior, sweeps=4).factors
    assert fitted.engine("vllm").quantized_bandwidth_scale == fitted.engine("vllm-v0").quantized_bandwidth_scale
    assert fitted.engine("vllm-v0").quantized_bandwidth_scale == pytest.approx(0.55, rel=0.15)


def test_a_source_counts_by_the_square_root_of_its_rows() -> None:
    """The loss weighs each row 1 / sqrt(rows of its source), scaled to average 1: a source with four times the
    rows counts twice as much in all, not four times, and a one-source fit weighs every row 1."""
    rows = _weight_rows({"https://github.com/big/a/blob/c/x.md": 8, "https://github.com/small/b/blob/c/y.md": 2})
    weights = source_weights(rows)
    assert sum(weights.values()) == pytest.approx(len(rows))
    big = [weights[r.id] for r in rows if r.source_name == "big"]
    small = [weights[r.id] for r in rows if r.source_name == "small"]
    assert sum(big) == pytest.approx(2 * sum(small))
    assert list(source_weights(rows[:8]).values()) == pytest.approx([1.0] * 8)


def _weight_rows(counts: dict[str, int]) -> list[Scenario]:
    """Copies of the bundled example's first line, `n` from each source URL."""
    text = resources.files("inferplan.planner").joinpath("data/example-scenarios.jsonl").read_text(encoding="utf-8")
    base = json.loads(next(line for line in text.splitlines() if line.strip()))
    return [Scenario.model_validate({**base, "id": f"{source.split('/')[3]}-{i}", "source": source})
            for source, n in counts.items() for i in range(n)]
