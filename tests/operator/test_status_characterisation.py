"""The exact statuses `observe_status` and `next_status` write, byte for byte (key order and number types too), for
a set of inputs that covers their branches: captured once (issue 38, point 3, before the status was built in one
place) in tests/operator/data/status_characterisation.json, and compared with what they write now.

The planner's answers that `next_status` is given are stored there too (as inputs), and the observations carry
hand-written predictions, so the captured statuses depend on the status code alone, not on the planner's numbers.
To capture again (only for an intended change of the status): INFERPLAN_CAPTURE_STATUS=1 pytest this file."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest

from inferplan.observe.observation import Observation
from inferplan.observe.promql import Quantile
from inferplan.operator.inventory import Inventory, NodeGpus, build_inventory
from inferplan.operator.observing import Current, ObserveOutcome, observe_status
from inferplan.operator.status import DeploymentChange, ManifestsRef, PlanStatus, next_status
from inferplan.planner.calibration.observed import CurrentPrediction, CurrentShape, compare
from inferplan.planner.calibration.online import Calibration
from inferplan.planner.quantiles import QUANTILE_NAMES
from inferplan.planner.results import PlanResult
from inferplan.planner.spec import Observe

CAPTURED = Path(__file__).parent / "data" / "status_characterisation.json"

T0, T1, T2, T3 = "2026-11-30T10:00:00Z", "2026-11-30T10:09:59Z", "2026-11-30T10:10:00Z", "2026-11-30T10:11:00Z"
SHAPE = CurrentShape("H100-SXM5-80GB", 2, 1, "bf16", "auto", 256)
CURRENT = Current(SHAPE, "llama", {"gpuType": "Deployment", "replicas": "spec", "maxBatch": "default"})

PREDICTION = CurrentPrediction(
    latency={"ttft": {0.5: 0.0812345, 0.9: 0.2034567, 0.95: 0.3123456, 0.99: 0.7012345},
             "tpot": {0.5: 0.0301234, 0.9: 0.0401234, 0.95: 0.0451234, 0.99: 0.0601234},
             "e2e": {0.5: 6.0123456, 0.9: 12.012345, 0.95: 15.012345, 0.99: 25.012345}},
    mean={"ttft": 0.1212345, "tpot": 0.0351234, "e2e": 8.0123456},
    utilization=0.623456789, overloaded=False)


def _settings(**given: object) -> Observe:
    return Observe.model_validate({"prometheus": "main", "selector": {"model_name": "llama"},
                                   "current": {"gpuType": "H100", "replicas": 2}, "driftSeconds": 600, **given})


def _observation(scale: float = 1.0, requests: float = 1234.56789, **changes: Any) -> Observation:
    """Observed figures equal to the prediction x scale, each in a bucket of +-10% around it."""
    latency = {m: {q: Quantile(v * scale, v * scale * 0.9, v * scale * 1.1) for q, v in qs.items()}
               for m, qs in PREDICTION.latency.items()}
    fields: dict[str, Any] = dict(
        window="5m", requests_per_second=2.123456789, requests_in_window=requests, prompt_mean=1000.12345,
        output_mean=250.98765, latency=latency, latency_mean={m: v * scale for m, v in PREDICTION.mean.items()},
        running=10.5, waiting=0.25, kv_usage=0.4321, kv_blocks=1000, block_size=16)
    fields.update(changes)
    return Observation(**fields)


def _outcome(observation: Observation, settings: Observe | None = None,
             prediction: CurrentPrediction | None = PREDICTION, **changes: Any) -> ObserveOutcome:
    observed = {m: {q: (v.value, v.low, v.high) for q, v in qs.items()} for m, qs in observation.latency.items()}
    fields: dict[str, Any] = dict(observation=observation, current=CURRENT, prediction=prediction,
                                  discrepancies=compare(prediction.latency, observed) if prediction else [],
                                  settings=settings or _settings(), calibration_gpu="H100-SXM5-80GB")
    fields.update(changes)
    return ObserveOutcome("main", "5m", **fields)


def _recommended(ratios: dict[str, tuple[float, float]], gpu: str = "H100-SXM5-80GB", scale: float = 1.0,
                 conditions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    point = {f"{m}Ms": {QUANTILE_NAMES[q]: v * scale * 1e3 for q, v in qs.items()}
             for m, qs in PREDICTION.latency.items()}
    intervals = {f"{m}Ms": {name: [v * low, v * high] for name, v in point[f"{m}Ms"].items()}
                 for m, (low, high) in ratios.items()}
    return {"conditions": conditions or [], "recommendation": {"gpuType": gpu, "predicted": {
        **point, "intervals": intervals, "confidence": 0.8}}}


def observe_cases() -> dict[str, dict[str, Any]]:
    """name -> the status observe_status writes; later cases start from earlier ones."""
    out: dict[str, dict[str, Any]] = {}

    def run(name: str, old: dict[str, Any] | None, outcome: ObserveOutcome, now: str = T0,
            generation: int = 1) -> dict[str, Any]:
        out[name] = observe_status(old, outcome, now=now, generation=generation)
        return out[name]

    slow = _outcome(_observation(2.0))
    accurate = run("accurate", {"conditions": []}, _outcome(_observation(1.05)))
    run("accurate_same_figures_later", accurate, _outcome(_observation(1.05)), now=T1)
    run("accurate_busier", accurate, _outcome(_observation(1.05, requests=2000.0)), now=T1, generation=2)
    pending = run("drift_pending", {"conditions": []}, slow)
    later = run("drift_still_pending", pending, slow, now=T1)
    drifted = run("drifted", later, slow, now=T2)
    run("healed", drifted, _outcome(_observation()), now=T3)
    run("drift_default_thresholds", {"conditions": []}, _outcome(_observation(2.0), Observe.model_validate(
        {"prometheus": "main", "selector": {"model_name": "llama"}, "current": {"gpuType": "H100", "replicas": 2}})))
    run("loose_ratio", {"conditions": []}, _outcome(_observation(2.0), _settings(maxErrorRatio="0.9")))

    error = ObserveOutcome("main", "5m", error=("PrometheusUnreachable", "unreachable"))
    run("error_first", None, error)
    run("error_without_conditions", {"observedGeneration": 2, "warnings": ["w"]}, error, generation=2)
    good = run("good_with_other_keys", {
        "observedGeneration": 1,
        "conditions": [{"type": "Ready", "status": "True", "reason": "Planned", "message": "",
                        "lastTransitionTime": "2026-11-30T09:00:00Z"}, "junk",
                       {"type": "MetricsAvailable", "status": "False", "reason": "NoMatchingSeries", "message": "x",
                        "lastTransitionTime": "2026-11-30T09:30:00Z", "observedGeneration": 1}],
        "recommendation": {"kept": True}, "planFoo": 1}, _outcome(_observation()))
    run("error_after_good", good, error, now=T1)
    run("invalid_spec", good, ObserveOutcome("main", "5m", error=("InvalidSpec", "bad")), now=T1, generation=3)

    run("current_error", good, _outcome(_observation(), current=None, prediction=None, discrepancies=[],
                                        current_error="Deployment 'llama' has no ready replicas"), now=T1)
    run("current_unknown", {"conditions": []},
        _outcome(_observation(), current=None, prediction=None, discrepancies=[]))
    run("no_latency_data", {"conditions": []},
        _outcome(_observation(latency={}, latency_mean={}), discrepancies=[]))
    sparse = _observation(1.1, prompt_mean=None, output_mean=None, running=None, waiting=None, kv_usage=None,
                          kv_blocks=None, block_size=None)
    sparse.latency.pop("e2e")
    sparse.latency["tpot"].pop(0.99)
    sparse.latency_mean.pop("tpot")
    run("sparse_observation", {"conditions": []}, _outcome(sparse))
    overloaded = CurrentPrediction(PREDICTION.latency, PREDICTION.mean, math.inf, True)
    run("overloaded", {"conditions": []}, _outcome(_observation(), prediction=overloaded))

    slower = _outcome(_observation(1.2))
    narrow = run("narrow_interval", _recommended({m: (0.9, 1.05) for m in ("ttft", "tpot", "e2e")}), slower)
    run("narrow_interval_drifted", narrow, slower, now=T2)
    wide = _recommended({m: (0.5, 3.0) for m in ("ttft", "tpot", "e2e")})
    run("wide_interval", wide, slow)
    run("below_wide_interval", wide, _outcome(_observation(0.3)))
    run("interval_moved", _recommended({m: (0.5, 1.5) for m in ("ttft", "tpot", "e2e")}, scale=2.0),
        _outcome(_observation(0.6)))
    run("ttft_interval_only", _recommended({"ttft": (0.5, 3.0)}), slow)
    run("other_gpu_family", _recommended({m: (0.5, 3.0) for m in ("ttft", "tpot", "e2e")}, gpu="A100-SXM4-80GB"),
        slow)

    calibrate = _settings(calibrate=True)
    fitted = Calibration(decode=0.812345678, prefill=1.23456789, samples=700, updates=1, note="decode 0.81")
    first = run("calibrated", {"conditions": []}, _outcome(_observation(), calibrate, calibration=fitted))
    same = run("calibrated_again", first, _outcome(_observation(), calibrate, calibration=fitted), now=T1)
    run("calibrated_update", same, _outcome(_observation(), calibrate, calibration=Calibration(
        0.7, 1.1, 1400, 2, "n" * 1500)), now=T2)
    run("calibrated_other_gpu", same, _outcome(_observation(), calibrate, calibration=fitted,
                                               calibration_gpu="A100-SXM4-80GB"), now=T2)
    run("catalog_calibration", {"conditions": []}, _outcome(_observation(), calibrate, calibration=Calibration()))
    run("calibration_kept_without_one", same, _outcome(_observation(), calibrate, current=None, prediction=None,
                                                       discrepancies=[], current_error="gone"), now=T2)
    run("calibration_kept_on_error", same, ObserveOutcome("main", "5m", error=("NoMatchingSeries", "none"),
                                                          settings=calibrate), now=T2)
    run("calibration_dropped", same, _outcome(_observation()), now=T2)
    return out


def _nodes() -> list[NodeGpus]:
    return [NodeGpus("a", "NVIDIA-H100-80GB-HBM3", 8, True, True),
            NodeGpus("b", "NVIDIA-H100-80GB-HBM3", 4, True, True),
            NodeGpus("c", "NVIDIA-L4", 1, True, True), NodeGpus("d", "Zeta-9", 2, True, True)]


def next_cases(results: dict[str, PlanResult], observed: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """name -> the status next_status writes, for the planner's answers `results` (feasible, infeasible) and with
    statuses of the observe cases as old ones."""
    out: dict[str, dict[str, Any]] = {}
    cluster = build_inventory(_nodes())

    def run(name: str, old: dict[str, Any] | None, now: str = T0, generation: int = 1,
            inventory: Inventory = cluster, **given: Any) -> dict[str, Any]:
        fields: dict[str, Any] = dict(result=None, error=None)
        fields.update(given)
        out[name] = next_status(old, generation=generation, now=now, planner_version="0.1.0", inventory=inventory,
                                **fields)
        return out[name]

    planning = run("planning", None)
    manifests = ManifestsRef(target="Deployment", image="vllm/vllm-openai:v0.10.0", objects=["Deployment/chat"],
                             digest="sha256:" + "0" * 64, render="inferplan render plan.yaml")
    change = DeploymentChange(deployment="llama", in_sync=False, summary=["replicas: 2 -> 3"],
                              patch='{"spec": {"replicas": 3}}')
    feasible = run("feasible", planning, now=T1, result=results["feasible"], ttft_percentile="p99",
                   manifests=manifests, change=change, extra_warnings=["planned with a stale inventory"],
                   bounds={"H100-SXM5-80GB": (4, 15)})
    run("feasible_again", feasible, now=T2, result=results["feasible"], ttft_percentile="p99", manifests=manifests,
        change=change, extra_warnings=["planned with a stale inventory"], bounds={"H100-SXM5-80GB": (4, 15)})
    infeasible = run("infeasible", feasible, now=T2, generation=2, result=results["infeasible"])
    run("error", infeasible, now=T3, generation=3, error=("InvalidModel", "unknown model 'acme/nope'"))
    run("usable_types", None, result=results["feasible"],
        inventory=cluster.usable(frozenset({"H100-SXM5-80GB"})))
    run("no_gpus_of_the_types", None, result=results["feasible"], inventory=cluster.usable(frozenset({"B200"})))
    run("no_gpus", None, result=results["infeasible"], inventory=build_inventory([]))
    run("long_message", None, error=("InvalidModel", "m" * 40000))

    # The observing step's fields and conditions carried over; an invalid block and condition dropped.
    carried = {**observed["calibrated_again"], "recommendation": {"kept": True}, "planFoo": 1}
    run("carries_observation", carried, now=T1, result=results["feasible"])
    broken = {**observed["drifted"], "calibration": {"gpuType": "H100-SXM5-80GB"},
              "conditions": [*observed["drifted"]["conditions"],
                             {"type": "Broken", "status": "Maybe", "reason": "x", "message": "",
                              "lastTransitionTime": T0}]}
    run("drops_invalid_blocks", broken, now=T1, result=results["infeasible"])
    return out


def observe_after_plan_cases(planned: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """An observation on top of a status next_status wrote, and next_status on top of that."""
    return {
        "observe_after_feasible": observe_status(planned["feasible"], _outcome(_observation(2.0)), now=T1,
                                                 generation=1),
        "observe_after_error": observe_status(planned["error"], _outcome(_observation()), now=T3, generation=3),
    }


def _planner_results() -> dict[str, PlanResult]:
    """The planner's answers for a feasible and an infeasible plan (only when capturing)."""
    from inferplan.planner.request import resolve_plan
    from inferplan.planner.search.plan import plan
    from inferplan.planner.spec_parsing import parse_plan
    from tests.support.plans import spec

    base = spec(gpuTypes=["H100"], tensorParallelSizes=[1])
    slow = json.loads(json.dumps(base))
    slow["slo"]["tpot"]["maxMs"] = 3
    return {"feasible": plan(resolve_plan(parse_plan(base))), "infeasible": plan(resolve_plan(parse_plan(slow)))}


