"""`inferplan report`: the HTML page a reviewer opens, read back with html.parser.

What a reader relies on: one chart point per candidate shown, the recommendation marked, the SLO region
shaded, the simulated distributions with their percentile, every plan string escaped, nothing fetched from
anywhere, and the same plan giving the same file.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
import yaml

from inferplan.cli import main
from inferplan.planner.request import PlanRequest, resolve_plan
from inferplan.planner.results import PlanResult
from inferplan.planner.search.plan import plan
from inferplan.planner.simulation.simulate import SimulationResult
from inferplan.planner.simulation.verification import simulate_candidate
from inferplan.planner.spec_parsing import load_plan_file
from inferplan.report import frontier_in_plane, nice_ticks, render_report, simulation_flags
from tests.support.plans import example_spec

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "plans" / "chat-assistant-8b.yaml"
INFEASIBLE = REPO / "examples" / "platform" / "infeasible-ask.yaml"
HOSTILE = "<script>alert('x')</script> \"mod\u00e8le\" & <img src=x onerror=alert(1)>"
VOID = {"meta", "br", "link", "img", "input", "hr", "source"}


# --------------------------------------------------------------------------------------------------
# A small DOM from html.parser


@dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    children: list[Node] = field(default_factory=list)
    text: str = ""

    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def all(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> list[Node]:
        """Descendants with this tag, class and attribute values, in document order."""
        found = []
        for child in self.children:
            if ((tag is None or child.tag == tag) and (cls is None or cls in child.classes())
                    and all(child.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items())):
                found.append(child)
            found += child.all(tag, cls, **attrs)
        return found

    def all_text(self) -> str:
        return self.text + "".join(child.all_text() for child in self.children)


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Node(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        assert self.stack[-1].tag == tag, f"</{tag}> closes <{self.stack[-1].tag}>"
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.stack[-1].text += data


def parse(page: str) -> Node:
    """The page as a tree; fails on an end tag that does not close the open element."""
    builder = _Builder()
    builder.feed(page)
    builder.close()
    assert builder.stack == [builder.root], "unclosed elements"
    return builder.root


# --------------------------------------------------------------------------------------------------
# Fixtures


def _resolve(path: Path) -> PlanRequest:
    return resolve_plan(load_plan_file(path), path.parent)


def _planned(path: Path) -> tuple[PlanRequest, PlanResult, SimulationResult | None]:
    request = _resolve(path)
    result = plan(request)
    simulation = None
    if result.recommendation is not None:
        simulation = simulate_candidate(request, result.recommendation, requests=2000, seed=3)
    return request, result, simulation


@pytest.fixture(scope="module")
def example() -> tuple[PlanRequest, PlanResult, SimulationResult | None]:
    return _planned(EXAMPLE)


@pytest.fixture(scope="module")
def example_page(example: tuple[PlanRequest, PlanResult, SimulationResult | None]) -> str:
    return render_report(*example, title="chat example")


def _write_plan(tmp_path: Path, change: dict) -> Path:
    data = example_spec(EXAMPLE) | change
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


# --------------------------------------------------------------------------------------------------
# The frontier charts


def test_each_frontier_chart_has_one_point_per_candidate_shown(example, example_page: str) -> None:
    _, result, _ = example
    assert result.recommendation is not None and len(result.alternatives) >= 2
    charts = parse(example_page).all("svg", "frontier")
    assert [c.attrs["data-metric"] for c in charts] == ["ttft", "tpot"]
    for chart in charts:
        points = chart.all("circle", "point")
        assert len(points) == 1 + len(result.alternatives)
        assert [p.attrs["data-candidate"] for p in points] == ["R", *map(str, range(1, len(result.alternatives) + 1))]
        assert [p.attrs["data-gpu"] for p in points] == [c.gpu_type for c in
                                                         [result.recommendation, *result.alternatives]]


def test_the_recommendation_is_marked_and_labelled(example, example_page: str) -> None:
    _, result, _ = example
    for chart in parse(example_page).all("svg", "frontier"):
        marked = chart.all("circle", "recommendation")
        assert len(marked) == 1 and marked[0].attrs["data-candidate"] == "R"
        assert marked[0].attrs["data-cost-per-hour"] == f"{result.recommendation.cost.dollars_per_hour:g}"
        assert float(marked[0].attrs["r"]) > max(float(p.attrs["r"]) for p in chart.all("circle", "alternative"))
        assert [t.text for t in chart.all("text", "point-label") if "recommendation" in t.classes()] == ["recommended"]


def test_points_sit_where_their_cost_and_latency_put_them(example, example_page: str) -> None:
    """Higher cost is higher on the chart (smaller y), higher latency further right (larger x)."""
    _, result, _ = example
    shown = [result.recommendation, *result.alternatives]
    for chart in parse(example_page).all("svg", "frontier"):
        metric = chart.attrs["data-metric"]
        points = chart.all("circle", "point")
        cost = [c.cost.dollars_per_hour for c in shown]
        latency = [getattr(c.predicted, f"{metric}_ms").p95 for c in shown]
        y = [float(p.attrs["cy"]) for p in points]
        x = [float(p.attrs["cx"]) for p in points]
        for i in range(len(shown)):
            for j in range(len(shown)):
                if cost[i] > cost[j] * 1.01:
                    assert y[i] < y[j]
                if latency[i] > latency[j] * 1.01:
                    assert x[i] > x[j]


def test_the_region_beyond_each_slo_is_shaded_and_a_budget_too(example, example_page: str, tmp_path: Path) -> None:
    for chart in parse(example_page).all("svg", "frontier"):
        assert len(chart.all("rect", "over-slo")) == 1
        assert not chart.all("rect", "over-budget")  # the example has no budget
        limit = chart.all("line", "limit")[0]
        shaded = chart.all("rect", "over-slo")[0]
        assert float(shaded.attrs["x"]) == pytest.approx(float(limit.attrs["x1"]))
        points = chart.all("circle", "point")
        assert all(float(p.attrs["cx"]) < float(shaded.attrs["x"]) for p in points)  # all meet the SLO

    request, result, simulation = _planned(_write_plan(tmp_path, {"constraints": {
        "gpuTypes": ["NVIDIA-L40S", "NVIDIA-H100-80GB-HBM3"], "budgetDollarsPerHour": "9"}}))
    page = parse(render_report(request, result, simulation, title="budget"))
    for chart in page.all("svg", "frontier"):
        band = chart.all("rect", "over-budget")
        assert len(band) == 1
        budget_y = float(band[0].attrs["y"]) + float(band[0].attrs["height"])
        assert all(float(p.attrs["cy"]) > budget_y for p in chart.all("circle", "point"))  # all under budget
    assert "over budget" in page.all("section", id="frontier")[0].all_text()


def test_axes_have_ticks_and_units(example_page: str) -> None:
    for chart in parse(example_page).all("svg", "frontier"):
        titles = [t.text for t in chart.all("text", "axis-title")]
        assert titles[0].endswith("p95 [ms]") and titles[1] == "cost [$/h]"
        ticks = [t.text for t in chart.all("text", "tick")]
        assert "0" in ticks and "$0" in ticks and len(ticks) >= 6


def _label_boxes(chart: Node) -> list[tuple[str, tuple[float, float, float, float]]]:
    """Each point label's text and the box it covers at 11px (6.5 px a character, 9 px above the baseline and 2
    below: narrower than any bold 11px digit or letter is drawn)."""
    boxes = []
    for label in chart.all("text", "point-label"):
        x, y, width = float(label.attrs["x"]), float(label.attrs["y"]), 6.5 * len(label.text)
        anchor = label.attrs.get("text-anchor", "start")
        left = x - width if anchor == "end" else x - width / 2 if anchor == "middle" else x
        boxes.append((label.text, (left, y - 9, left + width, y + 2)))
    return boxes


def test_point_labels_stay_readable_where_points_crowd(tmp_path: Path) -> None:
    """A 70B model over the whole catalog with 20 alternatives: several points sit at one cost and close
    latencies. Each label is drawn where no other label or point covers it and inside the chart, and each
    candidate is named by exactly one label (alternatives at the same spot share one: "6, 7")."""
    request, result, _ = _planned(_write_plan(tmp_path, {
        "model": {"name": "meta-llama/Llama-3.1-70B-Instruct"}, "constraints": {}, "alternatives": 20}))
    assert len(result.alternatives) >= 8
    page = render_report(request, result, None, title="crowded")
    for chart in parse(page).all("svg", "frontier"):
        width, height = (float(v) for v in chart.attrs["viewbox"].split()[2:])
        boxes = _label_boxes(chart)
        named = [key for text, _ in boxes for key in
                 (["R"] if text == "recommended" else text.split(", "))]
        assert sorted(named) == sorted(p.attrs["data-candidate"] for p in chart.all("circle", "point"))
        circles = [(float(c.attrs["cx"]), float(c.attrs["cy"]), float(c.attrs["r"]))
                   for c in chart.all("circle", "point")]
        for i, (text, (left, top, right, bottom)) in enumerate(boxes):
            assert 0 <= left and right <= width and 0 <= top and bottom <= height, (chart.attrs["data-metric"], text)
            for other, box in boxes[i + 1:]:
                assert min(right, box[2]) <= max(left, box[0]) or min(bottom, box[3]) <= max(top, box[1]), \
                    (chart.attrs["data-metric"], text, other)
            for cx, cy, r in circles:
                assert min(right, cx + r) <= max(left, cx - r) or min(bottom, cy + r) <= max(top, cy - r), \
                    (chart.attrs["data-metric"], text, cx, cy)


# --------------------------------------------------------------------------------------------------
# Simulated distributions


def test_distributions_mark_the_simulated_percentile_and_the_limit(example, example_page: str) -> None:
    request, _, simulation = example
    charts = parse(example_page).all("svg", "distribution")
    assert [c.attrs["data-metric"] for c in charts] == ["ttft", "tpot"]
    for chart, samples in zip(charts, (simulation.ttft_s, simulation.tpot_s), strict=True):
        marker = chart.all("circle", "marker")[0]
        assert marker.attrs["data-quantile"] == "p95"
        expected_ms = float(np.quantile(samples[np.isfinite(samples)], 0.95)) * 1e3
        assert float(marker.attrs["data-ms"]) == pytest.approx(expected_ms, abs=5e-4)  # written to 1 us
        assert len(chart.all("polyline", "cdf")) == 1
        assert len(chart.all("rect", "over-slo")) == 1
        limit_ms = next(s.max_s for s in request.slos if s.metric == chart.attrs["data-metric"]) * 1e3
        assert f"SLO {limit_ms:.0f}" in chart.all("text", "limit-label")[0].text


def test_no_simulation_says_so(example) -> None:
    request, result, _ = example
    page = parse(render_report(request, result, None, title="t"))
    assert not page.all("svg", "distribution")
    assert "Not simulated" in page.all("section", id="simulation")[0].all_text()


# --------------------------------------------------------------------------------------------------
# Tables and lists


def test_the_table_lists_the_recommendation_then_each_alternative_with_why(example, example_page: str) -> None:
    _, result, _ = example
    table = parse(example_page).all("table", "candidates")[0]
    rows = [r for r in table.all("tr") if "note-row" not in r.classes() and r.all("td")]
    assert [r.all("td")[0].text for r in rows] == ["rec.", *map(str, range(1, len(result.alternatives) + 1))]
    assert [r.all("td")[1].text for r in rows] == [c.gpu_type for c in [result.recommendation, *result.alternatives]]
    whys = [r.all_text() for r in table.all("tr", "note-row")]
    assert [w.split(" [")[0] for w in whys] == [c.why for c in [result.recommendation, *result.alternatives]]
    bold = rows[0].all("b")  # the SLO's percentile of each metric
    assert [b.text for b in bold][:2] == [f"{result.recommendation.predicted.ttft_ms.p95:.0f}",
                                           f"{result.recommendation.predicted.tpot_ms.p95:.1f}"]


def test_the_details_state_each_slos_confidence_by_the_held_out_errors(example, example_page: str) -> None:
    _, result, _ = example
    details = parse(example_page).all("section", id="recommendation")[0]
    terms = [t.text for t in details.all("dt")]
    said = details.all("dd")[terms.index("SLOs by held-out error")].all_text()
    for check in result.recommendation.predicted.slo_checks:
        assert f"{check.metric.upper()} {check.percentile} <= " in said
        holds = f"{check.holds_with:.2f}" if check.holds_with else "under 0.5"
        assert f"holds with {holds}" in said and f"x{check.ratio:.2f}" in said


def test_an_infeasible_plan_renders_its_reasons_and_suggestions() -> None:
    request, result, simulation = _planned(INFEASIBLE)
    assert result.recommendation is None and simulation is None
    page = render_report(request, result, simulation, title="too tight")
    tree = parse(page)
    assert not tree.all("circle", "point")
    assert [c.all("text", "empty")[0].text for c in tree.all("svg", "frontier")] == \
        ["No feasible deployment: nothing to plot"] * 2
    assert "No deployment meets every gate" in tree.all_text()
    rows = tree.all("table", "infeasible")[0].all("tr")[1:]
    assert [(r.all("td")[0].text, r.all("td")[2].all_text()) for r in rows] == \
        [(i.gate, i.reason) for i in result.infeasible]
    assert [li.text for li in tree.all("section", id="suggestions")[0].all("li")] == result.suggestions
    assert "No recommendation to simulate" in tree.all("section", id="simulation")[0].all_text()


# --------------------------------------------------------------------------------------------------
# Safety: self-contained, escaped, ASCII, deterministic


def test_the_page_loads_nothing(example_page: str) -> None:
    tree = parse(example_page)
    assert not tree.all("link") and not tree.all("script") and not tree.all("img") and not tree.all("iframe")
    for node in tree.all():
        for name, value in node.attrs.items():
            if name in ("src", "href", "xlink:href", "action", "srcset", "poster", "data"):
                pytest.fail(f"<{node.tag} {name}={value!r}> refers to something")
            assert not re.search(r"url\(", value), (node.tag, name, value)
    css = "".join(s.text for s in tree.all("style"))
    assert "url(" not in css and "@import" not in css and "@font-face" not in css
    assert not re.search(r"(src|href)\s*=\s*[\"']?\s*https?://", example_page)
    csp = [m.attrs["content"] for m in tree.all("meta") if m.attrs.get("http-equiv") == "Content-Security-Policy"]
    assert csp == ["default-src 'none'; style-src 'unsafe-inline'"]


def test_plan_strings_are_escaped_and_the_page_is_ascii(tmp_path: Path) -> None:
    """The served model name (here an inline architecture's repoId) is the user's text: it reaches the
    summary, the checkpoint and the engine command, and must stay text everywhere."""
    architecture = {"repoId": HOSTILE, "numLayers": 32, "hiddenSize": 4096, "intermediateSize": 14336,
                    "numAttentionHeads": 32, "numKvHeads": 8, "vocabSize": 128256, "maxPositionEmbeddings": 8192}
    request, result, simulation = _planned(_write_plan(tmp_path, {"model": {"architecture": architecture}}))
    assert request.served_model == HOSTILE and result.recommendation is not None
    page = render_report(request, result, simulation, title=f"report {HOSTILE}")
    assert page.isascii()
    assert "<script" not in page.lower() and "<img" not in page.lower()
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &quot;mod&#232;le&quot; &amp; &lt;img" in page
    tree = parse(page)
    assert not tree.all("script") and not tree.all("img")
    assert tree.all("title")[0].text == f"report {HOSTILE}"
    assert HOSTILE in tree.all("p", "plan")[0].text
    assert tree.all("code")[0].text == result.recommendation.checkpoint == HOSTILE


def test_the_same_plan_gives_the_same_bytes_in_fresh_processes(example_page: str) -> None:
    """`inferplan report` of the plan in fresh processes whose string hashing (set and dict-of-set orders)
    differs prints the page rendered here, byte for byte."""
    for seed in ("1", "2"):
        done = subprocess.run([sys.executable, "-m", "inferplan.cli", "report", str(EXAMPLE), "--no-verify",
                               "--requests", "2000", "--seed", "3", "--title", "chat example"],
                              capture_output=True, text=True, check=True, env={**os.environ, "PYTHONHASHSEED": seed})
        assert done.stdout == example_page, f"inferplan report differs with PYTHONHASHSEED={seed}"


# --------------------------------------------------------------------------------------------------
# The command


def test_report_command_writes_the_page_the_plan_renders(example_page: str, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "a.html"
    assert main(["report", str(EXAMPLE), "-o", str(out), "--requests", "2000", "--seed", "3", "--no-verify",
                 "--title", "chat example"]) == 0
    assert out.read_bytes() == example_page.encode("ascii")
    assert f"wrote {out}" in capsys.readouterr().err
    assert main(["report", str(EXAMPLE), "--requests", "1000", "--no-verify"]) == 0
    tree = parse(capsys.readouterr().out)
    assert tree.all("title")[0].text == "inferplan report: chat-assistant-8b.yaml"
    assert len(tree.all("svg", "distribution")) == 2  # the recommendation was simulated


def test_report_command_prints_to_stdout_and_reports_bad_plans(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(INFEASIBLE), "--no-verify", "--title", "tight"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("<!DOCTYPE html>") and "<title>tight</title>" in out
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: {name: meta-llama/Llama-3.1-8B}\nengine: {name: vllm}\nworkload: {}\nslo: {}\n")
    assert main(["report", str(bad), "-o", str(tmp_path / "r.html")]) == 2
    assert not (tmp_path / "r.html").exists()


def test_a_model_name_too_long_for_a_checkpoint_is_a_plan_problem_not_a_traceback(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An inline architecture's repoId is the checkpoint a result holds (at most 128 characters): a longer one is
    reported as the plan's problem (exit 2, no page), as `plan` reports it, where the search crashed building
    its candidates."""
    architecture = {"repoId": "org/" + "x" * 125, "numLayers": 32, "hiddenSize": 4096, "intermediateSize": 14336,
                    "numAttentionHeads": 32, "numKvHeads": 8, "vocabSize": 128256, "maxPositionEmbeddings": 8192}
    path = _write_plan(tmp_path, {"model": {"architecture": architecture}})
    out = tmp_path / "r.html"
    for argv in (["report", str(path), "-o", str(out), "--no-verify", "--requests", "500"], ["plan", str(path)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "model.architecture: repo_id (the checkpoint the engine loads) must be at most 128 characters, " \
               "got 129" in err and "Traceback" not in err
    assert not out.exists()
    architecture["repoId"] = "org/" + "x" * 124  # 128: planned and reported
    assert main(["report", str(_write_plan(tmp_path, {"model": {"architecture": architecture}})), "-o", str(out),
                 "--no-verify", "--requests", "500"]) == 0
    assert "org/" + "x" * 124 in out.read_text()


# --------------------------------------------------------------------------------------------------
# Helpers


@pytest.mark.parametrize(("top", "ticks"), [(1.0, [0, 0.2, 0.4, 0.6, 0.8, 1.0]), (540.0, [0, 200, 400, 600]),
                                            (13.2, [0, 5.0, 10.0, 15.0]),
                                            (0.037, [0, 0.01, 0.02, 0.03, 0.04])])
def test_nice_ticks_cover_the_range_at_round_steps(top: float, ticks: list[float]) -> None:
    assert nice_ticks(top) == pytest.approx(ticks)


def test_frontier_in_plane_keeps_points_no_other_beats_on_both() -> None:
    points = [(10.0, 5.0), (5.0, 9.0), (12.0, 6.0), (3.0, 9.5), (5.0, 7.0)]
    assert frontier_in_plane(points) == [3, 4, 0]


def test_a_plan_read_back_with_its_status_reports_the_reviewed_answer(
        example, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """`kubectl get icp X -o yaml | inferplan report -`: the status's answer (with the operator's extra fields in the
    recommendation) is reported as it is, not planned again."""
    import io

    from inferplan.operator.status import Recommendation

    _, result, _ = example
    assert result.recommendation is not None
    shown = result.model_copy(update={"alternatives": result.alternatives[:2]})  # differs from a fresh plan
    status = shown.model_dump(by_alias=True, mode="json")
    status["recommendation"] = Recommendation(**dict(result.recommendation)).model_dump(by_alias=True, mode="json")
    status["recommendation"]["manifests"] = {"target": "Deployment", "image": "i", "objects": [], "digest": "d",
                                             "render": "r"}
    spec = yaml.safe_load(EXAMPLE.read_text())
    manifest = {"apiVersion": "inferplan.io/v1alpha1", "kind": "InferenceCapacityPlan", "metadata": {"name": "chat"},
                "spec": spec.get("spec", spec), "status": status}
    monkeypatch.setattr("sys.stdin", io.StringIO(yaml.safe_dump(manifest)))
    assert main(["report", "-", "--requests", "500"]) == 0
    out, err = capsys.readouterr()
    assert "reporting the answer in the manifest's status" in err
    for chart in parse(out).all("svg", "frontier"):
        assert len(chart.all("circle", "point")) == 3


def test_a_plan_read_back_without_an_answer_is_not_planned_over_the_catalog(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # Read back before the operator answered (server-set metadata, no status): planning it offline would answer for
    # the whole GPU catalog, not the cluster's GPUs.
    import io

    spec = yaml.safe_load(EXAMPLE.read_text())
    manifest = {"apiVersion": "inferplan.io/v1alpha1", "kind": "InferenceCapacityPlan",
                "metadata": {"name": "chat", "namespace": "serving", "uid": "1234", "resourceVersion": "7"},
                "spec": spec.get("spec", spec)}
    monkeypatch.setattr("sys.stdin", io.StringIO(yaml.safe_dump(manifest)))
    assert main(["report", "-", "--requests", "500"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "serving/chat was read back from the cluster" in err


def test_a_short_run_and_a_missed_slo_are_flagged() -> None:
    # Long outputs: 5,000 requests from empty replicas end before the batch fills (the run reached 17k of
    # 40k output tokens/s); the page says so, and says when a simulated percentile misses its target.
    path = EXAMPLE.parents[1] / "platform" / "qwen3-32b-long-outputs.yaml"
    request = _resolve(path)
    result = plan(request, confirm=False)
    rec = result.recommendation
    assert rec is not None
    short = simulate_candidate(request, rec, requests=5000, seed=0)
    flags = simulation_flags(request, rec, short)
    assert any(f.startswith("NOT STEADY") for f in flags)
    assert 'class="flag">NOT STEADY' in render_report(request, result, short, title="t")
    fewer = rec.model_copy(update={"replicas": max(1, rec.replicas * 2 // 3)})
    missed = simulation_flags(request, fewer, simulate_candidate(request, fewer, requests=20_000, seed=0))
    assert any(f.startswith("MISSED: simulated TPOT p95") for f in missed)
    long_run = simulate_candidate(request, rec, requests=60_000, seed=0)
    assert not [f for f in simulation_flags(request, rec, long_run) if f.startswith("NOT STEADY")]


def test_each_frontier_point_carries_its_prediction_interval(example, example_page: str) -> None:
    # The band through each point is the candidate's stated interval at the chart's percentile: it brackets the
    # point and says its bounds.
    _, result, _ = example
    for chart in parse(example_page).all("svg", "frontier"):
        points = {p.attrs["data-candidate"]: p for p in chart.all("circle", "point")}
        bands = {b.attrs["data-candidate"]: b for b in chart.all("line", "band")}
        assert bands.keys() == points.keys()
        for key, band in bands.items():
            low, high = float(band.attrs["data-low-ms"]), float(band.attrs["data-high-ms"])
            assert low <= float(points[key].attrs["data-latency-ms"]) <= high
            assert float(band.attrs["x1"]) <= float(points[key].attrs["cx"]) <= float(band.attrs["x2"])
    assert result.recommendation is not None and result.recommendation.predicted.intervals is not None


def test_a_plans_confidence_reads_as_it_states_it_on_the_bands_and_bounds(tmp_path: Path) -> None:
    """slo.confidence "0.975": each band says "97.5% interval" and the SLO bounds "bound at 97.5%", the confidence
    the plan asked for, not a rounded 98% (or 97%)."""
    slo = {**example_spec(EXAMPLE)["slo"], "confidence": "0.975"}
    request = _resolve(_write_plan(tmp_path, {"slo": slo}))
    result = plan(request)
    assert result.recommendation is not None and result.recommendation.predicted.confidence == 0.975
    page = render_report(request, result, None, title="t")
    titles = [b.all_text() for chart in parse(page).all("svg", "frontier") for b in chart.all("line", "band")]
    assert titles and all(t.startswith("97.5% interval: ") for t in titles)
    assert "bound at 97.5%: " in page and not re.search(r"\b9[78]%", page.replace("97.5%", ""))


def test_a_workload_without_a_second_token_reports_no_tpot(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Outputs of one token: no TPOT chart (frontier or distribution), "-" in the TPOT column, no NaN anywhere."""
    path = _write_plan(tmp_path, {"workload": {"requestsPerSecond": "50", "promptTokens": {"mean": 800},
                                               "outputTokens": {"mean": 1, "cv": "0"}},
                                  "slo": {"ttft": {"maxMs": 500}}})
    out = tmp_path / "report.html"
    assert main(["report", str(path), "--requests", "2000", "-o", str(out)]) == 0
    text = out.read_text()
    page = parse(text)
    assert {svg.attrs.get("data-metric") for svg in page.all("svg")} == {"ttft"}
    assert not re.search(r"\bnan\b", text, re.IGNORECASE)
    rec = page.all("tr", "recommendation")[0].all("td")
    assert sorted(rec[9].all_text().replace(" ", "")) == sorted("-/-/-/-")  # p50 / p90 / p95 / p99: none


def test_a_read_back_plan_whose_status_answers_an_earlier_spec_is_refused_as_render_refuses_it(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    spec = yaml.safe_load(EXAMPLE.read_text())
    manifest = {"apiVersion": "inferplan.io/v1alpha1", "kind": "InferenceCapacityPlan",
                "metadata": {"name": "chat", "namespace": "serving", "uid": "1234", "generation": 2},
                "spec": spec.get("spec", spec), "status": {"observedGeneration": 1, "recommendation": None,
                                                           "infeasible": [{"gpuType": "H100-SXM5-80GB"}]}}
    monkeypatch.setattr("sys.stdin", io.StringIO(yaml.safe_dump(manifest)))
    assert main(["report", "-", "--requests", "500"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "the status answers generation 1 of the spec, which is at generation 2" in err
    manifest["status"]["recommendation"] = "garbage"
    manifest["status"]["observedGeneration"] = 2
    monkeypatch.setattr("sys.stdin", io.StringIO(yaml.safe_dump(manifest)))
    assert main(["report", "-", "--requests", "500"]) == 2
    assert "status.recommendation is not a recommendation" in capsys.readouterr().err


def test_an_empty_output_name_is_an_error_and_a_report_is_written_whole(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    # `-o "$OUT"` with OUT unset wrote the page to standard output and exited 0.
    assert main(["report", str(EXAMPLE), "--no-verify", "-o", ""]) == 2
    assert "-o names no file" in capsys.readouterr().err
    # Written through a temporary file beside it and renamed: no leftover, the file's mode kept.
    out = tmp_path / "r.html"
    out.write_text("old", encoding="ascii")
    out.chmod(0o640)
    assert main(["report", str(EXAMPLE), "--no-verify", "--requests", "500", "-o", str(out)]) == 0
    assert out.read_text(encoding="ascii").startswith("<!DOCTYPE html>") and (out.stat().st_mode & 0o777) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]


def test_output_dash_is_standard_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    # `-o -` wrote a file named '-' in the current folder and said 'wrote -'.
    monkeypatch.chdir(tmp_path)
    assert main(["report", str(EXAMPLE), "--no-verify", "--requests", "500", "-o", "-"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("<!DOCTYPE html>") and "wrote" not in captured.err
    assert list(tmp_path.iterdir()) == []


def test_an_output_that_cannot_be_a_file_is_refused_before_planning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    # A folder, or a file in a folder that does not exist, was refused after the plan and the simulation (minutes
    # with --requests 200000), as calibrate's --write is not.
    def planned_anyway(*_: object) -> None:
        raise AssertionError("planned before the output was checked")

    monkeypatch.setattr("inferplan.cli._read_manifest", planned_anyway)
    assert main(["report", str(EXAMPLE), "-o", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"inferplan: error: -o {tmp_path}: is a directory\n"
    missing = tmp_path / "no-such-folder" / "r.html"
    assert main(["report", str(EXAMPLE), "-o", str(missing)]) == 2
    assert capsys.readouterr().err == (f"inferplan: error: -o {missing}: its folder {missing.parent} does not "
                                       "exist\n")
