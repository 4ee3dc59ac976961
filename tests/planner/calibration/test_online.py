"""Online calibration (inferplan/planner/calibration/online.py): the decode and prefill multipliers fitted to a running
deployment's observed means, and what the fit refuses. tests/operator/test_observing.py covers the status the
operator writes from it."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from inferplan.planner.calibration.observed import CurrentShape, ObservedWorkload, predict_current, with_workload
from inferplan.planner.calibration.online import Calibration, calibrated_factors, update_calibration
from inferplan.planner.catalog.engines import engine_profile
from inferplan.planner.catalog.gpus import load_gpu_catalog
from inferplan.planner.catalog.precisions import weight_precision
from inferplan.planner.model.factors import load_factors
from inferplan.planner.model.performance import build_hardware
from inferplan.planner.request import resolve_plan
from inferplan.planner.spec_parsing import load_plan_file

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "plans" / "chat-assistant-8b.yaml"
SHAPE = CurrentShape("H100-SXM5-80GB", 2, 1, "bf16", "auto", 256)


@pytest.fixture(scope="module")
def req():
    return resolve_plan(load_plan_file(EXAMPLE))


def test_calibration_removes_most_of_the_error_of_a_slower_deployment(req) -> None:
    """A deployment whose true decode and prefill speed are 0.7 and 0.6 of what its kernels and engine terms give."""
    observed_req = with_workload(req, ObservedWorkload(req.rate_rps))
    factors = load_factors()
    truth = predict_current(observed_req, SHAPE, calibrated_factors(factors, req.engine, SHAPE.gpu_type,
                                                                    Calibration(decode=0.7, prefill=0.6)))

    def error(calibration: Calibration) -> float:
        predicted = predict_current(observed_req, SHAPE, calibrated_factors(factors, req.engine, SHAPE.gpu_type,
                                                                            calibration))
        return max(abs(predicted.latency[m][q] / truth.latency[m][q] - 1) for m in truth.latency
                   for q in truth.latency[m])

    calibration = Calibration()
    before = error(calibration)
    for _ in range(4):  # four 5-minute windows of 1,000 requests
        calibration = update_calibration(observed_req, SHAPE, truth.mean, 1000, 0.0, calibration, factors)
    after = error(calibration)
    assert before > 0.3 and after < 0.05, (before, after)
    assert calibration.provenance == "observed" and calibration.updates == 4 and calibration.samples == 4000
    # Each multiplier is fitted to one mean while both move the other a little (prefill stalls stretch TPOT, the
    # decode step is part of TTFT), so four windows land within 5% of the truth, not exactly on it.
    assert calibration.decode == pytest.approx(0.7, rel=0.05) and calibration.prefill == pytest.approx(0.6, rel=0.05)


def test_calibration_refuses_what_the_data_cannot_support(req) -> None:
    truth = predict_current(req, SHAPE)
    few = update_calibration(req, SHAPE, truth.mean, 50, 0.0, Calibration())
    assert few.updates == 0 and "fewer than" in few.note
    absurd = update_calibration(req, SHAPE, {"tpot": truth.mean["tpot"] * 20, "ttft": truth.mean["ttft"]}, 1000,
                                0.0, Calibration())
    assert absurd.updates == 0 and absurd.decode == 1.0 and "rejected" in absurd.note
    queued = update_calibration(req, SHAPE, {"tpot": truth.mean["tpot"], "ttft": truth.mean["ttft"] * 3}, 1000,
                                50.0, Calibration())
    assert queued.prefill == 1.0 and "queueing" in queued.note
    one_step = update_calibration(req, SHAPE, {"tpot": truth.mean["tpot"] * 2.5}, 1_000_000, 0.0, Calibration())
    assert one_step.decode == pytest.approx(1 / 1.5), "one window moves a factor by at most 1.5x"
    assert math.isfinite(one_step.prefill)


def test_a_calibration_scales_that_engines_speeds_on_that_gpu_type_only(req) -> None:
    """The multipliers become `decode_speed` and `prefill_speed` of the engine's factors on the deployment's GPU
    type (an override), which scale the decode and the prefill rates of its hardware; the engine's factors on other
    GPU types and its fitted terms stay as shipped, and a neutral calibration changes nothing."""
    factors = load_factors()
    assert calibrated_factors(factors, req.engine, SHAPE.gpu_type, Calibration()) is factors
    calibrated = calibrated_factors(factors, req.engine, SHAPE.gpu_type, Calibration(decode=0.7, prefill=0.6))
    base = factors.engine_on(req.engine, SHAPE.gpu_type, "nvidia")
    on_gpu = calibrated.engine_on(req.engine, SHAPE.gpu_type, "nvidia")
    assert set(calibrated.overrides) == {(req.engine, SHAPE.gpu_type)}
    assert (on_gpu.decode_speed, on_gpu.prefill_speed) == pytest.approx((0.7 * base.decode_speed,
                                                                         0.6 * base.prefill_speed))
    assert on_gpu == dataclasses.replace(base, decode_speed=on_gpu.decode_speed, prefill_speed=on_gpu.prefill_speed)
    assert calibrated.engine_on(req.engine, "A100-SXM4-80GB", "nvidia") == base
    gpu = load_gpu_catalog().get(SHAPE.gpu_type)
    engine = engine_profile(req.engine)
    before, after = (build_hardware(req.arch, gpu, weight_precision("bf16"), 2.0, engine, f, 1)
                     for f in (base, on_gpu))
    assert after.bandwidth_bytes_s == pytest.approx(0.7 * before.bandwidth_bytes_s)
    assert after.decode_flops_s == pytest.approx(0.7 * before.decode_flops_s)
    assert after.prefill_flops_s == pytest.approx(0.6 * before.prefill_flops_s)
    assert after.attention_flops_s == pytest.approx(0.6 * before.attention_flops_s)
