"""A recommendation that rests on no measurement is marked first and priced with the uncertainty it carries
(docs/planning.md#unmeasured-candidates): `Candidate.measured`, `Candidate.upper_cost`, the plan table's first
lines, the JSON and the operator's Feasible message."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import inferplan.planner.search.annotate as annotate
from inferplan.cli import main
from inferplan.operator.inventory import build_inventory
from inferplan.operator.status import next_status
from inferplan.planner.catalog.engines import ENGINES
from inferplan.planner.catalog.gpus import resolve_gpu
from inferplan.planner.catalog.precisions import weight_precision
from inferplan.planner.model.factors import FactorSet, load_factors
from inferplan.planner.model.performance import build_hardware, decode_step_s, prefill_s, stack_hardware
from inferplan.planner.request import resolve_plan
from inferplan.planner.results import Candidate, PlanResult, cents
from inferplan.planner.search.annotate import slower_steps
from inferplan.planner.search.core import UNMEASURED_STEP_SLOWDOWN
from inferplan.planner.search.plan import plan
from inferplan.planner.spec_parsing import load_plan_file, parse_plan
from inferplan.report import render_report
from tests.support.plans import REPO, spec

OPEN_GPUS = REPO / "examples" / "platform" / "batch-70b-open-gpus.yaml"
"""Llama-3.1-70B with GPU types open: an MI325X (published kernels, no vLLM 0.11 run on CDNA3) wins on its price."""


def _plan_output(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["plan", *args]) == 0
    return capsys.readouterr().out


def test_an_unmeasured_recommendation_is_marked_before_it_with_its_cost_range(
        capsys: pytest.CaptureFixture[str]) -> None:
    lines = _plan_output(capsys, str(OPEN_GPUS)).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Recommendation"))
    marks = [line for line in lines[:start] if line.startswith("UNMEASURED")]
    assert len(marks) == 1, lines[:start]
    mark = marks[0]
    assert "MI325X" in "\n".join(lines[start:start + 2])  # the GPU the mark is about
    assert "kernels published" in mark and "measured serving lines 0" in mark
    low, high = (float(x) for x in re.findall(r"\$(\d+\.\d\d)/h", mark))
    assert high > low
    assert f"{UNMEASURED_STEP_SLOWDOWN - 1:.0%} slower" in mark and "held-out" in mark


def test_the_json_carries_the_mark_the_upper_cost_and_the_first_warning(capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads(_plan_output(capsys, str(OPEN_GPUS), "-o", "json"))
    rec = data["recommendation"]
    assert rec["measured"] is False
    upper = rec["upperCost"]
    assert upper["stepSlowdown"] == UNMEASURED_STEP_SLOWDOWN
    assert upper["replicas"] >= rec["replicas"] and upper["dollarsPerHour"] > rec["cost"]["dollarsPerHour"]
    assert upper["dollarsPerHour"] == pytest.approx(
        upper["gpus"] * rec["cost"]["dollarsPerHour"] / rec["gpus"], rel=1e-3)
    assert rec["warnings"][0].startswith("unmeasured:") and f"${upper['dollarsPerHour']:.2f}/h" in rec["warnings"][0]
    mi355x = [a for a in data["alternatives"] if a["gpuType"] == "MI355X"]
    assert mi355x and all(a["measured"] is False and a["warnings"][0].startswith("unmeasured:") for a in mi355x)


def test_a_measured_recommendation_has_no_mark(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Llama-3.1-8B on H100 with vLLM: the H100's own kernel tables and vLLM 0.11 runs on Hopper."""
    plan_file = tmp_path / "h100.yaml"
    plan_file.write_text(json.dumps(spec(gpuTypes=["H100-SXM5-80GB"])))
    out = _plan_output(capsys, str(plan_file))
    assert "UNMEASURED" not in out and "unmeasured" not in out
    rec = json.loads(_plan_output(capsys, str(plan_file), "-o", "json"))["recommendation"]
    assert rec["measured"] is True and rec["upperCost"] is None
    assert rec["provenance"]["kernels"] == "measured" and int(rec["provenance"]["measuredLines"]) > 0


def _shown(result: PlanResult) -> list[Candidate]:
    return [c for c in [result.recommendation, *result.alternatives] if c is not None]


