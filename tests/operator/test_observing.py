"""spec.observe (inferplan/operator/observing.py): the current deployment from a Deployment, the comparison and
its status, and an observation measured in one process and assessed in another. The observed-workload floor
and online calibration: tests/planner/calibration/test_observed.py and tests/planner/calibration/test_online.py."""

from __future__ import annotations

import copy
import dataclasses
import datetime
import pickle
from pathlib import Path

import pytest
import yaml

from inferplan.observe.observation import SETTLE_SECONDS, Observation
from inferplan.observe.prometheus import PrometheusEndpoint
from inferplan.observe.promql import Quantile
from inferplan.operator.observing import (
    CurrentError,
    ObserveOutcome,
    assess,
    measure,
    observe_status,
    read_deployment,
    resolve_current,
)
from inferplan.operator.status import PlanStatus, PredictionStatus
from inferplan.planner.calibration.observed import CurrentShape, compare, predict_current
from inferplan.planner.catalog.engine_args import ENGINE_FLAGS
from inferplan.planner.quantiles import QUANTILE_NAMES
from inferplan.planner.request import resolve_plan
from inferplan.planner.spec import Observe
from inferplan.planner.spec_parsing import load_plan_file, parse_plan
from tests.support.engine_standin import standin_config
from tests.support.fixtures import PrometheusFactory, StandinFactory
from tests.support.plans import spec

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "plans" / "chat-assistant-8b.yaml"


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
    from inferplan.planner.search.plan import plan

    tgi = resolve_plan(load_plan_file(EXAMPLE.parents[1] / "platform" / "tgi-mistral-7b.yaml"))
    c = plan(tgi).recommendation
    assert "--max-concurrent-requests" in c.engine_args
    for args in (c.engine_args, ["--max-concurrent-requests", "999", *c.engine_args]):
        assert read_deployment(vllm_deployment(args))["max_batch"] == c.max_batch


def test_shell_wrapped_arguments_and_gpu_limits_are_read() -> None:
    body = vllm_deployment(["-c", "exec vllm serve m -tp 4 --max-num-seqs 32 --dtype bfloat16"], ready=None,
                           gpus="4")
    assert read_deployment(body) == {"replicas": 4, "gpu_type": "H100-SXM5-80GB", "gpus_per_replica": 4,
                                     "max_batch": 32, "precision": "bf16"}


def test_spec_fields_win_and_defaults_are_marked(req) -> None:
    body = vllm_deployment(["--max-num-seqs", "64"])
    current = resolve_current({"deployment": "llama", "replicas": 5}, body, req)
    # No step budget, memory or context flag: the engine's own defaults at its release on an H100 (vLLM V1: 8192,
    # chunked, 0.9 of the memory, the model's context).
    assert current.shape == CurrentShape("H100-SXM5-80GB", 5, 1, req.precisions[0], "auto", 64,
                                         release=req.engine_release, max_num_batched_tokens=8192,
                                         chunked_prefill=True, memory_fraction=0.9,
                                         max_model_len=req.arch.max_position_embeddings)
    assert current.sources == {"gpuType": "Deployment", "replicas": "spec", "maxBatch": "Deployment",
                               "gpusPerReplica": "Deployment", "precision": "default", "kvCacheDtype": "default",
                               "engineRelease": "default", "maxNumBatchedTokens": "default",
                               "chunkedPrefill": "default", "memoryFraction": "default", "maxModelLen": "default"}


def test_without_a_gpu_type_the_error_says_what_to_set(req) -> None:
    body = vllm_deployment([])
    del body["spec"]["template"]["spec"]["nodeSelector"]
    with pytest.raises(CurrentError, match="gpuType"):
        resolve_current({"deployment": "llama"}, body, req)
    with pytest.raises(CurrentError, match="no ready replicas"):
        resolve_current({"deployment": "llama"}, vllm_deployment([], ready=0), req)


@pytest.mark.parametrize("label", ["NVIDIA-H100-80GB-HBM3-MIG-3g.40gb", "NVIDIA-H100-80GB-HBM3-SHARED"])
def test_a_deployment_on_mig_slices_or_shared_gpus_is_not_compared_with_a_whole_gpu(req, label: str) -> None:
    """Its node selector had resolved to the whole H100: a 3g.40gb slice's figures were compared with a whole
    card's prediction (memory and compute of the wrong size)."""
    body = vllm_deployment(["--max-num-seqs", "64"])
    body["spec"]["template"]["spec"]["nodeSelector"]["nvidia.com/gpu.product"] = label
    with pytest.raises(CurrentError, match=f"runs on '{label}', a MIG slice or a shared GPU"):
        resolve_current({"deployment": "llama"}, body, req)
    # The plan's own observe.current.gpuType says what the replicas are: it wins.
    assert resolve_current({"deployment": "llama", "gpuType": "H100"}, body, req).shape.gpu_type == "H100-SXM5-80GB"


def _observation(prediction, scale: float = 1.0, requests: float = 1000.0) -> Observation:
    """Observed figures equal to a prediction x scale, each in a bucket of +-10% around it."""
    latency = {m: {q: Quantile(v * scale, v * scale * 0.9, v * scale * 1.1) for q, v in qs.items()}
               for m, qs in prediction.latency.items()}
    return Observation("5m", 2.0, requests, 1000.0, 250.0, latency,
                       {m: v * scale for m, v in prediction.mean.items()}, 10.0, 0.0, 0.4, 1000, 16)


def _settings(**given: object) -> Observe:
    """spec.observe as the spec parses it (its defaults filled in), with `given` on top."""
    return Observe.model_validate({"prometheus": "main", "selector": {"model_name": "llama"},
                                   "current": {"gpuType": "H100", "replicas": 2}, "driftSeconds": 600, **given})


def _outcome(req, observation: Observation, settings: Observe | None = None) -> ObserveOutcome:
    from inferplan.operator.observing import Current

    prediction = predict_current(req, SHAPE)
    observed = {m: {q: (v.value, v.low, v.high) for q, v in qs.items()} for m, qs in observation.latency.items()}
    return ObserveOutcome("main", "5m", observation, current=Current(SHAPE, "llama", {"replicas": "Deployment"}),
                          prediction=prediction, discrepancies=compare(prediction.latency, observed),
                          settings=settings or _settings())


def _conditions(status: dict) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


def test_a_matching_deployment_is_accurate_and_its_figures_are_in_status(req) -> None:
    prediction = predict_current(req, SHAPE)
    status = observe_status({"conditions": []}, _outcome(req, _observation(prediction, 1.05)),
                            now="2026-11-30T10:00:00Z", generation=1)
    assert _conditions(status) == {"MetricsAvailable": ("True", "SeriesFound"),
                                   "PredictionAccurate": ("True", "Accurate")}
    PlanStatus.model_validate(status)  # the CRD's status schema accepts it
    assert status["observed"]["current"]["replicas"] == 2
    assert status["prediction"]["errorRatio"]["ttft"]["p99"] == pytest.approx(1 / 1.05 - 1, abs=1e-3)


def test_an_observation_that_finds_the_same_figures_changes_only_the_sample_time(req) -> None:
    """The operator writes a status only when it changed: the next observation of the same figures differs in
    observed.sampleTime alone, which is not a change (a write per observation churned every GitOps diff)."""
    from inferplan.operator.observing import only_sample_time_moved

    prediction = predict_current(req, SHAPE)
    first = observe_status({"conditions": []}, _outcome(req, _observation(prediction)), now="2026-11-30T10:00:00Z",
                           generation=1)
    again = observe_status(first, _outcome(req, _observation(prediction)), now="2026-11-30T10:00:30Z", generation=1)
    assert again != first and again["observed"]["sampleTime"] == "2026-11-30T10:00:30Z"
    assert only_sample_time_moved(first, again)
    busier = observe_status(first, _outcome(req, _observation(prediction, requests=2000.0)),
                            now="2026-11-30T10:00:30Z", generation=1)
    assert not only_sample_time_moved(first, busier)
    assert not only_sample_time_moved(None, first) and not only_sample_time_moved(first, first)


def test_drift_turns_the_condition_false_only_after_drift_seconds(req) -> None:
    prediction = predict_current(req, SHAPE)
    slow = _outcome(req, _observation(prediction, 2.0))
    kwargs = dict(generation=1)
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
                          _outcome(req, _observation(prediction)), now="2026-11-30T10:00:00Z", generation=1)
    down = observe_status(good, ObserveOutcome("main", "5m", error=("PrometheusUnreachable", "unreachable")),
                          now="2026-11-30T10:01:00Z", generation=1)
    assert _conditions(down)["MetricsAvailable"] == ("False", "PrometheusUnreachable")
    assert _conditions(down)["PredictionAccurate"] == ("True", "Accurate")
    assert _conditions(down)["Ready"] == ("True", "Planned")
    assert down["observed"] == good["observed"] and down["prediction"] == good["prediction"]
    assert down["recommendation"] == {"kept": True}


def test_the_thresholds_are_the_plans_own_with_the_specs_defaults(req) -> None:
    """maxErrorRatio and driftSeconds come from spec.observe as parsed: what the plan gives, else the spec's
    defaults (0.25, 900 s), never a second copy of them."""
    prediction = predict_current(req, SHAPE)
    observation = _observation(prediction, 2.0)  # twice as slow as predicted
    loose = observe_status({"conditions": []}, _outcome(req, observation, _settings(maxErrorRatio="0.9")),
                           now="2026-11-30T10:00:00Z", generation=1)
    assert _conditions(loose)["PredictionAccurate"] == ("True", "Accurate")
    defaults = Observe.model_validate({"prometheus": "main", "selector": {"model_name": "llama"},
                                       "current": {"gpuType": "H100", "replicas": 2}})
    first = observe_status({"conditions": []}, _outcome(req, observation, defaults), now="2026-11-30T10:00:00Z",
                           generation=1)
    assert _conditions(first)["PredictionAccurate"] == ("True", "DriftPending")
    assert "25%" in next(c["message"] for c in first["conditions"] if c["type"] == "PredictionAccurate")
    still = observe_status(first, _outcome(req, observation, defaults), now="2026-11-30T10:14:59Z", generation=1)
    assert _conditions(still)["PredictionAccurate"] == ("True", "DriftPending")
    drifted = observe_status(still, _outcome(req, observation, defaults), now="2026-11-30T10:15:00Z", generation=1)
    assert _conditions(drifted)["PredictionAccurate"] == ("False", "PredictionDrift")


# ----------------------------------------------------------------------------------------------------------
# Judged against the recommendation's prediction interval (issue 37), the fixed ratio as the fallback


def _recommended(prediction, ratios: dict[str, tuple[float, float]], gpu: str = "H100-SXM5-80GB",
                 scale: float = 1.0) -> dict:
    """A status whose recommendation (on `gpu`) predicted `scale` x `prediction` and carries, for each metric of
    `ratios`, the interval (low, high) x its prediction at every percentile, as the planner writes it."""
    point = {f"{m}Ms": {QUANTILE_NAMES[q]: v * scale * 1e3 for q, v in qs.items()}
             for m, qs in prediction.latency.items()}
    intervals = {f"{m}Ms": {name: [v * low, v * high] for name, v in point[f"{m}Ms"].items()}
                 for m, (low, high) in ratios.items()}
    return {"conditions": [], "recommendation": {"gpuType": gpu, "predicted": {
        **point, "intervals": intervals, "confidence": 0.8}}}


def _accurate(status: dict) -> tuple[str, str, str]:
    found = next(c for c in status["conditions"] if c["type"] == "PredictionAccurate")
    return found["status"], found["reason"], found["message"]


EVERY_METRIC = ("ttft", "tpot", "e2e")


def test_inside_the_fixed_ratio_but_outside_a_narrow_interval_drifts(req) -> None:
    """20% slower than predicted passes maxErrorRatio 25% but not an interval that reaches only 5% above the
    prediction: the interval judges, with the duration of the old rule."""
    prediction = predict_current(req, SHAPE)
    slower = _outcome(req, _observation(prediction, 1.2))  # each observed bucket (1.08, 1.32] x predicted
    without = observe_status({"conditions": []}, slower, now="2026-11-30T10:00:00Z", generation=1)
    state, reason, message = _accurate(without)
    assert (state, reason) == ("True", "Accurate") and "judged by maxErrorRatio 25%" in message
    assert "intervalMs" not in without["prediction"]

    narrow = _recommended(prediction, {m: (0.9, 1.05) for m in EVERY_METRIC})
    first = observe_status(narrow, slower, now="2026-11-30T10:00:00Z", generation=1)
    state, reason, message = _accurate(first)
    assert (state, reason) == ("True", "DriftPending")
    assert "judged against the recommendation's 80% prediction intervals (TTFT, TPOT, E2E)" in message
    assert "maxErrorRatio" not in message
    drifted = observe_status(first, slower, now="2026-11-30T10:10:00Z", generation=1)
    state, reason, message = _accurate(drifted)
    assert (state, reason) == ("False", "PredictionDrift")
    # The message names the metric, the observed value and the interval it is outside of (every percentile is
    # equally far out, 1.08 / 1.05 - 1: the first is named).
    named = message.split(" observed ")[0]
    metric, percentile = named.split()
    q = {v: k for k, v in QUANTILE_NAMES.items()}[percentile]
    value = prediction.latency[metric.lower()][q]
    assert f"observed {value * 1.2 * 1e3:.4g} ms" in message
    assert f"prediction interval {value * 0.9 * 1e3:.4g}-{value * 1.05 * 1e3:.4g} ms" in message
    assert "3% beyond it" in message and "(and 11 more outside)" in message
    assert drifted["prediction"]["driftSince"] == "2026-11-30T10:00:00Z"
    PredictionStatus.model_validate(drifted["prediction"])  # the CRD's status schema accepts it


