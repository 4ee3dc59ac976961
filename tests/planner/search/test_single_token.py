"""A workload whose every output is one token (outputTokens mean 1, CV 0): no token follows the first, so TPOT is
undefined. The plan is answered; its TPOT is absent (null), never a number, and is not an objective of the
frontier or a tag."""

from __future__ import annotations

import copy
import json
import math
from typing import Any

import numpy as np

from inferplan.planner.request import PlanRequest, resolve_plan
from inferplan.planner.search.core import tpot_defined
from inferplan.planner.search.plan import plan
from inferplan.planner.search.select import _objectives, non_dominated
from inferplan.planner.spec_parsing import parse_plan
from tests.support.plans import spec

SINGLE: dict[str, Any] = {**spec(gpuTypes=["NVIDIA-H100-80GB-HBM3", "L40S"]),
                          "workload": {"requestsPerSecond": "50", "promptTokens": {"mean": 800},
                                       "outputTokens": {"mean": 1, "cv": "0"}},
                          "slo": {"ttft": {"maxMs": 300}}}


def single_token(**workload: Any) -> PlanRequest:
    data = copy.deepcopy(SINGLE)
    data["workload"].update(workload)
    return resolve_plan(parse_plan(data))


def test_tpot_is_defined_unless_every_output_is_one_token() -> None:
    assert not tpot_defined(single_token())
    assert not tpot_defined(single_token(outputTokens={"mean": 1, "p95": 1}))
    assert tpot_defined(single_token(outputTokens={"mean": 1}))  # CV 1 assumed: some outputs are longer
    assert tpot_defined(single_token(outputTokens={"mean": 2, "cv": "0"}))


def test_a_single_token_workload_is_planned_without_a_tpot() -> None:
    result = plan(single_token())
    shown = [c for c in [result.recommendation, *result.alternatives] if c is not None]
    assert shown and result.recommendation is not None
    for c in shown:
        assert c.predicted.tpot_ms is None
        assert c.predicted.intervals is not None and c.predicted.intervals.tpot_ms is None
        assert c.predicted.ttft_ms.p95 > 0 and c.predicted.e2e_ms.p95 > 0
        assert "lowestTpot" not in c.tags
    dumped = result.model_dump(by_alias=True, mode="json")
    assert dumped["recommendation"]["predicted"]["tpotMs"] is None
    text = json.dumps(dumped, allow_nan=False)  # no NaN anywhere
    assert "NaN" not in text and not math.isnan(dumped["recommendation"]["predicted"]["e2eMs"]["p95"])


def test_tpot_does_not_pick_alternatives_where_there_is_none() -> None:
    """The frontier over cost, TTFT, e2e and headroom alone: no row is shown for a TPOT it does not have (the model's
    per-step time of a request that never takes a step), so no shown row is beaten by another on all of them."""
    req = single_token()
    result = plan(req)
    shown = [c for c in [result.recommendation, *result.alternatives] if c is not None]
    assert len(shown) >= 2
    objectives = np.array([_objectives(req, c) for c in shown])
    assert np.all(objectives[:, 2] == 0.0)  # TPOT: the same (none) for every row
    assert non_dominated(objectives).all()
    assert all(not c.why.startswith("lowest TPOT") for c in shown)


def test_an_observed_workload_of_one_token_outputs_judges_no_tpot_target() -> None:
    # The spec refuses a TPOT target on declared one-token outputs; an observed workload can still become one (the
    # operator replaces the declared mean with the observed one): its SLO checks judge the targets it has.
    import dataclasses

    from inferplan.planner.calibration.observed import ObservedWorkload, planning_request

    data = spec()
    data["workload"] = {**data["workload"], "outputTokens": {"mean": 200, "cv": "0"}, "source": "observed"}
    data["observe"] = {"prometheus": "main", "selector": {"model_name": "chat"}, "current": {"deployment": "chat"}}
    declared = resolve_plan(parse_plan(data))
    observed, _ = planning_request(declared, ObservedWorkload(declared.rate_rps, declared.prompt_mean, 1.0))
    assert not tpot_defined(observed)
    result = plan(dataclasses.replace(observed, verify=False))
    assert result.recommendation is not None and result.recommendation.predicted.tpot_ms is None
    assert [c.metric for c in result.recommendation.predicted.slo_checks] == [
        s.metric for s in observed.slos if s.metric != "tpot"]
