"""The model's accuracy on the published measurements never falls more than 3 points below the README."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from inferplan.planner.accuracy import score
from inferplan.planner.predict import predict_scenarios
from inferplan.planner.scenarios import read_scenarios

README = Path(__file__).resolve().parents[1] / "README.md"
SLACK = 0.03


def readme_figures() -> dict[str, float]:
    text = README.read_text(encoding="utf-8")
    table = text.split("<!-- accuracy-table:begin -->")[1].split("<!-- accuracy-table:end -->")[0]
    figures = {}
    for match in re.finditer(r"^\| (\w+) \| \d+ \| ([\d.]+)% \|", table, flags=re.MULTILINE):
        figures[match.group(1)] = float(match.group(2)) / 100
    return figures


def test_readme_states_a_figure_for_every_target_metric() -> None:
    figures = readme_figures()
    for metric in ("kv_cache_tokens", "max_concurrency", "weights_gib", "kv_cache_gib", "decode_tps_single",
                   "output_tps_total", "ttft_ms_p99", "tpot_ms_p99", "e2e_ms_mean", "overall"):
        assert metric in figures


@pytest.fixture(scope="module")
def report(published_scenarios: Path):
    parsed = read_scenarios(published_scenarios)
    assert not parsed.errors
    return score(parsed.scenarios, predict_scenarios(parsed.scenarios))


@pytest.mark.parametrize("metric", sorted(readme_figures()))
def test_median_error_stays_within_three_points_of_readme(report, metric: str) -> None:
    stated = readme_figures()[metric]
    got = report.overall if metric == "overall" else report.metrics[metric]
    assert got.median_ape is not None
    assert got.median_ape <= stated + SLACK, f"{metric}: MdAPE {got.median_ape:.3f} vs README {stated:.3f}"


def test_overall_share_within_25_percent_stays_near_readme(report) -> None:
    text = README.read_text(encoding="utf-8")
    stated = float(re.search(r"^\| overall \| \d+ \| [\d.]+% \| [\d.]+% \| ([\d.]+)% \|", text, re.M).group(1)) / 100
    assert report.overall.within25 >= stated - SLACK


def test_almost_every_non_suspect_row_is_scored(report) -> None:
    skipped = sum(s.skipped for s in report.metrics.values())
    scored = report.overall.scored
    assert scored / (scored + skipped) >= 0.95