def test_outside_the_fixed_ratio_but_inside_a_wide_interval_is_accurate(req) -> None:
    """Twice as slow as predicted drifts by maxErrorRatio, but lies inside an interval up to 3x the prediction."""
    prediction = predict_current(req, SHAPE)
    slow = _outcome(req, _observation(prediction, 2.0))
    old_rule = observe_status({"conditions": []}, slow, now="2026-11-30T10:00:00Z", generation=1)
    assert _accurate(old_rule)[:2] == ("True", "DriftPending")
    wide = _recommended(prediction, {m: (0.5, 3.0) for m in EVERY_METRIC})
    status = observe_status(wide, slow, now="2026-11-30T10:00:00Z", generation=1)
    state, reason, message = _accurate(status)
    assert (state, reason) == ("True", "Accurate")
    assert "inside its bound" in message and "80% prediction intervals (TTFT, TPOT, E2E)" in message
    assert "driftSince" not in status["prediction"]
    # The band each percentile was judged against is in the status, around the prediction for the observed workload.
    p95 = prediction.latency["tpot"][0.95] * 1e3
    assert status["prediction"]["intervalMs"]["tpot"]["p95"] == pytest.approx([0.5 * p95, 3.0 * p95], rel=1e-4)
    assert status["prediction"]["confidence"] == 0.8
    PredictionStatus.model_validate(status["prediction"])
    # Below the interval is outside too: a third of the prediction, under its low end of a half.
    fast = observe_status(wide, _outcome(req, _observation(prediction, 0.3)), now="2026-11-30T10:00:00Z",
                          generation=1)
    state, reason, message = _accurate(fast)
    assert (state, reason) == ("True", "DriftPending") and "beyond it" in message


def test_the_interval_is_carried_around_the_prediction_for_the_observed_workload(req) -> None:
    """The recommendation was predicted at the planned rate; the current prediction is for the observed one. Its
    interval (the same ratios to the prediction) moves with it: an observation at 0.6x the current prediction is
    inside the band 0.5-1.5x around it, though below the recommendation's own interval, which was predicted twice
    as high."""
    prediction = predict_current(req, SHAPE)
    quieter = _outcome(req, _observation(prediction, 0.6))
    status = observe_status(_recommended(prediction, {m: (0.5, 1.5) for m in EVERY_METRIC}, scale=2.0), quieter,
                            now="2026-11-30T10:00:00Z", generation=1)
    assert _accurate(status)[:2] == ("True", "Accurate")
    p50 = prediction.latency["ttft"][0.5] * 1e3
    assert status["prediction"]["intervalMs"]["ttft"]["p50"] == pytest.approx([0.5 * p50, 1.5 * p50], rel=1e-4)


def test_a_metric_without_an_interval_falls_back_to_the_fixed_ratio(req) -> None:
    """Only TTFT has an interval: TPOT and E2E are judged by maxErrorRatio, and the message says which is which."""
    prediction = predict_current(req, SHAPE)
    slow = _outcome(req, _observation(prediction, 2.0))
    status = observe_status(_recommended(prediction, {"ttft": (0.5, 3.0)}), slow, now="2026-11-30T10:00:00Z",
                            generation=1)
    state, reason, message = _accurate(status)
    assert (state, reason) == ("True", "DriftPending")  # TPOT and E2E twice as slow: beyond 25%
    assert "against the recommendation's 80% prediction intervals (TTFT)" in message
    assert "by maxErrorRatio 25% (TPOT, E2E: no interval for these percentiles)" in message
    assert "(maxErrorRatio)" in message  # the farthest is one the ratio judged
    assert set(status["prediction"]["intervalMs"]) == {"ttft"}


def test_the_condition_states_the_intervals_at_the_plans_own_confidence(req) -> None:
    """A recommendation whose intervals are stated at 0.975 (slo.confidence "0.975"): PredictionAccurate says
    "97.5% prediction intervals", not a rounded 98%."""
    prediction = predict_current(req, SHAPE)
    recommended = _recommended(prediction, {m: (0.5, 1.5) for m in EVERY_METRIC})
    recommended["recommendation"]["predicted"]["confidence"] = 0.975
    status = observe_status(recommended, _outcome(req, _observation(prediction, 1.0)), now="2026-11-30T10:00:00Z",
                            generation=1)
    message = _accurate(status)[2]
    assert "against the recommendation's 97.5% prediction intervals" in message and "98%" not in message
    assert status["prediction"]["confidence"] == 0.975


def test_intervals_of_another_gpu_family_do_not_judge_the_current_deployment(req) -> None:
    """The recommendation runs on A100s (its intervals rest on that family's evidence); the deployment observed runs
    H100s: the fixed ratio judges, and the message says why."""
    prediction = predict_current(req, SHAPE)
    slow = _outcome(req, _observation(prediction, 2.0))
    status = observe_status(_recommended(prediction, {m: (0.5, 3.0) for m in EVERY_METRIC}, gpu="A100-SXM4-80GB"),
                            slow, now="2026-11-30T10:00:00Z", generation=1)
    state, reason, message = _accurate(status)
    assert (state, reason) == ("True", "DriftPending")
    assert "by maxErrorRatio 25%" in message and "A100-SXM4-80GB" in message and "H100-SXM5-80GB" in message
    assert "intervalMs" not in status["prediction"]


# ----------------------------------------------------------------------------------------------------------
# Through a real Prometheus (skipped without one, except in CI)

LATENCY = {"ttft": {"0.5": 0.08, "0.9": 0.2, "0.95": 0.3, "0.99": 0.7},
           "tpot": {"0.5": 0.03, "0.9": 0.04, "0.95": 0.045, "0.99": 0.06},
           "e2e": {"0.5": 6.0, "0.9": 12.0, "0.95": 15.0, "0.99": 25.0}}


def test_an_observation_is_read_in_one_step_and_assessed_in_another_process(engine_standin: StandinFactory,
                                                                             prometheus: PrometheusFactory) -> None:
    """The operator reads (Prometheus, the Deployment) in its observe threads and calibrates and predicts in its
    planner processes: what `measure` returns crosses to a process as plain data, and `assess` gives the same
    outcome there."""
    server = prometheus([engine_standin(standin_config(labels={"model_name": "llama"}, requests_per_second=40,
                                                       latency=LATENCY))])
    server.wait_for_series('increase({model_name="llama", __name__="vllm:e2e_request_latency_seconds_count"}'
                           f'[30s] offset {round(SETTLE_SECONDS)}s) > 20', timeout_s=60)  # the window observed
    data = spec()
    data["observe"] = {"prometheus": "main", "selector": {"model_name": "llama"}, "window": "30s", "minRequests": 10,
                       "calibrate": True, "current": {"gpuType": "NVIDIA-L4", "replicas": 2, "maxBatch": 64}}
    endpoints = {"main": PrometheusEndpoint("main", server.url)}
    measured = measure(data, endpoints, lambda name: None)
    assert measured.outcome.error is None and measured.outcome.observation is not None
    assert measured.outcome.prediction is None and measured.request is not None
    assert measured.outcome.settings is not None and measured.outcome.settings.calibrate
    here = assess(measured, None)
    there = assess(pickle.loads(pickle.dumps(measured)), None)
    assert here.prediction is not None and here.calibration is not None and here.discrepancies
    assert there == here
    # An outcome that is already an error is assessed as it is.
    unknown = measure(data, {}, lambda name: None)
    assert unknown.outcome.error is not None and unknown.outcome.error[0] == "UnknownPrometheus"
    assert assess(unknown, None) is unknown.outcome


@pytest.mark.parametrize("engine", sorted(ENGINE_FLAGS))
def test_the_deployment_the_planner_wrote_reads_back_as_planned(engine: str) -> None:
    """engine_launch writes and read_deployment reads one table (engine_args.ENGINE_FLAGS): a Deployment
    started with the recommendation's arguments reads back with its tensor-parallel size, batch, step budget, memory
    share and context length."""
    from inferplan.planner.search.annotate import deployment_of
    from inferplan.planner.search.plan import plan

    data = yaml.safe_load(EXAMPLE.read_text())
    plan_spec = data.get("spec", data)
    plan_spec.setdefault("constraints", {})["tensorParallelSizes"] = [2]
    planned = dataclasses.replace(resolve_plan(parse_plan(plan_spec)), engine=engine)
    c = plan(planned).recommendation
    assert c is not None and c.gpus_per_replica == 2
    found = read_deployment(vllm_deployment(c.engine_args, gpus="8"), engine)
    assert (found["gpus_per_replica"], found["max_batch"]) == (2, c.max_batch)
    written = [c.engine_args[i + 1] for i, flag in enumerate(c.engine_args) if flag in ENGINE_FLAGS[engine].step_tokens]
    assert found.get("max_num_batched_tokens") == (int(written[0]) if written else None)
    settings = deployment_of(planned, c).settings
    assert (found["memory_fraction"], found["max_model_len"]) == (settings.memory_fraction, settings.max_model_len)


def test_a_pipelined_replica_reads_back_with_all_its_stages() -> None:
    """A pod of one pipeline stage (a LeaderWorkerSet leader's arguments) reads back as the whole replica: TP x
    stages GPUs and its stages, so it is predicted as the search planned it."""
    from inferplan.planner.search.plan import plan

    path = EXAMPLE.parents[1] / "platform" / "llama-405b-bf16-h100.yaml"
    request = resolve_plan(load_plan_file(path))
    rec = plan(request).recommendation
    assert rec is not None and rec.pipeline_parallel == 2
    body = vllm_deployment(rec.engine_args, gpus="8")  # a pod holds one stage's GPUs
    body["spec"]["template"]["spec"]["nodeSelector"] = rec.node_selector
    found = read_deployment(body, "vllm")
    assert (found["gpus_per_replica"], found["pipeline_parallel"]) == (16, 2)
    current = resolve_current({"deployment": "llama"}, body, request)
    assert current.shape.pipeline_parallel == 2 and current.shape.gpus_per_replica == 16
    # At the plan's rate over the recommendation's replicas: the search's numbers for it.
    predicted = predict_current(request, dataclasses.replace(current.shape, replicas=rec.replicas))
    for metric, quantiles in (("tpot", rec.predicted.tpot_ms), ("ttft", rec.predicted.ttft_ms)):
        assert predicted.latency[metric][0.95] * 1e3 == pytest.approx(quantiles.p95, rel=0.01)
    assert "pipeline_parallel" not in read_deployment(vllm_deployment(["--tensor-parallel-size", "8"]), "vllm")


def test_a_deployment_with_data_parallel_attention_reads_back_as_such() -> None:
    """SGLang's --enable-dp-attention, as the planner writes it for an MLA model, reads back into the current
    shape, so the running deployment is predicted with the attention it runs."""
    from inferplan.planner.search.plan import plan

    deepseek = resolve_plan(load_plan_file(EXAMPLE.parents[1] / "platform" / "deepseek-r1-shapes.yaml"))
    # 1,000-token prompts: data-parallel attention's layout (with 4,000 each prompt's attention on its rank stalls
    # the others, and tensor parallelism is the cheaper).
    deepseek = dataclasses.replace(deepseek, shapes=("aggregated",), max_nodes_per_replica=1, prompt_mean=1000.0)
    rec = plan(deepseek).recommendation
    assert rec is not None and rec.data_parallel_attention
    body = vllm_deployment(rec.engine_args, gpus=str(rec.gpus_per_replica))
    body["spec"]["template"]["spec"]["nodeSelector"] = rec.node_selector
    assert read_deployment(body, "sglang")["data_parallel_attention"] is True
    current = resolve_current({"deployment": "deepseek"}, body, deepseek)
    assert current.shape.data_parallel_attention and current.shape.gpus_per_replica == rec.gpus_per_replica
    assert current.shape.expert_parallel == rec.expert_parallel == ("--ep-size" in rec.engine_args)
    plain = [a for a in rec.engine_args if a != "--enable-dp-attention"]  # the switch is what says it
    assert "data_parallel_attention" not in read_deployment(vllm_deployment(plain), "sglang")


def test_an_sglang_nvfp4_launch_reads_back_as_nvfp4() -> None:
    # The planner launches SGLang on a ModelOpt NVFP4 checkpoint with --quantization modelopt_fp4.
    body = vllm_deployment(["--model-path", "nvidia/DeepSeek-R1-0528-FP4", "--quantization", "modelopt_fp4"])
    assert read_deployment(body, "sglang")["precision"] == "nvfp4"


@pytest.mark.parametrize("engine", ["vllm", "sglang", "tensorrt-llm"])
def test_a_rendered_deployment_of_a_pre_quantised_checkpoint_reads_back_at_its_precision(engine: str) -> None:
    """`inferplan render` gives the engine a pre-quantised repository and no quantisation flag (the method is in
    the checkpoint's own config): the precision is read from the checkpoint, not taken as the plan's first (bf16)."""
    from inferplan.deploy.manifests import deployment
    from inferplan.planner.search.plan import plan

    data = spec(gpuTypes=["NVIDIA-H100-80GB-HBM3"])
    data["model"] = {"name": "meta-llama/Llama-3.1-70B-Instruct", "precisions": ["bf16", "fp8"]}
    data["engine"] = {"name": engine}
    request = resolve_plan(parse_plan(data))
    rec = plan(dataclasses.replace(request, precisions=("fp8",))).recommendation
    assert rec is not None and rec.precision == "fp8"
    body = deployment(request, rec, name="llama")
    args = " ".join(body["spec"]["template"]["spec"]["containers"][0].get("args", []))
    assert "quantization" not in args and "FP8" in args  # what render writes: the repository, no flag
    assert read_deployment(body, engine)["precision"] == "fp8"
    current = resolve_current({"deployment": "llama"}, {**body, "status": {"readyReplicas": 1}}, request)
    assert current.shape.precision == "fp8" and current.sources["precision"] == "Deployment"
    # A 16-bit repository still reads its --dtype, and a quantisation flag wins over the repository.
    assert read_deployment(vllm_deployment(["--model", "meta-llama/Llama-3.1-70B", "--dtype", "float16"]),
                           "vllm")["precision"] == "fp16"
    assert read_deployment(vllm_deployment(["--model", "nvidia/Llama-3.1-70B-Instruct-FP8", "-q", "awq"]),
                           "vllm")["precision"] == "int4-awq"


