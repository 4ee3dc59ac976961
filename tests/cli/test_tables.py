"""The plan as text (inferplan/tables.py, what `inferplan plan` prints): the shapes, GPU names, units, shares and
counts a reader takes from it."""

from __future__ import annotations

import dataclasses
import functools
import re
from pathlib import Path

import pytest

from inferplan.cli import main
from inferplan.planner.request import PlanRequest, resolve_plan
from inferplan.planner.results import Candidate, Infeasible, PlanResult, Role, per_hour
from inferplan.planner.search.advice import _describe
from inferplan.planner.search.core import miss_ms_text
from inferplan.planner.search.plan import plan
from inferplan.planner.search.select import tag_candidates
from inferplan.planner.spec_parsing import load_plan_file, parse_plan
from inferplan.report import _candidates_section, _recommendation_section
from inferplan.tables import format_plan, latency_figures, parallelism_column
from tests.support.plans import example_spec, spec

REPO = Path(__file__).resolve().parents[2]
CHAT = REPO / "examples" / "plans" / "chat-assistant-8b.yaml"  # constraints.gpuTypes by node label
TRTLLM = REPO / "examples" / "platform" / "trtllm-70b-fp8.yaml"  # constraints.gpuTypes by catalog key


@functools.cache
def planned(path: Path) -> tuple[PlanRequest, PlanResult]:
    request = resolve_plan(load_plan_file(path), path.parent)
    return request, plan(request)


def _table(text: str) -> tuple[list[str], list[list[str]]]:
    """The alternatives table's header cells and rows (cells split on runs of two spaces or more)."""
    lines = text.splitlines()
    start = lines.index("Alternatives (Pareto frontier over cost, latency and headroom):") + 1
    header = re.split(r"\s{2,}", lines[start].strip())
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("  ") or line.startswith("  ("):
            break
        rows.append(re.split(r"\s{2,}", line.strip()))
    return header, rows


def _with_e2e_p95(c: Candidate, value_ms: float) -> Candidate:
    e2e = c.predicted.e2e_ms.model_copy(update={"p95": value_ms})
    return c.model_copy(update={"predicted": c.predicted.model_copy(update={"e2e_ms": e2e})})


def test_headroom_and_utilization_are_each_said_against_what_they_are_a_share_of() -> None:
    request, result = planned(CHAT)
    rec = result.recommendation
    assert rec is not None
    lines = format_plan(result, request).splitlines()
    assert not [line for line in lines if "utilization" in line and "headroom" in line]
    capacity = rec.replicas * rec.predicted.max_requests_per_second_per_replica
    assert any(line.startswith(f"  headroom {rec.headroom:.0%}: every SLO holds up to {capacity:.1f} requests/s, ")
               for line in lines)
    (load,) = [line for line in lines if line.startswith("  utilization ")]
    assert f"utilization {rec.predicted.utilization:.2f}: the planned rate over the rate that keeps every batch" in load


@pytest.mark.parametrize("values_ms", [[5064.0, 10_400.0, 8000.0], [36.4, 175.0, 7.5]])
def test_a_latency_column_has_one_unit_in_its_header(values_ms: list[float]) -> None:
    """The e2e column of "10.4 s" beside "5064 ms" reads "e2e s" over 5.1 and 10.4."""
    request, result = planned(CHAT)
    assert len(result.alternatives) >= 3
    alternatives = [_with_e2e_p95(a, v) for a, v in zip(result.alternatives, values_ms, strict=False)]
    header, rows = _table(format_plan(result.model_copy(update={"alternatives": alternatives}), request))
    unit = "s" if max(values_ms) >= 10_000 else "ms"
    assert header[5:8] == ["TTFT ms", "TPOT ms", f"e2e {unit}"]
    for row, value in zip(rows, values_ms, strict=False):
        assert all(re.fullmatch(r"[0-9.]+", cell) for cell in row[5:8]), row  # figures, no unit in a cell
        assert float(row[7]) == pytest.approx(value / (1000 if unit == "s" else 1), rel=0.06)


def test_latency_figures_keep_small_values_readable_in_seconds() -> None:
    assert latency_figures([36.4, 12_000.0]) == ("s", ["0.036", "12.0"])
    assert latency_figures([7.54, 175.2, 9_999.0]) == ("ms", ["7.5", "175", "9999"])


