"""spec.observe end to end: the operator (a process, as deployed) reads serving-engine stand-ins through a
real Prometheus, writes what it observed and how far its predictions are, calibrates, exports predicted and
observed series that the same Prometheus scrapes back, and survives a Prometheus outage.

Stand-ins (tests/support/engine_standin.py) export vLLM-named series whose latencies are drawn from known
quantiles: the planner's own prediction for the current deployment (matching), three times it (slow), or the
prediction for an engine 0.7x / 0.6x as efficient as the catalog says (calibration).
"""

from __future__ import annotations

import copy
import datetime
import itertools
import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml

from inferplan.planner.calibration.observed import CurrentShape, ObservedWorkload, predict_current, with_workload
from inferplan.planner.calibration.online import Calibration, calibrated_factors
from inferplan.planner.model.factors import load_factors
from inferplan.planner.request import resolve_plan
from inferplan.planner.spec_parsing import parse_plan
from inferplan.resource import GROUP, PLURAL, VERSION
from tests.support.engine_standin import StandinProcess, free_port, standin_config
from tests.support.monitoring import dashboard_expressions, rule_expressions
from tests.support.prometheus import PrometheusServer, promql_string, require_prometheus

from .conftest import wait_for

RATE = 10.0  # requests/s each stand-in serves
SHAPE = CurrentShape("H100-SXM5-80GB", 2, 1, "bf16", "auto", 256)
QUIRK = 'a"b\\c\nd'  # a label value that must be escaped in PromQL
SPEC: dict[str, Any] = {
    "model": {"name": "meta-llama/Llama-3.1-8B-Instruct", "precisions": ["bf16"]},
    "engine": {"name": "vllm"},
    "workload": {"requestsPerSecond": "4", "promptTokens": {"mean": 500, "p95": 1500},
                 "outputTokens": {"mean": 250, "p95": 700}},
    "slo": {"ttft": {"maxMs": 500, "percentile": "p95"}, "tpot": {"maxMs": 50, "percentile": "p95"}},
    "constraints": {"gpuTypes": ["H100-SXM5-80GB"], "tensorParallelSizes": [1],
                    "availableGpus": {"H100-SXM5-80GB": 16}},
}


def _latency(factors: Any = None, scale: float = 1.0) -> dict[str, dict[str, float]]:
    req = with_workload(resolve_plan(parse_plan(SPEC)), ObservedWorkload(RATE))
    prediction = predict_current(req, SHAPE, factors)
    return {m: {str(q): v * scale for q, v in qs.items()} for m, qs in prediction.latency.items()}


def _standin(model: str, latency: dict[str, dict[str, float]], **labels: str) -> StandinProcess:
    req = resolve_plan(parse_plan(SPEC))
    config = standin_config(labels={"model_name": model, **labels}, requests_per_second=RATE, latency=latency,
                            prompt_tokens={"mean": req.prompt_mean, "cv": req.prompt_cv},
                            output_tokens={"mean": req.output_mean, "cv": req.output_cv})
    return StandinProcess(config).start()


def _plan(name: str, selector: dict[str, str], **observe: Any) -> dict[str, Any]:
    spec = copy.deepcopy(SPEC)
    spec["observe"] = {"prometheus": "main", "selector": selector, "window": "30s", "current": {"deployment": "llama"},
                       "driftSeconds": 0, **observe}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceCapacityPlan", "metadata": {"name": name},
            "spec": spec}