def _recommendation(gpu: str, factors: FactorSet | None = None) -> Candidate:
    result = plan(resolve_plan(parse_plan(spec(gpuTypes=[gpu]))), factors, suggest=False)
    assert result.recommendation is not None
    return result.recommendation


def test_unmeasured_means_neither_kernels_nor_a_serving_line_measured_on_the_gpu() -> None:
    # Measured kernels (L40S) without a vLLM 0.11 run on Ada: extrapolated, but not unmeasured.
    l40s = _recommendation("L40S")
    assert (l40s.provenance["kernels"], l40s.provenance["measuredLines"]) == ("measured", "0")
    assert l40s.measured and l40s.upper_cost is None
    # Scaled kernels (an A100 40GB from the A100 80GB's tables): measured.
    a100 = _recommendation("A100-SXM4-40GB")
    assert a100.provenance["kernels"] == "scaled" and a100.measured
    # Published kernels and no line on CDNA3: unmeasured, and the warning saying so comes first.
    mi300x = _recommendation("AMD-Instinct-MI300X")
    assert (mi300x.provenance["kernels"], mi300x.provenance["measuredLines"]) == ("published", "0")
    assert not mi300x.measured and mi300x.upper_cost is not None
    assert mi300x.warnings[0].startswith("unmeasured:")
    # The same GPU with factors fitted on vLLM runs on CDNA3: the serving runs were measured.
    shipped = load_factors()
    fitted = replace(shipped, meta={**shipped.meta, "rows_by_engine_family": {"vllm-rocm": {"cdna3": 7}}})
    on_rocm = _recommendation("AMD-Instinct-MI300X", fitted)
    assert on_rocm.provenance["measuredLines"] == "7" and on_rocm.measured and on_rocm.upper_cost is None


def test_the_upper_cost_is_the_search_again_with_slower_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """With steps as predicted the re-evaluation gives the recommendation's own replicas; slower, at least as many.
    Only the recommendation is ranged (each range is a rate search of its own); unmeasured alternatives carry the
    mark and the warning."""
    request = resolve_plan(load_plan_file(OPEN_GPUS), OPEN_GPUS.parent)
    result = plan(request, suggest=False)
    rec = result.recommendation
    assert rec is not None and not rec.measured
    upper = rec.upper_cost
    assert upper is not None and upper.replicas is not None and upper.replicas >= rec.replicas
    assert all(c.upper_cost is None and c.warnings[0].startswith("unmeasured:")
               for c in result.alternatives if not c.measured)
    monkeypatch.setattr(annotate, "UNMEASURED_STEP_SLOWDOWN", 1.0)
    same = plan(request, suggest=False).recommendation
    assert same is not None and same.upper_cost is not None and same.upper_cost.replicas == same.replicas


def test_the_upper_cost_is_its_gpus_at_the_plans_price() -> None:
    """Not the recommendation's cost (kept to the cent) over its GPUs: 2 x MI300X at $1.9917 cost $3.98/h, and 4
    read back from it $7.96/h where they cost $7.97/h."""
    data = spec(gpuTypes=["AMD-Instinct-MI300X"], prices={"AMD-Instinct-MI300X": "1.9917"})
    data["workload"]["requestsPerSecond"] = "40"
    rec = plan(resolve_plan(parse_plan(data)), suggest=False).recommendation
    assert rec is not None and rec.upper_cost is not None and rec.upper_cost.gpus is not None
    assert rec.upper_cost.gpus > rec.gpus
    assert rec.upper_cost.dollars_per_hour == cents(rec.upper_cost.gpus * 1.9917)


def test_an_slo_no_replica_count_meets_with_slower_steps_is_named() -> None:
    """A TPOT target just above the MI300X's light-load TPOT: 1.83x slower steps miss it whatever the replicas."""
    loose = plan(resolve_plan(parse_plan(spec(gpuTypes=["AMD-Instinct-MI300X"]))), suggest=False).recommendation
    assert loose is not None
    tpot = loose.predicted.tpot_ms.p50 * 1.2
    data = spec(gpuTypes=["AMD-Instinct-MI300X"])
    data["slo"]["tpot"] = {"maxMs": round(tpot), "percentile": "p95"}
    tight = plan(resolve_plan(parse_plan(data)), suggest=False).recommendation
    assert tight is not None and tight.upper_cost is not None
    assert tight.upper_cost.replicas is None and tight.upper_cost.dollars_per_hour is None
    assert tight.upper_cost.missed.startswith(f"TPOT p95 <= {round(tpot)} ms")
    assert "no replica count meets TPOT p95" in tight.warnings[0]


