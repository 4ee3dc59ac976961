"""The model's accuracy on the published measurements never falls more than 3 points below docs/accuracy.md.

docs/accuracy.md holds one table per published file between markers (`TABLES`: `<!-- accuracy-table:begin -->`
for scenarios.jsonl, and so on), written by `python scripts/readme_tables.py`, which also writes each file's
overall row into the README's summary (`<!-- accuracy-summary:begin -->`); the summary must agree with the tables.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from inferplan.planner.calibration.accuracy import AccuracyReport, score
from inferplan.planner.calibration.predict import predict_scenarios
from inferplan.planner.calibration.scenarios import read_scenarios

REPO = Path(__file__).resolve().parents[3]
DOC = REPO / "docs" / "accuracy.md"  # the tables the README's accuracy summary links to
README = REPO / "README.md"
SLACK = 0.03
SHARED = Path(__file__).resolve().parents[4] / "shared" / "accuracy"
TABLES = {"scenarios.jsonl": "accuracy-table", "latency-under-load.jsonl": "accuracy-table-load",
          "offline-and-online.jsonl": "accuracy-table-offline-online",
          "large-models-under-load.jsonl": "accuracy-table-large"}


def doc_table(marker: str) -> str:
    text = DOC.read_text(encoding="utf-8")
    return text.split(f"<!-- {marker}:begin -->")[1].split(f"<!-- {marker}:end -->")[0]


def doc_figures(marker: str = "accuracy-table") -> dict[str, float]:
    figures = {}
    for match in re.finditer(r"^\| (\w+) \| \d+ \| ([\d.]+)% \|", doc_table(marker), flags=re.MULTILINE):
        figures[match.group(1)] = float(match.group(2)) / 100
    return figures


def test_readme_states_a_figure_for_every_target_metric() -> None:
    figures = doc_figures()
    for metric in ("kv_cache_tokens", "max_concurrency", "weights_gib", "kv_cache_gib", "decode_tps_single",
                   "output_tps_total", "ttft_ms_p99", "tpot_ms_p99", "e2e_ms_mean", "overall"):
        assert metric in figures
    under_load = doc_figures("accuracy-table-load")
    for metric in ("ttft_ms_mean", "ttft_ms_p50", "ttft_ms_p99", "tpot_ms_p50", "output_tps_total", "overall"):
        assert metric in under_load
    for marker in ("accuracy-table-offline-online", "accuracy-table-large"):
        figures = doc_figures(marker)
        for metric in ("output_tps_total", "ttft_ms_p50", "overall"):
            assert metric in figures, (marker, metric)


_reports: dict[str, AccuracyReport] = {}


def report_of(name: str) -> AccuracyReport:
    path = SHARED / name
    if not path.is_file():
        pytest.skip(f"published scenarios not found at {path}")
    if name not in _reports:
        parsed = read_scenarios(path)
        assert not parsed.errors
        _reports[name] = score(parsed.scenarios, predict_scenarios(parsed.scenarios))
    return _reports[name]


CASES = [(name, metric) for name, marker in TABLES.items() for metric in sorted(doc_figures(marker))]


@pytest.mark.parametrize(("name", "metric"), CASES)
def test_median_error_stays_within_three_points_of_readme(name: str, metric: str) -> None:
    stated = doc_figures(TABLES[name])[metric]
    report = report_of(name)
    got = report.overall if metric == "overall" else report.metrics[metric]
    assert got.median_ape is not None
    assert got.median_ape <= stated + SLACK, f"{name} {metric}: MdAPE {got.median_ape:.3f} vs the table {stated:.3f}"


@pytest.mark.parametrize("name", sorted(TABLES))
def test_overall_share_within_25_percent_stays_near_readme(name: str) -> None:
    table = doc_table(TABLES[name])
    stated = float(re.search(r"^\| overall \| \d+ \| [\d.]+% \| [\d.]+% \| ([\d.]+)% \|", table, re.M).group(1)) / 100
    assert report_of(name).overall.within25 >= stated - SLACK


def test_readme_summary_agrees_with_the_tables() -> None:
    summary = README.read_text(encoding="utf-8")
    summary = summary.split("<!-- accuracy-summary:begin -->")[1].split("<!-- accuracy-summary:end -->")[0]
    for name, marker in TABLES.items():
        overall = re.search(r"^\| overall \| (\d+) \| ([\d.]+%) \| [\d.]+% \| ([\d.]+%) \|", doc_table(marker), re.M)
        rows, median, within = overall.groups()
        assert f"| {name} | {rows} | {median} | {within} |" in summary, name
    loso = doc_table("loso-table")
    held_out = re.search(r"Median over the (\d+) sources ([\d.]+%), worst ([\d.]+%) \((\w+)", loso)
    sources, median, worst, source = held_out.groups()
    rows = sum(int(m) for m in re.findall(r"^\| [\w.-]+ \| (\d+) \|", loso, flags=re.M))
    row = f"| held out: leave one source out ({sources} sources) | {rows} | median {median}, worst {worst} ({source}) |"
    assert row in summary


@pytest.mark.parametrize("name", sorted(TABLES))
def test_almost_every_non_suspect_row_is_scored(name: str) -> None:
    report = report_of(name)
    skipped = sum(s.skipped for s in report.metrics.values())
    scored = report.overall.scored
    assert scored / (scored + skipped) >= 0.95
