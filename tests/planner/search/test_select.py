"""Choosing what a plan shows: the recommendation's order, the same over the search's rows as over candidates."""

from __future__ import annotations

import numpy as np

from inferplan.planner.results import rounded
from inferplan.planner.search.select import _select


def _first(cost: list[float], spare: list[float], gpus: list[int], ttft: list[float], tpot: list[float]) -> int:
    """The row `_select` recommends among rows of these costs [$/h], headrooms, GPUs and latencies [s]."""
    objectives = np.column_stack([cost, ttft, tpot, np.full(len(cost), 1.0), -np.array(spare)])
    return int(_select(objectives, np.array(spare), np.array(gpus), alternatives=5)[0])


def test_costs_that_print_alike_tie_and_headroom_decides_as_in_the_recommendation() -> None:
    # $35.001/h and $35.003/h both show as $35.0/h (`rounded`): the candidates' order (`by_cost`) ties them and takes
    # the one with more headroom; the search's pick must be the same row, or the row recommended is not shown.
    assert rounded(35.001) == rounded(35.003)
    assert _first([35.001, 35.003], [0.10, 0.30], [10, 10], [1.0, 1.0], [0.02, 0.02]) == 1


def test_equal_cost_and_headroom_take_the_fewer_gpus() -> None:
    # Same cost and headroom, one faster to the first token, the other per token: both on the frontier; the
    # recommendation's order takes the one of fewer GPUs, whichever the search found first.
    assert _first([24.0, 24.0], [0.2, 0.2], [12, 8], [0.5, 0.6], [0.03, 0.02]) == 1
    assert _first([24.0, 24.0], [0.2, 0.2], [8, 12], [0.5, 0.6], [0.03, 0.02]) == 0
