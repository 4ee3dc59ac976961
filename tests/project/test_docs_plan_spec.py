"""docs/plan-spec.md's bounds column says what the API server accepts: an integer range ("1-10000") is the CRD's
minimum and maximum for the field (for a map, its values; for a list, its length), and an open one (">= 1") is a
minimum with no maximum. It gave `observe.minRequests` as ">= 1", where the CRD (and the planner) refuse more
than 1000000."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
# Rows of a table that describes several fields at once: a token distribution, an SLO target.
_SHARED = {"workload.mean": "workload.promptTokens.mean",
           "workload.percentiles": "workload.promptTokens.percentiles.p50",
           "slo.maxMs": "slo.ttft.maxMs"}


def _spec_schema() -> dict[str, Any]:
    crd = yaml.safe_load((REPO / "crds" / "inferplan.io_inferencecapacityplans.yaml").read_text())
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]


def _ranges() -> list[tuple[str, int, int | None]]:
    """(field path under spec, low, high or None for an open range) for each table row whose bounds cell gives an
    integer range."""
    found = []
    for section in re.split(r"^## ", (REPO / "docs" / "plan-spec.md").read_text(), flags=re.M)[1:]:
        top = re.match(r"`(\w+)`", section)
        if not top:
            continue
        for field, bounds in re.findall(r"^\| `([\w.]+)` \|.*\| ([^|]*) \|$", section, re.M):
            path = _SHARED.get(f"{top.group(1)}.{field}", f"{top.group(1)}.{field}")
            if match := re.search(r"(?:^|, |each )(\d+)-(\d+)(?: items)?(?:[,;]|$)", bounds.strip()):
                found.append((path, int(match.group(1)), int(match.group(2))))
            elif match := re.fullmatch(r">= (\d+)", bounds.strip()):
                found.append((path, int(match.group(1)), None))
    return found


def _bounds(node: dict[str, Any]) -> tuple[Any, Any]:
    if node.get("type") == "array":
        return node.get("minItems"), node.get("maxItems")
    if node.get("type") == "object" and isinstance(node.get("additionalProperties"), dict):
        node = node["additionalProperties"]
    return node.get("minimum"), node.get("maximum")


def test_every_integer_range_of_the_spec_page_is_the_crds() -> None:
    ranges = _ranges()
    assert len(ranges) >= 20  # the page's tables were read
    wrong = []
    spec = _spec_schema()
    for path, low, high in ranges:
        node = spec
        for key in path.split("."):
            node = node["properties"][key]
        if _bounds(node) != (low, high):
            wrong.append(f"{path}: page {low}-{high}, CRD {_bounds(node)}")
    assert not wrong, wrong
