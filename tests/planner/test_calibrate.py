"""The factor fit: it recovers factors that generated the data, and keeps engines without data at the prior."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from inferplan.planner.calibrate import calibrate
from inferplan.planner.factors import FactorSet, load_factors
from inferplan.planner.predict import predict_scenarios
from inferplan.planner.scenarios import read_scenarios


def synthetic(published: Path, truth: FactorSet) -> list:
    """Published vLLM single-stream and static-batch rows with values replaced by `truth`'s predictions."""
    rows = [r for r in read_scenarios(published).scenarios
            if r.engine == "vllm" and not r.suspect and r.load.kind in ("single", "static_batch")][:40]
    predicted = predict_scenarios(rows, truth)
    return [r.model_copy(update={"value": p.predicted}) for r, p in zip(rows, predicted, strict=True)
            if p.predicted]


def test_fit_recovers_the_bandwidth_efficiency_that_made_the_data(published_scenarios: Path) -> None:
    shipped = load_factors()
    prior = replace(shipped, engines={}, families={})
    made = replace(prior.default_engine, bandwidth_efficiency=0.62)
    truth = replace(prior, engines={"vllm": made, "vllm-v0": made})  # both release lines of vLLM
    rows = synthetic(published_scenarios, truth)
    assert len(rows) >= 20
    fitted = calibrate(rows, prior, sweeps=4)
    assert fitted.loss_after < fitted.loss_before
    lines = [line for line, n in fitted.rows_by_engine.items() if n >= 10]
    assert lines
    for line in lines:
        assert fitted.factors.engine(line).bandwidth_efficiency == pytest.approx(0.62, rel=0.1), line


def test_engines_without_rows_keep_their_factors(published_scenarios: Path) -> None:
    shipped = load_factors()
    rows = [r for r in read_scenarios(published_scenarios).scenarios if r.engine == "llama.cpp"][:10]
    fitted = calibrate(rows, shipped, sweeps=1)
    assert fitted.factors.engine("vllm") == shipped.engine("vllm")
    assert set(fitted.rows_by_engine) == {"llama.cpp"}