# ----------------------------------------------------------------------------------------------------------
# Narrowed by what this deployment did (issue 37, point 3)


def _window_end(i: int, minutes: int = 5) -> str:
    """When the `i`th of windows `minutes` apart ends (5: each 5m window follows the last, none overlap)."""
    at = datetime.datetime(2026, 11, 30, 10, tzinfo=datetime.UTC) + datetime.timedelta(minutes=i * minutes)
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def _observations(req, status: dict, scales: list[float], requests: float = 1000.0, start: int = 0,
                  minutes: int = 5) -> dict:
    """`status` after one observation per scale (observed = scale x the prediction), `minutes` apart (the 5m windows
    follow each other)."""
    prediction = predict_current(req, SHAPE)
    for i, scale in enumerate(scales, start):
        status = observe_status(status, _outcome(req, _observation(prediction, scale, requests)),
                                now=_window_end(i, minutes), generation=1)
    return status


def test_the_deployments_own_errors_narrow_its_band_once_there_are_enough(req) -> None:
    """Inside a wide interval (0.5-3x), windows observed at 0.98-1.10x the prediction are kept as this deployment's
    errors; from the ninth on, its band is their 80% split-conformal interval, narrower than the recommendation's,
    and the message says so. An observation at 2x, inside the recommendation's band, is then outside."""
    prediction = predict_current(req, SHAPE)
    wide = _recommended(prediction, {m: (0.5, 3.0) for m in EVERY_METRIC})
    scales = [1.0, 1.05, 0.98, 1.1, 1.02, 1.07, 0.99, 1.04]
    eight = _observations(req, wide, scales)
    kept = eight["prediction"]["residuals"]["tpot"]["p95"]
    assert len(kept) == 8 and eight["prediction"]["residualsFor"] == "llama:H100-SXM5-80GB/1/256/bf16/auto"
    p95 = prediction.latency["tpot"][0.95] * 1e3
    assert eight["prediction"]["intervalMs"]["tpot"]["p95"] == pytest.approx([0.5 * p95, 3.0 * p95], rel=1e-4)
    assert "narrowed" not in _accurate(eight)[2]

    nine = _observations(req, eight, [1.03], start=8)
    assert len(nine["prediction"]["residuals"]["tpot"]["p95"]) == 9
    ten = _observations(req, nine, [1.0], start=9)  # judged against the band of nine windows
    low, high = ten["prediction"]["intervalMs"]["tpot"]["p95"]
    assert low == pytest.approx(0.98 * p95, rel=2e-3)  # the smallest of nine at 80%: 0.98x
    assert high == pytest.approx(1.1 * p95, rel=2e-3)  # the largest of nine at 80%: 1.1x
    state, reason, message = _accurate(ten)
    assert (state, reason) == ("True", "Accurate") and "narrowed by this deployment's own errors (" in message
    PredictionStatus.model_validate(ten["prediction"])

    slow = _observations(req, ten, [2.0], start=10)
    assert _accurate(slow)[:2] == ("True", "DriftPending")
    assert len(slow["prediction"]["residuals"]["tpot"]["p95"]) == 10  # an error outside its band is not kept


def test_at_a_higher_confidence_the_band_narrows_only_from_as_many_windows_as_it_needs(req) -> None:
    """A plan with slo.confidence "0.95" is judged against 95% intervals. Nine windows cannot state a 95% band: their
    split-conformal bounds at 95% lie beyond the sample (the 0th and 10th of nine), and the sample's range covers
    only about 80% of the next window. Twenty (all that are kept) cannot either: it stays the recommendation's band.
    At 90%, nineteen windows do (eighteen do not)."""
    prediction = predict_current(req, SHAPE)
    wide = _recommended(prediction, {m: (0.5, 3.0) for m in EVERY_METRIC})
    wide["recommendation"]["predicted"]["confidence"] = 0.95
    scales = [1.0, 1.05, 0.98, 1.1, 1.02, 1.07, 0.99, 1.04, 1.03, 1.01] * 2
    status = _observations(req, wide, [*scales, 1.0])
    assert len(status["prediction"]["residuals"]["tpot"]["p95"]) == 20
    p95 = prediction.latency["tpot"][0.95] * 1e3
    assert status["prediction"]["intervalMs"]["tpot"]["p95"] == pytest.approx([0.5 * p95, 3.0 * p95], rel=1e-4)
    assert status["prediction"]["confidence"] == 0.95
    state, reason, message = _accurate(status)
    assert (state, reason) == ("True", "Accurate") and "95% prediction intervals" in message
    assert "narrowed" not in message

    ninety = dict(wide, recommendation={**wide["recommendation"], "predicted": {
        **wide["recommendation"]["predicted"], "confidence": 0.9}})
    eighteen = _observations(req, ninety, [*scales[:18], 1.0])
    assert eighteen["prediction"]["intervalMs"]["tpot"]["p95"] == pytest.approx([0.5 * p95, 3.0 * p95], rel=1e-4)
    nineteen = _observations(req, ninety, [*scales[:19], 1.0])
    assert nineteen["prediction"]["intervalMs"]["tpot"]["p95"] == pytest.approx([0.98 * p95, 1.1 * p95], rel=2e-3)
    assert "90% prediction intervals" in _accurate(nineteen)[2] and "narrowed" in _accurate(nineteen)[2]


def test_an_observation_that_finds_the_same_figures_adds_no_error_and_writes_nothing(req) -> None:
    """Two observations that read the same samples (no scrape between them: a scrape interval longer than the
    operator's INFERPLAN_OBSERVE_SECONDS) are one window, not two: the second adds no error (nine such reads of one
    window would narrow the band to that window alone) and differs from the first in observed.sampleTime only, which
    the operator does not write."""
    from inferplan.operator.observing import only_sample_time_moved

    prediction = predict_current(req, SHAPE)
    wide = _recommended(prediction, {m: (0.5, 3.0) for m in EVERY_METRIC})
    first = _observations(req, wide, [1.05])
    again = _observations(req, first, [1.05], start=1)
    assert again["prediction"]["residuals"] == first["prediction"]["residuals"]
    assert len(again["prediction"]["residuals"]["tpot"]["p95"]) == 1
    assert only_sample_time_moved(first, again)
    ten = _observations(req, wide, [1.05] * 10)  # one window read ten times: the recommendation's band stays
    p95 = prediction.latency["tpot"][0.95] * 1e3
    assert ten["prediction"]["intervalMs"]["tpot"]["p95"] == pytest.approx([0.5 * p95, 3.0 * p95], rel=1e-4)
    other = _observations(req, first, [1.06], start=1)  # a new scrape: new figures, a new error
    assert len(other["prediction"]["residuals"]["tpot"]["p95"]) == 2


def test_windows_that_overlap_the_last_one_kept_add_no_errors(req) -> None:
    """Observed every minute over 5m windows, each window shares four minutes of requests with the one before: ten
    such windows had added ten errors, about two windows' traffic, and narrowed the band to their range (stated at
    80%, it covered far less of the next window: false drift). A window adds its errors once it lies wholly after
    the last one kept."""
    prediction = predict_current(req, SHAPE)
    wide = _recommended(prediction, {m: (0.5, 3.0) for m in EVERY_METRIC})
    scales = [1.0, 1.05, 0.98, 1.1, 1.02, 1.07, 0.99, 1.04, 1.03, 1.0, 1.01]
    minutely = _observations(req, wide, scales, minutes=1)
    assert len(minutely["prediction"]["residuals"]["tpot"]["p95"]) == 3  # minutes 0, 5 and 10
    assert minutely["prediction"]["residualsAt"] == _window_end(10, 1)
    p95 = prediction.latency["tpot"][0.95] * 1e3
    assert minutely["prediction"]["intervalMs"]["tpot"]["p95"] == pytest.approx([0.5 * p95, 3.0 * p95], rel=1e-4)
    assert "narrowed" not in _accurate(minutely)[2]
    # Windows that follow each other each add theirs, and nine narrow the band.
    assert "narrowed by this deployment's own errors" in _accurate(_observations(req, wide, scales))[2]


def test_own_errors_never_widen_a_band_and_small_windows_or_another_deployment_keep_none(req) -> None:
    prediction = predict_current(req, SHAPE)
    narrow = _recommended(prediction, {m: (0.9, 1.3) for m in EVERY_METRIC})
    # Inside by the histogram's resolution (each bucket +-10%): 0.82x and 1.4x overlap the band 0.9-1.3x.
    spread = _observations(req, narrow, [1.0, 1.4, 0.82, 1.2, 1.0, 1.4, 0.82, 1.2, 1.0, 1.1])
    assert len(spread["prediction"]["residuals"]["tpot"]["p95"]) == 10
    p95 = prediction.latency["tpot"][0.95] * 1e3
    # Nine errors from 0.82x to 1.4x: their band is wider than 0.9-1.3x, which stays.
    assert spread["prediction"]["intervalMs"]["tpot"]["p95"] == pytest.approx([0.9 * p95, 1.3 * p95], rel=1e-4)

    small = _observations(req, narrow, [1.0] * 3, requests=100.0)  # under the calibration's 200 requests
    assert "residuals" not in small["prediction"]

    elsewhere = dict(spread, prediction={**spread["prediction"], "residualsFor": "A100-SXM4-80GB/1/256/bf16/auto"})
    again = _observations(req, elsewhere, [1.0], start=11)
    assert again["prediction"]["residuals"]["tpot"]["p95"] == [0.0]  # started afresh for this deployment


# ----------------------------------------------------------------------------------------------------------
# What calibrates and what narrows: only windows of the deployment as it runs now, within the fit's bounds


H100, A100 = "H100-SXM5-80GB", "A100-SXM4-80GB"


def _measured(req, observation: Observation, shape: CurrentShape = SHAPE, image: str | None = None):
    from inferplan.operator.observing import Current, Measured

    return Measured(ObserveOutcome("main", "5m", observation, current=Current(shape, "llama", {}, image=image),
                                   settings=_settings(calibrate=True)), req)


def _with_current(status: dict, shape: CurrentShape, sample_time: str = "2026-11-30T10:00:00Z") -> dict:
    """`status` as an earlier observation left it, with `shape` as the current deployment it found."""
    return {**status, "observed": {"prometheus": "main", "window": "5m", "sampleTime": sample_time,
                                   "requestsPerSecond": 2.0, "requestsInWindow": 1000.0, "current": {
                                       "deployment": "llama", "gpuType": shape.gpu_type, "replicas": shape.replicas,
                                       "gpusPerReplica": shape.gpus_per_replica, "maxBatch": shape.max_batch,
                                       "precision": shape.precision, "kvCacheDtype": shape.kv_cache_dtype}}}


def test_a_window_that_reaches_back_before_the_deployment_changed_neither_calibrates_nor_narrows(req) -> None:
    """plan -> observe -> calibrate -> re-plan -> the Deployment changes (here its batch cap): for one window after
    the change, Prometheus' window still holds the old pods' latencies, which must not calibrate the new deployment
    or count as its own errors. From a whole window after the change on, they do again."""
    old_shape = dataclasses.replace(SHAPE, max_batch=128)
    prediction = predict_current(req, SHAPE)
    slower = _observation(prediction, 1.3)  # what the old pods did, in the window that straddles the change
    before = _with_current(_recommended(prediction, {m: (0.5, 3.0) for m in EVERY_METRIC}), old_shape)
    straddling = assess(_measured(req, slower), before, now="2026-11-30T10:01:00Z")
    assert straddling.calibration is not None and straddling.calibration.updates == 0
    assert "changed" in straddling.calibration.note and straddling.calibration.decode == 1.0
    status = observe_status(before, straddling, now="2026-11-30T10:01:00Z", generation=1)
    assert status["observed"]["current"]["changedAt"] == "2026-11-30T10:01:00Z"
    assert "residuals" not in status["prediction"] and status["calibration"]["updates"] == 0
    # Still the same deployment four minutes on: the 5m window still reaches back before the change.
    later = assess(_measured(req, slower), status, now="2026-11-30T10:05:59Z")
    assert later.calibration is not None and later.calibration.updates == 0
    status = observe_status(status, later, now="2026-11-30T10:05:59Z", generation=1)
    assert status["observed"]["current"]["changedAt"] == "2026-11-30T10:01:00Z" and "residuals" not in \
        status["prediction"]
    rescraped = _observation(prediction, 1.3, requests=1010.0)  # the window a scrape later
    settled = assess(_measured(req, rescraped), status, now="2026-11-30T10:06:00Z")
    assert settled.calibration is not None and settled.calibration.updates == 1
    status = observe_status(status, settled, now="2026-11-30T10:06:00Z", generation=1)
    assert status["prediction"]["residuals"] and status["calibration"]["updates"] == 1


def _calibrated(req, observation: Observation, minutes: list[int]) -> dict:
    """The status after one calibrating observation of `observation` at each of `minutes` (from 10:00)."""
    status: dict = {"conditions": []}
    for minute in minutes:
        now = _window_end(minute, 1)
        status = observe_status(status, assess(_measured(req, observation), status, now=now), now=now, generation=1)
    return status


