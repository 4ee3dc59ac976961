"""The `inferplan` command line (inferplan/cli.py), run in-process: predict, accuracy, calibrate, errors and
help; `inferplan plan` and `inferplan catalog`; `inferplan simulate` and `plan --verify`; `inferplan render`
(multi-document YAML or a v1 List of the recommendation, from a plan or from a manifest read back with its
status; autoscaling objects; errors exit 1 (infeasible) or 2 (cannot render) with the reason on stderr); and
`inferplan diff PLAN --deployment FILE` (the change applying the recommendation makes in a running Deployment,
as lines and a strategic merge patch; exit 0 in sync, 1 different, 2 trouble, as diff does). `inferplan
report`: tests/cli/test_report.py."""

from __future__ import annotations

import copy
import io
import json
import re
import subprocess
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from inferplan.cli import main
from inferplan.deploy.manifests import manifests_digest
from inferplan.planner.catalog.gpus import load_gpu_catalog
from inferplan.planner.model.factors import parse_factors
from inferplan.planner.results import Candidate, PlanResult, replica_shape
from tests.support.plans import EXAMPLES, example_spec, planned

REPO = Path(__file__).resolve().parents[2]
PUBLISHED = REPO.parent / "shared" / "accuracy" / "scenarios.jsonl"
METRIC_KEYS = {"scored", "skipped", "mape", "medianApe", "within25", "intervalCoverage"}
PLAN_EXAMPLES = sorted((REPO / "examples" / "plans").glob("*.yaml"))
CHAT = EXAMPLES[0]

needs_published = pytest.mark.skipif(
    not PUBLISHED.is_file(), reason=f"published scenario file not found at {PUBLISHED}"
)


# ----------------------------------------------------------------------------------------------------------
# inferplan predict, accuracy and calibrate; help, version and usage errors


def _example_path() -> Path:
    return Path(str(resources.files("inferplan.planner").joinpath("data/example-scenarios.jsonl")))


def _example_lines() -> list[str]:
    return [line for line in _example_path().read_text(encoding="utf-8").splitlines() if line.strip()]


def _example_ids() -> list[str]:
    return [json.loads(line)["id"] for line in _example_lines()]


def test_predict_without_arguments_prints_the_bundled_example_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("# bundled example")
    assert lines[1].split()[:4] == ["metric", "measured", "predicted", "error"]
    for rid in _example_ids():
        assert rid in out
    assert len(lines) == 2 + len(_example_ids())


def test_predict_json_lists_every_row(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "--scenarios", str(_example_path()), "-o", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert isinstance(data, list)
    assert [d["id"] for d in data] == _example_ids()
    for entry in data:
        assert set(entry) == {"id", "metric", "measured", "predicted", "skipped"}
        assert (entry["predicted"] is None) == (entry["skipped"] is not None)
    assert any(entry["predicted"] is not None for entry in data)


@needs_published
def test_predict_json_on_published_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "--scenarios", str(PUBLISHED), "-o", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data) == 304
    assert all(isinstance(d["measured"], float) for d in data)


def _check_accuracy_json(data: dict) -> None:
    assert set(data) == {"metrics", "overall", "skippedReasons", "suspect", "outliers", "unmodelled", "sources",
                         "badLines"}
    assert set(data["overall"]) == METRIC_KEYS
    for entry in [*data["metrics"].values(), *data["suspect"].values(), *data["unmodelled"].values()]:
        assert set(entry) == METRIC_KEYS
    for entry in [*data["metrics"].values(), data["overall"]]:  # suspect rows are not covered
        assert entry["scored"] == 0 or 0 <= entry["intervalCoverage"] <= 1
    assert data["overall"]["scored"] > 0


