"""`inferplan report`'s page opened in a real headless Chromium: it renders, each frontier chart holds one
point per candidate shown, and opening it raises no error and fetches nothing but the file itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inferplan.cli import main
from inferplan.planner.results import PlanResult

from .conftest import Page

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "plans" / "chat-assistant-8b.yaml"
INFEASIBLE = REPO / "examples" / "platform" / "infeasible-ask.yaml"

BOXES = """JSON.stringify([...document.querySelectorAll('svg.chart')].map(s => {
  const r = s.getBoundingClientRect(); return [s.dataset.metric, r.width, r.height]; }))"""
POINTS = """JSON.stringify([...document.querySelectorAll('svg.frontier')].map(s => [s.dataset.metric,
  [...s.querySelectorAll('circle.point')].map(c => {
    const r = c.getBoundingClientRect(); return [c.dataset.candidate, r.width > 0 && r.height > 0]; })]))"""


def _report(plan: Path, out: Path, capsys: pytest.CaptureFixture[str]) -> PlanResult:
    """Write the report of `plan` to `out` as a user would, and return the plan's answer (same options)."""
    assert main(["report", str(plan), "-o", str(out), "--requests", "2000"]) == 0
    assert main(["plan", str(plan), "-o", "json"]) == 0
    return PlanResult.model_validate(json.loads(capsys.readouterr().out))


def _assert_clean(page: Page, url: str) -> None:
    assert page.problems() == []
    assert page.requests() == [url]  # the file itself, nothing else


def test_the_report_renders_with_one_point_per_candidate(browser: Page, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report.html"
    result = _report(EXAMPLE, out, capsys)
    assert result.recommendation is not None and result.alternatives
    browser.open(out.as_uri())

    assert browser.evaluate("document.title") == "inferplan report: chat-assistant-8b.yaml"
    boxes = json.loads(browser.evaluate(BOXES))
    assert [metric for metric, _, _ in boxes] == ["ttft", "tpot", "ttft", "tpot"]  # frontier, then distributions
    assert all(width > 100 and height > 100 for _, width, height in boxes), boxes
    expected = ["R", *map(str, range(1, len(result.alternatives) + 1))]
    for metric, points in json.loads(browser.evaluate(POINTS)):
        assert [key for key, _ in points] == expected, metric
        assert all(visible for _, visible in points), metric
    assert browser.evaluate("document.querySelectorAll('svg.frontier circle.point.recommendation').length") == 2
    rows = browser.evaluate("document.querySelectorAll('table.candidates tbody tr:not(.note-row)').length")
    assert rows == len(expected)
    _assert_clean(browser, out.as_uri())


def test_an_infeasible_plan_renders_its_reasons(browser: Page, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "infeasible.html"
    result = _report(INFEASIBLE, out, capsys)
    assert result.recommendation is None and result.infeasible
    browser.open(out.as_uri())

    assert browser.evaluate("document.querySelectorAll('circle.point').length") == 0
    assert browser.evaluate("[...document.querySelectorAll('svg.frontier text.empty')].map(t => t.textContent)") == \
        ["No feasible deployment: nothing to plot"] * 2
    shown = browser.evaluate("document.querySelector('#infeasible').innerText")
    assert all(i.reason in shown for i in result.infeasible)
    assert browser.evaluate("document.querySelector('#suggestions').getBoundingClientRect().height") > 0
    _assert_clean(browser, out.as_uri())


def test_the_harness_sees_errors_and_requests(browser: Page, tmp_path: Path) -> None:
    """The checks above would catch a page that fetches or fails: this one does both."""
    bad = tmp_path / "bad.html"
    bad.write_text('<!DOCTYPE html><title>bad</title><img src="http://127.0.0.1:9/x.png">'
                   '<script>console.error("boom"); undefinedFunction();</script>')
    browser.open(bad.as_uri())
    problems = browser.problems()
    assert any("boom" in p for p in problems) and any(p.startswith("exception") for p in problems)
    assert "http://127.0.0.1:9/x.png" in browser.requests()