def test_windows_that_overlap_the_last_update_leave_the_calibration_alone(req) -> None:
    """Observed every minute over 5m windows, each window shares four minutes of requests with the one before: each
    had updated the calibration with all of its requests, so `samples` read about 5x the requests served and the fit
    moved about 5x as fast as n / (n + 500) per window says. A window updates it once it lies wholly after the one
    that last did (`lastUpdateTime`)."""
    prediction = predict_current(req, SHAPE)
    slower = _observation(prediction, 1.3)  # 1,000 requests in each 5m window
    minutely = _calibrated(req, slower, list(range(11)))["calibration"]
    assert (minutely["updates"], minutely["samples"]) == (3, 3000)  # the windows ending at 10:00, 10:05 and 10:10
    assert minutely["lastUpdateTime"] == _window_end(10, 1)
    assert "reach back before the end of the window that last updated it" not in minutely["note"]
    # Three windows that follow each other calibrate it as far.
    following = _calibrated(req, slower, [0, 5, 10])["calibration"]
    assert (minutely["decode"], minutely["prefill"]) == (following["decode"], following["prefill"])
    between = _calibrated(req, slower, [0, 1])["calibration"]
    assert between["updates"] == 1 and f"last updated it ({_window_end(0, 1)})" in between["note"], between


def test_a_new_engine_image_or_replica_count_is_a_change_and_the_first_observation_is_trusted(req) -> None:
    prediction = predict_current(req, SHAPE)
    first = assess(_measured(req, _observation(prediction, 1.3), image="vllm/vllm-openai:v0.11.0"), None,
                   now="2026-11-30T10:00:00Z")
    assert first.calibration is not None and first.calibration.updates == 1  # nothing says it changed
    status = observe_status({"conditions": []}, first, now="2026-11-30T10:00:00Z", generation=1)
    assert status["observed"]["current"]["image"] == "vllm/vllm-openai:v0.11.0"
    assert "changedAt" not in status["observed"]["current"]
    upgraded = assess(_measured(req, _observation(prediction, 1.3), image="vllm/vllm-openai:v0.11.1"), status,
                      now="2026-11-30T10:01:00Z")
    assert upgraded.calibration is not None and upgraded.calibration.updates == 1  # not updated again
    scaled = assess(_measured(req, _observation(prediction, 1.3), dataclasses.replace(SHAPE, replicas=3),
                              image="vllm/vllm-openai:v0.11.0"), status, now="2026-11-30T10:01:00Z")
    assert scaled.calibration is not None and scaled.calibration.updates == 1 and "changed" in scaled.calibration.note


def test_a_recorded_calibration_outside_the_fits_bounds_is_not_used(req) -> None:
    """status.calibration is the operator's, but anyone who may write the status subresource can set it: a factor
    the fit could never produce (outside 0.25-4x, or not a number) plans and predicts nothing."""
    from inferplan.operator.observing import previous_calibration, recorded_calibration
    from inferplan.operator.reconcile import plan_factors
    from inferplan.planner.model.factors import load_factors

    for decode in (0.0, -1.0, 40.0, float("nan"), float("inf"), "x"):
        status = {"calibration": {"gpuType": H100, "decode": decode, "prefill": 1.0, "provenance": "observed",
                                  "samples": 1000, "updates": 2, "note": ""}}
        assert recorded_calibration(status) is None, decode
        assert previous_calibration(status, H100).decode == 1.0
        assert plan_factors({"observe": {"calibrate": True}}, status, "vllm") is load_factors()


def test_a_deployment_that_moves_to_another_gpu_type_keeps_what_was_learnt_on_the_first(req) -> None:
    """Calibrated on H100 (slower than the catalog says), the plan moves to A100; once the deployment runs A100 the
    H100 calibration must still plan H100, else the next plan sees H100 at catalog speed again, moves back, and the
    plan swings between the two as the deployment follows it. Back on H100, its calibration goes on from where it
    was."""
    from inferplan.operator.observing import previous_calibration
    from inferplan.operator.reconcile import plan_factors
    from inferplan.planner.calibration.online import Calibration
    from inferplan.planner.model.factors import load_factors

    on_h100 = {"conditions": [], "calibration": {"gpuType": H100, "decode": 0.7, "prefill": 0.8,
                                                 "provenance": "observed", "samples": 3000, "updates": 3,
                                                 "note": "updated"}}
    a100 = dataclasses.replace(SHAPE, gpu_type=A100)
    prediction = predict_current(req, a100)
    from inferplan.operator.observing import Current

    outcome = ObserveOutcome("main", "5m", _observation(prediction, requests=100.0),
                             current=Current(a100, "llama", {}), prediction=prediction,
                             calibration=Calibration(note="not updated"), calibration_gpu=A100,
                             settings=_settings(calibrate=True))
    on_a100 = observe_status(on_h100, outcome, now="2026-11-30T10:00:00Z", generation=1)
    PlanStatus.model_validate(on_a100)
    assert on_a100["calibration"]["gpuType"] == A100 and on_a100["calibration"]["decode"] == 1.0
    base = load_factors().engine_on("vllm", H100, "nvidia")
    planned = plan_factors({"observe": {"calibrate": True}}, on_a100, "vllm").engine_on("vllm", H100, "nvidia")
    assert planned.decode_speed == pytest.approx(0.7 * base.decode_speed)
    assert planned.prefill_speed == pytest.approx(0.8 * base.prefill_speed)
    back = previous_calibration(on_a100, H100)
    assert (back.decode, back.prefill, back.samples, back.updates) == (0.7, 0.8, 3000, 3)


def test_a_status_that_recorded_no_image_is_not_a_change(req) -> None:
    """A status written before images were recorded (or by an API server whose CRD prunes the field) has none: that
    alone is no change, else every observation would find one and calibration would stop for good."""
    prediction = predict_current(req, SHAPE)
    before = _with_current({"conditions": []}, SHAPE)
    assert "image" not in before["observed"]["current"]
    outcome = assess(_measured(req, _observation(prediction, 1.3), image="vllm/vllm-openai:v0.11.0"), before,
                     now="2026-11-30T10:01:00Z")
    assert outcome.changed_at is None and outcome.settled
    assert outcome.calibration is not None and outcome.calibration.updates == 1


def test_another_engine_image_starts_the_deployments_own_errors_afresh(req) -> None:
    """Errors learnt on one engine version do not narrow another's band: the image is part of what they were observed
    on (`residualsFor`), as the GPU type, TP size, batch, precision and KV dtype are."""
    from inferplan.operator.observing import Current

    prediction = predict_current(req, SHAPE)
    wide = _recommended(prediction, {m: (0.5, 3.0) for m in EVERY_METRIC})

    def observed(status: dict, image: str, minute: int) -> dict:
        outcome = dataclasses.replace(_outcome(req, _observation(prediction, 1.05 + minute / 100)),
                                      current=Current(SHAPE, "llama", {}, image=image))
        return observe_status(status, outcome, now=_window_end(minute), generation=1)

    status = wide
    for minute in range(3):
        status = observed(status, "vllm/vllm-openai:v0.10.2", minute)
    assert len(status["prediction"]["residuals"]["tpot"]["p95"]) == 3
    assert status["prediction"]["residualsFor"] == "llama:H100-SXM5-80GB/1/256/bf16/auto@vllm/vllm-openai:v0.10.2"
    upgraded = observed(status, "vllm/vllm-openai:v0.11.0", 3)
    assert len(upgraded["prediction"]["residuals"]["tpot"]["p95"]) == 1
    assert upgraded["prediction"]["residualsFor"].endswith("@vllm/vllm-openai:v0.11.0")


def test_another_deployment_of_the_same_shape_starts_its_own_errors_afresh(req) -> None:
    """observe.current.deployment moved from llama-blue to llama-green (same GPU type, TP, batch, precision, KV dtype
    and image): blue's errors had narrowed green's band, and the message called them "this deployment's own"."""
    from inferplan.operator.observing import Current

    prediction = predict_current(req, SHAPE)
    wide = _recommended(prediction, {m: (0.5, 3.0) for m in EVERY_METRIC})

    def observed(status: dict, deployment: str, minute: int) -> dict:
        outcome = dataclasses.replace(_outcome(req, _observation(prediction, 1.0 + minute / 100)),
                                      current=Current(SHAPE, deployment, {}, image="vllm/vllm-openai:v0.11.0"))
        return observe_status(status, outcome, now=f"2026-11-30T{10 + minute // 12:02d}:{minute % 12 * 5:02d}:00Z",
                              generation=1)

    status = wide
    for minute in range(10):
        status = observed(status, "llama-blue", minute)
    assert "narrowed by this deployment's own errors" in _accurate(status)[2]
    green = observed(status, "llama-green", 10)
    assert green["prediction"]["residualsFor"].startswith("llama-green:")
    assert len(green["prediction"]["residuals"]["tpot"]["p95"]) == 1
    assert "narrowed" not in _accurate(green)[2]


def test_an_upgrade_keeps_the_errors_an_earlier_release_kept_without_the_deployments_name(req) -> None:
    """A status written before `residualsFor` began with the Deployment's name (da1f54e: the shape and image alone,
    observed on the Deployment observe.current names): the operator upgraded kept none of them, and the band they had
    narrowed went back to the recommendation's until nine more windows. They are this deployment's own: kept, and
    `residualsFor` written with the name."""
    from inferplan.operator.observing import Current

    prediction = predict_current(req, SHAPE)
    wide = _recommended(prediction, {m: (0.5, 3.0) for m in EVERY_METRIC})

    def observed(status: dict, minute: int) -> dict:
        outcome = dataclasses.replace(_outcome(req, _observation(prediction, 1.0 + minute / 100)),
                                      current=Current(SHAPE, "llama", {}, image="vllm/vllm-openai:v0.11.0"))
        return observe_status(status, outcome, now=f"2026-11-30T{10 + minute // 12:02d}:{minute % 12 * 5:02d}:00Z",
                              generation=1)

    status = wide
    for minute in range(10):
        status = observed(status, minute)
    earlier = copy.deepcopy(status)
    earlier["prediction"]["residualsFor"] = "H100-SXM5-80GB/1/256/bf16/auto@vllm/vllm-openai:v0.11.0"
    del earlier["prediction"]["residualsAt"]  # the earlier release wrote none
    upgraded = observed(earlier, 10)
    assert upgraded["prediction"]["residualsFor"] == "llama:H100-SXM5-80GB/1/256/bf16/auto@vllm/vllm-openai:v0.11.0"
    assert len(upgraded["prediction"]["residuals"]["tpot"]["p95"]) == 11
    assert "narrowed by this deployment's own errors" in _accurate(upgraded)[2]
    # Another shape or image written the earlier way is still another deployment's.
    earlier["prediction"]["residualsFor"] = "H100-SXM5-80GB/1/256/bf16/auto@vllm/vllm-openai:v0.10.2"
    assert len(observed(earlier, 10)["prediction"]["residuals"]["tpot"]["p95"]) == 1


def test_another_memory_share_or_step_budget_starts_the_deployments_own_errors_afresh(req) -> None:
    """The engine settings a Deployment states are part of what its errors were observed on (`residualsFor`): the
    same pods moved from --gpu-memory-utilization 0.9 to 0.95 hold another KV cache, and batch and queue otherwise,
    so 0.9's errors do not narrow 0.95's band. A `residualsFor` an earlier release wrote without the settings is this
    deployment's: an upgrade keeps it."""
    from inferplan.operator.observing import Current, engine_settings_part

    prediction = predict_current(req, SHAPE)
    wide = _recommended(prediction, {m: (0.5, 3.0) for m in EVERY_METRIC})

    def observed(status: dict, share: float, minute: int) -> dict:
        shape = dataclasses.replace(SHAPE, memory_fraction=share, max_num_batched_tokens=2048, max_model_len=16384,
                                    chunked_prefill=True)
        outcome = dataclasses.replace(_outcome(req, _observation(prediction, 1.0 + minute / 100)),
                                      current=Current(shape, "llama", {}, image="vllm/vllm-openai:v0.11.0"))
        return observe_status(status, outcome, now=f"2026-11-30T{10 + minute // 12:02d}:{minute % 12 * 5:02d}:00Z",
                              generation=1)

    assert engine_settings_part(SHAPE) == ""
    status = wide
    for minute in range(10):
        status = observed(status, 0.9, minute)
    assert status["prediction"]["residualsFor"] == (
        "llama:H100-SXM5-80GB/1/256/bf16/auto/budget2048+mem0.9+ctx16384+chunked@vllm/vllm-openai:v0.11.0")
    assert "narrowed by this deployment's own errors" in _accurate(status)[2]
    moved = observed(status, 0.95, 10)
    assert "mem0.95" in moved["prediction"]["residualsFor"]
    assert len(moved["prediction"]["residuals"]["tpot"]["p95"]) == 1
    assert "narrowed" not in _accurate(moved)[2]
    # Written by a release that did not key the settings: kept, and keyed with them from now on.
    earlier = copy.deepcopy(status)
    earlier["prediction"]["residualsFor"] = "llama:H100-SXM5-80GB/1/256/bf16/auto@vllm/vllm-openai:v0.11.0"
    upgraded = observed(earlier, 0.9, 10)
    assert len(upgraded["prediction"]["residuals"]["tpot"]["p95"]) == 11
    assert upgraded["prediction"]["residualsFor"] == status["prediction"]["residualsFor"]