def test_gpus_are_named_as_the_plan_named_them() -> None:
    """The chat plan lists node labels (NVIDIA-H100-80GB-HBM3): the shape and the GPU column say those; a plan that
    lists catalog keys (H100-SXM5-80GB) reads keys."""
    request, result = planned(CHAT)
    rec = result.recommendation
    assert rec is not None
    text = format_plan(result, request)
    label = rec.node_selector["nvidia.com/gpu.product"]
    assert label != rec.gpu_type and f"replica(s) x {label} = " in text
    _, rows = _table(text)
    assert {row[0] for row in rows} <= {a.node_selector["nvidia.com/gpu.product"] for a in result.alternatives}
    assert all(f"why {a.replicas} x " in text for a in result.alternatives)
    request, result = planned(TRTLLM)
    assert result.recommendation is not None
    _, rows = _table(format_plan(result, request))
    assert {row[0] for row in rows} <= {"H100-SXM5-80GB", "H200-SXM-141GB"}


def test_a_replica_of_one_gpu_reads_without_a_count() -> None:
    """"2 x H100" for a replica of one GPU, "2 x 2 H100" for two: never "x1" or "x 1 "."""
    request, result = planned(CHAT)
    rec = result.recommendation
    assert rec is not None and rec.gpus_per_replica == 1
    own = [line for line in format_plan(result, request).splitlines()
           if "replica(s) x" in line or line.startswith("  why ")]
    label = rec.node_selector["nvidia.com/gpu.product"]
    assert f"  {rec.replicas} replica(s) x {label} = {rec.gpus} GPU(s), " in own[0]
    for a in result.alternatives:
        name = a.node_selector["nvidia.com/gpu.product"]
        shape = f"{a.replicas} x {name}" if a.gpus_per_replica == 1 else f"{a.replicas} x {a.gpus_per_replica} {name}"
        assert any(line.startswith(f"  why {shape} (") for line in own), shape
    assert not [line for line in own if re.search(r"\bx ?1 ", line.split(": ")[0]) or re.search(r"\bx1\b", line)]


def test_fewer_alternatives_than_asked_say_why() -> None:
    """`alternatives: 5` showing 3 says so, and why, in one line; as many as asked need no word."""
    request, result = planned(CHAT)
    shown = len(result.alternatives)
    assert request.alternatives == 5 and 0 < shown < 5
    (why,) = [line for line in format_plan(result, request).splitlines() if "alternatives asked" in line]
    assert why.startswith(f"  {shown} of the 5 alternatives asked: each other feasible candidate costs over 3x ")
    assert "simulation" not in why
    missed = Infeasible(gpu_type="L40S", gpus_per_replica=1, precision="bf16", kv_cache_dtype="auto", max_batch=64,
                        gate="verify", reason="simulated TTFT p95 of 3 x 1 L40S is 600 ms > 500 ms target")
    text = format_plan(result.model_copy(update={"alternatives": [], "infeasible": [missed]}), request)
    assert "Alternatives:\n  0 of the 5 alternatives asked: " in text
    assert "; 1 missed an SLO in simulation (gate verify, below)" in text
    assert "alternatives asked" not in format_plan(result, dataclasses.replace(request, alternatives=shown))


@pytest.mark.parametrize("rate", ["0.0001", "0.001", "0.1", "20"])
def test_the_rate_every_slo_holds_up_to_is_the_capacity_at_any_rate(rate: str) -> None:
    """"every SLO holds up to X requests/s, Y x the planned": the replicas x the highest rate of one within every
    SLO, not the planned rate over 1 - headroom, which rounds to 1 - 1 = 0 at a rate far below the capacity."""
    request = resolve_plan(parse_plan({**spec(gpuTypes=["NVIDIA-H100-80GB-HBM3"], tensorParallelSizes=[1]),
                                       "workload": {"requestsPerSecond": rate, "promptTokens": {"mean": 500},
                                                    "outputTokens": {"mean": 200}}}))
    result = plan(request)
    rec = result.recommendation
    assert rec is not None
    capacity = rec.replicas * rec.predicted.max_requests_per_second_per_replica
    (line,) = [line for line in format_plan(result, request).splitlines() if line.startswith("  headroom ")]
    match = re.fullmatch(r"  headroom (\d+)%: every SLO holds up to ([0-9.]+) requests/s, ([0-9.,]+)x the planned "
                         r"([0-9.e-]+)", line)
    assert match, line
    assert float(match[2]) == pytest.approx(capacity, abs=0.05)
    assert float(match[3].replace(",", "")) == pytest.approx(capacity / float(rate), rel=1e-3)
    assert int(match[1]) == round(100 * (1 - float(rate) / capacity))
    assert rec.max_requests_per_second() == pytest.approx(capacity)


