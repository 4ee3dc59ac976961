"""Prediction intervals (inferplan/planner/model/intervals.py) and their derivation (scripts/derive_intervals.py)."""

from __future__ import annotations

import itertools
import json
import math
import runpy
from importlib import resources
from pathlib import Path

import pytest

from inferplan.planner.model.intervals import (
    CONFIDENCES,
    LEVELS,
    METRIC_CLASSES,
    Evidence,
    IntervalTable,
    Residual,
    conformal_bounds,
    derive,
    interval,
    load_intervals,
    model_kind,
)
from inferplan.planner.search.annotate import candidate_intervals
from inferplan.tables import interval_text
from tests.support.plans import EXAMPLES, planned

REPO = Path(__file__).resolve().parents[3]
EXAMPLE_ROWS = Path(str(resources.files("inferplan.planner").joinpath("data/example-scenarios.jsonl")))
ALL_METRICS = [m for metrics in METRIC_CLASSES.values() for m in metrics]


def _evidence(metric: str = "tpot_ms_p99", measured: bool = True, **kw: str) -> Evidence:
    values = {"kind": "dense", "engine_line": "vllm", "family": "hopper", "load": "poisson"} | kw
    return Evidence(metric, values["kind"], values["engine_line"], values["family"], values["load"], measured)


def test_conformal_bounds_widen_with_confidence() -> None:
    sample = [math.log(1 + 0.05 * k) - 0.3 for k in range(40)]
    bounds = [conformal_bounds(sample, c) for c in CONFIDENCES]
    for (lo0, hi0), (lo1, hi1) in itertools.pairwise(bounds):
        assert lo1 <= lo0 <= hi0 <= hi1
    assert bounds[-1] == (min(sample), max(sample))  # 40 rows cannot place a 99% bound inside the sample


def test_derive_falls_back_to_coarser_groups() -> None:
    rows = [Residual(_evidence(family="hopper"), "a", 0.1 * (k % 5 - 2)) for k in range(25)]
    rows += [Residual(_evidence(family="ampere"), "b", 0.5) for _ in range(3)]
    data = derive(rows, min_rows=20)
    assert "tpot_ms_p99|dense|vllm|hopper" in data["measured"]
    assert "tpot_ms_p99|dense|vllm|ampere" not in data["measured"]  # 3 rows: read from the engine line's group
    table = IntervalTable.from_json(data)
    assert table.log_bounds(_evidence(family="ampere")) == table.log_bounds(_evidence(family="ada"))
    assert derive(rows, min_rows=20) == data  # deterministic


@pytest.mark.parametrize("metric", ["ttft_ms_p50", "ttft_ms_p99", "tpot_ms_p50", "tpot_ms_p99", "e2e_ms_mean"])
@pytest.mark.parametrize("measured", [True, False])
def test_one_sided_bounds_rise_with_confidence_and_invert(metric: str, measured: bool) -> None:
    table, evidence = load_intervals(), _evidence(metric, measured)
    uppers = [table.upper_log_bound(evidence, c) for c in CONFIDENCES]
    assert all(u >= 0 for u in uppers) and uppers == sorted(uppers)
    # The one-sided bound at c is the central interval's upper end at 2c - 1: never above the same c's central one.
    assert all(u <= table.log_bounds(evidence, c)[1] + 1e-12 for u, c in zip(uppers, CONFIDENCES, strict=True))
    for c in (0.55, 0.7, 0.85, 0.93):
        bound = table.upper_log_bound(evidence, c)
        holds = table.confidence_within(evidence, bound + 1e-9)
        assert c - 0.011 <= holds  # the target at the bound holds with (about) c
        assert table.upper_log_bound(evidence, max(holds, CONFIDENCES[0])) <= bound + 1e-6
    assert table.confidence_within(evidence, -0.01) == 0.0  # below the prediction: not even the median
    assert table.confidence_within(evidence, 50.0) == CONFIDENCES[-1]


