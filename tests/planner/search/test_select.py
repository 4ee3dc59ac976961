"""Choosing what a plan shows: the recommendation's order, the same over the search's rows as over candidates."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from inferplan.planner.catalog.engines import ENGINES
from inferplan.planner.model.factors import load_factors
from inferplan.planner.request import resolve_plan
from inferplan.planner.results import cents, cost_of
from inferplan.planner.search.core import _Rows
from inferplan.planner.search.grid import _grid
from inferplan.planner.search.plan import _search_rates, plan
from inferplan.planner.search.select import _confirm, _feasible_rows, _select
from inferplan.planner.spec_parsing import load_plan_file

REPO = Path(__file__).resolve().parents[3]


def _first(cost: list[float], spare: list[float], gpus: list[int], ttft: list[float], tpot: list[float]) -> int:
    """The row `_select` recommends among rows of these costs [$/h], headrooms, GPUs and latencies [s]."""
    objectives = np.column_stack([cost, ttft, tpot, np.full(len(cost), 1.0), -np.array(spare)])
    return int(_select(objectives, np.array(spare), np.array(gpus), alternatives=5)[0])


def test_costs_that_print_alike_tie_and_headroom_decides_as_in_the_recommendation() -> None:
    # $35.001/h and $35.003/h both show as $35.00/h (`cents`): the candidates' order (`by_cost`) ties them and takes
    # the one with more headroom; the search's pick must be the same row, or the row recommended is not shown.
    assert cents(35.001) == cents(35.003)
    assert _first([35.001, 35.003], [0.10, 0.30], [10, 10], [1.0, 1.0], [0.02, 0.02]) == 1
    # $3.456/h and $3.464/h both print $3.46/h: they tie too.
    assert _first([3.456, 3.464], [0.10, 0.30], [10, 10], [1.0, 1.0], [0.02, 0.02]) == 1


def test_a_cost_is_kept_to_the_cent_and_a_cent_cheaper_wins() -> None:
    # 51 x 8 A100 at $2.4984 per GPU-hour: $1019.35/h, which four significant digits kept as 1019 (printed
    # "$1019.00/h"); $1019.40/h then tied with it and the headroom chose the dearer one.
    cost = cost_of([(51 * 8, 2.4984)], output_tokens_per_hour=3.6e6)
    assert cost.dollars_per_hour == 1019.35
    assert cost.dollars_per_million_tokens == 283.2
    assert _first([1019.35, 1019.40], [0.10, 0.30], [408, 408], [1.0, 1.0], [0.02, 0.02]) == 0


def test_equal_cost_and_headroom_take_the_fewer_gpus() -> None:
    # Same cost and headroom, one faster to the first token, the other per token: both on the frontier; the
    # recommendation's order takes the one of fewer GPUs, whichever the search found first.
    assert _first([24.0, 24.0], [0.2, 0.2], [12, 8], [0.5, 0.6], [0.03, 0.02]) == 1
    assert _first([24.0, 24.0], [0.2, 0.2], [8, 12], [0.5, 0.6], [0.03, 0.02]) == 0


def test_no_row_cheaper_than_the_recommendation_meets_every_slo_by_the_report_sample() -> None:
    # qwen2-5-72b-rag unverified recommended 3 x 4 H100 at $35.4/h: only the rows shown were searched again with the
    # report's sample, and 5 x 2 H200, needing 6 replicas by the search's sample, needs 5 by the report's: $35.0/h.
    path = REPO / "examples" / "platform" / "qwen2-5-72b-rag.yaml"
    req = resolve_plan(load_plan_file(path), path.parent)
    rec = plan(req).recommendation
    assert rec is not None
    rows = _Rows(req, _grid(req, ENGINES[req.engine], load_factors()))
    searched = _search_rates(rows)
    _confirm(req, rows, _feasible_rows(req, rows, searched)[0])  # every feasible row, by the report's sample
    _, _, _, cost = _feasible_rows(req, rows, searched)
    assert rec.cost.dollars_per_hour <= cents(float(cost.min()))
    assert rec.cost.dollars_per_hour == 35.0
