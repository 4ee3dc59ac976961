"""`inferplan plan` and `inferplan catalog` as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from inferplan.cli import main
from inferplan.planner.results import PlanResult

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((REPO / "examples" / "plans").glob("*.yaml"))


def test_the_bundled_example_plan_is_the_chat_example() -> None:
    bundled = REPO / "inferplan" / "planner" / "data" / "example-plan.yaml"
    assert bundled.read_text() == (REPO / "examples" / "plans" / "chat-assistant-8b.yaml").read_text()


def test_plan_without_a_file_plans_the_bundled_example(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan"]) == 0
    out = capsys.readouterr().out
    assert "bundled example plan" in out
    assert "Recommendation" in out and "node selector: nvidia.com/gpu.product=" in out


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_plan_validates_as_json_output(example: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(example), "-o", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) == {"recommendation", "alternatives", "infeasible", "warnings", "assumptions", "suggestions"}
    result = PlanResult.model_validate(data)
    assert result.recommendation is not None, example.name
    assert result.model_dump(by_alias=True, mode="json") == data


def test_yaml_output_is_the_same_object(capsys: pytest.CaptureFixture[str]) -> None:
    main(["plan", str(EXAMPLES[0]), "-o", "json"])
    as_json = json.loads(capsys.readouterr().out)
    main(["plan", str(EXAMPLES[0]), "-o", "yaml"])
    assert yaml.safe_load(capsys.readouterr().out) == as_json


def test_invalid_plan_lists_every_problem_and_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "model: {name: meta-llama/Llama-3.1-8B}\nengine: {name: vllm}\n"
        "workload: {requestsPerSecond: '0', promptTokens: {mean: 500, p95: 100}, outputTokens: {mean: 50}}\n"
        "slo: {}\nconstraints: {gpuTypes: [H1000]}\n"
    )
    assert main(["plan", str(bad)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert any("workload.requestsPerSecond" in line for line in err)
    assert any("workload.promptTokens.p95" in line for line in err)
    assert any(line.endswith("slo: give at least one of ttft, tpot (or itl), e2e") for line in err)
    assert any("constraints.gpuTypes[0]" in line and "H100" in line for line in err)


def test_infeasible_plan_is_an_answer_not_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = yaml.safe_load((REPO / "examples" / "plans" / "chat-assistant-8b.yaml").read_text())
    plan["slo"]["tpot"]["maxMs"] = 1
    path = tmp_path / "strict.yaml"
    path.write_text(yaml.safe_dump(plan))
    assert main(["plan", str(path)]) == 0
    out = capsys.readouterr().out
    assert "No deployment meets every gate." in out and "[slo]" in out


def test_missing_plan_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "no/such/plan.yaml"]) == 2
    assert "plan file not found: no/such/plan.yaml" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["gpus", "models"])
def test_catalog_lists(kind: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["catalog", kind]) == 0
    table = capsys.readouterr().out
    assert ("NVIDIA-H100-80GB-HBM3" if kind == "gpus" else "meta-llama/Llama-3.1-405B") in table
    assert main(["catalog", kind, "-o", "json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    assert len(entries) >= (25 if kind == "gpus" else 30)