def test_a_one_sided_bound_reads_its_finest_group_alone_and_an_interval_joins_its_parent() -> None:
    # Held out, two groups joined made the one-sided bounds too wide (87.7% of the latency rows within the 80% bound,
    # 82.3% with the finest alone); the central intervals keep the join (BOUND_GROUPS_JOINED, GROUPS_JOINED).
    close = [Residual(_evidence("e2e_ms_mean", family="hopper"), "a", 0.01 * (k % 5)) for k in range(25)]
    far = [Residual(_evidence("e2e_ms_mean", family="ampere"), "b", 0.2 * (k % 5)) for k in range(25)]
    table = IntervalTable.from_json(derive(close + far, min_rows=20))
    hopper = _evidence("e2e_ms_mean", family="hopper", load="burst")  # no group of its load: the pair's, the line's
    assert table.upper_log_bound(hopper, 0.95) <= 0.04 + 1e-9  # the hopper rows' own spread
    assert table.log_bounds(hopper, 0.9)[1] >= 0.6  # joined with the engine line's rows, ampere's among them
    assert table.confidence_within(hopper, 0.05) == CONFIDENCES[-1]


def test_a_confidence_outside_the_range_is_refused() -> None:
    for bad in (0.3, 0.995):
        with pytest.raises(ValueError, match="outside"):
            load_intervals().upper_log_bound(_evidence(), bad)


@pytest.mark.parametrize("metric", ALL_METRICS)
def test_shipped_intervals_widen_with_confidence_and_contain_the_prediction(metric: str) -> None:
    widths = []
    for confidence in (0.5, 0.65, 0.8, 0.9, 0.99):
        low, high = interval(metric, 100.0, engine_line="vllm", family="hopper", measured=True, load="concurrency",
                             confidence=confidence)
        assert low <= 100.0 <= high
        widths.append((low, high))
    for (lo0, hi0), (lo1, hi1) in itertools.pairwise(widths):
        assert lo1 <= lo0 and hi0 <= hi1
    assert widths[-1] != widths[0]


@pytest.mark.parametrize("metric", ALL_METRICS)
@pytest.mark.parametrize("pair", [("vllm", "hopper"), ("sglang", "cdna3"), ("tensorrt-llm", "ampere")])
def test_extrapolated_pair_never_narrower_than_a_measured_one(metric: str, pair: tuple[str, str]) -> None:
    table = load_intervals()
    line, family = pair
    for kind in ("dense", "moe", "mla"):
        measured = table.log_bounds(_evidence(metric, True, kind=kind, engine_line=line, family=family))
        extrapolated = table.log_bounds(_evidence(metric, False, kind=kind, engine_line=line, family=family))
        assert extrapolated[0] <= measured[0] and measured[1] <= extrapolated[1]


def test_confidence_outside_the_stored_levels_is_an_error() -> None:
    with pytest.raises(ValueError, match="confidence"):
        load_intervals().log_bounds(_evidence(), 0.999)


