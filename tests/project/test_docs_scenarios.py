"""docs/scenarios.md says what inferplan does with each key of the shared scenario format: it names every key the
reader takes (`Scenario`), every engine and load kind the reader accepts, and each key whose value a prediction
does not use says so."""

from __future__ import annotations

import json
import re
import typing
from pathlib import Path

from inferplan.planner.calibration.predict import WEIGHT_SPELLINGS, predict_scenarios
from inferplan.planner.calibration.scenarios import ENGINES, KV_SPELLINGS, Load, Scenario, parse_scenario_line

REPO = Path(__file__).resolve().parents[2]
DOC = (REPO / "docs" / "scenarios.md").read_text(encoding="utf-8")
EXAMPLE = REPO / "inferplan" / "planner" / "data" / "example-scenarios.jsonl"


def _intro() -> str:
    return DOC.split("How inferplan treats them:", 1)[0]


def test_the_doc_lists_the_29_keys_in_the_formats_order() -> None:
    keys = list(Scenario.model_fields)
    assert len(keys) == 29
    found = [k for k in re.findall(r"`([a-z_]+)`", _intro()) if k in Scenario.model_fields]
    assert list(dict.fromkeys(found)) == keys


def test_the_doc_names_the_engines_and_load_kinds_the_reader_accepts() -> None:
    intro = _intro()
    engines = re.search(r"`engine` \(([^)]*)\)", intro)
    assert engines is not None and [e.strip() for e in engines.group(1).split(",")] == list(ENGINES)
    kinds = [typing.get_args(m.model_fields["kind"].annotation)[0] for m in typing.get_args(typing.get_args(Load)[0])]
    loads = re.search(r"`load` \(([^)]*)\)", intro)
    assert loads is not None and re.findall(r"`([a-z_]+)`", loads.group(1)) == kinds


def test_the_keys_a_prediction_does_not_use_are_named_as_such() -> None:
    unused = DOC.split("Read, with no effect on a prediction:", 1)[1].split("\n- ", 1)[0]
    changes = {"prefix_caching": [True, False, None], "gpu_variant_assumed": [True, False], "detail": ["x", "y"]}
    lines = [json.loads(line) for line in EXAMPLE.read_text(encoding="utf-8").splitlines() if line.strip()]
    for key, values in changes.items():
        assert f"`{key}`" in unused
        predicted = set()
        for value in values:
            rows = [parse_scenario_line(json.dumps(line | {key: value}), 1) for line in lines]
            assert all(isinstance(row, Scenario) for row in rows)
            predicted.add(tuple(p.predicted for p in predict_scenarios(rows)))  # type: ignore[arg-type]
        assert len(predicted) == 1, key


def test_the_weight_spellings_the_doc_quotes_read_as_it_says() -> None:
    """Each `spelling` as `value` the doc quotes is a spelling of one value that `WEIGHT_SPELLINGS` reads so, and each
    spelling it calls ambiguous has several."""
    quoted = re.findall(r"`([a-z0-9_]+)` as `([a-z0-9-]+)`", DOC)
    assert len(quoted) >= 3
    for spelt, value in quoted:
        assert WEIGHT_SPELLINGS[spelt] == (value,)
    several = re.search(r"one that may mean several, ((?:`[a-z0-9_-]+`, )+)is\s+settled", DOC)
    assert several is not None
    for spelt in re.findall(r"`([a-z0-9_-]+)`", several.group(1)):
        assert len(WEIGHT_SPELLINGS[spelt]) > 1


def test_the_kv_cache_spellings_the_doc_quotes_read_as_it_says() -> None:
    """Each KV spelling the doc quotes (`fp8_e4m3` ... are `fp8`, `bfloat16` is `bf16`) is in `KV_SPELLINGS` with
    that value, and a line of the bundled example spelling it so is read as it."""
    sentence = " ".join(DOC.split("A `kv_cache` that spells", 1)[1].split("any other value", 1)[0].split())
    quoted = re.findall(r"((?:`[a-z0-9_]+`(?: and )?)+) (?:are|is) `([a-z0-9]+)`", sentence)
    spelt = {name: value for names, value in quoted for name in re.findall(r"`([a-z0-9_]+)`", names)}
    assert set(spelt) == {"fp8_e4m3", "fp8_e5m2", "bfloat16", "float16"}
    line = json.loads(EXAMPLE.read_text(encoding="utf-8").splitlines()[0])
    for name, value in spelt.items():
        assert KV_SPELLINGS[name] == value
        row = parse_scenario_line(json.dumps(line | {"kv_cache": name}), 1)
        assert isinstance(row, Scenario) and row.kv_cache == value