def test_the_window_that_updates_the_calibration_is_judged_by_the_prediction_made_before_it(req) -> None:
    """With observe.calibrate, each window both updates the calibration and adds its errors to this deployment's own
    (which narrow its band). Taken against a prediction already fitted to the same window, the errors were in
    sample: a third of what they are (the update moves 2/3 of the way for 1,000 requests), and the band they narrow
    claims an 80% that new windows do not keep. The prediction judged and recorded is the one the plan in the status
    rests on: the calibration before this window's update, which goes to the status for the next one."""
    import math

    from inferplan.planner.calibration.observed import ObservedWorkload, with_workload

    observed_req = with_workload(req, ObservedWorkload(2.0, 1000.0, 250.0))
    prediction = predict_current(observed_req, SHAPE)  # the catalog's: no calibration yet
    wide = _recommended(prediction, {m: (0.5, 3.0) for m in EVERY_METRIC})
    outcome = assess(_measured(req, _observation(prediction, 1.2)), wide, now="2026-11-30T10:00:00Z")
    assert outcome.calibration is not None and outcome.calibration.updates == 1 and outcome.calibration.decode < 0.9
    status = observe_status(wide, outcome, now="2026-11-30T10:00:00Z", generation=1)
    assert status["prediction"]["meanLatencyMs"]["tpot"] == pytest.approx(prediction.mean["tpot"] * 1e3, rel=1e-3)
    assert status["prediction"]["residuals"]["tpot"]["p50"] == [pytest.approx(math.log(1.2), abs=1e-3)]
    assert status["calibration"]["decode"] == round(outcome.calibration.decode, 4)  # what the next plan uses


def test_back_on_a_gpu_type_its_calibration_goes_on_with_its_own_update_time(req) -> None:
    from inferplan.operator.observing import Current
    from inferplan.planner.calibration.online import Calibration

    a100 = dataclasses.replace(SHAPE, gpu_type=A100)
    prediction = predict_current(req, a100)
    on_a100 = {"conditions": [], "calibration": {
        "gpuType": A100, "decode": 1.0, "prefill": 1.0, "provenance": "catalog", "samples": 0, "updates": 0,
        "note": "not updated", "others": [{"gpuType": H100, "decode": 0.7, "prefill": 0.8, "samples": 3000,
                                           "updates": 3, "lastUpdateTime": "2026-11-30T09:00:00Z"}]}}
    restored = Calibration(0.7, 0.8, 3000, 3, "not updated: 100 requests in the window, fewer than 200")
    outcome = ObserveOutcome("main", "5m", _observation(prediction, requests=100.0),
                             current=Current(SHAPE, "llama", {}), prediction=prediction, calibration=restored,
                             calibration_gpu=H100, settings=_settings(calibrate=True))
    back = observe_status(on_a100, outcome, now="2026-11-30T10:00:00Z", generation=1)["calibration"]
    assert (back["gpuType"], back["decode"], back["updates"]) == (H100, 0.7, 3)
    assert back["lastUpdateTime"] == "2026-11-30T09:00:00Z"  # not updated now: H100's own time
    assert "others" not in back  # A100 learnt nothing: nothing to keep


def test_a_deployment_whose_status_leaves_out_ready_replicas_has_none_ready(req) -> None:
    """The API server omits readyReplicas when it is 0 (omitempty): a Deployment whose pods all crash-loop has a
    status without it. Its spec.replicas (3) had been read as 3 serving replicas."""
    body = vllm_deployment(["--max-num-seqs", "64"], ready=None)
    body["status"] = {"observedGeneration": 2, "replicas": 3, "updatedReplicas": 3, "unavailableReplicas": 3}
    assert read_deployment(body)["replicas"] == 0
    with pytest.raises(CurrentError, match="no ready replicas"):
        resolve_current({"deployment": "llama"}, body, req)


def test_a_repeated_flag_reads_as_its_last_value_as_the_engine_parses_it() -> None:
    """argparse keeps a flag's last value (a chart's extraArgs appended after its own flags): the first one had been
    read, a batch cap of 128 where vLLM ran 32."""
    body = vllm_deployment(["serve", "m", "--max-num-seqs", "128", "--no-enable-prefix-caching", "--max-num-seqs=32",
                            "--kv-cache-dtype", "fp8", "--kv-cache-dtype", "auto"])
    found = read_deployment(body, "vllm")
    assert (found["max_batch"], found["kv_cache_dtype"]) == (32, "auto")


def test_vllm_flags_spelled_with_underscores_are_read() -> None:
    """vLLM's parser takes --max_num_seqs for --max-num-seqs: such a Deployment had been read without its batch cap
    and KV dtype (the default 256 and auto predicted while it ran 64 and FP8)."""
    body = vllm_deployment(["--model", "m", "--tensor_parallel_size", "2", "--max_num_seqs=64",
                            "--kv_cache_dtype", "fp8"], gpus="4")
    assert read_deployment(body, "vllm") == {"replicas": 3, "gpu_type": "H100-SXM5-80GB", "gpus_per_replica": 2,
                                             "max_batch": 64, "kv_cache_dtype": "fp8"}


def test_a_node_affinity_that_allows_two_gpu_types_is_not_read_as_its_first(req) -> None:
    """`In: [A100-40GB, H100]` lets the scheduler place the replicas on either: the first value had been taken as the
    GPU type, so an H100 fleet was predicted as A100s without a word."""
    body = vllm_deployment(["--max-num-seqs", "64"])
    pod = body["spec"]["template"]["spec"]
    del pod["nodeSelector"]
    term = {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In",
                                  "values": ["NVIDIA-A100-SXM4-40GB", "NVIDIA-H100-80GB-HBM3"]}]}
    pod["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [term]}}}
    assert "gpu_type" not in read_deployment(body)
    with pytest.raises(CurrentError, match=r"may run on any of NVIDIA-A100-SXM4-40GB, NVIDIA-H100-80GB-HBM3.*gpuType"):
        resolve_current({"deployment": "llama"}, body, req)
    assert resolve_current({"deployment": "llama", "gpuType": "H100"}, body, req).shape.gpu_type == "H100-SXM5-80GB"
    body["metadata"]["annotations"] = {"inferplan.io/gpu-type": "NVIDIA-H100-80GB-HBM3"}
    assert read_deployment(body)["gpu_type"] == "H100-SXM5-80GB"
    # Two spellings of one GPU type are one GPU type.
    del body["metadata"]["annotations"]
    term["matchExpressions"][0]["values"] = ["NVIDIA-H100-80GB-HBM3", "H100-SXM5-80GB"]
    assert read_deployment(body)["gpu_type"] == "H100-SXM5-80GB"


def test_a_deployment_without_a_batch_cap_runs_the_engines_default_on_its_gpu(req) -> None:
    """vLLM 0.11 (`EngineArgs._set_default_args`) caps the batch at 1024 sequences on a GPU of 70 GiB or more other
    than an A100, 256 elsewhere: an H100 Deployment without --max-num-seqs had been predicted at 256."""
    body = vllm_deployment(["serve", "meta-llama/Llama-3.1-8B-Instruct"])
    current = resolve_current({"deployment": "llama"}, body, req)
    assert (current.shape.max_batch, current.sources["maxBatch"]) == (1024, "default")
    body["spec"]["template"]["spec"]["nodeSelector"]["nvidia.com/gpu.product"] = "NVIDIA-L4"
    assert resolve_current({"deployment": "llama"}, body, req).shape.max_batch == 256


def test_the_engine_container_is_found_by_its_gpu_request_or_its_launch() -> None:
    """A manifest asking for GPUs under requests only (or for none: runtimeClass nvidia) with a proxy sidecar first
    had been read from the sidecar: no TP, no batch cap, the proxy's image; and diff patched the proxy."""
    body = vllm_deployment(["serve", "m", "--max-num-seqs", "64"], gpus="2")
    pod = body["spec"]["template"]["spec"]
    pod["containers"][0] = {"name": "proxy", "image": "envoyproxy/envoy"}
    pod["containers"][1]["image"] = "vllm/vllm-openai:v0.11.0"
    pod["containers"][1]["resources"] = {"requests": {"nvidia.com/gpu": "2"}}
    want = {"replicas": 3, "gpu_type": "H100-SXM5-80GB", "image": "vllm/vllm-openai:v0.11.0", "gpus_per_replica": 1,
            "max_batch": 64}
    assert read_deployment(body) == want
    del pod["containers"][1]["resources"]
    assert read_deployment(body) == want


def test_a_tgi_deployment_configured_by_environment_is_read_from_it() -> None:
    """TGI's launcher reads NUM_SHARD, MAX_BATCH_SIZE, QUANTIZE ... from the environment, as its docs configure it:
    they had been ignored, so a 2-shard FP8 server in a 4-GPU pod was read as TP 4 and the plan's precision."""
    body = vllm_deployment([], gpus="4")
    container = body["spec"]["template"]["spec"]["containers"][1]
    container["image"] = "ghcr.io/huggingface/text-generation-inference:3.3.7"
    container["env"] = [{"name": "MODEL_ID", "value": "m"}, {"name": "NUM_SHARD", "value": "2"},
                        {"name": "MAX_BATCH_SIZE", "value": "32"}, {"name": "QUANTIZE", "value": "fp8"},
                        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}]
    found = read_deployment(body, "tgi")
    assert (found["gpus_per_replica"], found["max_batch"], found["precision"]) == (2, 32, "fp8")
    container["args"] = ["--num-shard", "4"]  # the command line wins over the environment
    assert read_deployment(body, "tgi")["gpus_per_replica"] == 4
    container["image"] = "vllm/vllm-openai:v0.11.0"  # another engine's NUM_SHARD means nothing
    container["args"] = ["serve", "m"]
    assert "max_batch" not in read_deployment(body, "vllm")


@pytest.mark.parametrize(("image", "batch"), [
    ("vllm/vllm-openai:v0.6.3", 256),                                      # V0: 256 on every GPU
    ("rocm/vllm:rocm6.2_mi300_ubuntu20.04_py3.9_vllm_0.6.4", 256),         # AMD's tag: the vllm_ release, not rocm6.2
    ("10.0.0.5:5000/vllm/vllm-openai:v0.6.3", 256),                        # a registry's address is not the release
    ("vllm/vllm-openai:v0.11.0", 1024),
    ("vllm/vllm-openai:latest", 1024),                                     # no release in the tag: the plan's
])
def test_a_deployment_without_a_batch_cap_runs_its_images_release_default(req, image: str, batch: int) -> None:
    """A Deployment running vllm/vllm-openai:v0.6.3 without --max-num-seqs under a plan naming no version had been
    compared as vLLM 0.11 at 1024 sequences on its H100, where V0 runs 256 (`EngineArgs.max_num_seqs = 256`,
    vllm/engine/arg_utils.py of 0.6.3.post1): the default is now its image's release's, where the tag names one."""
    body = vllm_deployment(["--model", "meta-llama/Llama-3.1-8B-Instruct"])
    body["spec"]["template"]["spec"]["containers"][1]["image"] = image
    current = resolve_current({"deployment": "llama"}, body, req)
    assert (current.shape.max_batch, current.sources["maxBatch"]) == (batch, "default")


@pytest.mark.parametrize(("engine", "args"), [
    ("tensorrt-llm", ["serve", "meta-llama/Llama-3.3-70B-Instruct", "--tp_size", "4", "--max_batch_size", "128"]),
    ("tgi", ["--model-id", "meta-llama/Llama-3.3-70B-Instruct", "--num-shard", "4"]),
    ("vllm", ["serve", "meta-llama/Llama-3.3-70B-Instruct", "--dtype", "auto", "-tp", "4"]),
])
def test_a_16_bit_repository_without_a_dtype_flag_reads_back_in_its_own_dtype(engine: str, args: list[str]) -> None:
    """A hand-written launch of the 16-bit repository with no --dtype (trtllm-serve has none; TGI and vLLM run the
    config's dtype unset or on `auto`) serves bf16: observed as bf16, not as the plan's first precision (fp8 in the
    TensorRT-LLM 70B example), which predicted the running bf16 replicas as FP8 ones."""
    request = resolve_plan(load_plan_file(EXAMPLE.parents[1] / "platform" / "trtllm-70b-fp8.yaml"))
    request = dataclasses.replace(request, precisions=("fp8", *(p for p in request.precisions if p != "fp8")))
    body = vllm_deployment(args, gpus="4")
    assert read_deployment(body, engine)["precision"] == "bf16"
    current = resolve_current({"deployment": "llama"}, body, dataclasses.replace(request, engine=engine))
    assert current.shape.precision == "bf16" and current.sources["precision"] == "Deployment"


def test_a_pod_of_data_parallel_ranks_runs_that_many_engines_of_the_tp_size(req) -> None:
    """A pod given 8 GPUs running --tensor-parallel-size 4 --data-parallel-size 2 is two engines of TP 4, each with
    its own batch: it was predicted as one TP-4 engine per pod carrying the pod's whole traffic."""
    for dp in (["--data-parallel-size", "2"], ["-dp", "2"], ["--data-parallel-size=2"]):
        body = vllm_deployment(["--model", "m", "--tensor-parallel-size", "4", *dp], gpus="8")
        current = resolve_current({"deployment": "llama"}, body, req)
        assert (current.shape.replicas, current.shape.gpus_per_replica) == (6, 4), dp
    sglang = vllm_deployment(["--tp-size", "4", "--dp-size", "2"], gpus="8")
    assert resolve_current({"deployment": "llama"}, sglang, req).shape.replicas == 6
    # Replicas stated in the spec are the engines, taken as they are.
    assert resolve_current({"deployment": "llama", "replicas": 2}, body, req).shape.replicas == 2


