"""The factor fit: it recovers factors that generated the data, and keeps engines without data at the prior."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from inferplan.planner.calibrate import calibrate, identifiable_families, row_line
from inferplan.planner.factors import NO_SM_CAP_GB_S, FactorSet, FamilyFactors, load_factors
from inferplan.planner.gpus import resolve_gpu
from inferplan.planner.predict import predict_scenarios
from inferplan.planner.scenarios import read_scenarios


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