def test_a_workload_without_a_second_token_prints_no_tpot() -> None:
    """Outputs of one token: TPOT is undefined, printed "-" (never a number, never nan)."""
    request = resolve_plan(parse_plan({**spec(gpuTypes=["NVIDIA-H100-80GB-HBM3", "L40S"]),
                                       "workload": {"requestsPerSecond": "50", "promptTokens": {"mean": 800},
                                                    "outputTokens": {"mean": 1, "cv": "0"}},
                                       "slo": {"ttft": {"maxMs": 300}}}))
    result = plan(request)
    assert result.recommendation is not None and result.alternatives
    text = format_plan(result, request)
    assert not re.search(r"\bnan\b", text, re.IGNORECASE)
    (latencies,) = [line for line in text.splitlines() if line.startswith("  TTFT p50/p95/p99 ")]
    assert "; TPOT -; e2e p95 " in latencies
    (intervals,) = [line for line in text.splitlines() if line.startswith("  intervals from held-out errors: ")]
    assert "TPOT" not in intervals and "TTFT p95 " in intervals
    header, rows = _table(text)
    column = header.index("TPOT ms")
    assert rows and all(row[column] == "-" for row in rows)


def test_a_confidence_between_whole_percents_reads_as_the_plan_states_it() -> None:
    """slo.confidence "0.975": the intervals and the SLO bounds say 97.5%, as the plan asked and as the reasons say
    (confidence 0.975), not a rounded 98% (or 97%) that it did not ask for."""
    data = example_spec(CHAT)
    data["slo"]["confidence"] = "0.975"
    request = resolve_plan(parse_plan(data))
    result = plan(request)
    assert result.recommendation is not None and result.recommendation.predicted.confidence == 0.975
    text = format_plan(result, request)
    (intervals,) = [line for line in text.splitlines() if line.startswith("  intervals from held-out errors: ")]
    (checks,) = [line for line in text.splitlines() if line.startswith("  SLOs by held-out error: ")]
    assert "(97.5%: " in intervals and "%: " not in intervals.replace("(97.5%: ", "")
    assert checks.count("bound at 97.5%: ") == len(request.slos)
    assert not re.search(r"\b9[78]%", text.replace("97.5%", ""))


def test_a_disaggregated_recommendations_capacity_interval_names_its_pool() -> None:
    """A disaggregated pair's intervals rest on its decode pool (its top-level fields): the capacity they bound is a
    decode replica's (4.2 requests/s in the example, where a prefill replica serves 1.08), and the line says so, as
    the headroom line beside it counts the prefill pool's."""
    path = REPO / "examples" / "platform" / "long-prompts-70b-shapes.yaml"
    request, result = planned(path)
    rec = result.recommendation
    assert rec is not None and rec.roles and rec.predicted.intervals is not None
    decode = next(r for r in rec.roles if r.role == "decode")
    assert rec.predicted.max_requests_per_second_per_replica == decode.max_requests_per_second_per_replica
    (intervals,) = [line for line in format_plan(result, request).splitlines()
                    if line.startswith("  intervals from held-out errors: ")]
    assert f"capacity {decode.max_requests_per_second_per_replica:.3g} requests/s per decode replica (80%: " \
        in intervals


@pytest.mark.parametrize("path", [CHAT, REPO / "examples" / "platform" / "long-prompts-70b-shapes.yaml"],
                         ids=["chat", "long-prompts"])