def test_vllm_data_parallel_ranks_with_expert_parallelism_are_one_instance_over_all_their_gpus() -> None:
    """`--data-parallel-size 8 --enable-expert-parallel` on Qwen3-235B-A22B in FP8, a pod of eight H200: one
    instance of eight ranks, the attention data-parallel and the experts spread over all eight GPUs, each rank
    scheduling its own 64 sequences, as the planner reads the same command in a scenario file
    (tests/planner/calibration/test_predict.py). It was predicted as eight replicas each holding the whole 235B
    model on one GPU: overloaded, a TTFT of hours."""
    from inferplan.planner.calibration.observed import ObservedWorkload, with_workload

    qwen = resolve_plan(load_plan_file(EXAMPLE.parents[1] / "platform" / "qwen3-235b-fp8-h200.yaml"))
    args = ["--model", "Qwen/Qwen3-235B-A22B-FP8", "--data-parallel-size", "8", "--enable-expert-parallel",
            "--max-num-seqs", "64"]
    body = vllm_deployment(args, ready=2, gpus="8")
    body["spec"]["template"]["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-H200"}
    current = resolve_current({"deployment": "qwen"}, body, qwen)
    assert current.shape == CurrentShape("H200-SXM-141GB", 2, 8, "fp8", "auto", 64, data_parallel_attention=True,
                                         expert_parallel=True, data_parallel=8, release=qwen.engine_release,
                                         max_num_batched_tokens=8192, chunked_prefill=True, memory_fraction=0.9,
                                         max_model_len=qwen.arch.max_position_embeddings)
    observed = with_workload(qwen, ObservedWorkload(4.0))
    prediction = predict_current(observed, current.shape)
    assert not prediction.overloaded and prediction.utilization < 1
    assert prediction.latency["ttft"][0.5] < 1.0  # seconds
    # Each rank its own 64: the same instance capped at 64 sequences in all queues at this load.
    capped = predict_current(observed, dataclasses.replace(current.shape, data_parallel=1))
    assert prediction.latency["ttft"][0.95] < capped.latency["ttft"][0.95]
    # Without expert parallelism the ranks are whole copies of the model (replicas), as they are on a dense model.
    copies = [a for a in args if a != "--enable-expert-parallel"]
    body["spec"]["template"]["spec"]["containers"][1]["args"] = copies
    assert resolve_current({"deployment": "qwen"}, body, qwen).shape.replicas == 16
    dense = vllm_deployment(["--model", "m", "--tensor-parallel-size", "4", "-dp", "2", "--enable-expert-parallel"],
                            gpus="8")
    llama = resolve_plan(load_plan_file(EXAMPLE))
    assert (resolve_current({"deployment": "llama"}, dense, llama).shape.replicas,
            resolve_current({"deployment": "llama"}, dense, llama).shape.gpus_per_replica) == (6, 4)


def test_without_a_tp_flag_only_tgi_shards_over_the_pods_gpus(req) -> None:
    """vLLM (SGLang, trtllm-serve) without a TP flag runs TP 1 on a pod given 4 GPUs; it was predicted at TP 4.
    TGI's launcher shards over every GPU it is given."""
    vllm = vllm_deployment(["-c", "exec vllm serve m --max-num-seqs 32"], gpus="4")
    current = resolve_current({"deployment": "llama"}, vllm, req)
    assert current.shape.gpus_per_replica == 1 and current.sources["gpusPerReplica"] == "Deployment"
    tgi = vllm_deployment(["--model-id", "m"], gpus="4")
    tgi["spec"]["template"]["spec"]["containers"][1]["image"] = "ghcr.io/huggingface/text-generation-inference:3.3.6"
    assert read_deployment(tgi, "vllm")["gpus_per_replica"] == 4
    # A container that names no engine (arguments to its image's entry point) runs the plan's.
    assert read_deployment(vllm_deployment(["--model-id", "m"], gpus="4"), "tgi")["gpus_per_replica"] == 4
    assert read_deployment(vllm_deployment(["--model", "m"], gpus="4"), "vllm")["gpus_per_replica"] == 1


def test_a_recorded_time_with_fractional_seconds_or_none_readable_holds_no_window_back() -> None:
    """`residualsAt` and `lastUpdateTime` edited by hand (fractional seconds, an offset, garbage): windows after
    them still count, where an unreadable time had stopped calibration and band narrowing for good."""
    from inferplan.operator.observing import _settled
    assert _settled("2026-12-06T11:43:27.5Z", "5m", "2026-12-06T11:48:28Z")
    assert not _settled("2026-12-06T11:43:27.5Z", "5m", "2026-12-06T11:48:27Z")
    assert _settled("2026-12-06T12:43:27+01:00", "5m", "2026-12-06T11:48:27Z")
    assert _settled("yesterday", "5m", "2026-12-06T11:48:27Z")


@pytest.mark.parametrize(("before", "after"), [
    # vLLM's wide expert parallelism on a pod of eight H200: 8 ranks of TP 1, then 4 ranks of TP 2 (same GPUs, same
    # per-rank batch, same replicas)
    (["--data-parallel-size", "8", "--enable-expert-parallel"],
     ["--data-parallel-size", "4", "--tensor-parallel-size", "2", "--enable-expert-parallel"]),
    # SGLang's data-parallel attention, then with expert-parallel MoE layers turned on
    (["--tp-size", "8", "--enable-dp-attention"], ["--tp-size", "8", "--enable-dp-attention", "--ep-size", "8"]),
    # one replica over 8 GPUs: TP 8, then TP 4 x 2 pipeline stages
    (["--tensor-parallel-size", "8"], ["--tensor-parallel-size", "4", "--pipeline-parallel-size", "2"]),
])
def test_another_rank_layout_of_the_same_gpus_and_batch_is_a_change(before: list[str], after: list[str]) -> None:
    """Going from vLLM's dp 8 x tp 1 to dp 4 x tp 2 with expert parallelism (or turning SGLang's expert parallelism
    on, or splitting TP 8 into two pipeline stages) keeps the GPU type, replicas, GPUs per replica and batch: it had
    not been seen as a change, so the old layout's errors narrowed the new one's band and its latencies, still in
    Prometheus' window, calibrated it. The layout is now recorded, moves `changedAt` and starts the errors afresh."""
    from inferplan.operator.observing import Current, Measured
    from inferplan.planner.calibration.observed import ObservedWorkload, with_workload

    qwen = resolve_plan(load_plan_file(EXAMPLE.parents[1] / "platform" / "qwen3-235b-fp8-h200.yaml"))

    def current(args: list[str]) -> Current:
        body = vllm_deployment(["--model", "Qwen/Qwen3-235B-A22B-FP8", "--max-num-seqs", "64", *args], ready=2,
                               gpus="8")
        body["spec"]["template"]["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-H200"}
        return resolve_current({"deployment": "qwen"}, body, qwen)

    old, new = current(before), current(after)
    assert old.shape != new.shape
    assert (old.shape.gpu_type, old.shape.replicas, old.shape.gpus_per_replica, old.shape.max_batch) == \
        (new.shape.gpu_type, new.shape.replicas, new.shape.gpus_per_replica, new.shape.max_batch)
    observed_req = with_workload(qwen, ObservedWorkload(2.0, 1000.0, 250.0))
    prediction = predict_current(observed_req, old.shape)
    status = _recommended(prediction, {m: (0.5, 3.0) for m in EVERY_METRIC}, gpu="H200-SXM-141GB")

    def observed(status: dict, current: Current, scale: float, now: str) -> tuple[ObserveOutcome, dict]:
        measured = Measured(ObserveOutcome("main", "5m", _observation(prediction, scale), current=current,
                                           settings=_settings(calibrate=True)), qwen)
        outcome = assess(measured, status, now=now)
        return outcome, observe_status(status, outcome, now=now, generation=1)

    _, status = observed(status, old, 1.1, _window_end(0))
    assert status["calibration"]["updates"] == 1 and len(status["prediction"]["residuals"]["tpot"]["p95"]) == 1
    changed, status = observed(status, new, 1.2, _window_end(1))
    assert changed.changed_at == _window_end(1) and status["observed"]["current"]["changedAt"] == _window_end(1)
    assert changed.calibration is not None and changed.calibration.updates == 1 and "changed" in \
        changed.calibration.note
    assert "residuals" not in status["prediction"]  # the old layout's error is not the new one's
    _, status = observed(status, new, 1.15, _window_end(2))  # a whole window after the change: its own
    assert status["calibration"]["updates"] == 2 and status["observed"]["current"]["changedAt"] == _window_end(1)
    assert len(status["prediction"]["residuals"]["tpot"]["p95"]) == 1


def test_a_window_that_overlaps_the_one_that_last_calibrated_keeps_no_errors(req) -> None:
    """The errors kept are out of sample: each window is predicted with the calibration as it was before the window,
    and keeps its errors only once it lies wholly after the window that last updated that calibration. The two
    clocks had been apart: a window drifting outside its band keeps no error (residualsAt stays) but does calibrate,
    and the next minute's window, four of its five minutes the calibration's, was judged by a prediction fitted to
    them and kept its (in-sample) errors."""
    from inferplan.planner.calibration.observed import ObservedWorkload, with_workload

    observed_req = with_workload(req, ObservedWorkload(2.0, 1000.0, 250.0))
    prediction = predict_current(observed_req, SHAPE)  # the catalog's: no calibration yet
    status = _recommended(prediction, {m: (0.5, 2.5) for m in EVERY_METRIC})

    def observed(status: dict, minute: int, requests: float) -> dict:
        now = _window_end(minute, 1)
        outcome = assess(_measured(req, _observation(prediction, 3.0, requests)), status, now=now)
        return observe_status(status, outcome, now=now, generation=1)

    status = observed(status, 0, 1000.0)  # 3x slower: outside the band (no error kept), calibrated
    assert status["calibration"]["updates"] == 1 and "residuals" not in status["prediction"]
    status = observed(status, 1, 1010.0)  # inside the band around the calibrated prediction, but in sample
    assert status["calibration"]["updates"] == 1 and _accurate(status)[:2] == ("True", "Accurate")
    assert "residuals" not in status["prediction"]
    status = observed(status, 5, 1020.0)  # wholly after the window that calibrated: out of sample
    assert status["prediction"]["residuals"]["tpot"]["p95"] and status["prediction"]["residualsAt"] == \
        _window_end(5, 1)


@pytest.mark.parametrize(("engine", "version", "image", "batch", "release", "source"), [
    # NVIDIA NIM: the tag is the NIM container's release, not vLLM's or TensorRT-LLM's
    ("vllm", "0.6.3", "nvcr.io/nim/meta/llama-3.1-8b-instruct:1.8.0", 256, "0.6.3", "spec"),
    ("tensorrt-llm", "0.18.0", "nvcr.io/nim/meta/llama-3.1-8b-instruct:1.8.0", 256, "0.18.0", "spec"),
    # Triton's release (24.08), not TensorRT-LLM's
    ("tensorrt-llm", "0.18.0", "nvcr.io/nvidia/tritonserver:24.08-trtllm-python-py3", 256, "0.18.0", "spec"),
    # a team's own image, tagged with its own release
    ("vllm", None, "registry.corp/serving/llama-server:0.6.0", 1024, "0.11.2", "default"),
    # the engines' own published images name their release, on a mirror too
    ("tensorrt-llm", None, "nvcr.io/nvidia/tensorrt-llm/release:0.18.0", 256, "0.18.0", "Deployment"),
    ("vllm", "0.11.0", "registry.corp:5000/mirror/vllm/vllm-openai:v0.6.3", 256, "v0.6.3", "Deployment"),
])
def test_a_containers_own_release_is_not_taken_as_the_engines(req, engine: str, version: str | None, image: str,
                                                              batch: int, release: str, source: str) -> None:
    """A NIM image (`nvcr.io/nim/meta/llama-3.1-8b-instruct:1.8.0`) under a vLLM 0.6.3 plan had been read as vLLM
    1.8.0, newer than any, and its max batch defaulted to V1's 1024 on an H100 where V0 runs 256 (under a TensorRT-LLM
    0.18 plan, 1.x's 2048 where the built engines run 256). Only an engine's own published images (`engine_image`)
    name its release; otherwise the plan's version, else the pinned one, and the status says which was assumed."""
    from inferplan.operator.observing import Measured

    body = vllm_deployment(["--model", "meta-llama/Llama-3.1-8B-Instruct"])
    body["spec"]["template"]["spec"]["containers"][1]["image"] = image
    request = dataclasses.replace(req, engine=engine, engine_version=version)
    current = resolve_current({"deployment": "llama"}, body, request)
    assert (current.shape.max_batch, current.sources["maxBatch"]) == (batch, "default")
    assert (current.release, current.sources["engineRelease"]) == (release, source)
    prediction = predict_current(req, current.shape)
    outcome = assess(Measured(ObserveOutcome("main", "5m", _observation(prediction), current=current,
                                             settings=_settings()), request), None, now=_window_end(0))
    recorded = observe_status({"conditions": []}, outcome, now=_window_end(0), generation=1)["observed"]["current"]
    assert (recorded["engineRelease"], recorded["sources"]["engineRelease"]) == (release, source)


# ----------------------------------------------------------------------------------------------------------
# Predicted as the release the Deployment runs


def _assessed_with_image(req, image: str, old: dict | None = None, calibrate: bool = False,
                         scale: float = 1.3) -> tuple:
    """(current, outcome, status) of a Deployment at --max-num-seqs 256 running `image`, observed `scale` x the
    plan's prediction for SHAPE."""
    from inferplan.operator.observing import Measured

    body = vllm_deployment(["--model", "meta-llama/Llama-3.1-8B-Instruct", "--max-num-seqs", "256"])
    body["spec"]["template"]["spec"]["containers"][1]["image"] = image
    current = resolve_current({"deployment": "llama"}, body, req)
    observation = _observation(predict_current(req, SHAPE), scale)
    outcome = assess(Measured(ObserveOutcome("main", "5m", observation, current=current,
                                             settings=_settings(calibrate=calibrate)), req), old, now=_window_end(0))
    status = observe_status(old or {"conditions": []}, outcome, now=_window_end(0), generation=1)
    return current, outcome, status