@pytest.mark.parametrize("factor", [1.0, 1.83, np.array([1.5, 3.0])])
def test_slower_steps_makes_every_step_that_many_times_as_long(factor: float | np.ndarray) -> None:
    arch = resolve_plan(parse_plan(spec())).arch
    engine = ENGINES["vllm"]
    one = build_hardware(arch, resolve_gpu("H100-SXM5-80GB"), weight_precision("bf16"), 2.0, engine,
                         load_factors().engine("vllm"), 2, 1)
    hw = stack_hardware([one, one])
    slow = slower_steps(hw, factor)
    batch, context = np.array([1.0, 64.0]), np.array([600.0, 2000.0])
    assert np.allclose(decode_step_s(slow, batch, context), factor * decode_step_s(hw, batch, context))
    assert np.allclose(prefill_s(slow, context, 1.0, 2048.0), factor * prefill_s(hw, context, 1.0, 2048.0))
    assert np.all(slow.request_overhead_s == hw.request_overhead_s)  # part of no step


def test_the_operator_says_unmeasured_first_in_the_feasible_message() -> None:
    request = resolve_plan(load_plan_file(OPEN_GPUS), OPEN_GPUS.parent)
    result = plan(request, suggest=False)
    rec = result.recommendation
    assert rec is not None and rec.upper_cost is not None
    new = next_status(None, generation=1, now="2026-12-04T00:00:00Z", planner_version="0",
                      inventory=build_inventory([]), result=result, error=None)
    feasible = next(c for c in new["conditions"] if c["type"] == "Feasible")
    assert feasible["message"].startswith("unmeasured: ")
    assert f"up to ${rec.upper_cost.dollars_per_hour:.2f}/h" in feasible["message"]
    assert new["recommendation"]["measured"] is False
    assert new["recommendation"]["upperCost"]["replicas"] == rec.upper_cost.replicas


def test_the_report_page_says_it_beside_the_verdict() -> None:
    request = resolve_plan(load_plan_file(OPEN_GPUS), OPEN_GPUS.parent)
    page = render_report(request, plan(request, suggest=False), None, title="open GPUs")
    verdict = page.index('<p class="verdict">')
    assert page.index('<p class="flag">UNMEASURED: the recommendation rests on no measurement') > verdict
    measured = resolve_plan(parse_plan(spec(gpuTypes=["H100-SXM5-80GB"])))
    assert "UNMEASURED" not in render_report(measured, plan(measured, suggest=False), None, title="H100")


def test_a_cost_from_the_catalogs_price_estimate_says_so() -> None:
    """A price the catalog holds no quote for (the RTX A6000's $0.50 is the author's estimate) is the cost's basis
    like a quoted one, so the candidate says which it is: provenance `cost` `estimate` with a warning naming the
    price and how to give one's own; a quoted price is `catalog`, the plan's own `spec`, neither warned."""
    def recommended(**constraints: object) -> Candidate:
        rec = plan(resolve_plan(parse_plan(spec(**constraints)))).recommendation
        assert rec is not None
        return rec

    estimate = recommended(gpuTypes=["RTX-A6000"])
    assert estimate.provenance["cost"] == "estimate"
    assert any(w.startswith("RTX-A6000: $0.5 per GPU-hour is the catalog's estimate") and "constraints.prices" in w
               for w in estimate.warnings)
    quoted = recommended(gpuTypes=["H100"])
    assert quoted.provenance["cost"] == "catalog" and not any("catalog's estimate" in w for w in quoted.warnings)
    own = recommended(gpuTypes=["RTX-A6000"], prices={"RTX-A6000": "0.45"})
    assert own.provenance["cost"] == "spec" and not any("catalog's estimate" in w for w in own.warnings)