@needs_published
def test_accuracy_json_on_published_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["accuracy", "--scenarios", str(PUBLISHED), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    _check_accuracy_json(data)
    assert data["badLines"] == 0
    assert data["overall"]["scored"] > 250
    assert 0 <= data["overall"]["medianApe"] < 1  # a fraction, not a percent


def test_accuracy_json_on_example(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["accuracy", "--scenarios", str(_example_path()), "--json"]) == 0
    _check_accuracy_json(json.loads(capsys.readouterr().out))


def test_accuracy_table_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["accuracy"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:3] == ["metric", "scored", "skipped"]
    assert "overall" in out


@pytest.fixture
def one_bad_line(tmp_path: Path) -> Path:
    lines = _example_lines()
    bad = json.loads(lines[2])
    bad["input_tokens"] = -1
    path = tmp_path / "one-bad.jsonl"
    path.write_text("\n".join([lines[0], lines[1], json.dumps(bad), *lines[3:]]) + "\n", encoding="utf-8")
    return path


def test_accuracy_reports_bad_line_on_stderr_and_scores_the_rest(
    one_bad_line: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["accuracy", "--scenarios", str(one_bad_line), "--json"]) == 0
    captured = capsys.readouterr()
    assert "line 3" in captured.err
    assert "input_tokens" in captured.err
    assert str(one_bad_line) in captured.err
    data = json.loads(captured.out)
    _check_accuracy_json(data)
    assert data["badLines"] == 1
    # The bundled example has no suspect rows: every good line is scored or skipped.
    assert data["overall"]["scored"] + data["overall"]["skipped"] == len(_example_lines()) - 1


def test_accuracy_table_mentions_bad_lines(one_bad_line: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["accuracy", "--scenarios", str(one_bad_line)]) == 0
    captured = capsys.readouterr()
    assert "1 bad line(s) skipped" in captured.out
    assert "line 3" in captured.err


def test_predict_reports_bad_line_and_predicts_the_rest(
    one_bad_line: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["predict", "--scenarios", str(one_bad_line), "-o", "json"]) == 0
    captured = capsys.readouterr()
    assert "line 3" in captured.err
    ids = [d["id"] for d in json.loads(captured.out)]
    expected = _example_ids()
    assert ids == expected[:2] + expected[3:]


@pytest.mark.parametrize("command", [["predict"], ["accuracy"], ["accuracy", "--json"], ["predict", "-o", "json"]])
@pytest.mark.parametrize("content", ["", "\n", "not json\n{}\n"])
def test_a_file_without_a_valid_line_is_an_error_not_an_empty_score(
    command: list[str], content: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # An empty table (or `[]`) with exit status 0 read as "scored, nothing wrong"; calibrate refused such files.
    path = tmp_path / "nothing.jsonl"
    path.write_text(content, encoding="utf-8")
    assert main([*command, "--scenarios", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"no scenario line to {'predict' if command[0] == 'predict' else 'score'} in {path}" in captured.err
    if content.startswith("not json"):
        assert "line 1" in captured.err and "2 bad line(s)" in captured.err


def test_predict_prints_no_error_for_a_value_measured_at_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `accuracy` skips such a row (no relative error); the table said "+0.0%", a perfect prediction.
    row = json.loads(_example_lines()[0])
    row["value"] = 0.0
    path = tmp_path / "zero.jsonl"
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    assert main(["predict", "--scenarios", str(path)]) == 0
    line = capsys.readouterr().out.splitlines()[1]
    assert "+0.0%" not in line and "measured 0: no relative error" in line


def test_accuracy_scores_several_files_pooled_and_a_row_given_twice_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The four published files are scored together; one file at a time was all `accuracy` took.
    lines = _example_lines()
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_text("\n".join(lines[:3]) + "\n", encoding="utf-8")
    second.write_text("\n".join(lines[2:]) + "\n", encoding="utf-8")  # lines[2] in both
    assert main(["accuracy", "--json", "--scenarios", str(first), str(second)]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    counted = report["overall"]["scored"] + report["overall"]["skipped"] + sum(
        m["scored"] + m["skipped"] for group in ("suspect", "unmodelled") for m in report[group].values())
    assert counted == len(lines)
    assert report["badLines"] == 1 and f"{second}: " in captured.err and "duplicate id" in captured.err
    assert main(["predict", "-o", "json", "--scenarios", str(first), str(second)]) == 0
    assert [p["id"] for p in json.loads(capsys.readouterr().out)] == [json.loads(line)["id"] for line in lines]


@pytest.mark.parametrize("command", ["predict", "accuracy", "calibrate"])
def test_missing_scenario_file_exits_2_naming_the_file(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no-such-file.jsonl"
    assert main([command, "--scenarios", str(missing)]) == 2
    err = capsys.readouterr().err
    assert str(missing) in err
    assert "not found" in err


def test_missing_factors_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "factors.json"
    assert main(["predict", "--factors", str(missing)]) == 2
    assert str(missing) in capsys.readouterr().err


def test_help_exits_0_and_lists_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for command in ("predict", "accuracy", "calibrate"):
        assert command in out


@pytest.mark.parametrize("command", ["predict", "accuracy", "calibrate"])
def test_subcommand_help_exits_0(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    assert "--scenarios" in capsys.readouterr().out


def test_no_command_prints_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "usage" in capsys.readouterr().out.lower()


def test_version_prints_the_planner_version(capsys: pytest.CaptureFixture[str]) -> None:
    """The release and the digest of the model, as status.plannerVersion records it (the release alone, 0.1.0, was
    the same for every build)."""
    from inferplan import __version__
    from inferplan.version import planner_version

    assert main(["--version"]) == 0
    printed = capsys.readouterr().out.strip()
    assert printed == planner_version() and printed.startswith(f"{__version__}+")


def test_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["frobnicate"])
    assert exc.value.code == 2


def test_calibrate_writes_factors_that_predict_accepts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "factors.json"
    assert main(["calibrate", "--scenarios", str(_example_path()), "--write", str(out)]) == 0
    assert "fitted on" in capsys.readouterr().out
    parse_factors(json.loads(out.read_text(encoding="utf-8")))
    assert main(["predict", "--factors", str(out), "-o", "json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == len(_example_ids())


def test_module_help_runs_in_a_subprocess() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "inferplan.cli", "--help"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "usage: inferplan" in result.stdout


# ----------------------------------------------------------------------------------------------------------
# inferplan plan and inferplan catalog


def test_the_bundled_example_plan_is_the_chat_example() -> None:
    bundled = REPO / "inferplan" / "planner" / "data" / "example-plan.yaml"
    assert bundled.read_text() == (REPO / "examples" / "plans" / "chat-assistant-8b.yaml").read_text()


def test_plan_without_a_file_plans_the_bundled_example(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan"]) == 0
    out = capsys.readouterr().out
    assert "bundled example plan" in out
    assert "Recommendation" in out and "node selector: nvidia.com/gpu.product=" in out


@pytest.mark.parametrize("example", PLAN_EXAMPLES, ids=lambda p: p.stem)
def test_every_example_plan_validates_as_json_output(example: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(example), "-o", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) == {"recommendation", "alternatives", "infeasible", "warnings", "assumptions", "suggestions",
                         "shapes"}
    result = PlanResult.model_validate(data)
    assert result.recommendation is not None, example.name
    assert result.model_dump(by_alias=True, mode="json") == data


def test_yaml_output_is_the_same_object(capsys: pytest.CaptureFixture[str]) -> None:
    main(["plan", str(PLAN_EXAMPLES[0]), "-o", "json"])
    as_json = json.loads(capsys.readouterr().out)
    main(["plan", str(PLAN_EXAMPLES[0]), "-o", "yaml"])
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
    plan = example_spec(REPO / "examples" / "plans" / "chat-assistant-8b.yaml")
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
    if kind == "models":  # the aliases that hold other weights of the architecture (docs/catalogs-models.md)
        qwen = next(e for e in entries if e["repo_id"] == "Qwen/Qwen2.5-32B")
        assert "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B" in qwen["derivatives"]
        assert "Qwen/Qwen2.5-32B-Instruct" in qwen["aliases"] and "Qwen/Qwen2.5-32B-Instruct" not in qwen["derivatives"]


def test_the_gpu_table_prices_each_gpu_as_a_plan_costs_it(capsys: pytest.CaptureFixture[str]) -> None:
    """The price a plan multiplies (per GPU-hour, unrounded: 2 x 2.4984 is the $4.997/h of two A100s, not 2 x 2.50),
    and whether it is a quote or the catalog author's estimate (a plan's `provenance.cost`)."""
    assert main(["catalog", "gpus"]) == 0
    lines = capsys.readouterr().out.splitlines()
    spans = [m.span() for m in re.finditer(r"-+", lines[1])]  # the columns, by the rule under the header

    def cells(line: str) -> list[str]:
        return [line[a:b].strip() for a, b in spans]

    header = cells(lines[0])
    assert "$/GPU-h" in header and "price" in header
    rows = {cells(line)[0]: cells(line) for line in lines[2:]}
    for gpu in load_gpu_catalog():
        row = rows[gpu.key]
        assert float(row[header.index("$/GPU-h")]) == gpu.usd_per_hour
        assert row[header.index("price")] == ("estimate" if "usd_per_hour" in gpu.unverified_fields else "quoted")
    assert rows["A100-SXM4-80GB"][header.index("$/GPU-h")] == "2.4984"
    assert rows["GB200-NVL72"][header.index("price")] == "estimate"


# ----------------------------------------------------------------------------------------------------------
# inferplan simulate and plan --verify


def test_simulate_command_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", str(CHAT), "--requests", "2000", "-o", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["requests"] == 2000 and data["source"] == "generated (seed 0)"
    assert {(p["metric"], p["quantile"]) for p in data["percentiles"]} == {
        (m, q) for m in ("ttft", "tpot", "e2e") for q in ("p50", "p90", "p95", "p99")}


def test_simulate_replays_a_trace_and_reports_bad_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(0)
    times = np.cumsum(rng.exponential(0.05, 300))
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps({"t": float(t), "prompt": 400, "output": 100}) + "\n" for t in times))
    assert main(["simulate", str(CHAT), "--trace", str(trace), "-o", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["requests"] == 300 and data["source"] == "trace"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"t": 0.0, "prompt": 10, "output": 5}\n{"t": 1.0, "prompt": -1, "output": 5}\n')
    assert main(["simulate", str(CHAT), "--trace", str(bad)]) == 2
    assert ":2:" in capsys.readouterr().err


@pytest.mark.parametrize("shape", ["aggregated", "disaggregated"])
def test_simulate_says_how_many_trace_requests_exceed_the_context(shape: str, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Requests longer than the deployment's max_model_len (the engine would refuse them) are served shortened by the
    simulator, and stderr says how many, for separate prefill and decode pools as for aggregated replicas."""
    from tests.support.plans import LONG_PROMPTS_PD

    spec = tmp_path / "plan.yaml"
    spec.write_text(yaml.safe_dump(LONG_PROMPTS_PD if shape == "disaggregated" else example_spec(CHAT)))
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps({"t": 0.5 * i, "prompt": 300_000 if i % 4 == 0 else 2000, "output": 100})
                             + "\n" for i in range(40)))
    assert main(["simulate", str(spec), "--trace", str(trace), "--no-verify", "-o", "json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["requests"] == 40
    assert "10 of the trace's 40 requests exceed the deployment's max_model_len" in err


def test_simulate_says_that_pools_are_spread_round_robin_whatever_the_router(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The simulator spreads requests over each pool of a disaggregated deployment round robin (as the rendered
    sglang-router does): --router least_outstanding is not what it serves, and stderr says so."""
    from tests.support.plans import LONG_PROMPTS_PD

    spec = tmp_path / "plan.yaml"
    spec.write_text(yaml.safe_dump(LONG_PROMPTS_PD))
    args = ["simulate", str(spec), "--no-verify", "--requests", "500", "-o", "json"]
    assert main([*args, "--router", "least_outstanding"]) == 0
    assert "round robin" in capsys.readouterr().err
    assert main(args) == 0
    assert capsys.readouterr().err == ""


def test_simulate_and_report_say_when_fewer_replicas_than_planned_are_simulated(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Above 16 replicas a generated workload is served on 16 at the plan's rate per replica. The summary named the
    whole deployment beside the 16 replicas' output rate, about 16/26 of what the plan's 26 produce, with nothing
    saying so; it now says which replicas ran at what rate (JSON: simulatedReplicas, requestsPerSecond), and so does
    the report. A trace is served on every replica and says nothing of the kind."""
    spec = tmp_path / "plan.yaml"
    chat = example_spec(CHAT)
    spec.write_text(yaml.safe_dump({**chat, "workload": {**chat["workload"], "requestsPerSecond": "400"}}))
    args = ["simulate", str(spec), "--no-verify", "--requests", "3000"]
    assert main([*args, "-o", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    replicas = int(data["deployment"].split(" x ")[0])
    assert replicas > 16 and data["simulatedReplicas"] == {"replicas": 16}
    assert data["requestsPerSecond"] == pytest.approx(400 * 16 / replicas, rel=1e-4)
    assert data["outputTokensPerSecond"] < 0.8 * 400 * 250  # the 16 replicas', not the deployment's 100,000
    assert main(args) == 0
    assert f"; simulated on 16 of its {replicas} replicas at {400 * 16 / replicas:.4g} requests/s" in \
        capsys.readouterr().out.splitlines()[0]
    assert main(["report", str(spec), "--no-verify", "--requests", "3000"]) == 0
    assert f"(simulated on 16 of its {replicas} replicas at" in capsys.readouterr().out
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps({"t": i / 400, "prompt": 400, "output": 100}) + "\n" for i in range(400)))
    assert main([*args[:2], "--no-verify", "--trace", str(trace), "-o", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert "simulatedReplicas" not in data and "requestsPerSecond" not in data


def test_plan_verify_flag_and_spec_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(CHAT), "-o", "json"]) == 0  # verified by default
    assert json.loads(capsys.readouterr().out)["recommendation"]["provenance"]["predicted"] == "simulated"
    assert main(["plan", str(CHAT), "--no-verify", "-o", "json"]) == 0
    provenance = json.loads(capsys.readouterr().out)["recommendation"]["provenance"]
    assert provenance["predicted"] == ("calibrated" if int(provenance["measuredLines"]) else "extrapolated")
    spec = tmp_path / "verified.yaml"
    spec.write_text(yaml.safe_dump({**example_spec(CHAT), "verify": True}))
    assert main(["plan", str(spec), "--no-verify", "-o", "json"]) == 0  # the plan's field wins
    assert json.loads(capsys.readouterr().out)["recommendation"]["provenance"]["predicted"] == "simulated"


def test_simulate_serves_the_recommendation_plan_prints(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "verified.yaml"
    spec.write_text(yaml.safe_dump({**example_spec(CHAT), "verify": True}))
    assert main(["plan", str(spec), "-o", "json"]) == 0
    rec = json.loads(capsys.readouterr().out)["recommendation"]
    assert main(["simulate", str(spec), "--requests", "2000", "-o", "json"]) == 0
    simulated = json.loads(capsys.readouterr().out)
    assert simulated["plannedBy"] == "simulated"
    shape = replica_shape(rec["replicas"], rec["gpusPerReplica"], rec["gpuType"])
    assert simulated["deployment"].startswith(f"{shape},")
    assert main(["simulate", str(CHAT), "--requests", "2000", "--no-verify", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["plannedBy"] == "analytic"


# ----------------------------------------------------------------------------------------------------------
# inferplan render


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_render_prints_the_objects_as_multi_document_yaml(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "render", str(CHAT), "--no-verify")
    assert code == 0, err
    objects = list(yaml.safe_load_all(out))
    assert [o["kind"] for o in objects] == ["Deployment", "PodDisruptionBudget", "Service"]
    assert out.count("\n---\n") == 2
    _, candidate = planned(CHAT)
    assert objects[0]["spec"]["replicas"] == candidate.replicas
    assert objects[0]["metadata"]["name"] == "chat-assistant-8b"  # the manifest's name
    assert manifests_digest(objects) in err  # the digest the status's manifests reference carries
    bare = tmp_path / "bare.yaml"
    bare.write_text(yaml.safe_dump(example_spec(CHAT)))
    code, out, err = run(capsys, "render", str(bare), "--no-verify")
    assert code == 0, err
    assert next(yaml.safe_load_all(out))["metadata"]["name"] == "llama-3-1-8b-instruct"  # named after the model


def test_render_names_and_places_objects_after_the_manifest(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    manifest = yaml.safe_load(next(p for p in EXAMPLES if p.stem == "trtllm-70b-fp8").read_text())
    manifest["metadata"]["namespace"] = "platform"
    path = tmp_path / "trtllm-70b-fp8.yaml"
    path.write_text(yaml.safe_dump(manifest))
    code, out, err = run(capsys, "render", str(path), "--no-verify", "-o", "json")
    assert code == 0, err
    listed = json.loads(out)
    assert listed["kind"] == "List" and [o["kind"] for o in listed["items"]] == ["ConfigMap", "Deployment",
                                                                         "PodDisruptionBudget", "Service"]
    assert {o["metadata"]["name"] for o in listed["items"][1:]} == {"trtllm-70b"}
    assert {o["metadata"]["namespace"] for o in listed["items"]} == {"platform"}
    code, out, _ = run(capsys, "render", str(path), "--no-verify", "--name", "llm", "--namespace", "prod")
    assert {(o["metadata"]["name"], o["metadata"]["namespace"]) for o in yaml.safe_load_all(out)} >= {("llm", "prod")}


def test_render_from_status_renders_that_recommendation_without_planning(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, candidate = planned(CHAT)
    # What the operator wrote: another answer than planning would give now (3 replicas, its own batch), with the
    # status's extra keys beside the candidate's.
    stored = candidate.model_copy(update={"replicas": 3, "gpus": 3, "max_batch": 128})
    manifest = {"apiVersion": "inferplan.io/v1alpha1", "kind": "InferenceCapacityPlan",
                "metadata": {"name": "chat", "namespace": "serving", "generation": 2},
                "spec": example_spec(CHAT),
                "status": {"observedGeneration": 2,
                           "recommendation": {**stored.model_dump(by_alias=True, mode="json"),
                                              "manifests": {"target": "Deployment"}}}}
    path = tmp_path / "chat.yaml"
    path.write_text(yaml.safe_dump(manifest))
    code, out, err = run(capsys, "render", str(path))
    assert code == 0, err
    assert "status" in err and "not planning again" in err
    deployment = next(o for o in yaml.safe_load_all(out) if o["kind"] == "Deployment")
    assert deployment["spec"]["replicas"] == 3 and deployment["metadata"]["name"] == "chat"
    assert Candidate.model_validate(stored.model_dump()).max_batch == 128

    manifest["metadata"]["generation"] = 3  # the spec moved on since the status was written: not reviewed for it
    path.write_text(yaml.safe_dump(manifest))
    code, out, err = run(capsys, "render", str(path))
    assert code == 2 and out == "" and "generation 2" in err and "generation 3" in err
    code, _, err = run(capsys, "render", str(path), "--allow-stale-status")
    assert code == 0 and "warning" in err and "generation 2" in err and "generation 3" in err


def test_render_reads_standard_input(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(CHAT.read_text()))
    code, out, err = run(capsys, "render", "-", "--no-verify", "--name", "chat")
    assert code == 0, err
    assert [o["metadata"]["name"] for o in yaml.safe_load_all(out)] == ["chat", "chat", "chat"]


def test_render_with_autoscaling(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "render", str(CHAT), "--no-verify", "--name", "chat", "--autoscaling", "keda")
    assert code == 0, err
    objects = {o["kind"]: o for o in yaml.safe_load_all(out)}
    assert set(objects) == {"Deployment", "PodDisruptionBudget", "Service", "ScaledObject"}
    assert "replicas" not in objects["Deployment"]["spec"]  # the autoscaler owns them
    assert "--prometheus-url" in err  # the serverAddress is a placeholder until given
    code, out, err = run(capsys, "render", str(CHAT), "--no-verify", "--autoscaling", "hpa", "--target", "kserve",
                         "--scale-on", "concurrency")
    assert code == 0, err
    hpa = next(o for o in yaml.safe_load_all(out) if o["kind"] == "HorizontalPodAutoscaler")
    assert hpa["spec"]["metrics"][0]["pods"]["metric"]["name"] == "vllm_requests_running"


@pytest.mark.parametrize(("options", "says"), [
    (["--scale-on", "concurrency"], "add --autoscaling hpa or keda"),
    (["--scale-on", "requests"], "add --autoscaling hpa or keda"),
    (["--prometheus-url", "http://prometheus.monitoring.svc:9090"], "add --autoscaling keda"),
    (["--autoscaling", "hpa", "--prometheus-url", "http://prometheus.monitoring.svc:9090"], "add --autoscaling keda"),
    (["--autoscaling", "keda", "--prometheus-url", "prometheus:9090"], "not an http(s) URL"),
])
def test_autoscaler_options_without_their_autoscaler_exit_2(capsys: pytest.CaptureFixture[str], options: list[str],
                                                            says: str) -> None:
    """An option of an autoscaler that is not rendered was dropped without a word (`render --scale-on concurrency`
    printed no autoscaler and exit 0), and KEDA was given any text as its serverAddress."""
    code, out, err = run(capsys, "render", str(CHAT), "--no-verify", *options)
    assert code == 2 and out == "" and says in err


def test_a_prometheus_url_with_credentials_is_rendered_with_a_warning_that_does_not_quote_them(
        capsys: pytest.CaptureFixture[str]) -> None:
    # The ScaledObject (which lands in Git) carried user:password from the URL, and nothing said so.
    url = "http://scaler:s3cret-pw@prometheus.monitoring.svc:9090"
    code, out, err = run(capsys, "render", str(CHAT), "--no-verify", "--name", "chat", "--namespace", "serving",
                         "--autoscaling", "keda", "--prometheus-url", url)
    assert code == 0, err
    scaled = next(o for o in yaml.safe_load_all(out) if o["kind"] == "ScaledObject")
    assert scaled["spec"]["triggers"][0]["metadata"]["serverAddress"] == url  # KEDA accepts them: not refused
    assert "inferplan: warning: --prometheus-url holds credentials" in err and "TriggerAuthentication" in err
    assert "s3cret-pw" not in err
    code, out, err = run(capsys, "render", str(CHAT), "--no-verify", "--autoscaling", "keda", "--prometheus-url",
                         "http://scaler:s3cret-pw@prometheus 9090")
    assert code == 2 and "not an http(s) URL" in err and "s3cret-pw" not in err
    code, out, err = run(capsys, "render", str(CHAT), "--no-verify", "--namespace", "serving", "--autoscaling",
                         "keda", "--prometheus-url", "http://prometheus.monitoring.svc:9090")
    assert code == 0 and "warning" not in err


def test_an_infeasible_plan_exits_1_with_the_reasons(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "render", str(REPO / "examples" / "platform" / "infeasible-ask.yaml"), "--no-verify")
    assert code == 1 and out == ""
    assert "no feasible deployment" in err and "budget" in err


def test_an_amd_recommendation_renders_a_rocm_image_and_a_release_without_a_build_for_the_gpu_is_not_planned(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    amd = REPO / "examples" / "platform" / "amd-only-cluster.yaml"
    code, out, err = run(capsys, "render", str(amd), "--no-verify")
    assert code == 0, err
    assert "vllm/vllm-openai-rocm:v" in out and "amd.com/gpu" in out
    own = "registry.example.com/rocm/vllm:0.11.2-gfx942"  # an AMD build of the pinned release
    code, out, err = run(capsys, "render", str(amd), "--no-verify", "--image", own)
    assert code == 0, err
    assert f"image: {own}" in out  # --image still wins
    manifest = yaml.safe_load(amd.read_text())
    manifest["spec"]["engine"] = {"name": "vllm", "version": "0.6.3.post1"}  # its one ROCm build predates MI355X
    manifest["spec"]["constraints"] = {"availableGpus": {"MI355X": 32}}
    path = tmp_path / "vllm-0.6-mi355x.yaml"
    path.write_text(yaml.safe_dump(manifest))
    code, out, err = run(capsys, "render", str(path), "--no-verify")
    assert code == 1 and out == ""  # refused at planning, as an infeasible plan, not left for render to fail on
    assert "vllm 0.6.x has no ROCm build for cdna4 GPUs (MI355X)" in err and "engine.version" in err


def test_an_unknown_autoscaling_engine_and_a_bad_name_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    tgi = str(REPO / "examples" / "platform" / "tgi-mistral-7b.yaml")
    code, _, err = run(capsys, "render", tgi, "--no-verify", "--autoscaling", "hpa")
    assert code == 2 and "sglang, vllm" in err
    code, _, err = run(capsys, "render", str(CHAT), "--no-verify", "--name", "Not_A_Name")
    assert code == 2 and "DNS-1035" in err


def test_a_plan_file_named_by_a_number_is_refused_not_a_traceback(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """`metadata: {name: 123}` reads as a number in YAML: render and diff say it is no name, as for any other."""
    path = tmp_path / "numbered.yaml"
    path.write_text(yaml.safe_dump({**yaml.safe_load(CHAT.read_text()), "metadata": {"name": 123}}))
    code, out, err = run(capsys, "render", str(path), "--no-verify")
    assert code == 2 and out == "" and "name 123 is not a DNS-1035 label" in err
    code, out, err = run(capsys, "render", str(CHAT), "--no-verify")
    running = tmp_path / "running.yaml"
    running.write_text(out)
    code, out, err = run(capsys, "diff", str(path), "--no-verify", "--deployment", str(running))
    assert code == 2 and "name 123 is not a DNS-1035 label" in err


# ----------------------------------------------------------------------------------------------------------
# inferplan diff


@pytest.fixture
def rendered(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """What `inferplan render` makes of the example: the Deployment as it would run once applied."""
    code, out, err = run(capsys, "render", str(CHAT), "--no-verify")
    assert code == 0, err
    path = tmp_path / "running.yaml"
    path.write_text(out)
    return path


def _edited(path: Path, replicas: int, batch: str) -> Path:
    documents = list(yaml.safe_load_all(path.read_text()))
    running = next(d for d in documents if d["kind"] == "Deployment")
    running["spec"]["replicas"] = replicas
    args = running["spec"]["template"]["spec"]["containers"][0]["args"]
    args[args.index("--max-num-seqs") + 1] = batch
    out = path.with_name("edited.yaml")
    out.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": documents}))  # as kubectl get prints
    return out


def test_a_deployment_that_runs_the_recommendation_is_in_sync(capsys: pytest.CaptureFixture[str],
                                                             rendered: Path) -> None:
    code, out, err = run(capsys, "diff", str(CHAT), "--deployment", str(rendered), "--no-verify")
    assert code == 0, err
    assert "already runs the recommendation" in out


def test_the_differences_are_lines_and_a_patch(capsys: pytest.CaptureFixture[str], rendered: Path) -> None:
    running = yaml.safe_load_all(rendered.read_text())
    want = next(d for d in running if d["kind"] == "Deployment")
    want_args = want["spec"]["template"]["spec"]["containers"][0]["args"]
    batch = want_args[want_args.index("--max-num-seqs") + 1]
    edited = _edited(rendered, want["spec"]["replicas"] + 3, "7")
    code, out, err = run(capsys, "diff", str(CHAT), "--deployment", str(edited), "--no-verify")
    assert code == 1, err
    assert f"  replicas: {want['spec']['replicas'] + 3} -> {want['spec']['replicas']}" in out.splitlines()
    assert f"  args: --max-num-seqs 7 -> {batch}" in out.splitlines()

    code, out, _ = run(capsys, "diff", str(CHAT), "--deployment", str(edited), "--no-verify", "-o", "patch")
    assert code == 1
    patch = json.loads(out)
    assert patch["spec"]["replicas"] == want["spec"]["replicas"]
    assert patch["spec"]["template"]["spec"]["containers"][0]["args"] == want_args

    code, out, _ = run(capsys, "diff", str(CHAT), "--deployment", str(edited), "--no-verify", "-o", "json")
    data = json.loads(out)
    assert code == 1 and data["inSync"] is False and data["patch"] == patch and len(data["summary"]) == 2


def test_diff_does_not_print_the_running_api_key(capsys: pytest.CaptureFixture[str], rendered: Path) -> None:
    """`inferplan diff` had printed `args: - --api-key sk-SECRET123` (and -o json the same line)."""
    documents = list(yaml.safe_load_all(rendered.read_text()))
    running = next(d for d in documents if d["kind"] == "Deployment")
    running["spec"]["template"]["spec"]["containers"][0]["args"] += ["--api-key", "sk-SECRET123"]
    rendered.write_text(yaml.safe_dump_all(documents))
    for output in ("text", "json", "patch"):
        code, out, err = run(capsys, "diff", str(CHAT), "--deployment", str(rendered), "--no-verify", "-o", output)
        assert code == 1, err
        assert "sk-SECRET123" not in out + err
        assert output == "patch" or "args: - --api-key <redacted>" in out


@pytest.fixture
def pools(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, dict[str, dict[str, Any]]]:
    """A disaggregated SGLang plan (tests.support.plans.LONG_PROMPTS_PD) and the pools' Deployments `inferplan render`
    makes of it, by role."""
    from tests.support.plans import LONG_PROMPTS_PD

    spec = tmp_path / "pd.yaml"
    spec.write_text(yaml.safe_dump({"apiVersion": "inferplan.io/v1alpha1", "kind": "InferenceCapacityPlan",
                                    "metadata": {"name": "pd"}, "spec": LONG_PROMPTS_PD}))
    code, out, err = run(capsys, "render", str(spec), "--no-verify")
    assert code == 0, err
    deployments = {d["metadata"]["name"]: d for d in yaml.safe_load_all(out) if d["kind"] == "Deployment"}
    return spec, {role: deployments[f"pd-{role}"] for role in ("prefill", "decode")}


def test_a_pool_of_a_disaggregated_recommendation_is_compared_with_that_pool(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, pools: tuple[Path, dict[str, dict[str, Any]]]) -> None:
    """Each pool's Deployment is compared with the pool of its role (its `inferplan.io/role` label, else its
    --disaggregation-mode), never with the other pool: a prefill Deployment is not told to become a decode one."""
    spec, by_role = pools
    for role, running in by_role.items():
        path = tmp_path / f"{role}.yaml"
        path.write_text(yaml.safe_dump(running))
        code, out, err = run(capsys, "diff", str(spec), "--deployment", str(path), "--no-verify")
        assert code == 0, out + err
        assert "already runs the recommendation" in out
        # Without the label (a Deployment of one's own), the engine's --disaggregation-mode tells the role.
        unlabelled = copy.deepcopy(running)
        for meta in (unlabelled["metadata"], unlabelled["spec"]["template"]["metadata"]):
            meta["labels"].pop("inferplan.io/role")
        unlabelled["spec"]["replicas"] += 1
        path.write_text(yaml.safe_dump(unlabelled))
        code, out, err = run(capsys, "diff", str(spec), "--deployment", str(path), "--no-verify")
        assert code == 1, err
        assert [line.strip() for line in out.splitlines()[1:-2]] == [
            f"replicas: {running['spec']['replicas'] + 1} -> {running['spec']['replicas']}"]
    # A Deployment that is neither pool's is refused, with the reason.
    neither = copy.deepcopy(by_role["decode"])
    neither["spec"]["template"]["metadata"]["labels"].pop("inferplan.io/role")
    neither["metadata"]["labels"].pop("inferplan.io/role")
    args = neither["spec"]["template"]["spec"]["containers"][0]["args"]
    at = args.index("--disaggregation-mode")
    del args[at:at + 2]
    path = tmp_path / "neither.yaml"
    path.write_text(yaml.safe_dump(neither))
    code, _, err = run(capsys, "diff", str(spec), "--deployment", str(path), "--no-verify")
    assert code == 2 and "prefill and decode pools" in err and "pd-prefill" in err


def test_the_deployment_can_come_from_standard_input(capsys: pytest.CaptureFixture[str], rendered: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(rendered.read_text()))
    code, _, err = run(capsys, "diff", str(CHAT), "--deployment", "-", "--no-verify")
    assert code == 0, err


def test_trouble_exits_2_with_the_reason(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    two = tmp_path / "two.yaml"
    two.write_text("kind: Deployment\nmetadata: {name: a}\n---\nkind: Deployment\nmetadata: {name: b}\n")
    code, _, err = run(capsys, "diff", str(CHAT), "--deployment", str(two), "--no-verify")
    assert code == 2 and "exactly one Deployment (found: a, b)" in err
    code, _, err = run(capsys, "diff", str(CHAT), "--deployment", str(tmp_path / "missing.yaml"), "--no-verify")
    assert code == 2 and "cannot read" in err
    code, _, err = run(capsys, "diff", "-", "--deployment", "-")
    assert code == 2 and "cannot both come from standard input" in err
    infeasible = CHAT.parents[1] / "platform" / "infeasible-ask.yaml"
    one = tmp_path / "one.yaml"
    one.write_text("kind: Deployment\nmetadata: {name: a}\nspec: {template: {spec: {containers: [{name: x}]}}}\n")
    code, _, err = run(capsys, "diff", str(infeasible), "--deployment", str(one), "--no-verify")
    assert code == 2 and "no feasible deployment" in err


def test_diff_refuses_an_image_that_is_no_image_reference(capsys: pytest.CaptureFixture[str], rendered: Path) -> None:
    """`diff --image` is checked as `render --image` is: a patch setting it would make pods the kubelet cannot pull
    (it was only compared, and patched in as given)."""
    code, out, err = run(capsys, "diff", str(CHAT), "--deployment", str(rendered), "--no-verify",
                         "--image", "vllm/vllm-openai:v0.11.0 --bad")
    assert code == 2 and not out
    assert "is not a container image reference" in err
    code, _, err = run(capsys, "diff", str(CHAT), "--deployment", str(rendered), "--no-verify",
                       "--image", "vllm/vllm-openai:v0.11.0")
    assert code in (0, 1), err


def test_render_json_names_the_digest_of_the_yaml_and_provenance_is_strings(
        capsys: pytest.CaptureFixture[str]) -> None:
    """What docs/deploy.md and docs/planning.md say of the machine-readable outputs: `render -o json` ends stderr
    with the digest of the objects' YAML (the status's `manifests.digest`), not of the JSON it prints; and every
    `provenance` value of `plan -o json` is a string, `measuredLines` a decimal count ("0" where unmeasured)."""
    code, out, err = run(capsys, "render", str(CHAT), "--no-verify", "-o", "json")
    assert code == 0, err
    objects = json.loads(out)["items"]
    assert err.rstrip().endswith(f"{len(objects)} objects, {manifests_digest(objects)}")
    code, out, err = run(capsys, "plan", str(CHAT), "--no-verify", "-o", "json")
    assert code == 0, err
    result = json.loads(out)
    for candidate in [result["recommendation"], *result["alternatives"]]:
        provenance = candidate["provenance"]
        assert all(isinstance(value, str) for value in provenance.values())
        assert provenance["measuredLines"].isdigit()
        assert candidate["provenance"]["predicted"] != "extrapolated" or provenance["measuredLines"] == "0"


def test_a_plan_piped_in_without_dash_is_not_taken_for_the_bundled_example() -> None:
    """`kubectl get icp NAME -o yaml | inferplan render | kubectl apply -f -` rendered the bundled example's objects
    (a note on stderr only) for the cluster to apply: render now refuses it, naming `-`; plan warns; `-` reads it;
    /dev/null is no plan given, and diff's `--deployment -` is its own input."""
    import os

    plan_text = CHAT.read_text(encoding="utf-8")

    def cli(*args: str, stdin: Any = None, text: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "inferplan.cli", *args], input=text, stdin=stdin,
                              capture_output=True, text=True, cwd=REPO, env=os.environ | {"PYTHONPATH": str(REPO)},
                              check=False)

    refused = cli("render", "--no-verify", text=plan_text)
    assert refused.returncode == 2 and refused.stdout == ""
    assert "`inferplan render -`" in refused.stderr
    planned_example = cli("plan", "--no-verify", text=plan_text)
    assert planned_example.returncode == 0 and "standard input is not read without `-`" in planned_example.stderr
    read = cli("render", "-", "--no-verify", text=plan_text)
    assert read.returncode == 0 and "kind: Deployment" in read.stdout and "warning" not in read.stderr
    quiet = cli("render", "--no-verify", stdin=subprocess.DEVNULL)
    assert quiet.returncode == 0 and "warning" not in quiet.stderr