def test_a_latency_reads_the_same_on_each_line_of_the_recommendation(path: Path) -> None:
    """The TTFT p95 the latency line prints ("TTFT p50/p95/p99 623 / 1813 / 3032 ms") reads the same, in the same
    unit, in its interval and in its SLO check: not "1.8 s (80%: 0.93-12.7 s)" because the interval's high end
    reaches 10 s."""
    request, result = planned(path)
    text = format_plan(result, request)
    (latencies,) = [line for line in text.splitlines() if line.startswith("  TTFT p50/p95/p99 ")]
    (intervals,) = [line for line in text.splitlines() if line.startswith("  intervals from held-out errors: ")]
    (checks,) = [line for line in text.splitlines() if line.startswith("  SLOs by held-out error: ")]
    figures = re.match(r"  TTFT p50/p95/p99 (\S+) / (\S+) / (\S+) (ms|s);", latencies)
    assert figures is not None
    p95, unit = figures.group(2), figures.group(4)
    assert re.search(rf"TTFT p95 {re.escape(p95)} {unit} \(80%: \S+-\S+ {unit}\)", intervals), intervals
    assert re.search(rf"TTFT p95 <= \S+ {unit} holds with [^(]+\(bound at 80%: {re.escape(p95)} x", checks), checks


PHI4 = REPO / "examples" / "platform" / "phi-4-tensor-parallel.yaml"  # an L40S TPOT 0.3 ms over its 25 ms target


def test_a_nearest_miss_reads_over_its_target() -> None:
    """"TPOT p95 ... is 25 ms even at light load > 25 ms target" says the target is met; the reason (the table's line
    and the JSON's `reason`) states the latency with the decimals it takes to read over it."""
    request, result = planned(PHI4)
    text = format_plan(result, request)
    misses = re.findall(r"is ([0-9.]+) ms even at light load > ([0-9.]+) ms target", text)
    assert misses
    assert all(float(value) > float(target) for value, target in misses), misses
    assert ("TPOT p95 at batch 1 on L40S (fp8) is 25.3 ms even at light load > 25 ms target"
            in [i.reason for i in result.infeasible])


def test_a_missed_limit_reads_over_it_at_any_rounding() -> None:
    request = resolve_plan(parse_plan(spec()))
    ttft = next(s for s in request.slos if s.metric == "ttft")  # 1000 ms
    assert miss_ms_text(request, ttft, 1.0003, 1.0, "1000") == "1000.3"
    assert miss_ms_text(request, ttft, 1.00004, 1.0, "1000") == "1000.04"
    assert miss_ms_text(request, ttft, 1.2, 1.0, "1200") == "1200"


PLANNING = REPO / "docs" / "planning.md"


def test_the_headroom_line_docs_planning_quotes_is_the_bundled_example_s() -> None:
    request, result = planned(CHAT)
    quoted = re.search(r"`(headroom 28%: every SLO holds up to [^`]*)`", PLANNING.read_text())
    assert quoted is not None
    assert f"  {quoted.group(1)}" in format_plan(result, request).splitlines()


def test_the_replica_step_docs_planning_quotes_is_where_the_plan_takes_one_more() -> None:
    # The doc gave the step of the unverified search (23.75 gets 4) as the plan's, where `inferplan plan` verifies by
    # default and keeps the search's own rate (8.385 a replica): 23.75 keeps 3 there.
    from inferplan.planner.simulation.verification import planned as verified

    docs = " ".join(PLANNING.read_text().split())
    shown = re.search(r"gets (\d+) replicas of ([0-9.]+) requests/s each, every SLO held up to ([0-9.]+) requests/s, "
                      r"and a plan for ([0-9.]+) still gets \1, one for ([0-9.]+) gets (\d+) \(with `--no-verify` .*?"
                      r": ([0-9.]+) requests/s each, ([0-9.]+) requests/s, ([0-9.]+) keeps \1 and ([0-9.]+) "
                      r"gets \6[;)]",
                      docs)
    assert shown is not None
    replicas, rate, held, keeps, steps, more, rate_nv, held_nv, keeps_nv, steps_nv = shown.groups()
    data = example_spec(CHAT)
    data["constraints"]["gpuTypes"] = ["NVIDIA-L40S"]
    for verify, per_replica, total, below, above in ((True, rate, held, keeps, steps),
                                                     (False, rate_nv, held_nv, keeps_nv, steps_nv)):
        for rps, expected in ((below, int(replicas)), (above, int(more))):
            request = resolve_plan(parse_plan({**data, "workload": {**data["workload"], "requestsPerSecond": rps},
                                               "verify": verify}))
            rec = (verified(request) if verify else plan(request)).recommendation
            assert rec is not None and rec.replicas == expected, (verify, rps)
            if rec.replicas == int(replicas):
                assert f"{rec.predicted.max_requests_per_second_per_replica:g}" == per_replica
                assert f"every SLO holds up to {total} requests/s" in format_plan(
                    verified(request) if verify else plan(request), request)


