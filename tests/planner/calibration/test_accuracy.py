"""Accuracy scoring: MAPE, median APE and share within 25% per metric, with suspect and skipped rows apart."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from inferplan.planner.calibration.accuracy import AccuracyReport, absolute_percentage_error, format_report, score
from inferplan.planner.calibration.predict import Prediction, predict_scenarios
from inferplan.planner.calibration.scenarios import Scenario, parse_scenario_line, read_scenarios
from inferplan.planner.model.factors import load_factors

PUBLISHED = Path(__file__).resolve().parents[4] / "shared" / "accuracy" / "scenarios.jsonl"
METRIC_KEYS = {"scored", "skipped", "mape", "medianApe", "within25", "intervalCoverage"}

DECODE = 2  # example line: llama.cpp decode_tps_single
E2E = 3     # example line: TensorRT-LLM static batch e2e_ms_mean


def _example(index: int) -> dict[str, Any]:
    text = resources.files("inferplan.planner").joinpath("data/example-scenarios.jsonl").read_text(
        encoding="utf-8"
    )
    return json.loads([line for line in text.splitlines() if line.strip()][index])


def _row(index: int, rid: str, value: float, *, suspect: bool = False) -> Scenario:
    data = _example(index)
    data.update(id=rid, value=value, suspect=suspect)
    parsed = parse_scenario_line(json.dumps(data), 1)
    assert isinstance(parsed, Scenario), parsed
    return parsed


def _pred(row: Scenario, predicted: float | None, skipped: str | None = None) -> Prediction:
    return Prediction(row.id, row.metric, row.value, predicted, skipped)


def _case() -> tuple[list[Scenario], list[Prediction]]:
    """Four decode rows and two e2e rows with hand-chosen errors.

    decode APEs: 0.10, 0.25 (exactly on the boundary), 1.00, 0.00
    e2e APEs:    0.50, 0.25
    """
    pairs = [
        (_row(DECODE, "d1", 100.0), 110.0),
        (_row(DECODE, "d2", 200.0), 150.0),
        (_row(DECODE, "d3", 50.0), 100.0),
        (_row(DECODE, "d4", 80.0), 80.0),
        (_row(E2E, "e1", 1000.0), 1500.0),
        (_row(E2E, "e2", 400.0), 300.0),
    ]
    return [r for r, _ in pairs], [_pred(r, p) for r, p in pairs]


def test_per_metric_figures_match_hand_computation() -> None:
    rows, preds = _case()
    report = score(rows, preds)
    decode = report.metrics["decode_tps_single"]
    assert decode.scored == 4
    assert decode.skipped == 0
    assert decode.mape == pytest.approx((0.10 + 0.25 + 1.00 + 0.00) / 4)   # 0.3375
    assert decode.median_ape == pytest.approx((0.10 + 0.25) / 2)           # 0.175
    assert decode.within25 == pytest.approx(3 / 4)                          # 0.25 counts as within
    e2e = report.metrics["e2e_ms_mean"]
    assert e2e.scored == 2
    assert e2e.mape == pytest.approx(0.375)
    assert e2e.median_ape == pytest.approx(0.375)
    assert e2e.within25 == pytest.approx(0.5)


def test_overall_pools_every_scored_row() -> None:
    rows, preds = _case()
    overall = score(rows, preds).overall
    assert overall.scored == 6
    assert overall.skipped == 0
    assert overall.mape == pytest.approx(2.1 / 6, abs=1e-4)
    assert overall.median_ape == pytest.approx(0.25)
    assert overall.within25 == pytest.approx(4 / 6, abs=1e-4)


def test_ape_is_a_fraction_and_symmetric_in_sign() -> None:
    assert absolute_percentage_error(150.0, 100.0) == pytest.approx(0.5)
    assert absolute_percentage_error(50.0, 100.0) == pytest.approx(0.5)
    assert absolute_percentage_error(0.0, 0.0) == 0.0


def test_suspect_rows_are_reported_apart_and_leave_headline_figures_unchanged() -> None:
    rows, preds = _case()
    baseline = score(rows, preds)
    bad = _row(DECODE, "s1", 10.0, suspect=True)
    bad_e2e = _row(E2E, "s2", 10.0, suspect=True)
    report = score([*rows, bad, bad_e2e], [*preds, _pred(bad, 100.0), _pred(bad_e2e, 15.0)])
    assert report.metrics == baseline.metrics
    assert report.overall == baseline.overall
    assert set(report.suspect) == {"decode_tps_single", "e2e_ms_mean"}
    assert report.suspect["decode_tps_single"].scored == 1
    assert report.suspect["decode_tps_single"].mape == pytest.approx(9.0)
    assert report.suspect["e2e_ms_mean"].mape == pytest.approx(0.5)
    assert all(rid not in ("s1", "s2") for rid, *_ in report.worst)


def test_metric_with_only_suspect_rows_has_no_headline_entry() -> None:
    bad = _row(E2E, "s1", 10.0, suspect=True)
    report = score([bad], [_pred(bad, 12.0)])
    assert report.metrics == {}
    assert report.overall.scored == 0
    assert report.suspect["e2e_ms_mean"].scored == 1


def test_unpredictable_suspect_row_does_not_touch_headline_counts() -> None:
    rows, preds = _case()
    bad = _row(E2E, "s1", 10.0, suspect=True)
    report = score([*rows, bad], [*preds, _pred(bad, None, "GPU not stated")])
    assert report.metrics["e2e_ms_mean"].skipped == 0
    assert report.overall.skipped == 0


def test_skipped_rows_are_counted_per_metric_and_by_reason() -> None:
    rows, preds = _case()
    s1, s2, s3, s4 = (_row(DECODE, "k1", 1.0), _row(DECODE, "k2", 1.0), _row(E2E, "k3", 1.0),
                      _row(E2E, "k4", 1.0))
    report = score(
        [*rows, s1, s2, s3, s4],
        [*preds, _pred(s1, None, "GPU not stated"), _pred(s2, None, "GPU not stated"),
         _pred(s3, None, "model not in the catalog: x"), _pred(s4, None, None)],
    )
    assert report.metrics["decode_tps_single"].skipped == 2
    assert report.metrics["decode_tps_single"].scored == 4
    assert report.metrics["e2e_ms_mean"].skipped == 2
    assert report.overall.skipped == 4
    assert report.overall.scored == 6
    assert report.skipped_reasons == {"GPU not stated": 2, "model not in the catalog: x": 1, "not predicted": 1}
    # Skipped rows do not change the error figures.
    assert report.overall.mape == score(rows, preds).overall.mape


def test_metric_with_only_skipped_rows_has_null_figures() -> None:
    row = _row(E2E, "k1", 5.0)
    report = score([row], [_pred(row, None, "sharding not stated")])
    entry = report.metrics["e2e_ms_mean"]
    assert (entry.scored, entry.skipped, entry.mape, entry.median_ape, entry.within25) == (0, 1, None, None, None)


def test_empty_input_scores_nothing() -> None:
    report = score([], [])
    assert report.metrics == {}
    assert report.overall.scored == 0
    assert report.overall.mape is None


def test_predictions_must_match_scenarios_one_to_one() -> None:
    rows, preds = _case()
    with pytest.raises(ValueError):
        score(rows, preds[:-1])


def test_every_row_outside_25_percent_is_listed_with_its_caveat() -> None:
    rows, preds = _case()
    report = score(rows, preds)
    ids = [o.id for o in report.outliers]
    assert ids[0] == "d3"
    assert "d2" not in ids  # exactly -25% is within
    assert all(abs(o.error) > 0.25 for o in report.outliers)
    assert [abs(o.error) for o in report.outliers] == sorted((abs(o.error) for o in report.outliers), reverse=True)
    first = report.outliers[0]
    assert (first.measured, first.predicted, first.error) == (50.0, 100.0, pytest.approx(1.0))
    assert "[normalization]" not in first.caveat
    assert report.worst[0][0] == "d3"


def test_rows_of_an_unmodelled_architecture_are_scored_apart() -> None:
    """DeepSeek-V3 (multi-head latent attention, scored apart and never fitted on): its rows get their own
    figures under the reason and never enter the headline ones, nor the outliers; a suspect one stays suspect."""
    rows, preds = _case()
    mla = [_row(DECODE, f"m{i}", 100.0).model_copy(update={"model": "deepseek-ai/DeepSeek-V3"}) for i in range(3)]
    suspect = _row(DECODE, "m9", 100.0, suspect=True).model_copy(update={"model": "deepseek-ai/DeepSeek-V3"})
    report = score([*rows, *mla, suspect], [*preds, _pred(mla[0], 150.0), _pred(mla[1], 100.0),
                                            _pred(mla[2], None, "no KV cache"), _pred(suspect, 300.0)])
    assert report.metrics == score(rows, preds).metrics
    assert all(not o.id.startswith("m") for o in report.outliers)
    (reason, apart), = report.unmodelled.items()
    assert "MLA" in reason
    assert apart.scored == 2 and apart.mape == pytest.approx((0.5 + 0.0) / 2) and apart.within25 == pytest.approx(0.5)
    assert report.suspect["decode_tps_single"].mape == pytest.approx(2.0)
    assert reason in format_report(report)


def test_zero_measurement_does_not_crash_scoring() -> None:
    row = _row(DECODE, "z1", 0.0)
    report = score([row], [_pred(row, 0.0)])
    assert report.metrics["decode_tps_single"].mape == 0.0


def test_to_json_has_documented_keys_and_fractions() -> None:
    rows, preds = _case()
    bad = _row(DECODE, "s1", 10.0, suspect=True)
    skip = _row(E2E, "k1", 1.0)
    data = score([*rows, bad, skip], [*preds, _pred(bad, 20.0), _pred(skip, None, "GPU not stated")]).to_json()
    assert set(data) == {"metrics", "overall", "skippedReasons", "suspect", "outliers", "unmodelled", "sources"}
    assert data["unmodelled"] == {}  # no row of an unmodelled architecture here
    assert set(data["sources"]) == {r.source_name for r in rows}  # the suspect row's source has these too
    for key in ("scored", "skipped"):  # every non-suspect row in exactly one source
        assert sum(s[key] for s in data["sources"].values()) == data["overall"][key]
    assert set(data["metrics"]) == {"decode_tps_single", "e2e_ms_mean"}
    for entry in [*data["metrics"].values(), data["overall"], *data["suspect"].values()]:
        assert set(entry) == METRIC_KEYS
    assert data["metrics"]["decode_tps_single"]["mape"] == pytest.approx(0.3375)
    assert data["metrics"]["decode_tps_single"]["medianApe"] == pytest.approx(0.175)
    assert data["metrics"]["decode_tps_single"]["within25"] == pytest.approx(0.75)
    assert data["metrics"]["e2e_ms_mean"]["skipped"] == 1
    assert data["skippedReasons"] == {"GPU not stated": 1}
    assert data["suspect"]["decode_tps_single"]["mape"] == pytest.approx(1.0)
    assert json.loads(json.dumps(data)) == data


def _from(row: Scenario, source: str) -> Scenario:
    return row.model_copy(update={"source": source})


def test_scores_per_source_over_all_their_metrics_without_suspect_or_unmodelled_rows() -> None:
    rows, preds = _case()  # APEs: decode 0.10, 0.25, 1.00, 0.00; e2e 0.50, 0.25
    lab_a, lab_b = "https://github.com/lab-a/bench/blob/abc/results.md", "https://example.org/lab-b.html"
    rows = [_from(r, lab_a if i in (0, 1, 4) else lab_b) for i, r in enumerate(rows)]
    suspect = _from(_row(DECODE, "s1", 10.0, suspect=True), lab_a)
    skip = _from(_row(E2E, "k1", 1.0), lab_b)
    report = score([*rows, suspect, skip], [*preds, _pred(suspect, 100.0), _pred(skip, None, "GPU not stated")])
    assert set(report.sources) == {"lab-a", "example.org"}
    a, b = report.sources["lab-a"], report.sources["example.org"]
    assert (a.scored, a.skipped) == (3, 0) and a.median_ape == pytest.approx(0.25)  # 0.10, 0.25, 0.50
    assert a.mape == pytest.approx((0.10 + 0.25 + 0.50) / 3, abs=1e-4) and a.within25 == pytest.approx(2 / 3, abs=1e-4)
    assert (b.scored, b.skipped) == (3, 1) and b.median_ape == pytest.approx(0.25)  # 1.00, 0.00, 0.25
    assert b.within25 == pytest.approx(2 / 3, abs=1e-4)  # the suspect row's 9x error is in neither
    text = format_report(report)
    assert "per source" in text
    lines = text.splitlines()
    first = lines.index(next(line for line in lines if line.startswith("per source")))
    assert lines[first + 1].split()[:2] == ["source", "scored"]  # its own header
    assert [line.split()[0] for line in lines[first + 2:first + 4]] == ["example.org", "lab-a"]  # ties by name
    one = score(rows[:2], preds[:2])
    assert "per source" not in format_report(one)  # one source: its figures are the overall ones
    assert score(rows, preds).to_json()["sources"]["lab-a"]["medianApe"] == pytest.approx(0.25)


def test_interval_coverage_counts_measured_values_inside_the_80_percent_interval() -> None:
    rows = [_row(DECODE, "d1", 100.0), _row(DECODE, "d2", 100.0), _row(E2E, "e1", 100.0)]
    preds = [_pred(rows[0], 100.0), _pred(rows[1], 1.0), _pred(rows[2], 100.0)]  # d2: 100x off
    assert score(rows, preds).overall.interval_coverage is None  # without the factors that predicted them
    report = score(rows, preds, load_factors())
    assert report.metrics["decode_tps_single"].interval_coverage == pytest.approx(0.5)
    assert report.metrics["e2e_ms_mean"].interval_coverage == pytest.approx(1.0)
    assert report.overall.interval_coverage == pytest.approx(2 / 3, abs=1e-4)
    assert "in 80%" in format_report(report).splitlines()[0]


def test_format_report_shows_percentages_and_sections() -> None:
    rows, preds = _case()
    bad = _row(DECODE, "s1", 10.0, suspect=True)
    skip = _row(E2E, "k1", 1.0)
    text = format_report(score([*rows, bad, skip], [*preds, _pred(bad, 20.0), _pred(skip, None, "GPU not stated")]))
    assert "decode_tps_single" in text
    assert "33.8%" in text  # MAPE 0.3375 as a percent
    assert "overall" in text
    assert "suspect" in text
    assert "GPU not stated" in text
    assert "rows outside +-25%" in text


@pytest.mark.skipif(not PUBLISHED.is_file(), reason=f"published scenario file not found at {PUBLISHED}")
def test_published_file_every_row_is_scored_skipped_or_suspect() -> None:
    rows = list(read_scenarios(PUBLISHED).scenarios)
    report: AccuracyReport = score(rows, predict_scenarios(rows))
    n_suspect = sum(r.suspect for r in rows)
    assert report.overall.scored + report.overall.skipped == len(rows) - n_suspect
    assert sum(s.scored for s in report.suspect.values()) <= n_suspect
    assert report.overall.scored > 0.9 * len(rows)
    assert sum(report.skipped_reasons.values()) == report.overall.skipped


def test_rows_apart_that_are_not_predicted_are_counted_where_they_belong() -> None:
    # A suspect row or a row of an unmodelled kind without a prediction was counted nowhere: not scored, not skipped.
    bad = _row(E2E, "s1", 10.0, suspect=True)
    mla = parse_scenario_line(json.dumps(_example(E2E) | {"id": "r1", "model": "deepseek-ai/DeepSeek-R1"}), 1)
    assert isinstance(mla, Scenario)
    report = score([bad, mla], [_pred(bad, None, "GPU not stated"), _pred(mla, None, "weights do not fit")])
    assert report.suspect["e2e_ms_mean"].scored == 0 and report.suspect["e2e_ms_mean"].skipped == 1
    (apart,) = report.unmodelled.values()
    assert apart.scored == 0 and apart.skipped == 1
    assert "1 more not predicted" in format_report(report)


def test_a_measured_value_of_zero_is_skipped_with_its_reason_and_the_json_stays_valid() -> None:
    rows, preds = _case()
    zero = _row(E2E, "z1", 0.0)
    report = score([*rows, zero], [*preds, _pred(zero, 12.0)])
    assert report.metrics["e2e_ms_mean"].skipped == 1
    assert report.skipped_reasons == {"measured value 0 against a prediction above 0: no relative error to score": 1}
    text = json.dumps(report.to_json(), allow_nan=False)  # no Infinity anywhere
    assert json.loads(text)["overall"]["scored"] == 6
