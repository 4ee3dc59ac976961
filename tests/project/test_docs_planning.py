"""docs/planning.md's table of the examples' answers with and without `slo.confidence` is what `inferplan plan FILE
--no-verify` answers (verified where a plan asks it or its traffic is bursty, as the CLI does), costs as printed."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from inferplan.planner.request import resolve_plan
from inferplan.planner.results import PlanResult, per_hour
from inferplan.planner.simulation.verification import planned
from inferplan.planner.spec_parsing import load_plan_file

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "planning.md"
HEADER = '| example | without `slo.confidence` | lowest `holdsWith` | at `slo.confidence: "0.8"` |\n|---|---|---|---|\n'


def _rows() -> list[list[str]]:
    table = DOC.read_text().split(HEADER, 1)[1].split("\n\n", 1)[0]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in table.splitlines()]


def _answer(result: PlanResult) -> str:
    rec = result.recommendation
    if rec is None:
        return "infeasible"
    return f"{rec.replicas} x {rec.gpus_per_replica} {rec.gpu_type} {per_hour(rec.cost.dollars_per_hour)}"


def test_the_table_lists_every_example() -> None:
    examples = {path.stem for path in (REPO / "examples").glob("*/*.yaml")}
    assert sorted(row[0] for row in _rows()) == sorted(examples)


@pytest.mark.parametrize("row", _rows(), ids=lambda row: row[0])
def test_each_row_is_what_the_plan_answers_without_and_at_confidence_0_8(row: list[str]) -> None:
    (path,) = (REPO / "examples").glob(f"*/{row[0]}.yaml")
    request = resolve_plan(load_plan_file(path), path.parent)
    result = planned(request, verify_default=False)
    lowest = "-" if result.recommendation is None else (
        f"{min(check.holds_with for check in result.recommendation.predicted.slo_checks):.2f}")
    at_80 = planned(dataclasses.replace(request, confidence=0.8), verify_default=False)
    assert [row[0], _answer(result), lowest, _answer(at_80)] == row