@pytest.mark.parametrize("example", ["deepseek-r1-shapes", "llama-405b-bf16-h100"])
def test_the_shapes_docs_planning_shows_are_what_inferplan_plan_prints(example: str) -> None:
    """The 'Deployment shapes compared' blocks of docs/planning.md, each under the example it names, verified as
    `inferplan plan FILE` verifies it."""
    from inferplan.planner.simulation.verification import planned as verified

    docs = PLANNING.read_text()
    at = docs.index(f"inferplan plan examples/platform/{example}.yaml")
    blocks = [b for b in docs.split("```") if b.startswith("\nDeployment shapes compared")]
    block = min(blocks, key=lambda b: abs(docs.index(b) - at))
    path = REPO / "examples" / "platform" / f"{example}.yaml"
    request = resolve_plan(load_plan_file(path), path.parent)
    shown = [line.strip() for line in format_plan(verified(request), request).splitlines()]
    for line in block.strip().splitlines()[1:]:
        assert line.strip() in shown, line


def test_the_recommendation_states_its_tags_and_why_as_the_json_does() -> None:
    # The alternatives' rows carried their tags and why; the recommendation's own (cheapest, lowestTtft, ...) were
    # in the JSON only, so a reader of the table could not tell which figure it was best at.
    request, result = planned(TRTLLM)
    rec = result.recommendation
    assert rec is not None and rec.tags
    lines = format_plan(result, request).splitlines()
    assert f"  tags: {','.join(rec.tags)} ({rec.why})" in lines


def test_rows_that_differ_only_by_dp_attention_or_expert_parallelism_read_apart() -> None:
    # deepseek-r1-shapes lists 2 x 8 H200 with and without data-parallel attention and expert parallelism: the TP
    # column read "8" for each, so the rows looked alike where the JSON (dataParallelAttention, expertParallel) did not.
    _, result = planned(CHAT)
    rec = result.recommendation
    assert rec is not None
    tp = rec.model_copy(update={"gpus_per_replica": 8, "gpus": 16})
    dp = tp.model_copy(update={"data_parallel_attention": True})
    ep = dp.model_copy(update={"expert_parallel": True})
    pp = ep.model_copy(update={"gpus_per_replica": 16, "pipeline_parallel": 2})
    assert [parallelism_column(c) for c in (tp, dp, ep, pp)] == ["8", "8 DP", "8 DP+EP", "8 PP2 DP+EP"]
    shown = dict(zip(("tp", "dp", "ep"), (c.model_dump(by_alias=True) for c in (tp, dp, ep)), strict=True))
    assert [(d["dataParallelAttention"], d["expertParallel"]) for d in shown.values()] == [
        (False, False), (True, False), (True, True)]
    assert "`8 DP+EP`" in PLANNING.read_text()


@pytest.mark.parametrize(("dollars", "shown"), [(3.2, "$3.20/h"), (1000.4, "$1000.40/h"), (1.5e6, "$1500000.00/h")])
def test_a_cost_per_hour_reads_alike_in_the_table_the_tags_and_the_suggestions(dollars: float, shown: str) -> None:
    # The table printed "$3.20/h" where the tags' why and the suggestions printed "$3.2/h" (`:g`), "$1000/h" for
    # $1000.40/h and "$1.5e+06/h" from $1M/h: one cost, one format, to the cent.
    request, result = planned(CHAT)
    rec = result.recommendation
    assert rec is not None
    costly = rec.model_copy(update={"cost": rec.cost.model_copy(update={"dollars_per_hour": dollars})})
    (tagged,) = tag_candidates(request, [costly])
    assert f", {shown}, " in tagged.why
    assert _describe(costly).endswith(f" at {shown}")
    lines = format_plan(result.model_copy(update={"recommendation": tagged}), request).splitlines()
    assert any(line.startswith(f"  {shown}, $") for line in lines)
    assert f"  tags: {','.join(tagged.tags)} ({tagged.why})" in lines


