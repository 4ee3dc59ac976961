"""What the CLI says about inputs it cannot use: a malformed factors file, standard input where it is not read."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from inferplan.cli import main

PLAN = Path(__file__).resolve().parents[2] / "examples" / "plans" / "chat-assistant-8b.yaml"
EXAMPLE_ROWS = Path(__file__).resolve().parents[2] / "inferplan" / "planner" / "data" / "example-scenarios.jsonl"
# A factors file with the neutral prior only, its closing brace left off for what follows.
PRIOR = ('{"engines": {}, "default_engine": {"step_overhead_ms": 1, "sequence_overhead_ms": 0.05, '
         '"request_overhead_ms": 0, "non_torch_gib": 0.3, "activation_scale": 1}')


@pytest.mark.parametrize(("content", "says"), [
    ("not json", "not valid JSON"),
    ("[1]", "expected a JSON object"),
    ("{}", "missing 'engines'"),
    ('{"engines": {"vllm": 5}, "default_engine": {}}', "engine 'vllm': expected a JSON object"),
    ('{"engines": {}, "default_engine": {"per_step_ms": "x"}}', "engine 'default'"),
    # A plan reads the measured lines from `meta`: each of these was a traceback.
    (PRIOR + ', "meta": [1]}', "'meta' must be a JSON object"),
    (PRIOR + ', "meta": {"rows_by_engine_family": []}}', "rows_by_engine_family"),
    (PRIOR + ', "meta": {"rows_by_engine_family": {"vllm": {"hopper": "x"}}}}', "rows_by_engine_family"),
])
def test_a_malformed_factors_file_is_an_error_that_names_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, says: str) -> None:
    factors = tmp_path / "f.json"
    factors.write_text(content, encoding="utf-8")
    for command in (["plan", str(PLAN), "--no-verify"], ["accuracy"]):
        assert main([*command, "--factors", str(factors)]) == 2
        err = capsys.readouterr().err
        assert f"inferplan: error: factors file {factors}: " in err and says in err
        assert "Traceback" not in err


def test_a_factors_line_no_engine_is_predicted_with_is_named(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    # A line spelt `vLLM`, or one of another version (`sglang-v0`), was read and never used, without a word.
    from inferplan.planner.model.factors import load_factors

    data = load_factors().to_json()
    data["engines"]["vLLM"] = data["engines"]["sglang-v0"] = data["engines"]["vllm"]
    factors = tmp_path / "f.json"
    factors.write_text(json.dumps(data), encoding="utf-8")
    assert main(["plan", str(PLAN), "--no-verify", "--factors", str(factors)]) == 0
    err = capsys.readouterr().err
    assert (f"inferplan: warning: factors file {factors}: no engine is predicted with the line(s) sglang-v0, vLLM, "
            "whose factors are not used") in err
    data["engines"] = {line: data["engines"]["vllm"] for line in ("vllm-rocm", "vllm-v0-rocm", "tensorrt-llm-v0")}
    factors.write_text(json.dumps(data), encoding="utf-8")
    assert main(["plan", str(PLAN), "--no-verify", "--factors", str(factors)]) == 0
    assert "warning" not in capsys.readouterr().err


def test_a_plan_is_read_from_standard_input(monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(PLAN.read_text(encoding="utf-8")))
    assert main(["plan", "-", "--no-verify", "-o", "json"]) == 0
    assert '"recommendation"' in capsys.readouterr().out


@pytest.mark.parametrize("command", ["plan", "report"])
def test_a_key_given_twice_on_standard_input_is_an_error(monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str], command: str) -> None:
    # As in a plan file: YAML would keep the last `name`, and plan for sglang without a word.
    text = PLAN.read_text(encoding="utf-8").replace("    name: vllm\n", "    name: vllm\n    name: sglang\n")
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    assert main([command, "-", "--no-verify"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("<stdin>: malformed YAML at line ") and "key 'name' is given twice" in err


def test_a_json_plan_indented_with_tabs_is_read_from_standard_input(monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(yaml.safe_load(PLAN.read_text(encoding="utf-8")),
                                                            indent="\t")))
    assert main(["plan", "-", "--no-verify", "-o", "json"]) == 0
    assert '"recommendation"' in capsys.readouterr().out


def test_a_plan_file_ending_in_a_document_separator_is_planned_and_reported(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(PLAN.read_text(encoding="utf-8") + "---\n", encoding="utf-8")
    assert main(["plan", str(path), "--no-verify", "-o", "json"]) == 0
    assert '"recommendation"' in capsys.readouterr().out
    assert main(["report", str(path), "--no-verify", "--requests", "200", "-o", str(tmp_path / "r.html")]) == 0
    assert "Traceback" not in capsys.readouterr().err


def test_a_scenario_file_from_standard_input_is_refused_with_a_reason(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["accuracy", "--scenarios", "-"]) == 2
    assert "a scenario file cannot be read from standard input" in capsys.readouterr().err


def test_a_problem_of_the_whole_plan_file_names_the_file_once(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("", encoding="utf-8")
    assert main(["plan", str(empty)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{empty}: ") and err.count(str(empty)) == 1


@pytest.mark.parametrize("command", ["simulate", "report"])
@pytest.mark.parametrize(("option", "value", "says"), [
    ("--requests", "-5", "must be at least 1"), ("--requests", "0", "must be at least 1"),
    ("--seed", "-1", "must be at least 0"), ("--requests", "many", "expected a whole number"),
])
def test_simulation_options_out_of_range_are_usage_errors(
        capsys: pytest.CaptureFixture[str], command: str, option: str, value: str, says: str) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([command, str(PLAN), option, value])
    assert exit_.value.code == 2
    assert says in capsys.readouterr().err


def test_an_empty_trace_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_text("\n", encoding="utf-8")
    assert main(["simulate", str(PLAN), "--trace", str(trace)]) == 2
    assert "the trace holds no requests" in capsys.readouterr().err


def test_a_trace_says_at_what_rate_it_arrives_against_the_plan(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """The planned column is the plan's workload (20 requests/s): stderr gives the trace's own mean arrival rate,
    so that a trace whose "t" is in milliseconds (1000x too slow) shows as such."""
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(f'{{"t": {250 * i}, "prompt": 100, "output": 10}}\n' for i in range(5)),
                     encoding="utf-8")
    assert main(["simulate", str(PLAN), "--trace", str(trace), "--no-verify"]) == 0
    assert ("the trace's 5 requests arrive at 0.004 requests/s over 1000 s; the planned column is the plan's "
            "workload at 20 requests/s") in capsys.readouterr().err
    trace.write_text('{"t": 7, "prompt": 100, "output": 10}\n', encoding="utf-8")
    assert main(["simulate", str(PLAN), "--trace", str(trace), "--no-verify"]) == 0
    assert "the trace's 1 request arrives all at one instant" in capsys.readouterr().err


@pytest.mark.parametrize("option", [["--requests", "1"], ["--seed", "3"]])
def test_a_trace_says_that_requests_and_seed_do_not_apply_to_it(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                 option: list[str]) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"t": 0, "prompt": 100, "output": 10}\n{"t": 0.5, "prompt": 100, "output": 10}\n',
                     encoding="utf-8")
    assert main(["simulate", str(PLAN), "--trace", str(trace), "--no-verify", "-o", "json", *option]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["requests"] == 2
    assert "--requests and --seed shape a generated workload: the trace's 2 requests are replayed as they are" in err
    assert main(["simulate", str(PLAN), "--trace", str(trace), "--no-verify", "-o", "json"]) == 0
    assert "--requests" not in capsys.readouterr().err


@pytest.mark.parametrize(("option", "value", "says"), [
    ("--namespace", "Bad NS", "is not a DNS-1123 label"),
    ("--image", "not an image!!", "is not a container image reference"),
])
def test_render_refuses_a_namespace_or_an_image_kubernetes_would_refuse(
        capsys: pytest.CaptureFixture[str], option: str, value: str, says: str) -> None:
    assert main(["render", str(PLAN), "--no-verify", option, value]) == 2
    captured = capsys.readouterr()
    assert says in captured.err and captured.out == ""


def test_render_refuses_a_manifest_namespace_kubernetes_would_refuse(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN.read_text(encoding="utf-8").replace("  name: chat-assistant-8b\n",
                                                             "  name: chat-assistant-8b\n  namespace: Team_A\n"),
                    encoding="utf-8")
    assert main(["render", str(plan), "--no-verify"]) == 2
    assert "namespace 'Team_A' is not a DNS-1123 label" in capsys.readouterr().err


def test_render_refuses_a_plan_whose_model_names_no_repository(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
              "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
              "num_hidden_layers": 32, "vocab_size": 128256, "max_position_embeddings": 131072,
              "torch_dtype": "bfloat16"}
    (tmp_path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    spec = ("model: {configFile: config.json}\nengine: {name: vllm}\n"
            'workload: {requestsPerSecond: "5", promptTokens: {mean: 1000}, outputTokens: {mean: 200}}\n'
            "slo: {ttft: {maxMs: 1000}, tpot: {maxMs: 50}}\nconstraints: {gpuTypes: [H100]}\n")
    (tmp_path / "plan.yaml").write_text(spec, encoding="utf-8")
    assert main(["render", str(tmp_path / "plan.yaml"), "--no-verify"]) == 2
    err = capsys.readouterr().err
    assert "names no repository for the engine to load (" in err and "config.json')" in err
    (tmp_path / "config.json").write_text(json.dumps(config | {"_name_or_path": "acme/llama-8b"}), encoding="utf-8")
    assert main(["render", str(tmp_path / "plan.yaml"), "--no-verify"]) == 0
    assert "- acme/llama-8b" in capsys.readouterr().out


def test_a_keda_scaler_without_a_namespace_says_its_query_spans_every_namespace(
        capsys: pytest.CaptureFixture[str]) -> None:
    bare = PLAN.read_text(encoding="utf-8")
    assert main(["render", str(PLAN), "--no-verify", "--autoscaling", "keda"]) == 0
    assert "matches the pods by name in every namespace" in capsys.readouterr().err
    assert "namespace:" not in bare.split("spec:")[0]  # the example plan names none
    assert main(["render", str(PLAN), "--no-verify", "--autoscaling", "keda", "--namespace", "team-a"]) == 0
    assert "every namespace" not in capsys.readouterr().err


def test_a_trace_with_requests_over_the_context_says_they_are_shortened(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"t": 0, "prompt": 200000, "output": 10}\n{"t": 0.5, "prompt": 100, "output": 10}\n',
                     encoding="utf-8")
    assert main(["simulate", str(PLAN), "--trace", str(trace), "--no-verify"]) == 0
    assert "1 of the trace's 2 requests exceed the deployment's max_model_len" in capsys.readouterr().err


def test_a_config_file_path_that_reads_as_org_slash_name_is_no_repository(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
              "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
              "num_hidden_layers": 32, "vocab_size": 128256, "max_position_embeddings": 131072}
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "llama.json").write_text(json.dumps(config), encoding="utf-8")
    (tmp_path / "plan.yaml").write_text(
        "model: {configFile: cfg/llama.json}\nengine: {name: vllm}\n"
        'workload: {requestsPerSecond: "5", promptTokens: {mean: 1000}, outputTokens: {mean: 200}}\n'
        "slo: {ttft: {maxMs: 1000}}\nconstraints: {gpuTypes: [H100]}\n", encoding="utf-8")
    assert main(["render", str(tmp_path / "plan.yaml"), "--no-verify"]) == 2
    assert "names no repository for the engine to load" in capsys.readouterr().err


def test_calibrate_checks_where_it_writes_before_it_fits(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for target, says in ((tmp_path / "missing" / "f.json", "does not exist"), (tmp_path, "is a directory")):
        assert main(["calibrate", "--scenarios", str(EXAMPLE_ROWS), "--write", str(target)]) == 2
        assert says in capsys.readouterr().err
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n", encoding="utf-8")
    assert main(["calibrate", "--scenarios", str(empty), "--write", str(tmp_path / "f.json")]) == 2
    assert "no scenario line to fit" in capsys.readouterr().err and not (tmp_path / "f.json").exists()
    assert main(["accuracy", "--scenarios", str(tmp_path)]) == 2
    assert f"scenario file {tmp_path} is a directory" in capsys.readouterr().err


@pytest.mark.parametrize("change", [{"suspect": True}, {"gpu": None}, {"value": 0.0},
                                    {"model": "deepseek-ai/DeepSeek-V3"}])
def test_calibrate_refuses_files_whose_every_line_a_fit_leaves_out(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict) -> None:
    # It printed "fitted on 0 rows", wrote a factors file fitted on nothing and exited 0.
    rows = tmp_path / "skipped.jsonl"
    rows.write_text("".join(json.dumps(json.loads(line) | change) + "\n"
                            for line in EXAMPLE_ROWS.read_text(encoding="utf-8").splitlines() if line.strip()),
                    encoding="utf-8")
    assert main(["calibrate", "--scenarios", str(rows), "--write", str(tmp_path / "f.json")]) == 2
    captured = capsys.readouterr()
    assert "no scenario line to fit: none of the 7 valid line(s) is one a fit uses" in captured.err
    assert captured.out == "" and not (tmp_path / "f.json").exists()


def test_calibrate_never_writes_over_the_measurements_it_fits(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    # `--write` naming a `--scenarios` file replaced a team's measurements with the factors fitted on them.
    rows = tmp_path / "mine.jsonl"
    rows.write_text(EXAMPLE_ROWS.read_text(encoding="utf-8"), encoding="utf-8")
    for target in (rows, tmp_path / "." / "mine.jsonl"):
        assert main(["calibrate", "--scenarios", str(EXAMPLE_ROWS), str(rows), "--write", str(target)]) == 2
        assert "is a --scenarios file" in capsys.readouterr().err
    assert rows.read_text(encoding="utf-8") == EXAMPLE_ROWS.read_text(encoding="utf-8")


def test_calibrate_fits_a_row_once_when_two_files_give_its_id(capsys: pytest.CaptureFixture[str]) -> None:
    # The same file twice was fitted on twice its rows (its harness times pulled twice as hard), silently.
    assert main(["calibrate", "--scenarios", str(EXAMPLE_ROWS)]) == 0
    once = capsys.readouterr().out
    assert main(["calibrate", "--scenarios", str(EXAMPLE_ROWS), str(EXAMPLE_ROWS)]) == 0
    captured = capsys.readouterr()
    assert captured.out == once
    rows = [line for line in EXAMPLE_ROWS.read_text(encoding="utf-8").splitlines() if line.strip()]
    duplicates = [line for line in captured.err.splitlines() if "duplicate id" in line]
    assert len(duplicates) == len(rows)
    assert duplicates[0].startswith(f"{EXAMPLE_ROWS}: line 1, field 'id': duplicate id ")
    assert duplicates[0].endswith(f"(first in {EXAMPLE_ROWS}, line 1) (line skipped)")


def test_calibrate_names_the_lines_it_did_not_fit(capsys: pytest.CaptureFixture[str]) -> None:
    # The bundled example is one source: no line has rows from two, so none is fitted, and the output says so.
    assert main(["calibrate", "--scenarios", str(EXAMPLE_ROWS)]) == 0
    out = capsys.readouterr().out
    assert "not fitted (a line needs 3 rows from 2 sources; these keep the neutral prior): " in out
    assert "vllm (4 rows)" in out


def test_calibrate_says_what_is_wrong_with_where_it_writes_and_names_empty_files(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # --write FILE/f.json said "its folder FILE does not exist" of a file that exists; and an empty file was
    # refused without its name, which predict and accuracy give.
    a_file = tmp_path / "notes.txt"
    a_file.write_text("x\n", encoding="utf-8")
    assert main(["calibrate", "--scenarios", str(EXAMPLE_ROWS), "--write", str(a_file / "f.json")]) == 2
    err = capsys.readouterr().err
    assert f"{a_file} is not a folder" in err and "does not exist" not in err
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n", encoding="utf-8")
    for verb in ("calibrate", "predict", "accuracy"):
        assert main([verb, "--scenarios", str(empty), str(empty)]) == 2
        assert f"in {empty}, {empty} (the files hold no valid line)" in capsys.readouterr().err