def _fixture_predictions(tmp_path: Path) -> Path:
    """Held-out predictions of the example rows: each predicted off by a row-dependent ratio."""
    lines = []
    for k, raw in enumerate(EXAMPLE_ROWS.read_text().splitlines()):
        row = json.loads(raw)
        lines.append(json.dumps({"source": f"s{k % 3}", "id": row["id"], "metric": row["metric"],
                                 "measured": row["value"], "held_out": row["value"] * (0.8 + 0.07 * k),
                                 "in_sample": row["value"], "suspect": False}))
    path = tmp_path / "predictions.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_derive_script_is_deterministic_and_writes_what_derive_gives(tmp_path: Path) -> None:
    script = runpy.run_path(str(REPO / "scripts" / "derive_intervals.py"))
    predictions = _fixture_predictions(tmp_path)
    outputs = []
    for name in ("a.json", "b.json"):
        assert script["main"](["--predictions", str(predictions), "--scenarios", str(EXAMPLE_ROWS),
                               "--min-rows", "2", "--write", str(tmp_path / name), "--no-coverage"]) == 0
        outputs.append((tmp_path / name).read_bytes())
    assert outputs[0] == outputs[1]
    data = json.loads(outputs[0])
    rows = script["read_scenarios"](EXAMPLE_ROWS).scenarios
    found = script["residuals"]([json.loads(line) for line in predictions.read_text().splitlines()], rows)
    assert len(found) == len(rows)
    assert data == json.loads(json.dumps(derive(found, 2, {"sources": 3})))
    # Each fold's other sources hold one source each: no engine line is fitted, every pair is extrapolated.
    assert data["measured"] == {} and "*" in data["extrapolated"]
    table = IntervalTable.from_json(data)
    low, high = table.log_bounds(Evidence("weights_gib", "dense", "vllm", "ampere", "startup", False))
    assert low <= 0 <= high


def test_shipped_data_is_readable_and_has_a_group_for_every_row() -> None:
    data = json.loads(resources.files("inferplan.planner").joinpath("data/intervals.json").read_text())
    assert tuple(data["meta"]["levels"]) == LEVELS
    for path in ("measured", "extrapolated"):
        for key, group in data[path].items():
            assert group["n"] >= data["meta"]["minRows"], key
            assert len(group["bounds"]) == len(LEVELS)
    assert "*" in data["measured"] and "*" in data["extrapolated"]


def test_plan_states_intervals_that_bracket_its_latencies() -> None:
    request, candidate = planned(EXAMPLES[0])
    predicted = candidate.model_dump(by_alias=True, mode="json")["predicted"]
    assert predicted["confidence"] == 0.8
    for metric in ("ttftMs", "tpotMs", "e2eMs"):
        for q in ("p50", "p90", "p95", "p99"):
            low, high = predicted["intervals"][metric][q]
            assert low <= predicted[metric][q] <= high
    text = interval_text(candidate, request)
    assert text.startswith("TTFT p95 ") and "(80%: " in text and "; TPOT p" in text


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_a_plans_capacity_and_kv_bound_concurrency_carry_intervals(example: Path) -> None:
    request, candidate = planned(example)
    p, intervals = candidate.predicted, candidate.predicted.intervals
    assert intervals is not None and intervals.max_requests_per_second_per_replica is not None
    low, high = intervals.max_requests_per_second_per_replica
    assert 0 < low <= p.max_requests_per_second_per_replica <= high
    if p.max_concurrency < candidate.max_batch:  # the KV cache bounds it: the KV model's error applies
        assert intervals.max_concurrency is not None
        assert intervals.max_concurrency[0] <= p.max_concurrency <= intervals.max_concurrency[1]
    else:  # the batch cap is a setting
        assert intervals.max_concurrency is None
    assert "capacity " in interval_text(candidate, request)


def test_wider_confidence_gives_wider_plan_intervals() -> None:
    request, candidate = planned(EXAMPLES[0])
    narrow, wide = (candidate_intervals(request, candidate, c) for c in (0.5, 0.95))
    for metric in ("ttft_ms", "tpot_ms", "e2e_ms"):
        (lo0, hi0), (lo1, hi1) = getattr(narrow, metric).p95, getattr(wide, metric).p95
        assert lo1 <= lo0 and hi0 <= hi1


def test_unmodelled_kind_without_evidence_of_its_own_takes_its_class_widest_bounds_at_every_confidence() -> None:
    rows = [Residual(_evidence(metric), "a", 0.01 * (k - 12)) for k in range(25) for metric in ("tpot_ms_p99",
                                                                                             "tpot_ms_p50")]
    rows += [Residual(_evidence("ttft_ms_p50"), "b", 0.1 * (k - 12)) for k in range(25)]
    table = IntervalTable.from_json(derive(rows, min_rows=20))
    dense = table.log_bounds(_evidence("tpot_ms_p99"))
    assert dense[1] < 0.2
    widest = table.log_bounds(_evidence("ttft_ms_p50"), 0.99)
    assert widest == pytest.approx((-1.2, 1.2))
    for confidence in (0.5, 0.8, 0.99):  # nothing says how far off it is: no confidence narrows it
        assert table.log_bounds(_evidence("tpot_ms_p99", kind="mla"), confidence) == widest