def test_a_deployment_is_predicted_as_the_release_its_image_runs(req) -> None:
    """A vllm/vllm-openai:v0.6.3 Deployment under a plan naming no version took only its default max batch from its
    image: it was predicted as vLLM 0.11 (the V1 factor line, V1's CUDA graphs, its sampler), the same prediction
    as the same Deployment on vllm/vllm-openai:latest. It is now predicted as the V0 engine it runs, the same as
    under a plan naming engine.version 0.6.3, and the status names the release it was predicted for."""
    assert req.engine_version is None
    _, v1, _ = _assessed_with_image(req, "vllm/vllm-openai:latest")
    current, v0, status = _assessed_with_image(req, "vllm/vllm-openai:v0.6.3")
    assert current.release == "v0.6.3"
    assert v0.prediction is not None and v1.prediction is not None
    assert v0.prediction.mean != v1.prediction.mean
    _, planned_v0, _ = _assessed_with_image(dataclasses.replace(req, engine_version="0.6.3"), "vllm/vllm-openai:latest")
    assert planned_v0.prediction == v0.prediction
    recorded = status["observed"]["current"]
    assert (recorded["engineRelease"], recorded["sources"]["engineRelease"]) == ("v0.6.3", "Deployment")


def test_a_deployments_release_calibrates_its_own_factor_line(req) -> None:
    """Calibration fits the decode and prefill speed of the line that predicts the Deployment: the same window on a
    V0 Deployment and on a V1 one calls for other corrections (they had been fitted against V1's terms alike), and
    a V0 Deployment is calibrated the same whether its image or the plan's engine.version names the release."""
    _, v1, _ = _assessed_with_image(req, "vllm/vllm-openai:latest", calibrate=True, scale=1.1)
    _, v0, _ = _assessed_with_image(req, "vllm/vllm-openai:v0.6.3", calibrate=True, scale=1.1)
    _, planned_v0, _ = _assessed_with_image(dataclasses.replace(req, engine_version="0.6.3"), "vllm/vllm-openai:latest",
                                            calibrate=True, scale=1.1)
    assert v0.calibration is not None and v1.calibration is not None and v0.calibration.updates == 1
    assert v0.calibration.decode != pytest.approx(v1.calibration.decode, rel=1e-3)
    assert planned_v0.calibration == v0.calibration


def test_intervals_of_the_current_release_line_do_not_judge_a_deployment_on_an_older_one(req) -> None:
    """A recommendation's intervals rest on the engine's current release line (a plan always prices it); a
    Deployment running vLLM 0.6.3 (V0) is judged by the fixed ratio, and the message says why."""
    prediction = predict_current(req, SHAPE)
    narrow = _recommended(prediction, {m: (0.9, 1.05) for m in EVERY_METRIC})
    _, _, v1 = _assessed_with_image(req, "vllm/vllm-openai:latest", old=narrow)
    assert "80% prediction intervals" in _accurate(v1)[2]
    _, _, v0 = _assessed_with_image(req, "vllm/vllm-openai:v0.6.3", old=narrow)
    message = _accurate(v0)[2]
    assert "maxErrorRatio 25%" in message and "older line vllm-v0" in message
    assert "intervalMs" not in v0["prediction"]


# ----------------------------------------------------------------------------------------------------------
# Predicted with the step token budget the Deployment runs

TGI_IMAGE = "ghcr.io/huggingface/text-generation-inference:3.3.7"


def _engine_deployment(engine: str, args: list[str], env: dict[str, str]) -> dict:
    """The vLLM Deployment of these tests with `args`; for TGI, its container on TGI's image with `env`."""
    body = vllm_deployment(args)
    if engine == "tgi":
        container = body["spec"]["template"]["spec"]["containers"][1]
        container["image"] = TGI_IMAGE
        container["env"] = [{"name": name, "value": value} for name, value in env.items()]
    return body


@pytest.mark.parametrize(("engine", "args", "env", "found"), [
    ("vllm", ["--max-num-batched-tokens", "512"], {}, {"max_num_batched_tokens": 512}),
    ("vllm", ["--max_num_batched_tokens=512"], {}, {"max_num_batched_tokens": 512}),
    ("sglang", ["--chunked-prefill-size", "512"], {}, {"max_num_batched_tokens": 512}),
    ("sglang", ["--chunked-prefill-size", "-1"], {}, {"chunked_prefill": False}),
    ("tgi", ["--max-batch-prefill-tokens", "512"], {}, {"max_num_batched_tokens": 512}),
    ("tgi", [], {"MAX_BATCH_PREFILL_TOKENS": "512"}, {"max_num_batched_tokens": 512}),
    ("tgi", ["--max-batch-prefill-tokens", "1024"], {"MAX_BATCH_PREFILL_TOKENS": "512"},
     {"max_num_batched_tokens": 1024}),
    ("tensorrt-llm", ["--max_num_tokens", "512"], {}, {"max_num_batched_tokens": 512}),
    ("vllm", ["--max-num-seqs", "64"], {}, {}),
])
def test_each_engines_step_budget_is_read(engine: str, args: list[str], env: dict[str, str],
                                          found: dict[str, object]) -> None:
    read = read_deployment(_engine_deployment(engine, args, env), engine)
    assert {key: read[key] for key in ("max_num_batched_tokens", "chunked_prefill") if key in read} == found


def test_a_deployment_is_predicted_with_the_step_budget_it_runs(req) -> None:
    """The engine's step token budget had not been read from a Deployment: one chunking prompts at 512 tokens
    (`--max-num-batched-tokens 512`) was predicted at the plan's budget (2048 for vLLM, as `inferplan render` writes
    it), its TTFT under load as for chunks four times its own, and judged and calibrated against that. It is now
    predicted as a plan stating engine.maxNumBatchedTokens 512 is, and the status says the budget is the
    Deployment's."""
    from inferplan.operator.observing import Measured

    assert req.max_num_batched_tokens is None
    plain = resolve_current({"deployment": "llama", "gpuType": "H100-SXM5-80GB", "replicas": 3, "maxBatch": 256},
                            None, req)  # spec.observe.current alone: the plan's budget (what render writes)
    assert (plain.shape.max_num_batched_tokens, plain.sources["maxNumBatchedTokens"]) == (None, "default")
    body = vllm_deployment(["--max-num-seqs", "256", "--max-num-batched-tokens", "512"])
    current = resolve_current({"deployment": "llama"}, body, req)
    assert (current.shape.max_num_batched_tokens, current.sources["maxNumBatchedTokens"]) == (512, "Deployment")
    small = predict_current(req, current.shape)
    assert small.latency["ttft"][0.95] > 1.5 * predict_current(req, plain.shape).latency["ttft"][0.95]
    stated = dataclasses.replace(req, max_num_batched_tokens=512)
    assert small == predict_current(stated, plain.shape)
    # A plan stating a budget: with no Deployment read, it is predicted with it (spec); a Deployment that states
    # another is predicted with its own.
    given = resolve_current({"deployment": "llama", "gpuType": "H100-SXM5-80GB", "replicas": 3, "maxBatch": 256},
                            None, stated)
    assert (given.shape.max_num_batched_tokens, given.sources["maxNumBatchedTokens"]) == (512, "spec")
    body8k = vllm_deployment(["--max-num-seqs", "256", "--max-num-batched-tokens", "8192"])
    assert resolve_current({"deployment": "llama"}, body8k, stated).shape.max_num_batched_tokens == 8192
    # Through an observation: the prediction is the Deployment's, and the status records the budget and its source.
    observation = _observation(small)
    outcome = assess(Measured(ObserveOutcome("main", "5m", observation, current=current, settings=_settings()), req),
                     None, now=_window_end(0))
    observed_req = dataclasses.replace(stated, rate_rps=observation.requests_per_second,
                                       prompt_mean=observation.prompt_mean, output_mean=observation.output_mean)
    assert outcome.prediction == predict_current(observed_req, plain.shape)
    recorded = observe_status({"conditions": []}, outcome, now=_window_end(0), generation=1)["observed"]["current"]
    assert (recorded["maxNumBatchedTokens"], recorded["sources"]["maxNumBatchedTokens"]) == (512, "Deployment")


def test_sglang_with_chunking_off_is_predicted_as_a_plan_without_chunking(req) -> None:
    """SGLang's `--chunked-prefill-size -1` (what `inferplan render` writes for engine.chunkedPrefill false) sends
    prompts whole: the Deployment is predicted as a plan with chunked prefill off, whatever the plan says."""
    sglang = dataclasses.replace(req, engine="sglang")
    body = vllm_deployment(["--max-running-requests", "256", "--chunked-prefill-size", "-1", "--context-length",
                            "8192"])
    current = resolve_current({"deployment": "llama"}, body, sglang)
    assert (current.shape.chunked_prefill, current.sources["chunkedPrefill"]) == (False, "Deployment")
    # Prompts go whole: a step takes at least the context, as the planner takes it for a plan without chunking.
    assert (current.shape.max_num_batched_tokens, current.sources["maxNumBatchedTokens"]) == (8192, "default")
    chunked = dataclasses.replace(current.shape, chunked_prefill=None, max_num_batched_tokens=None)
    whole = predict_current(sglang, current.shape)
    assert whole == predict_current(dataclasses.replace(sglang, chunked_prefill=False), chunked)
    assert whole != predict_current(sglang, chunked)


def test_a_changed_step_budget_is_a_change_of_the_deployment(req) -> None:
    """A Deployment whose budget is edited runs another deployment: windows reaching back before the edit hold the
    old budget's latencies (`changedAt`). A status written before the budget was recorded finds no change."""
    from inferplan.operator.observing import Measured, current_changed_at

    def current_with(*budget: str):
        body = vllm_deployment(["--max-num-seqs", "256", *budget])
        return resolve_current({"deployment": "llama"}, body, req)

    before = current_with("--max-num-batched-tokens", "2048")
    outcome = assess(Measured(ObserveOutcome("main", "5m", _observation(predict_current(req, before.shape)),
                                             current=before, settings=_settings()), req), None, now=_window_end(0))
    status = observe_status({"conditions": []}, outcome, now=_window_end(0), generation=1)
    now = _window_end(1)
    assert current_changed_at(status, before, now) is None
    assert current_changed_at(status, current_with("--max-num-batched-tokens", "512"), now) == now
    assert current_changed_at(status, current_with(), now) == now  # the flag removed: the plan's budget now
    older = copy.deepcopy(status)
    del older["observed"]["current"]["maxNumBatchedTokens"], older["observed"]["current"]["sources"][
        "maxNumBatchedTokens"]
    assert current_changed_at(older, current_with("--max-num-batched-tokens", "512"), now) is None


def test_a_deployment_without_a_step_budget_is_predicted_at_its_engines_own_default(req) -> None:
    """A Deployment whose command sets no step budget runs the engine's own default at its release (vLLM 0.11 on an
    H100: 8192 tokens a step, chunked; 0.6, V0: whole prompts, a budget of max(max_model_len, 2048)), as its max
    batch is the engine's default there: it had been predicted at the plan's budget (2048 for vLLM, as `inferplan
    render` writes it), whatever the pods run."""
    body = vllm_deployment(["--max-num-seqs", "256"])
    current = resolve_current({"deployment": "llama"}, body, req)
    assert (current.shape.max_num_batched_tokens, current.shape.chunked_prefill,
            current.sources["maxNumBatchedTokens"]) == (8192, True, "default")
    assert predict_current(req, current.shape) == predict_current(
        dataclasses.replace(req, max_num_batched_tokens=8192), dataclasses.replace(
            current.shape, max_num_batched_tokens=None, chunked_prefill=None))
    stated = dataclasses.replace(req, max_num_batched_tokens=512)  # the plan's budget is not what the pods run
    assert resolve_current({"deployment": "llama"}, body, stated).shape.max_num_batched_tokens == 8192
    v0_plan = dataclasses.replace(req, engine_version="0.6.3", max_model_len=8192)
    v0 = resolve_current({"deployment": "llama"}, vllm_deployment(["--max-num-seqs", "256", "--max-model-len", "8192"]),
                         v0_plan)
    assert (v0.shape.max_num_batched_tokens, v0.shape.chunked_prefill) == (8192, False)
    # Without --max-model-len vLLM 0.6 runs the model's context (131072 tokens for Llama 3.1), over 32k: it chunks
    # by itself, 512 tokens a step, whatever the plan's engine.maxModelLen.
    v0_long = resolve_current({"deployment": "llama"}, vllm_deployment(["--max-num-seqs", "256"]), v0_plan)
    assert (v0_long.shape.max_model_len, v0_long.sources["maxModelLen"]) == (131072, "default")
    assert (v0_long.shape.max_num_batched_tokens, v0_long.shape.chunked_prefill) == (512, True)


# ----------------------------------------------------------------------------------------------------------
# Predicted with the memory share, context length and chunking the Deployment runs