@pytest.mark.parametrize(("per_million", "shown"), [(0.004917, "$0.004917"), (0.3278, "$0.3278"), (283.2, "$283.20")])
def test_the_cost_per_million_tokens_reads_with_the_digits_the_json_keeps(per_million: float, shown: str) -> None:
    # `.3f` printed $0.004917 as "$0.005" and $0.3278 as "$0.328" in the table and the report, where the JSON keeps
    # four significant digits.
    request, result = planned(CHAT)
    rec = result.recommendation
    assert rec is not None
    cheap = rec.model_copy(update={"cost": rec.cost.model_copy(update={"dollars_per_million_tokens": per_million})})
    lines = format_plan(result.model_copy(update={"recommendation": cheap}), request).splitlines()
    assert f"  {per_hour(cheap.cost.dollars_per_hour)}, {shown} per million output tokens" in lines
    assert f"{shown} per million output tokens" in _recommendation_section(cheap)
    table = _candidates_section(request, result.model_copy(update={"recommendation": cheap}))
    assert f'<td class="num">{shown[1:]}</td>' in table


def test_the_readme_excerpt_is_what_inferplan_plan_prints(capsys: pytest.CaptureFixture[str]) -> None:
    # The README's excerpt is `inferplan plan` on the bundled example (chat-assistant-8b), verified as by default,
    # down to its engine command: every line as printed (its percentiles had stayed those of an earlier model).
    assert main(["plan"]) == 0
    printed = capsys.readouterr().out.splitlines()[1:]  # after the "# bundled example plan" line
    readme = (REPO / "README.md").read_text().split("\n## What a plan prints\n", 1)[1]
    excerpt = readme.split("\n```\n", 2)[1].splitlines()
    assert excerpt[-1] == "  ..."
    assert excerpt[:-1] == printed[:len(excerpt) - 1]
    assert excerpt[-2].startswith("  command: ")


def test_the_heading_states_every_tie_rule_of_the_order_and_the_readme_shows_it() -> None:
    # The heading said "ties broken by headroom" only; equal cost and headroom go to the fewer GPUs (`by_cost`).
    request, result = planned(CHAT)
    rec = result.recommendation
    assert rec is not None
    heading = next(line for line in format_plan(result, request).splitlines() if line.startswith("Recommendation ("))
    assert heading == "Recommendation (cheapest feasible; ties broken by headroom, then by fewer GPUs):"
    assert f"\n{heading[:-1]}, latencies from the simulator:\n" in (REPO / "README.md").read_text()


def test_a_disaggregated_row_gives_each_pools_parallelism() -> None:
    # The TP column of a disaggregated row read "8 / 4": a prefill pool with data-parallel attention and expert
    # parallelism read like one without, where an aggregated row says "8 DP+EP".
    _, result = planned(CHAT)
    rec = result.recommendation
    assert rec is not None
    prefill = Role(role="prefill", gpu_type="H200-SXM-141GB", node_selector={}, gpus_per_replica=8, replicas=2,
                   gpus=16, max_batch=16, data_parallel_attention=True, expert_parallel=True, utilization=0.5,
                   max_requests_per_second_per_replica=1.0, engine_args=[])
    decode = prefill.model_copy(update={"role": "decode", "gpus_per_replica": 4, "gpus": 8,
                                        "data_parallel_attention": False, "expert_parallel": False})
    pair = rec.model_copy(update={"shape": "disaggregated", "roles": [prefill, decode]})
    assert parallelism_column(pair) == "8 DP+EP / 4"
    dp = decode.model_copy(update={"data_parallel_attention": True})
    assert parallelism_column(pair.model_copy(update={"roles": [prefill, dp]})) == "8 DP+EP / 4 DP"
