"""The observed side of a plan (inferplan/planner/calibration/observed.py): the workload a plan observing its traffic is
planned for."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from inferplan.planner.calibration.observed import ObservedWorkload, planning_request
from inferplan.planner.request import resolve_plan
from inferplan.planner.spec_parsing import load_plan_file

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "plans" / "chat-assistant-8b.yaml"


@pytest.fixture(scope="module")
def req():
    return resolve_plan(load_plan_file(EXAMPLE))


def test_the_observed_workload_is_planned_for_but_never_below_the_floor(req) -> None:
    observed_req = dataclasses.replace(req, workload_source="observed", observed_floor=0.5)
    busy, note = planning_request(observed_req, ObservedWorkload(req.rate_rps * 2, 500.0, 100.0))
    assert busy.rate_rps == pytest.approx(req.rate_rps * 2) and busy.prompt_mean == 500.0 and "observed" in note
    quiet, note = planning_request(observed_req, ObservedWorkload(req.rate_rps * 0.1))
    assert quiet.rate_rps == pytest.approx(req.rate_rps * 0.5) and "floor" in note
    declared, note = planning_request(req, ObservedWorkload(req.rate_rps * 2))
    assert declared is req and note is None