DEPLOYMENT = {
    "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "llama"},
    "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "llama"}}, "template": {
        "metadata": {"labels": {"app": "llama"}},
        "spec": {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                 "containers": [{"name": "vllm", "image": "vllm/vllm-openai",
                                 "args": ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--max-num-seqs", "256",
                                          "--dtype", "bfloat16", "--max-num-batched-tokens", "2048"],
                                 "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}},
    "status": {"replicas": 2, "readyReplicas": 2},
}


NODE = {"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "observe-h100", "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
        "status": {"allocatable": {"nvidia.com/gpu": "8"}, "capacity": {"nvidia.com/gpu": "8"},
                   "conditions": [{"type": "Ready", "status": "True"}]}}


def _fetch(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.read().decode()
    except OSError:
        return None


@pytest.fixture(scope="module")
def loop(k8s: dict[str, Any], namespace: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    require_prometheus()
    standins = [
        _standin("llama-match", _latency(), quirk=QUIRK),
        _standin("llama-slow", _latency(scale=3.0)),
        _standin("llama-cal", _latency(calibrated_factors(load_factors(), "vllm", SHAPE.gpu_type,
                                                          Calibration(decode=0.7, prefill=0.6)))),
    ]
    metrics_port = free_port()
    run_dir = tmp_path_factory.mktemp("observe")  # pytest keeps the last few sessions' (the operator's log)
    prometheus = PrometheusServer(run_dir / "prometheus", [s.target for s in standins], extra_scrape_configs=[
        {"job_name": "inferplan", "static_configs": [{"targets": [f"127.0.0.1:{metrics_port}"]}]}])
    operator: subprocess.Popen[str] | None = None
    core = kubernetes.client.CoreV1Api(k8s["admin"])
    try:
        prometheus.start()
        endpoints = run_dir / "prometheus-endpoints.yaml"
        endpoints.write_text(yaml.safe_dump([{"name": "main", "url": prometheus.url, "timeoutSeconds": 2}]))
        apps = kubernetes.client.AppsV1Api(k8s["admin"])
        apps.create_namespaced_deployment(namespace, DEPLOYMENT)
        core.create_node(NODE)
        core.patch_node_status(NODE["metadata"]["name"], {"status": NODE["status"]})
        env = dict(os.environ, KUBECONFIG=str(k8s["kubeconfig"]), INFERPLAN_NAMESPACES=namespace,
                   INFERPLAN_METRICS_PORT=str(metrics_port), INFERPLAN_HEALTH_PORT="0", INFERPLAN_CHECK_SECONDS="0.5",
                   INFERPLAN_OBSERVE_SECONDS="2", INFERPLAN_PROMETHEUS_CONFIG=str(endpoints))
        log = open(run_dir / "operator.log", "w")
        operator = subprocess.Popen([str(Path(sys.executable).with_name("inferplan")), "operator"], env=env,
                                    stdout=log, stderr=subprocess.STDOUT, text=True)
        objects = kubernetes.client.CustomObjectsApi(k8s["admin"])
        plans = {
            "accurate": _plan("accurate", {"model_name": "llama-match", "quirk": QUIRK}),
            "drifting": _plan("drifting", {"model_name": "llama-slow"}),
            "calibrating": _plan("calibrating", {"model_name": "llama-cal"}, calibrate=True, maxErrorRatio="0.5"),
            "following": _plan("following", {"model_name": "llama-match", "quirk": QUIRK}),
        }
        plans["following"]["spec"]["workload"]["source"] = "observed"
        for body in plans.values():
            objects.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
        yield {"objects": objects, "namespace": namespace, "prometheus": prometheus,
               "metrics": f"http://127.0.0.1:{metrics_port}/metrics", "log": run_dir / "operator.log"}
    finally:
        if operator is not None:
            operator.send_signal(signal.SIGTERM)
            try:
                operator.wait(30)
            except subprocess.TimeoutExpired:
                operator.kill()
        prometheus.stop()
        for standin in standins:
            standin.stop()
        try:
            core.delete_node(NODE["metadata"]["name"])
        except kubernetes.client.ApiException:
            pass


def _status(loop: dict[str, Any], name: str) -> dict[str, Any]:
    obj = loop["objects"].get_namespaced_custom_object(GROUP, VERSION, loop["namespace"], PLURAL, name)
    return obj.get("status") or {}


def _condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions", []) if c["type"] == kind), {})


def _wait_condition(loop: dict[str, Any], name: str, kind: str, state: str, reason: str | None = None,
                    timeout_s: float = 60) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        status = _status(loop, name)
        found = _condition(status, kind)
        if found.get("status") == state and (reason is None or found.get("reason") == reason):
            return status
        return None

    try:
        return wait_for(check, timeout_s=timeout_s, interval_s=0.5)
    except AssertionError:
        raise AssertionError(f"{name}: {kind} not {state}/{reason}: {json.dumps(_status(loop, name))[:3000]}\n"
                             f"operator log:\n{loop['log'].read_text()[-3000:]}") from None


def test_a_matching_deployment_is_observed_and_predicted_accurately(loop: dict[str, Any]) -> None:
    def window_full() -> dict[str, Any] | None:  # until 30 s of series exist, rate() over 30s reads low
        status = _status(loop, "accurate")
        rate = (status.get("observed") or {}).get("requestsPerSecond", 0)
        return status if 0.6 * RATE < rate < 1.4 * RATE else None

    wait_for(window_full, timeout_s=60, interval_s=0.5)
    status = _wait_condition(loop, "accurate", "PredictionAccurate", "True", "Accurate")
    assert _condition(status, "MetricsAvailable")["status"] == "True"
    observed = status["observed"]
    assert observed["prometheus"] == "main" and observed["window"] == "30s"
    assert observed["current"] == {"deployment": "llama", "gpuType": "H100-SXM5-80GB", "replicas": 2,
                                   "gpusPerReplica": 1, "maxBatch": 256, "precision": "bf16", "kvCacheDtype": "auto",
                                   "image": "vllm/vllm-openai", "engineRelease": "0.11.2", "pipelineParallel": 1,
                                   "dataParallel": 1, "dataParallelAttention": False, "expertParallel": False,
                                   "maxNumBatchedTokens": 2048, "chunkedPrefill": True, "memoryFraction": 0.9,
                                   "maxModelLen": 131072,
                                   "sources": {"gpuType": "Deployment", "replicas": "Deployment",
                                               "gpusPerReplica": "Deployment", "maxBatch": "Deployment",
                                               "precision": "Deployment", "kvCacheDtype": "default",
                                               "engineRelease": "default", "maxNumBatchedTokens": "Deployment",
                                               "chunkedPrefill": "default", "memoryFraction": "default",
                                               "maxModelLen": "default"}}
    assert set(status["prediction"]["errorRatio"]) == {"ttft", "tpot", "e2e"}
    assert status["recommendation"]["gpuType"] == "H100-SXM5-80GB"
    assert "url" not in json.dumps(status).lower() and loop["prometheus"].url not in json.dumps(status)


def test_a_slower_deployment_turns_prediction_accurate_false_with_the_numbers(loop: dict[str, Any]) -> None:
    status = _wait_condition(loop, "drifting", "PredictionAccurate", "False", "PredictionDrift")
    message = _condition(status, "PredictionAccurate")["message"]
    assert "predicted" in message and "observed" in message and "%" in message
    assert status["prediction"]["driftSince"]


def test_calibration_fits_the_slower_engine_and_removes_the_drift(loop: dict[str, Any]) -> None:
    """Observed every 2 s over 30 s windows: a window updates the calibration only once it lies wholly after the one
    that last did, so the smoothed fit converges over several windows 30 s apart, and its sample count is the
    requests served, each counted once."""
    updates_seen: dict[int, str] = {}  # updates -> lastUpdateTime, as the status showed them

    def fitted() -> dict[str, Any] | None:
        status = _status(loop, "calibrating")
        calibration = status.get("calibration") or {}
        if calibration.get("lastUpdateTime"):
            updates_seen[calibration["updates"]] = calibration["lastUpdateTime"]
        converged = calibration.get("updates", 0) >= 3 and 0.6 < calibration.get("decode", 1.0) < 0.8
        return status if converged and abs(_mean_tpot_error(status)) < 0.15 else None

    try:
        status = wait_for(fitted, timeout_s=240, interval_s=1)
    except AssertionError:
        status = _status(loop, "calibrating")  # the assertions below say what did not converge
    calibration = status["calibration"]
    assert calibration["provenance"] == "observed" and calibration["gpuType"] == "H100-SXM5-80GB"
    assert 0.6 < calibration["decode"] < 0.8, calibration
    assert calibration["samples"] > 0 and calibration["lastUpdateTime"]
    # Windows that overlap the last update's had counted its requests again: one update per observation, and a
    # sample count many times the requests the engine served.
    seen = sorted(updates_seen.items())
    for (before, at), (after, then) in itertools.pairwise(seen):
        assert _seconds(then) - _seconds(at) >= 30 * (after - before), seen
    served = loop["prometheus"].value('sum(vllm:e2e_request_latency_seconds_count{model_name="llama-cal"})')
    assert calibration["samples"] <= 1.1 * served, (calibration, served)  # 1.1: increase() extrapolates to the edges
    # The mean (a histogram's sum over its count) is exact, where a quantile is known only to its bucket: TPOT's
    # p50 of 13 ms lies in vLLM's 10-25 ms bucket, which Prometheus interpolates to 17.5 ms. Uncalibrated, the
    # mean is predicted about 30% low.
    assert abs(_mean_tpot_error(status)) < 0.15, (status["observed"]["meanLatencyMs"], status["prediction"])
    assert _condition(status, "PredictionAccurate")["status"] == "True", status["conditions"]


def _seconds(text: str) -> float:
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC).timestamp()


def test_a_changed_deployment_is_calibrated_only_from_windows_after_the_change(loop: dict[str, Any],
                                                                              k8s: dict[str, Any]) -> None:
    """plan -> observe -> calibrate -> the Deployment changes (batch cap and engine image): the windows that still
    hold the old pods' latencies calibrate nothing, and say so; a whole window (30s) after the change, calibration
    goes on. Then the Deployment moves to another GPU type: the calibration starts there from the catalog, and what
    was learnt on H100 stays in status.calibration.others (it still plans H100)."""
    apps = kubernetes.client.AppsV1Api(k8s["admin"])
    namespace = loop["namespace"]
    running = copy.deepcopy(DEPLOYMENT)
    running["metadata"]["name"] = "rolling"
    del running["status"]
    apps.create_namespaced_deployment(namespace, running)
    body = _plan("rolling", {"model_name": "llama-cal"}, calibrate=True, maxErrorRatio="0.5")
    body["spec"]["observe"]["current"]["deployment"] = "rolling"
    loop["objects"].create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    wait_for(lambda: (_status(loop, "rolling").get("calibration") or {}).get("updates", 0) >= 1, timeout_s=90,
             interval_s=0.5)

    container = running["spec"]["template"]["spec"]["containers"][0]
    args = [("128" if a == "256" else a) for a in container["args"]]
    apps.patch_namespaced_deployment("rolling", namespace, {"spec": {"template": {"spec": {"containers": [
        {"name": "vllm", "image": "vllm/vllm-openai:v0.11.1", "args": args}]}}}})
    changed = wait_for(lambda: (s := _status(loop, "rolling"))["observed"]["current"]["maxBatch"] == 128 and s,
                       timeout_s=30, interval_s=0.5)
    current, calibration = changed["observed"]["current"], changed["calibration"]
    assert current["image"] == "vllm/vllm-openai:v0.11.1" and current["changedAt"], current
    # Kept by the API server (a CRD that pruned them would hide every change of the rank layout): the layout, and the
    # release the defaults were taken at, the tag of the engine's own image.
    assert (current["pipelineParallel"], current["dataParallel"], current["dataParallelAttention"],
            current["expertParallel"]) == (1, 1, False, False), current
    assert (current["engineRelease"], current["sources"]["engineRelease"]) == ("v0.11.1", "Deployment"), current
    assert _seconds(changed["observed"]["sampleTime"]) - _seconds(current["changedAt"]) < 30
    assert f"changed at {current['changedAt']}" in calibration["note"], calibration
    assert _seconds(calibration["lastUpdateTime"]) <= _seconds(current["changedAt"])

    def updated_again() -> dict[str, Any] | None:
        status = _status(loop, "rolling")
        return status if status["calibration"]["updates"] > calibration["updates"] else None

    again = wait_for(updated_again, timeout_s=90, interval_s=0.5)["calibration"]
    assert _seconds(again["lastUpdateTime"]) - _seconds(current["changedAt"]) >= 30, (again, current)

    apps.patch_namespaced_deployment("rolling", namespace, {"spec": {"template": {"spec": {"nodeSelector": {
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}}}}})
    moved = wait_for(lambda: (s := _status(loop, "rolling")).get("calibration", {}).get("gpuType") == "A100-SXM4-80GB"
                     and s, timeout_s=30, interval_s=0.5)["calibration"]
    [h100] = moved["others"]
    assert h100["gpuType"] == "H100-SXM5-80GB" and h100["updates"] >= again["updates"] and h100["decode"] < 1.0
    assert moved["updates"] == 0 and moved["decode"] == 1.0, moved


def _mean_tpot_error(status: dict[str, Any]) -> float:
    """Predicted over observed mean TPOT, less one (1.0 while either is missing)."""
    observed = ((status.get("observed") or {}).get("meanLatencyMs") or {}).get("tpot")
    predicted = ((status.get("prediction") or {}).get("meanLatencyMs") or {}).get("tpot")
    return predicted / observed - 1.0 if observed and predicted else 1.0


def test_a_plan_following_observed_traffic_plans_for_it(loop: dict[str, Any]) -> None:
    def replanned() -> dict[str, Any] | None:
        status = _status(loop, "following")
        return status if any("observed workload" in w for w in status.get("warnings", [])) else None

    status = wait_for(replanned, timeout_s=60, interval_s=0.5)
    declared = _status(loop, "accurate")["recommendation"]
    # Observed 10 req/s against 4 declared: the plan that follows traffic needs more replicas.
    assert status["recommendation"]["replicas"] >= declared["replicas"]
    assert status["recommendation"]["predicted"]["requestsPerSecondPerReplica"] * status["recommendation"][
        "replicas"] > 6


def test_prometheus_scrapes_back_predicted_and_observed_series(loop: dict[str, Any]) -> None:
    _wait_condition(loop, "drifting", "PredictionAccurate", "False", "PredictionDrift")
    prometheus: PrometheusServer = loop["prometheus"]
    error = prometheus.wait_for_series('inferplan_prediction_error_ratio{plan="drifting", metric="ttft", '
                                       'quantile="0.5"}', timeout_s=30)
    assert float(error[0]["value"][1]) < -0.3  # predicted far below what the slow stand-in does
    for name in ("inferplan_predicted_latency_seconds", "inferplan_observed_latency_seconds"):
        assert prometheus.wait_for_series(f'{name}{{plan="accurate", metric="tpot", quantile="0.99"}}', timeout_s=30)
    rate = prometheus.wait_for_series('inferplan_observed_requests_per_second{plan="accurate"}', timeout_s=30)
    assert 0.6 * RATE < float(rate[0]["value"][1]) < 1.4 * RATE
    # The selector's escaped label value reaches the stand-in's series through PromQL.
    selector = f'model_name="llama-match", quirk={promql_string(QUIRK)}'
    assert prometheus.query(f"vllm:e2e_request_latency_seconds_count{{{selector}}}")


def test_every_dashboard_and_alert_expression_runs_against_prometheus(loop: dict[str, Any]) -> None:
    _wait_condition(loop, "calibrating", "MetricsAvailable", "True")
    prometheus: PrometheusServer = loop["prometheus"]
    prometheus.wait_for_series("inferplan_calibration_factor", timeout_s=30)
    empty = []
    for title, expr in dashboard_expressions():
        if not prometheus.query(expr):  # raises on a query Prometheus rejects
            empty.append(title)
    assert not empty, f"dashboard expressions without data: {empty}"
    for _name, expr in rule_expressions():
        prometheus.query(expr)  # valid; alerts return data only while they fire


def test_a_prometheus_outage_keeps_the_recommendation_and_flips_metrics_available(loop: dict[str, Any]) -> None:
    before = _wait_condition(loop, "accurate", "MetricsAvailable", "True")
    prometheus: PrometheusServer = loop["prometheus"]
    prometheus.stop()
    try:
        down = _wait_condition(loop, "accurate", "MetricsAvailable", "False", "PrometheusUnreachable", timeout_s=30)
        assert down["recommendation"] == before["recommendation"]
        assert down["observed"]["current"] == before["observed"]["current"]
        assert _condition(down, "Ready")["status"] == "True"
        assert "main" in _condition(down, "MetricsAvailable")["message"]
        assert prometheus.url not in json.dumps(down)
    finally:
        prometheus.start()
    back = _wait_condition(loop, "accurate", "MetricsAvailable", "True", timeout_s=60)
    assert back["recommendation"] == before["recommendation"]


def test_a_deleted_plan_s_series_disappear(loop: dict[str, Any]) -> None:
    _wait_condition(loop, "drifting", "MetricsAvailable", "True")
    assert 'plan="drifting"' in (_fetch(loop["metrics"]) or "")
    loop["objects"].delete_namespaced_custom_object(GROUP, VERSION, loop["namespace"], PLURAL, "drifting")
    wait_for(lambda: 'plan="drifting"' not in (_fetch(loop["metrics"]) or 'plan="drifting"'), timeout_s=30)
    assert 'plan="accurate"' in (_fetch(loop["metrics"]) or "")


def test_the_status_carries_the_change_that_applies_and_then_reads_in_sync(loop: dict[str, Any],
                                                                            k8s: dict[str, Any]) -> None:
    """GitOps review: with spec.observe.current.deployment, status.recommendation.change says what applying the
    recommendation changes in the running Deployment, as lines and a strategic merge patch; `inferplan render -` of
    the plan read back renders the objects status.recommendation.manifests names, with the same digest; the API
    server applies the patch, and at the next observation the status says the Deployment is in sync."""
    apps = kubernetes.client.AppsV1Api(k8s["admin"])
    namespace = loop["namespace"]
    running = copy.deepcopy(DEPLOYMENT)
    running["metadata"]["name"] = "gitops"
    running["spec"]["template"]["spec"]["containers"][0]["args"] += ["--api-key", "sk-SECRET123"]
    del running["status"]
    apps.create_namespaced_deployment(namespace, running)
    body = _plan("gitops", {"model_name": "llama-match", "quirk": QUIRK})
    body["spec"]["observe"]["current"]["deployment"] = "gitops"
    loop["objects"].create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)

    status = wait_for(lambda: (s := _status(loop, "gitops")).get("recommendation", {}).get("change") and s,
                      timeout_s=60, interval_s=0.5)
    recommendation = status["recommendation"]
    change = recommendation["change"]
    assert change["deployment"] == "gitops" and change["inSync"] is False, change
    # Every plan reader sees the status: the running API key had been quoted in it.
    assert "args: - --api-key <redacted>" in change["summary"] and "sk-SECRET123" not in json.dumps(status), change
    # The running Deployment starts the engine through the image's entry point with --model; the rendered one runs
    # `vllm serve` with the recommendation's batch.
    assert any(line.startswith("command: (none) -> vllm serve") for line in change["summary"]), change
    if recommendation["maxBatch"] != 256:
        assert f"args: --max-num-seqs 256 -> {recommendation['maxBatch']}" in change["summary"], change
    if recommendation["replicas"] != 2:
        assert f"replicas: 2 -> {recommendation['replicas']}" in change["summary"]

    manifests = recommendation["manifests"]
    assert manifests["target"] == "Deployment" and manifests["objects"][-3:] == [
        "Deployment/gitops", "PodDisruptionBudget/gitops", "Service/gitops"]
    read_back = loop["objects"].get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "gitops")
    rendered = subprocess.run([str(Path(sys.executable).with_name("inferplan")), "render", "-"],
                              input=yaml.safe_dump(read_back), capture_output=True, text=True, check=True)
    assert "rendering the recommendation in the reviewed status of " in rendered.stderr
    assert manifests["digest"] in rendered.stderr
    kinds = [d["kind"] for d in yaml.safe_load_all(rendered.stdout)]
    assert [f"{k}/gitops" for k in kinds] == manifests["objects"]

    apps.patch_namespaced_deployment("gitops", namespace, json.loads(change["patch"]),
                                     _content_type="application/strategic-merge-patch+json")
    patched = apps.read_namespaced_deployment("gitops", namespace).to_dict()
    assert patched["spec"]["replicas"] == recommendation["replicas"]
    [engine] = patched["spec"]["template"]["spec"]["containers"]
    assert engine["name"] == "vllm" and engine["command"] == ["vllm", "serve"]  # the running container, patched
    assert str(recommendation["maxBatch"]) in engine["args"]

    def in_sync() -> dict[str, Any] | None:
        found = _status(loop, "gitops")["recommendation"].get("change", {})
        return found if found.get("inSync") else None

    settled = wait_for(in_sync, timeout_s=30, interval_s=0.5)
    assert settled.get("summary", []) == [] and settled.get("patch", "") == ""