@pytest.mark.parametrize(("engine", "args", "env", "found"), [
    ("vllm", ["--gpu-memory-utilization", "0.8", "--max-model-len", "16384"], {},
     {"memory_fraction": 0.8, "max_model_len": 16384}),
    ("vllm", ["--gpu_memory_utilization=0.95", "--max_model_len=4096"], {},
     {"memory_fraction": 0.95, "max_model_len": 4096}),
    ("sglang", ["--mem-fraction-static", "0.7", "--context-length", "8192", "--max-total-tokens", "100000"], {},
     {"memory_fraction": 0.7, "max_model_len": 8192}),
    ("sglang", ["--max-total-tokens", "100000"], {}, {}),  # SGLang's KV pool size, not a context length
    ("tgi", ["--cuda-memory-fraction", "0.9", "--max-total-tokens", "4096"], {},
     {"memory_fraction": 0.9, "max_model_len": 4096}),
    ("tgi", [], {"CUDA_MEMORY_FRACTION": "0.85", "MAX_TOTAL_TOKENS": "2048"},
     {"memory_fraction": 0.85, "max_model_len": 2048}),
    ("tgi", ["--max-total-tokens", "8192"], {"MAX_TOTAL_TOKENS": "2048"}, {"max_model_len": 8192}),
    ("tensorrt-llm", ["--kv_cache_free_gpu_memory_fraction", "0.85", "--max_seq_len", "8192"], {},
     {"memory_fraction": 0.85, "max_model_len": 8192}),
    ("lmdeploy", ["--cache-max-entry-count", "0.5", "--session-len", "8192"], {},
     {"memory_fraction": 0.5, "max_model_len": 8192}),
    ("vllm", ["--gpu-memory-utilization", "0.8", "--gpu-memory-utilization", "0.9"], {}, {"memory_fraction": 0.9}),
    # Values the engine would refuse are not read: a fraction outside (0, 1], a length that is no positive integer.
    ("vllm", ["--gpu-memory-utilization", "1.5", "--max-model-len", "8k"], {}, {}),
    ("vllm", ["--gpu-memory-utilization", "0", "--max-model-len", "-1"], {}, {}),
    ("vllm", ["--gpu-memory-utilization", "nan", "--max-model-len", "4096.5"], {}, {}),
    ("sglang", ["--mem-fraction-static", "high", "--context-length", ""], {}, {}),
    ("vllm", ["--gpu-memory-utilization"], {}, {}),
])
def test_each_engines_memory_share_and_context_length_are_read(engine: str, args: list[str], env: dict[str, str],
                                                                found: dict[str, object]) -> None:
    read = read_deployment(_engine_deployment(engine, args, env), engine)
    assert {key: read[key] for key in ("memory_fraction", "max_model_len") if key in read} == found


@pytest.mark.parametrize(("engine", "args", "chunked"), [
    ("vllm", ["--no-enable-chunked-prefill"], False),
    ("vllm", ["--no_enable_chunked_prefill"], False),
    ("vllm", ["--enable-chunked-prefill"], True),
    ("vllm", ["--enable-chunked-prefill", "--max-num-seqs", "64"], True),
    ("vllm", ["--enable-chunked-prefill", "False"], False),  # vLLM 0.6's optional value
    ("vllm", ["--enable-chunked-prefill=false"], False),
    ("vllm", ["--enable-chunked-prefill", "True"], True),
    ("vllm", ["--no-enable-chunked-prefill", "--enable-chunked-prefill"], True),  # the last one counts
    ("vllm", ["--enable-chunked-prefill", "--no-enable-chunked-prefill"], False),
    ("tensorrt-llm", ["--enable_chunked_prefill"], True),
    ("sglang", ["--chunked-prefill-size", "-1"], False),
    ("vllm", ["--max-num-seqs", "64"], None),
])
def test_each_engines_chunked_prefill_switch_is_read(engine: str, args: list[str], chunked: bool | None) -> None:
    assert read_deployment(vllm_deployment(args), engine).get("chunked_prefill") is chunked


def test_a_deployment_is_predicted_with_the_memory_share_it_runs(req) -> None:
    """The memory share had not been read from a Deployment: one at `--gpu-memory-utilization 0.8` and one at 0.95
    were both predicted at the plan's 0.9, the same KV cache, concurrency and queueing. A larger share leaves more KV
    tokens, so at a load the 0.8 deployment cannot carry (its KV cache holds fewer of these 5000-token requests) the
    0.95 one still keeps up."""
    from inferplan.planner.calibration.observed import running_request
    from inferplan.planner.search.annotate import deployment_of

    long = dataclasses.replace(req, prompt_mean=4000.0, output_mean=1000.0, rate_rps=6.5)

    def current_at(fraction: str):
        body = vllm_deployment(["--max-num-seqs", "1024", "--gpu-memory-utilization", fraction])
        return resolve_current({"deployment": "llama"}, body, req)

    def kv_tokens(current) -> int:
        shape = current.shape
        return deployment_of(running_request(long, shape), shape, None, 1, shape.release).memory.kv_cache_tokens

    low, high = current_at("0.8"), current_at("0.95")
    assert (low.shape.memory_fraction, low.sources["memoryFraction"]) == (0.8, "Deployment")
    assert (high.shape.memory_fraction, high.sources["memoryFraction"]) == (0.95, "Deployment")
    assert kv_tokens(high) > 1.2 * kv_tokens(low)
    at_low, at_high = predict_current(long, low.shape), predict_current(long, high.shape)
    assert at_high.utilization < at_low.utilization  # a higher capacity per replica
    assert at_low.overloaded and not at_high.overloaded
    assert at_high.latency["ttft"][0.95] < 0.5 * at_low.latency["ttft"][0.95]
    # A Deployment that states none runs its engine's own share (vLLM: 0.9), between the two.
    plain = resolve_current({"deployment": "llama"}, vllm_deployment(["--max-num-seqs", "1024"]), req)
    assert (plain.shape.memory_fraction, plain.sources["memoryFraction"]) == (0.9, "default")
    assert kv_tokens(low) < kv_tokens(plain) < kv_tokens(high)
    # The 0.95 Deployment is predicted as a plan stating engine.gpuMemoryUtilization 0.95 is.
    stated = dataclasses.replace(long, memory_fraction=0.95)
    assert at_high == predict_current(stated, dataclasses.replace(high.shape, memory_fraction=None))


@pytest.mark.parametrize(("engine", "flag", "low", "high"), [
    ("sglang", "--mem-fraction-static", "0.7", "0.85"),
    ("tgi", "--cuda-memory-fraction", "0.7", "0.95"),
    ("tensorrt-llm", "--kv_cache_free_gpu_memory_fraction", "0.7", "0.95"),
])
def test_each_engines_memory_share_sizes_its_kv_cache(req, engine: str, flag: str, low: str, high: str) -> None:
    """Each engine's own flag, in the meaning the planner's memory model gives it (SGLang's static share of the
    total, TensorRT-LLM's and TGI's share of what is free after loading): more memory, more KV tokens."""
    from inferplan.planner.calibration.observed import running_request
    from inferplan.planner.search.annotate import deployment_of

    plan = dataclasses.replace(req, engine=engine)

    def kv_tokens(fraction: str) -> int:
        current = resolve_current({"deployment": "llama"}, vllm_deployment(["--max-num-seqs", "256", flag, fraction]),
                                  plan)
        assert (current.shape.memory_fraction, current.sources["memoryFraction"]) == (float(fraction), "Deployment")
        shape = current.shape
        return deployment_of(running_request(plan, shape), shape, None, 1, shape.release).memory.kv_cache_tokens

    assert kv_tokens(high) > kv_tokens(low) > 0


def test_memory_share_context_and_chunking_sources(req) -> None:
    """Where each value came from, as the status says it: the Deployment's flag, its engine's own default at the
    release it runs where the Deployment states none (SGLang's share by the GPU's memory, the model's context),
    and with no Deployment read the plan's (spec) or the planner's (default, left to the plan)."""
    sglang = dataclasses.replace(req, engine="sglang")
    stated = resolve_current({"deployment": "llama"}, vllm_deployment(
        ["--mem-fraction-static", "0.8", "--context-length", "8192"]), sglang)
    assert (stated.shape.memory_fraction, stated.shape.max_model_len) == (0.8, 8192)
    assert (stated.sources["memoryFraction"], stated.sources["maxModelLen"]) == ("Deployment", "Deployment")
    unstated = resolve_current({"deployment": "llama"}, vllm_deployment([]), sglang)
    assert unstated.shape.max_model_len == req.arch.max_position_embeddings
    assert 0.8 < unstated.shape.memory_fraction < 0.9 and unstated.shape.memory_fraction != 0.88  # SGLang's own
    assert (unstated.sources["memoryFraction"], unstated.sources["maxModelLen"]) == ("default", "default")
    # Bad values are ignored: the engine's default, as for a flag not given.
    bad = resolve_current({"deployment": "llama"}, vllm_deployment(
        ["--mem-fraction-static", "1.2", "--context-length", "many"]), sglang)
    assert (bad.shape.memory_fraction, bad.shape.max_model_len, bad.sources["memoryFraction"]) == (
        unstated.shape.memory_fraction, unstated.shape.max_model_len, "default")
    given = {"deployment": "llama", "gpuType": "H100-SXM5-80GB", "replicas": 3, "maxBatch": 256}
    alone = resolve_current(given, None, req)
    assert (alone.shape.memory_fraction, alone.shape.max_model_len, alone.shape.chunked_prefill) == (None, None, None)
    assert (alone.sources["memoryFraction"], alone.sources["maxModelLen"], alone.sources["chunkedPrefill"]) == (
        "default", "default", "default")
    planned = dataclasses.replace(req, memory_fraction=0.85, max_model_len=4096, chunked_prefill=True)
    spec_only = resolve_current(given, None, planned)
    assert (spec_only.shape.memory_fraction, spec_only.shape.max_model_len, spec_only.shape.chunked_prefill) == (
        0.85, 4096, True)
    assert (spec_only.sources["memoryFraction"], spec_only.sources["maxModelLen"],
            spec_only.sources["chunkedPrefill"]) == ("spec", "spec", "spec")
    # A Deployment read: the plan's values are not what the pods run.
    pods = resolve_current({"deployment": "llama"}, vllm_deployment([]), planned)
    assert (pods.shape.memory_fraction, pods.shape.max_model_len) == (0.9, req.arch.max_position_embeddings)


def test_vllm_chunking_off_is_read_where_the_release_can_turn_it_off(req) -> None:
    """vLLM's --no-enable-chunked-prefill sends prompts whole from 0.11.1 on, predicted as a plan without chunking,
    each step at least the context; vLLM 0.8.0-0.11.0 chunk whatever the switch says
    (`engine_args.chunked_prefill_problem`), predicted chunked."""
    args = ["--max-num-seqs", "256", "--max-model-len", "8192", "--no-enable-chunked-prefill"]
    body = vllm_deployment(args)
    body["spec"]["template"]["spec"]["containers"][1]["image"] = "vllm/vllm-openai:v0.11.2"
    whole = resolve_current({"deployment": "llama"}, body, req)
    assert (whole.shape.chunked_prefill, whole.sources["chunkedPrefill"]) == (False, "Deployment")
    assert (whole.shape.max_num_batched_tokens, whole.sources["maxNumBatchedTokens"]) == (8192, "default")
    unchunked = dataclasses.replace(req, chunked_prefill=False, max_model_len=8192, max_num_batched_tokens=8192)
    bare = dataclasses.replace(whole.shape, chunked_prefill=None, max_model_len=None, max_num_batched_tokens=None)
    assert predict_current(req, whole.shape) == predict_current(unchunked, bare)
    body["spec"]["template"]["spec"]["containers"][1]["image"] = "vllm/vllm-openai:v0.10.1"
    forced = resolve_current({"deployment": "llama"}, body, req)
    assert (forced.shape.chunked_prefill, forced.sources["chunkedPrefill"]) == (True, "default")
    # vLLM 0.6 takes --enable-chunked-prefill True: chunked, at its default budget for chunking (512).
    v0 = vllm_deployment(["--max-num-seqs", "256", "--max-model-len", "8192", "--enable-chunked-prefill", "True"])
    v0["spec"]["template"]["spec"]["containers"][1]["image"] = "vllm/vllm-openai:v0.6.3"
    on = resolve_current({"deployment": "llama"}, v0, req)
    assert (on.shape.chunked_prefill, on.shape.max_num_batched_tokens) == (True, 512)


def test_a_changed_memory_share_or_context_is_a_change_of_the_deployment(req) -> None:
    """A Deployment whose memory share or context is edited runs another KV cache: windows reaching back before the
    edit hold the old one's latencies (`changedAt`). A status written before they were recorded finds no change."""
    from inferplan.operator.observing import Measured, current_changed_at

    def current_with(*args: str):
        return resolve_current({"deployment": "llama"}, vllm_deployment(["--max-num-seqs", "256", *args]), req)

    before = current_with("--gpu-memory-utilization", "0.9", "--max-model-len", "8192")
    outcome = assess(Measured(ObserveOutcome("main", "5m", _observation(predict_current(req, before.shape)),
                                             current=before, settings=_settings()), req), None, now=_window_end(0))
    status = observe_status({"conditions": []}, outcome, now=_window_end(0), generation=1)
    recorded = status["observed"]["current"]
    assert (recorded["memoryFraction"], recorded["maxModelLen"], recorded["chunkedPrefill"]) == (0.9, 8192, True)
    assert {recorded["sources"][key] for key in ("memoryFraction", "maxModelLen")} == {"Deployment"}
    assert recorded["sources"]["chunkedPrefill"] == "default"
    PlanStatus.model_validate(status)  # within the status's bounds (its sources among them)
    now = _window_end(1)
    assert current_changed_at(status, before, now) is None
    assert current_changed_at(status, current_with("--gpu-memory-utilization", "0.8", "--max-model-len", "8192"),
                              now) == now
    assert current_changed_at(status, current_with("--gpu-memory-utilization", "0.9", "--max-model-len", "4096"),
                              now) == now
    older = copy.deepcopy(status)
    for key in ("memoryFraction", "maxModelLen", "chunkedPrefill"):
        del older["observed"]["current"][key], older["observed"]["current"]["sources"][key]
    assert current_changed_at(older, current_with("--gpu-memory-utilization", "0.8", "--max-model-len", "4096"),
                              now) is None
