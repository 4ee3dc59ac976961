"""`inferplan simulate` and the simulation of a planned deployment."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from inferplan.cli import main
from inferplan.planner.search import deployment_of, plan
from inferplan.planner.spec import load_plan_file, resolve_plan
from inferplan.planner.verification import compare, plan_workload, simulate_candidate

CHAT = Path(__file__).resolve().parents[1] / "examples" / "plans" / "chat-assistant-8b.yaml"


@pytest.fixture(scope="module")
def planned():
    request = resolve_plan(load_plan_file(CHAT), CHAT.parent)
    return request, plan(request).recommendation


def test_the_plan_workload_fits_the_engine_context(planned) -> None:
    request, candidate = planned
    max_len = deployment_of(request, candidate).settings.max_model_len
    workload = plan_workload(request, 5000, 3, max_len)
    assert len(workload) == 5000
    assert int((workload.prompt_tokens + workload.output_tokens).max()) <= max_len
    assert workload.arrival_s[-1] == pytest.approx(5000 / request.rate_rps, rel=0.1)


def test_simulating_the_recommendation_agrees_with_its_analytic_tail(planned) -> None:
    request, candidate = planned
    result = simulate_candidate(request, candidate, requests=4000, seed=1)
    assert len(result.e2e_s) == 4000 and result.preemptions == 0
    rows = {(r.metric, r.quantile): r for r in compare(candidate, result)}
    assert len(rows) == 12 and all(math.isfinite(r.ratio) for r in rows.values())
    # Chat traffic (Poisson, moderate CV): the analytic p95 TPOT and e2e are within 25% of the simulation.
    for key in (("tpot", "p95"), ("e2e", "p95")):
        assert rows[key].ratio == pytest.approx(1.0, abs=0.25), rows[key]


def test_simulate_command_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", str(CHAT), "--requests", "2000", "-o", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["requests"] == 2000 and data["source"] == "generated (seed 0)"
    assert {(p["metric"], p["quantile"]) for p in data["percentiles"]} == {
        (m, q) for m in ("ttft", "tpot", "e2e") for q in ("p50", "p90", "p95", "p99")}


def test_simulate_replays_a_trace_and_reports_bad_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(0)
    times = np.cumsum(rng.exponential(0.05, 300))
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps({"t": float(t), "prompt": 400, "output": 100}) + "\n" for t in times))
    assert main(["simulate", str(CHAT), "--trace", str(trace), "-o", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["requests"] == 300 and data["source"] == "trace"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"t": 0.0, "prompt": 10, "output": 5}\n{"t": 1.0, "prompt": -1, "output": 5}\n')
    assert main(["simulate", str(CHAT), "--trace", str(bad)]) == 2
    assert ":2:" in capsys.readouterr().err