def test_unmodelled_kind_rests_on_its_own_residuals_pooled_by_quantity_and_class() -> None:
    rows = [Residual(_evidence(metric), "a", 0.01 * (k - 12)) for k in range(25) for metric in ("tpot_ms_p99",
                                                                                             "tpot_ms_p50")]
    rows += [Residual(_evidence("ttft_ms_p50"), "b", 0.1 * (k - 12)) for k in range(25)]
    # One source measured the kind: a dozen lines per metric (too few for a metric's group), its TTFT ~2.7x under
    # the prediction, its TPOT ~1.35x.
    rows += [Residual(_evidence(metric, kind="mla"), "c", centre + 0.01 * (k - 6)) for k in range(12)
             for metric, centre in (("ttft_ms_p50", 1.0), ("ttft_ms_mean", 1.0), ("tpot_ms_p50", 0.3),
                                    ("tpot_ms_mean", 0.3))]
    table = IntervalTable.from_json(derive(rows, min_rows=20))
    ttft = table.log_bounds(_evidence("ttft_ms_mean", kind="mla"))
    assert ttft[0] == 0.0 and 1.0 < ttft[1] < 1.1  # its kind's bias, not the modelled rows' +-1.2
    tail = table.log_bounds(_evidence("tpot_ms_p99", kind="mla"))  # not the modelled TPOT p99 rows within the vendor
    assert tail[0] == 0.0 and 1.0 < tail[1] < 1.1
    tpot = table.log_bounds(_evidence("tpot_ms_p50", kind="mla"), 0.5)
    assert tpot[0] == 0.0 and 0.25 < tpot[1] < 1.1
    assert table.log_bounds(_evidence("tpot_ms_p50", kind="mla"), 0.99)[1] < 1.2


def test_a_tails_bounds_contain_its_medians() -> None:
    # TPOT p99 residuals that happen to fall close, and a median whose errors spread wider: the p99's bounds are
    # the union, never narrower than the p50's; the p50 keeps its own.
    rows = [Residual(_evidence("tpot_ms_p99"), "a", 0.01 * (k - 12)) for k in range(25)]
    rows += [Residual(_evidence("tpot_ms_p50"), "b", 0.1 * (k - 12)) for k in range(25)]
    table = IntervalTable.from_json(derive(rows, min_rows=20))
    tail, median = (table.log_bounds(_evidence(metric)) for metric in ("tpot_ms_p99", "tpot_ms_p50"))
    assert median[0] < -0.5 and median[1] > 0.5
    assert tail == median
    own = IntervalTable.from_json(derive(rows[:25] + [Residual(_evidence("tpot_ms_p50"), "b", 0.001 * (k - 12))
                                                       for k in range(25)], min_rows=20))
    assert -0.2 < own.log_bounds(_evidence("tpot_ms_p99"))[0] < -0.05  # a wider tail keeps its own bounds


@pytest.mark.parametrize(("model", "kind"), [
    ("deepseek-ai/DeepSeek-R1", "mla"),
    ("amd/DeepSeek-R1-0528-MXFP4-Preview", "mla"),  # a catalogued repository of DeepSeek-R1
    ("nvidia/Qwen3-235B-A22B-NVFP4", "moe"),
    ("RedHatAI/Qwen2.5-72B-Instruct-FP8-dynamic", "dense"),  # a variant name of a catalogued model
])
def test_a_model_kind_is_read_through_its_repository_names(model: str, kind: str) -> None:
    assert model_kind(model) == kind
