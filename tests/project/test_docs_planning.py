"""docs/planning.md's table of the examples' answers with and without `slo.confidence` is what `inferplan plan FILE
--no-verify` answers (verified where a plan asks it or its traffic is bursty, as the CLI does), costs as printed."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from inferplan.planner.request import resolve_plan
from inferplan.planner.results import Candidate, PlanResult, per_hour
from inferplan.planner.simulation.verification import planned
from inferplan.planner.spec_parsing import load_plan_file, parse_plan
from tests.support.plans import verified

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


def _expected_answer(example: str) -> str:
    """The answer cell of the expected-answers table's row naming `example`."""
    table = DOC.read_text().split("**Expected answers.**", 1)[1].split("\n\n", 2)[1]
    rows = [line.split(" | ") for line in table.splitlines()[2:]]
    (answer,) = [cells[2] for cells in rows if f"`{example}.yaml`" in cells[1]]
    return answer


def _verified(example: str) -> PlanResult:
    (path,) = (REPO / "examples").glob(f"*/{example}.yaml")
    return verified(path)[1]


def _short(rec: Candidate) -> str:
    """"29 x H200", "2 x 2 H200": as the table names a deployment."""
    per = rec.gpus_per_replica
    return f"{rec.replicas} x {f'{per} ' if per > 1 else ''}{rec.gpu_type.split('-')[0]}"


@pytest.mark.parametrize("example", ["qwen3-32b-long-outputs", "gpt-oss-120b-h100", "trtllm-70b-fp8",
                                     "tgi-mistral-7b"])
def test_an_expected_answer_names_the_deployment_inferplan_plan_gives(example: str) -> None:
    rec = _verified(example).recommendation
    assert rec is not None
    answer = _expected_answer(example)
    assert answer.startswith(_short(rec)) or f": {_short(rec)} " in answer
    assert per_hour(rec.cost.dollars_per_hour)[:-2] in answer or example == "tgi-mistral-7b"
    if example == "qwen3-32b-long-outputs":
        assert f"TPOT p95 {rec.predicted.tpot_ms.p95:.1f} ms verified routed at random" in answer


def test_the_infeasible_examples_suggestions_are_those_quoted() -> None:
    result = _verified("infeasible-bursty-agent-72b")
    assert result.recommendation is None
    answer = _expected_answer("infeasible-bursty-agent-72b")
    gpu_type = next(s for s in result.suggestions if s.startswith("GPU type: "))
    slo = next(s for s in result.suggestions if s.startswith("SLO: "))
    assert f"infeasible-bursty-agent-72b: {gpu_type.split(': ', 1)[1].split(' (', 1)[0]}, or " in answer
    target = slo.split(": ", 1)[1].split(" (now", 1)[0]
    gives = slo.split(" gives ", 1)[1].split(" (", 1)[0].replace("-SXM5-80GB", "")
    assert f"or {target} for {gives}, a target the plan answers" in answer


def _shape_cell(line: str) -> tuple[str, float]:
    """A shapes line ("disaggregated: $320.00/h, 10 x 8 H100-SXM5-80GB prefill + ... (fp8, ...)") as the
    where-it-wins table writes it ("10 x 8 H100 prefill + ..., $320.00/h") and its cost."""
    cost = line.split(": $", 1)[1].split("/h", 1)[0]
    layout = re.sub(r"-[A-Z0-9-]*GB\b", "", line.split("/h", 1)[1].split(", ", 1)[1].split(" (", 1)[0])
    return f"{layout}, ${cost}/h", float(cost)


@pytest.mark.parametrize(("plan", "example", "tpot_ms"), [
    ("long prompts, TPOT p95 <= 12 ms", "long-prompts-70b-shapes", 12),
    ("long prompts, TPOT p95 <= 20 ms (the example)", "long-prompts-70b-shapes", None),
    ("chat, TPOT p95 <= 50 ms", "chat-assistant-8b", None),
])
def test_where_disaggregation_wins_is_what_inferplan_plan_compares(plan: str, example: str, tpot_ms: int | None
                                                                   ) -> None:
    (path,) = (REPO / "examples").glob(f"*/{example}.yaml")
    spec = yaml.safe_load(path.read_text())["spec"]
    spec.setdefault("constraints", {})["shapes"] = ["aggregated", "disaggregated"]
    if tpot_ms is not None:
        spec["slo"]["tpot"]["maxMs"] = tpot_ms
    shapes = planned(resolve_plan(parse_plan(spec), path.parent)).shapes
    aggregated, aggregated_cost = _shape_cell(next(s for s in shapes if s.startswith("aggregated, a replica within")))
    disaggregated, disaggregated_cost = _shape_cell(next(s for s in shapes if s.startswith("disaggregated: ")))
    winner = "disaggregated" if disaggregated_cost < aggregated_cost else "aggregated"
    saved = 1 - min(aggregated_cost, disaggregated_cost) / max(aggregated_cost, disaggregated_cost)
    table = DOC.read_text().split("| plan | cheapest aggregated | cheapest disaggregated | winner |", 1)[1]
    (row,) = [line for line in table.split("\n\n", 1)[0].splitlines() if line.startswith(f"| {plan} |")]
    cells = [cell.strip() for cell in row.strip("|").split(" | ")]
    assert cells[1].startswith(aggregated) and cells[2] == disaggregated
    assert cells[3] == f"{winner}, {saved:.0%} cheaper"
