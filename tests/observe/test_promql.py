"""PromQL built from spec values (inferplan/observe/promql.py) and the client-side histogram_quantile."""

from __future__ import annotations

import math

import pytest

from inferplan.observe import promql
from inferplan.observe.engine_metrics import VLLM


@pytest.mark.parametrize("value, literal", [
    ('plain', '"plain"'),
    ('a"b', '"a\\"b"'),
    ('back\\slash', '"back\\\\slash"'),
    ('line\nbreak', '"line\\nbreak"'),
    ('"} or vector(1) #', '"\\"} or vector(1) #"'),
])
def test_label_values_are_escaped_into_one_string_literal(value: str, literal: str) -> None:
    assert promql.escape_label_value(value) == literal


def test_a_crafted_value_cannot_end_the_selector() -> None:
    expr = promql.total_rate(VLLM.e2e, {"model_name": '"}) or vector(1) or sum(x{a="'}, "5m", "_count")
    # One matcher, its value one string: the only closing brace and parenthesis are the query's own.
    assert expr == ('sum(rate(vllm:e2e_request_latency_seconds_count{model_name="\\"}) or vector(1) or '
                    'sum(x{a=\\""}[5m]))')


@pytest.mark.parametrize("name", ["1abc", "a-b", "a b", "__name__", ""])
def test_bad_label_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="label name"):
        promql.matchers({name: "x"})


def test_old_and_new_metric_names_are_both_queried_newest_first() -> None:
    expr = promql.bucket_rates(VLLM.tpot, {"namespace": "serving"}, "5m")
    assert expr == ('(sum by (le) (rate(vllm:request_time_per_output_token_seconds_bucket{namespace="serving"}[5m])))'
                    ' or (sum by (le) (rate(vllm:inter_token_latency_seconds_bucket{namespace="serving"}[5m]))) or '
                    '(sum by (le) (rate(vllm:time_per_output_token_seconds_bucket{namespace="serving"}[5m])))')


def test_histogram_quantile_interpolates_within_the_bucket_like_prometheus() -> None:
    buckets = [(0.1, 10.0), (0.5, 60.0), (1.0, 90.0), (math.inf, 100.0)]
    q50 = promql.histogram_quantile(0.5, buckets)
    assert q50 == promql.Quantile(0.1 + 0.4 * (50 - 10) / 50, 0.1, 0.5)
    first = promql.histogram_quantile(0.05, buckets)
    assert first == promql.Quantile(0.05, 0.0, 0.1)  # the first bucket starts at 0
    top = promql.histogram_quantile(0.95, buckets)
    assert top == promql.Quantile(1.0, 1.0, math.inf)  # in +Inf: the highest finite bound
    assert promql.histogram_quantile(0.5, [(0.1, 0.0), (math.inf, 0.0)]) is None
    assert promql.histogram_quantile(0.5, [(0.1, 5.0)]) is None  # no +Inf bucket
