"""The model's factors (inferplan/planner/factors.py): the shipped file and its parser."""

from __future__ import annotations

from dataclasses import replace

import pytest

from inferplan.planner.factors import load_factors, parse_factors


def test_shipped_factors_round_trip_through_json() -> None:
    shipped = load_factors()
    assert parse_factors(shipped.to_json()) == replace(shipped, meta=shipped.to_json()["meta"])


def test_a_missing_factor_is_an_error_naming_it() -> None:
    data = load_factors().to_json()
    del data["engines"]["vllm"]["step_overhead_ms"]
    with pytest.raises(ValueError, match=r"vllm.*step_overhead_ms"):
        parse_factors(data)
