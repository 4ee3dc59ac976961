"""The spec's `slo`: `slo.confidence` is a decimal string as every other decimal of the spec, and a TPOT target on
outputs that never have a second token is refused, by the parser and by the CRD's rules alike."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from inferplan.operator.crd import build_crd
from inferplan.planner.request import resolve_plan
from inferplan.planner.spec_parsing import PlanError, parse_plan

MINIMAL: dict[str, Any] = {
    "model": {"name": "llama-3.1-8b"},
    "engine": {"name": "vllm"},
    "workload": {"requestsPerSecond": "12.5", "promptTokens": {"mean": 512}, "outputTokens": {"mean": 256}},
    "slo": {"ttft": {"maxMs": 500}, "tpot": {"maxMs": 50}},
}


def with_slo(**slo: Any) -> dict[str, Any]:
    data = copy.deepcopy(MINIMAL)
    data["slo"].update(slo)
    return data


def with_outputs(outputs: dict[str, Any], **slo: Any) -> dict[str, Any]:
    data = copy.deepcopy(MINIMAL)
    data["workload"]["outputTokens"] = outputs
    if slo:
        data["slo"] = slo
    return data


def problems_of(data: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(PlanError) as info:
        parse_plan(data)
    return dict(info.value.problems)


def spec_schema() -> dict[str, Any]:
    return build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]


# -- slo.confidence ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "value"), [("0.9", 0.9), ("0.5", 0.5), ("0.99", 0.99), ("0.75", 0.75)])
def test_confidence_is_a_quoted_decimal(text: str, value: float) -> None:
    spec = parse_plan(with_slo(confidence=text))
    assert spec.slo.confidence == text
    assert resolve_plan(spec).confidence == value


def test_confidence_unset_stays_unset() -> None:
    assert resolve_plan(parse_plan(MINIMAL)).confidence is None


@pytest.mark.parametrize(("text", "words"), [("0.3", 'must be >= 0.5 and <= 0.99, got "0.3"'),
                                             ("1", 'must be >= 0.5 and <= 0.99, got "1"'),
                                             ("0.995", 'must be >= 0.5 and <= 0.99, got "0.995"'),
                                             ("-0.8", "decimal number in a string"),
                                             ("80%", "decimal number in a string")])
def test_confidence_out_of_range_or_malformed_names_the_field(text: str, words: str) -> None:
    problems = problems_of(with_slo(confidence=text))
    assert list(problems) == ["slo.confidence"]
    assert words in problems["slo.confidence"]


def test_a_bare_confidence_is_told_to_quote_it_as_the_api_server_refuses_it() -> None:
    """The CRD types it as a string, as every decimal of the spec: a file the command line accepts is one the API
    server accepts, so an unquoted 0.9 is refused by both, with the quoted form to write."""
    problems = problems_of(with_slo(confidence=0.9))
    assert 'write "0.9"' in problems["slo.confidence"]
    confidence = spec_schema()["properties"]["slo"]["properties"]["confidence"]
    assert confidence["type"] == "string" and confidence["pattern"] == r"^[0-9]+(\.[0-9]+)?$"
    assert confidence["x-kubernetes-validations"] == [
        {"rule": "double(self) >= 0.5 && double(self) <= 0.99", "message": "must be >= 0.5 and <= 0.99"}]


# -- a TPOT target where no token follows the first ----------------------------------------------------------

ONE_TOKEN = [{"mean": 1, "cv": "0"}, {"mean": 1, "cv": "0.0"}, {"mean": 1, "p95": 1},
             {"mean": 1, "percentiles": {"p50": 1, "p99": 1}}]


@pytest.mark.parametrize("outputs", ONE_TOKEN)
@pytest.mark.parametrize("key", ["tpot", "itl"])
def test_a_tpot_target_on_single_token_outputs_is_refused_at_slo_tpot(outputs: dict[str, Any], key: str) -> None:
    problems = problems_of(with_outputs(outputs, ttft={"maxMs": 300}, **{key: {"maxMs": 50}}))
    assert list(problems) == ["slo.tpot"]
    assert "no token follows the first" in problems["slo.tpot"] and "TPOT is undefined" in problems["slo.tpot"]


@pytest.mark.parametrize("outputs", ONE_TOKEN)
def test_single_token_outputs_without_a_tpot_target_are_a_plan(outputs: dict[str, Any]) -> None:
    request = resolve_plan(parse_plan(with_outputs(outputs, ttft={"maxMs": 300})))
    assert request.output_mean == 1 and request.output_cv == 0


@pytest.mark.parametrize("outputs", [{"mean": 1}, {"mean": 1, "cv": "0.5"}, {"mean": 2, "cv": "0"},
                                     {"mean": 1, "p95": 3}, {"mean": 1, "percentiles": {"p50": 1, "p99": 4}}])
def test_a_tpot_target_stands_where_some_output_has_a_second_token(outputs: dict[str, Any]) -> None:
    assert parse_plan(with_outputs(outputs, tpot={"maxMs": 50})).slo.tpot is not None


def test_the_crd_refuses_a_tpot_target_on_single_token_outputs_with_the_same_message() -> None:
    rules = spec_schema()["x-kubernetes-validations"]
    (rule,) = [r for r in rules if r.get("fieldPath") == ".slo.tpot"]
    assert "no token follows the first" in rule["message"]
    for name in ("self.slo.tpot", "self.slo.itl", "self.workload.outputTokens.mean", "self.workload.outputTokens.cv",
                 "self.workload.outputTokens.p95", "self.workload.outputTokens.percentiles.p99"):
        assert name in rule["rule"], name
