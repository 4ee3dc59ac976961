"""spec.observe without a cluster: the current deployment from a Deployment, the comparison and its status,
the observed-workload floor, and online calibration."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from inferplan.observe.observation import Observation
from inferplan.observe.promql import Quantile
from inferplan.operator.observing import (
    CurrentError,
    ObserveOutcome,
    observe_status,
    read_deployment,
    resolve_current,
)
from inferplan.operator.status import PlanStatus
from inferplan.planner.factors import load_factors
from inferplan.planner.observed import (
    CurrentShape,
    ObservedWorkload,
    compare,
    planning_request,
    predict_current,
    with_workload,
)
from inferplan.planner.online import Calibration, calibrated_factors, update_calibration
from inferplan.planner.spec import load_plan_file, resolve_plan

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "plans" / "chat-assistant-8b.yaml"


@pytest.fixture(scope="module")
def req():
    return resolve_plan(load_plan_file(EXAMPLE))


SHAPE = CurrentShape("H100-SXM5-80GB", 2, 1, "bf16", "auto", 256)


def vllm_deployment(args: list[str], ready: int | None = 3, gpus: str = "1") -> dict:
    body = {
        "metadata": {"name": "llama"},
        "spec": {"replicas": 4, "template": {"spec": {
            "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
            "containers": [{"name": "sidecar"},
                           {"name": "vllm", "args": args, "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}},
    }
    if ready is not None:
        body["status"] = {"readyReplicas": ready}
    return body


def test_a_vllm_deployment_tells_replicas_gpu_tp_batch_precision_and_kv() -> None:
    body = vllm_deployment(["--model", "m", "--tensor-parallel-size=2", "--max-num-seqs", "64",
                            "--quantization", "fp8", "--kv-cache-dtype", "fp8_e4m3"], gpus="2")
    assert read_deployment(body) == {"replicas": 3, "gpu_type": "H100-SXM5-80GB", "gpus_per_replica": 2,
                                     "max_batch": 64, "precision": "fp8", "kv_cache_dtype": "fp8"}


def test_the_batch_of_a_tgi_deployment_the_planner_wrote_is_its_batch_cap() -> None:
    # The planner's TGI arguments carry --max-batch-size (the cap) and a larger --max-concurrent-requests
    # (admission): the batch read back is the cap, wherever each stands.
    from inferplan.planner.search import plan

    tgi = resolve_plan(load_plan_file(EXAMPLE.parents[1] / "platform" / "tgi-mistral-7b.yaml"))
    c = plan(tgi).recommendation
    assert "--max-concurrent-requests" in c.engine_args
    for args in (c.engine_args, ["--max-concurrent-requests", "999", *c.engine_args]):
        assert read_deployment(vllm_deployment(args))["max_batch"] == c.max_batch


def test_shell_wrapped_arguments_and_gpu_limits_are_read() -> None:
    body = vllm_deployment(["-c", "exec vllm serve m --max-num-seqs 32 --dtype bfloat16"], ready=None, gpus="4")
    assert read_deployment(body) == {"replicas": 4, "gpu_type": "H100-SXM5-80GB", "gpus_per_replica": 4,
                                     "max_batch": 32, "precision": "bf16"}


def test_spec_fields_win_and_defaults_are_marked(req) -> None:
    body = vllm_deployment(["--max-num-seqs", "64"])
    current = resolve_current({"deployment": "llama", "replicas": 5}, body, req)
    assert current.shape == CurrentShape("H100-SXM5-80GB", 5, 1, req.precisions[0], "auto", 64)
    assert current.sources == {"gpuType": "Deployment", "replicas": "spec", "maxBatch": "Deployment",
                               "gpusPerReplica": "Deployment", "precision": "default", "kvCacheDtype": "default"}


def test_without_a_gpu_type_the_error_says_what_to_set(req) -> None:
    body = vllm_deployment([])
    del body["spec"]["template"]["spec"]["nodeSelector"]
    with pytest.raises(CurrentError, match="gpuType"):
        resolve_current({"deployment": "llama"}, body, req)
    with pytest.raises(CurrentError, match="no ready replicas"):
        resolve_current({"deployment": "llama"}, vllm_deployment([], ready=0), req)


def test_the_observed_workload_is_planned_for_but_never_below_the_floor(req) -> None:
    observed_req = dataclasses.replace(req, workload_source="observed", observed_floor=0.5)
    busy, note = planning_request(observed_req, ObservedWorkload(req.rate_rps * 2, 500.0, 100.0))
    assert busy.rate_rps == pytest.approx(req.rate_rps * 2) and busy.prompt_mean == 500.0 and "observed" in note
    quiet, note = planning_request(observed_req, ObservedWorkload(req.rate_rps * 0.1))
    assert quiet.rate_rps == pytest.approx(req.rate_rps * 0.5) and "floor" in note
    declared, note = planning_request(req, ObservedWorkload(req.rate_rps * 2))
    assert declared is req and note is None


def _observation(prediction, scale: float = 1.0, requests: float = 1000.0) -> Observation:
    """Observed figures equal to a prediction x scale, each in a bucket of +-10% around it."""
    latency = {m: {q: Quantile(v * scale, v * scale * 0.9, v * scale * 1.1) for q, v in qs.items()}
               for m, qs in prediction.latency.items()}
    return Observation("5m", 2.0, requests, 1000.0, 250.0, latency,
                       {m: v * scale for m, v in prediction.mean.items()}, 10.0, 0.0, 0.4, 1000, 16)


def _outcome(req, observation: Observation) -> ObserveOutcome:
    from inferplan.operator.observing import Current

    prediction = predict_current(req, SHAPE)
    observed = {m: {q: (v.value, v.low, v.high) for q, v in qs.items()} for m, qs in observation.latency.items()}
    return ObserveOutcome("main", "5m", observation, current=Current(SHAPE, "llama", {"replicas": "Deployment"}),
                          prediction=prediction, discrepancies=compare(prediction.latency, observed))


def _conditions(status: dict) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


def test_a_matching_deployment_is_accurate_and_its_figures_are_in_status(req) -> None:
    prediction = predict_current(req, SHAPE)
    status = observe_status({"conditions": []}, _outcome(req, _observation(prediction, 1.05)),
                            now="2026-11-30T10:00:00Z", generation=1, max_error_ratio=0.25, drift_seconds=600,
                            calibrate=False)
    assert _conditions(status) == {"MetricsAvailable": ("True", "SeriesFound"),
                                   "PredictionAccurate": ("True", "Accurate")}
    PlanStatus.model_validate(status)  # the CRD's status schema accepts it
    assert status["observed"]["current"]["replicas"] == 2
    assert status["prediction"]["errorRatio"]["ttft"]["p99"] == pytest.approx(1 / 1.05 - 1, abs=1e-3)


def test_drift_turns_the_condition_false_only_after_drift_seconds(req) -> None:
    prediction = predict_current(req, SHAPE)
    slow = _outcome(req, _observation(prediction, 2.0))
    kwargs = dict(generation=1, max_error_ratio=0.25, drift_seconds=600, calibrate=False)
    first = observe_status({"conditions": []}, slow, now="2026-11-30T10:00:00Z", **kwargs)
    assert _conditions(first)["PredictionAccurate"] == ("True", "DriftPending")
    assert first["prediction"]["driftSince"] == "2026-11-30T10:00:00Z"
    later = observe_status(first, slow, now="2026-11-30T10:09:59Z", **kwargs)
    assert _conditions(later)["PredictionAccurate"] == ("True", "DriftPending")
    drifted = observe_status(later, slow, now="2026-11-30T10:10:00Z", **kwargs)
    state, reason = _conditions(drifted)["PredictionAccurate"]
    message = next(c["message"] for c in drifted["conditions"] if c["type"] == "PredictionAccurate")
    assert (state, reason) == ("False", "PredictionDrift") and "observed" in message and "%" in message
    healed = observe_status(drifted, _outcome(req, _observation(prediction)), now="2026-11-30T10:11:00Z", **kwargs)
    assert _conditions(healed)["PredictionAccurate"] == ("True", "Accurate")
    assert "driftSince" not in healed["prediction"]


def test_a_failed_query_keeps_the_last_figures_and_says_why(req) -> None:
    prediction = predict_current(req, SHAPE)
    good = observe_status({"conditions": [{"type": "Ready", "status": "True", "reason": "Planned", "message": "",
                                           "lastTransitionTime": "2026-11-30T09:00:00Z"}],
                           "recommendation": {"kept": True}},
                          _outcome(req, _observation(prediction)), now="2026-11-30T10:00:00Z", generation=1,
                          max_error_ratio=0.25, drift_seconds=600, calibrate=False)
    down = observe_status(good, ObserveOutcome("main", "5m", error=("PrometheusUnreachable", "unreachable")),
                          now="2026-11-30T10:01:00Z", generation=1, max_error_ratio=0.25, drift_seconds=600,
                          calibrate=False)
    assert _conditions(down)["MetricsAvailable"] == ("False", "PrometheusUnreachable")
    assert _conditions(down)["PredictionAccurate"] == ("True", "Accurate")
    assert _conditions(down)["Ready"] == ("True", "Planned")
    assert down["observed"] == good["observed"] and down["prediction"] == good["prediction"]
    assert down["recommendation"] == {"kept": True}


def test_calibration_removes_most_of_the_error_of_a_slower_deployment(req) -> None:
    """A deployment whose true decode and prefill efficiency are 0.7 and 0.6 of the catalog's."""
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
