"""Scenario files: the published file parses cleanly; bad lines become errors naming line and field."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import date
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from inferplan.planner.calibration.scenarios import (
    METRIC_UNITS,
    Scenario,
    ScenarioError,
    parse_scenario_line,
    read_scenario_files,
    read_scenarios,
)

PUBLISHED = Path(__file__).resolve().parents[4] / "shared" / "accuracy" / "scenarios.jsonl"
PUBLISHED_ROWS = 304

needs_published = pytest.mark.skipif(
    not PUBLISHED.is_file(), reason=f"published scenario file not found at {PUBLISHED}"
)


def _example_lines() -> list[str]:
    text = resources.files("inferplan.planner").joinpath("data/example-scenarios.jsonl").read_text(
        encoding="utf-8"
    )
    return [line for line in text.splitlines() if line.strip()]


def _example_row(index: int = 2) -> dict[str, Any]:
    """A real row of the bundled example (index 2: a llama.cpp single-stream decode speed)."""
    return json.loads(_example_lines()[index])


def _mutated(mutate: Callable[[dict[str, Any]], None], index: int = 2) -> str:
    row = _example_row(index)
    mutate(row)
    return json.dumps(row)


# --- the published file ---------------------------------------------------------------------------


@needs_published
def test_published_file_parses_with_zero_errors_and_304_rows() -> None:
    parsed = read_scenarios(PUBLISHED)
    assert [str(e) for e in parsed.errors] == []
    assert len(parsed.scenarios) == PUBLISHED_ROWS


@needs_published
def test_published_file_ids_unique_and_line_numbers_track_rows() -> None:
    parsed = read_scenarios(PUBLISHED)
    assert len({s.id for s in parsed.scenarios}) == len(parsed.scenarios)
    assert len(parsed.lines) == len(parsed.scenarios)
    assert list(parsed.lines) == sorted(parsed.lines)
    raw = PUBLISHED.read_text(encoding="utf-8").splitlines()
    for scenario, line in zip(parsed.scenarios[:20], parsed.lines[:20], strict=True):
        assert json.loads(raw[line - 1])["id"] == scenario.id


@needs_published
def test_published_file_units_match_their_metric() -> None:
    for scenario in read_scenarios(PUBLISHED).scenarios:
        assert scenario.unit == METRIC_UNITS[scenario.metric], scenario.id


def test_bundled_example_parses_cleanly() -> None:
    path = Path(str(resources.files("inferplan.planner").joinpath("data/example-scenarios.jsonl")))
    parsed = read_scenarios(path)
    assert parsed.errors == ()
    assert len(parsed.scenarios) == len(_example_lines())


# --- one line at a time ---------------------------------------------------------------------------


def test_good_line_parses_to_a_scenario() -> None:
    parsed = parse_scenario_line(_example_lines()[2], 3)
    assert isinstance(parsed, Scenario)
    assert parsed.metric == "decode_tps_single"
    assert parsed.load.kind == "single"


def test_source_name_is_github_owner() -> None:
    parsed = parse_scenario_line(_example_lines()[2], 1)
    assert isinstance(parsed, Scenario)
    assert parsed.source_name == "XiongjieDai"


@pytest.mark.parametrize(("source", "name"), [
    ("https://docs.nvidia.com/nim/benchmarking/llm/latest/performance.html#h100", "docs.nvidia.com"),
    ("https://github.com/vllm-project/vllm/blob/abc/README.md", "vllm-project"),
    ("file:///home/me/lab-a/results.md", "home-me-lab-a-results.md"),
    ("file:///home/me/lab-b/results.md", "home-me-lab-b-results.md"),
    ("/srv/bench/run-1.md", "srv-bench-run-1.md"),
    ("internal benchmark 2026-12", "internal benchmark 2026-12"),
    ("", "unnamed-source"),
])
def test_a_source_without_a_host_keeps_a_name_of_its_own(source: str, name: str) -> None:
    # Every file:// source was named "" (the URL's empty host): two labs' runs were one source, with one harness
    # time, and a leave-one-source-out fold named "".
    row = Scenario.model_validate(_example_row() | {"source": source})
    assert row.source_name == name


def test_bad_json_names_the_line_and_says_json() -> None:
    error = parse_scenario_line(_example_lines()[2][:-5], 17)
    assert isinstance(error, ScenarioError)
    assert error.line == 17
    assert error.field is None
    assert "JSON" in error.message
    assert "line 17" in str(error)


@pytest.mark.parametrize("text", ["[1, 2]", "null", '"a string"', "42"])
def test_json_that_is_not_an_object_is_an_error(text: str) -> None:
    error = parse_scenario_line(text, 5)
    assert isinstance(error, ScenarioError)
    assert error.line == 5


def _drop(key: str) -> Callable[[dict[str, Any]], None]:
    return lambda row: row.pop(key)


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda row: row.__setitem__(key, value)


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        pytest.param(_drop("model"), "model", id="missing-model"),
        pytest.param(_drop("suspect"), "suspect", id="missing-suspect"),
        pytest.param(_set("input_tokens", -1), "input_tokens", id="negative-input-tokens"),
        pytest.param(_set("output_tokens", -5), "output_tokens", id="negative-output-tokens"),
        pytest.param(_set("load", {"kind": "ramp"}), "load", id="unknown-load-kind"),
        pytest.param(_set("unit", "ms"), "unit", id="unit-not-matching-metric"),
        pytest.param(_set("metric", "tokens_per_joule"), "metric", id="unknown-metric"),
        pytest.param(_set("engine", "pytorch"), "engine", id="unknown-engine"),
        pytest.param(_set("gpus", 0), "gpus", id="zero-gpus"),
        pytest.param(_set("gpu_memory_utilization", 1.5), "gpu_memory_utilization", id="gmu-over-one"),
        pytest.param(_set("value", -1.0), "value", id="negative-value"),
        pytest.param(_set("id", "Has Spaces"), "id", id="id-bad-characters"),
        pytest.param(_set("unexpected_key", 1), "unexpected_key", id="extra-key"),
        # The format's JSON types: a quoted number or boolean is a bad line, not a value pydantic guesses.
        pytest.param(_set("gpus", "2"), "gpus", id="quoted-count"),
        pytest.param(_set("suspect", "yes"), "suspect", id="quoted-boolean"),
        pytest.param(_set("value", "12.5"), "value", id="quoted-value"),
        pytest.param(_set("input_tokens", True), "input_tokens", id="boolean-count"),
        # Far beyond any measured run: a bad line, not an allocation or an overflow.
        pytest.param(_set("max_model_len", 10**30), "max_model_len", id="huge-context"),
        pytest.param(_set("input_tokens", 10**19), "input_tokens", id="huge-prompt"),
        pytest.param(_set("load", {"kind": "burst", "value": 10**19}), "load.burst.value", id="huge-burst"),
    ],
)
def test_malformed_line_names_line_and_field(mutate: Callable[[dict[str, Any]], None], field: str) -> None:
    error = parse_scenario_line(_mutated(mutate), 9)
    assert isinstance(error, ScenarioError), error
    assert error.line == 9
    assert error.field == field
    assert "line 9" in str(error)
    assert repr(field) in str(error)


def test_bad_load_value_names_the_nested_field() -> None:
    error = parse_scenario_line(_mutated(_set("load", {"kind": "static_batch", "value": 0}), index=3), 4)
    assert isinstance(error, ScenarioError)
    assert error.field is not None
    assert error.field.startswith("load")
    assert error.field.endswith("value")


@pytest.mark.parametrize("load", [{"kind": "poisson", "rate": 2.0}, {"kind": "offline"}])
def test_a_load_without_its_num_prompts_key_is_a_bad_line(load: dict[str, Any]) -> None:
    """SCENARIOS.md gives each load exactly one shape, `{"kind":"poisson","rate":R,"num_prompts":M}` and
    `{"kind":"offline","num_prompts":M}` with "`num_prompts` may be null": the key is there, null where not stated,
    as every key of a line is. A line that left it out was read as null."""
    error = parse_scenario_line(_mutated(_set("load", load)), 6)
    assert isinstance(error, ScenarioError), error
    assert error.field == f"load.{load['kind']}.num_prompts"
    assert "required" in error.message.lower()
    stated = parse_scenario_line(_mutated(_set("load", {**load, "num_prompts": None})), 6)
    assert isinstance(stated, Scenario) and stated.load.num_prompts is None  # type: ignore[union-attr]


@pytest.mark.parametrize(("spelt", "value"), [
    ("fp8_e4m3", "fp8"), ("fp8_e5m2", "fp8"), ("FP8_E4M3", "fp8"), ("float8_e4m3fn", "fp8"), ("bfloat16", "bf16"),
    ("float16", "fp16"), ("BF16", "bf16"), ("fp8", "fp8"), ("auto", "auto"),
])
def test_a_kv_cache_spelt_as_the_engines_spell_it_is_read_as_the_value_it_means(spelt: str, value: str) -> None:
    """vLLM's and SGLang's --kv-cache-dtype write the FP8 element format (`fp8_e4m3`, `fp8_e5m2`) and torch writes
    `bfloat16`: each means one value of the format, so a line spelling it so is read as that value, as its weights'
    spellings are (`predict.WEIGHT_SPELLINGS`), not lost as a bad line."""
    row = parse_scenario_line(_mutated(_set("kv_cache", spelt)), 3)
    assert isinstance(row, Scenario), row
    assert row.kv_cache == value


@pytest.mark.parametrize("spelt", ["int8", "fp4", "fp8_e4m3_something", "", "e4m3"])
def test_a_kv_cache_that_spells_no_value_is_still_a_bad_line(spelt: str) -> None:
    error = parse_scenario_line(_mutated(_set("kv_cache", spelt)), 3)
    assert isinstance(error, ScenarioError) and error.field == "kv_cache", error


def test_unit_error_message_gives_the_expected_unit() -> None:
    error = parse_scenario_line(_mutated(_set("unit", "ms")), 2)
    assert isinstance(error, ScenarioError)
    assert METRIC_UNITS["decode_tps_single"] in error.message


def test_non_finite_value_is_rejected() -> None:
    error = parse_scenario_line(_mutated(_set("value", float("nan"))), 3)
    assert isinstance(error, ScenarioError)
    assert error.field == "value"


# --- whole files --------------------------------------------------------------------------------


def _write(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "scenarios.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_an_id_an_earlier_pooled_file_gave_is_an_error_of_the_later_file(tmp_path: Path) -> None:
    # A fit pools its files: a file given twice, or a subset beside its whole, counted those rows twice.
    lines = _example_lines()
    whole, part = tmp_path / "whole.jsonl", tmp_path / "part.jsonl"
    whole.write_text("\n".join(lines) + "\n", encoding="utf-8")
    part.write_text("\n".join([lines[3], _mutated(lambda r: r.update(id="new-id"), 1)]) + "\n", encoding="utf-8")
    files = read_scenario_files([whole, part, whole])
    assert [path for path, _ in files] == [whole, part, whole]
    assert len(files[0][1].scenarios) == len(lines) and files[0][1].errors == ()
    assert [row.id for row in files[1][1].scenarios] == ["new-id"] and files[1][1].lines == (2,)
    first = json.loads(lines[3])["id"]
    assert [str(e) for e in files[1][1].errors] == [
        f"line 1, field 'id': duplicate id {first!r} (first in {whole}, line 4)"]
    assert files[2][1].scenarios == () and [e.line for e in files[2][1].errors] == list(range(1, len(lines) + 1))


def test_duplicate_id_is_an_error_naming_the_second_line_and_id(tmp_path: Path) -> None:
    first = _example_lines()[2]
    path = _write(tmp_path, [first, _example_lines()[3], first])
    parsed = read_scenarios(path)
    assert len(parsed.scenarios) == 2
    assert len(parsed.errors) == 1
    error = parsed.errors[0]
    assert error.line == 3
    assert error.field == "id"
    assert "line 1" in error.message


def test_read_returns_good_rows_and_reports_bad_ones_without_raising(tmp_path: Path) -> None:
    good = _example_lines()
    lines = [
        good[0],                                          # 1 good
        "{not json",                                      # 2 bad JSON
        "",                                               # 3 blank
        good[1],                                          # 4 good
        _mutated(_drop("model"), index=2),                # 5 missing key
        "   ",                                            # 6 blank (spaces)
        _mutated(_set("input_tokens", -3), index=3),      # 7 negative tokens
        good[4],                                          # 8 good
        _mutated(_set("load", {"kind": "ramp"}), 5),      # 9 unknown load kind
        _mutated(_set("unit", "ms"), index=2),            # 10 unit mismatch
        good[0],                                          # 11 duplicate id
    ]
    parsed = read_scenarios(_write(tmp_path, lines))
    assert [s.id for s in parsed.scenarios] == [json.loads(good[i])["id"] for i in (0, 1, 4)]
    assert parsed.lines == (1, 4, 8)
    assert [(e.line, e.field) for e in parsed.errors] == [
        (2, None), (5, "model"), (7, "input_tokens"), (9, "load"), (10, "unit"), (11, "id"),
    ]


def test_blank_lines_are_ignored_but_counted_in_line_numbers(tmp_path: Path) -> None:
    good = _example_lines()
    parsed = read_scenarios(_write(tmp_path, ["", good[0], "", "", good[1], "\t"]))
    assert parsed.errors == ()
    assert parsed.lines == (2, 5)


def test_file_of_only_blank_lines_is_empty(tmp_path: Path) -> None:
    parsed = read_scenarios(_write(tmp_path, ["", "  ", ""]))
    assert parsed.scenarios == ()
    assert parsed.errors == ()


def test_crlf_line_endings_are_accepted(tmp_path: Path) -> None:
    good = _example_lines()
    path = tmp_path / "crlf.jsonl"
    path.write_bytes(("\r\n".join(good[:3]) + "\r\n").encode("utf-8"))
    parsed = read_scenarios(path)
    assert parsed.errors == ()
    assert len(parsed.scenarios) == 3


def test_invalid_utf8_line_is_reported_not_raised(tmp_path: Path) -> None:
    good = _example_lines()
    path = tmp_path / "binary.jsonl"
    path.write_bytes(good[0].encode() + b"\n\xff\xfe not utf-8\n" + good[1].encode() + b"\n")
    parsed = read_scenarios(path)
    assert len(parsed.scenarios) == 2
    assert [e.line for e in parsed.errors] == [2]


def test_utf8_bom_does_not_cost_the_first_row(tmp_path: Path) -> None:
    good = _example_lines()
    path = tmp_path / "bom.jsonl"
    path.write_text("\n".join(good) + "\n", encoding="utf-8-sig")
    parsed = read_scenarios(path)
    assert parsed.errors == ()
    assert len(parsed.scenarios) == len(good)


def test_a_source_dated_by_an_arxiv_identifier_gives_the_publication_month(published_scenarios: Path) -> None:
    rows = read_scenarios(published_scenarios).scenarios
    argonne = next(r for r in rows if r.source_name == "argonne-lcf" and "arXiv:2411.00136" in r.notes)
    assert argonne.published == date(2024, 11, 1)
    assert argonne.model_copy(update={"notes": "no paper"}).published is None
    assert argonne.model_copy(update={"notes": "arXiv:2413.00001"}).published is None  # no 13th month


def test_a_line_without_a_date_takes_the_one_its_source_revision_gives(tmp_path: Path) -> None:
    """Argonne's Figure 22 lines say only "same paper as above"; the paper's other lines, from the same
    repository commit, give its arXiv date, which picks the engine line they ran (`engines.factor_key`)."""
    dated = {**_example_row(), "id": "a-dated", "source": "https://github.com/o/r/blob/abc123/results.csv",
             "notes": "Paper arXiv:2411.00136."}
    same = {**dated, "id": "b-same-revision", "source": "https://github.com/o/r/blob/abc123/Plots/fig.csv",
            "notes": "Same paper as above."}
    other = {**same, "id": "c-other-commit", "source": "https://github.com/o/r/blob/def456/Plots/fig.csv"}
    path = tmp_path / "dated.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in (same, dated, other)), encoding="utf-8")
    rows = {r.id: r for r in read_scenarios(path).scenarios}
    assert rows["a-dated"].published == rows["b-same-revision"].published == date(2024, 11, 1)
    assert rows["b-same-revision"].source_revision == "github.com/o/r@abc123"
    assert rows["c-other-commit"].published is None
    # A line read alone has only its own notes to go by.
    assert parse_scenario_line(json.dumps(same), 1).published is None


def test_an_infinite_poisson_rate_is_a_bad_line_that_says_to_write_a_burst() -> None:
    # vLLM's benchmark prints "request rate inf"; json reads 1e999 (or Infinity) as an infinite float.
    for rate in ("1e999", "Infinity"):
        line = _mutated(_set("load", {"kind": "poisson", "rate": 0.5, "num_prompts": 100}))
        error = parse_scenario_line(line.replace('"rate": 0.5', f'"rate": {rate}'), 3)
        assert isinstance(error, ScenarioError), error
        assert error.field is not None and error.field.endswith("rate")
        assert "burst" in error.message


def test_json_nested_too_deeply_is_a_bad_line() -> None:
    error = parse_scenario_line("[" * 200_000 + "]" * 200_000, 7)
    assert isinstance(error, ScenarioError)
    assert error.line == 7 and "JSON" in error.message


@pytest.mark.parametrize("metric", ["output_tps_total", "tpot_ms_mean", "e2e_ms_mean"])
def test_includes_prefill_on_a_metric_other_than_a_decode_speed_is_a_bad_line(metric: str) -> None:
    """The format states `includes_prefill` for decode_tps_single only (null elsewhere); a TPOT or throughput line
    that said it included the prefill was predicted as the metric's own definition, the flag dropped."""
    def mutate(row: dict[str, Any]) -> None:
        row.update(metric=metric, unit=METRIC_UNITS[metric], includes_prefill=True)

    error = parse_scenario_line(_mutated(mutate), 5)
    assert isinstance(error, ScenarioError), error
    assert error.field == "includes_prefill"
    assert "decode_tps_single only" in error.message
    assert isinstance(parse_scenario_line(_mutated(lambda row: row.update(includes_prefill=True)), 5), Scenario)