def _statuses(results: dict[str, PlanResult]) -> dict[str, dict[str, Any]]:
    observed = observe_cases()
    planned = next_cases(results, observed)
    return {**{f"observe/{k}": v for k, v in observed.items()}, **{f"next/{k}": v for k, v in planned.items()},
            **{f"both/{k}": v for k, v in observe_after_plan_cases(planned).items()}}


def _dump(value: Any) -> str:
    return json.dumps(value, indent=1, ensure_ascii=True)


def _load() -> dict[str, Any]:
    if os.environ.get("INFERPLAN_CAPTURE_STATUS"):
        results = _planner_results()
        captured = {"inputs": {k: r.model_dump(by_alias=True, mode="json") for k, r in results.items()},
                    "statuses": _statuses(results)}
        CAPTURED.parent.mkdir(exist_ok=True)
        CAPTURED.write_text(_dump(captured) + "\n", encoding="ascii")
    return json.loads(CAPTURED.read_text(encoding="ascii"))


@pytest.fixture(scope="module")
def captured() -> dict[str, Any]:
    return _load()


@pytest.fixture(scope="module")
def written(captured: dict[str, Any]) -> dict[str, dict[str, Any]]:
    results = {k: PlanResult.model_validate(v) for k, v in captured["inputs"].items()}
    return _statuses(results)


def test_every_case_is_captured(captured: dict[str, Any], written: dict[str, dict[str, Any]]) -> None:
    assert list(written) == list(captured["statuses"])


@pytest.mark.parametrize("name", sorted(json.loads(CAPTURED.read_text(encoding="ascii"))["statuses"])
                         if CAPTURED.exists() else [])
def test_the_status_written_is_byte_for_byte_the_captured_one(name: str, captured: dict[str, Any],
                                                              written: dict[str, dict[str, Any]]) -> None:
    assert _dump(written[name]) == _dump(captured["statuses"][name])


def test_the_captured_statuses_are_ones_the_crd_accepts(captured: dict[str, Any]) -> None:
    """Every status next_status writes, and every block the observing step writes, validates against PlanStatus (the
    CRD's status schema; the observing step's old statuses here are partly stand-ins, kept as they are)."""
    for name, status in captured["statuses"].items():
        if name.startswith("observe/"):
            status = {k: v for k, v in status.items() if k in ("observed", "prediction", "calibration")}
        PlanStatus.model_validate(status)
