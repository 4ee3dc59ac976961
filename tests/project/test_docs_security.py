"""docs/security.md bounds a plan's search by the GPU types it may list, which are at most every type of the
catalog (two spellings of one GPU are an error). It said 32 after the catalog had grown to 33."""

from __future__ import annotations

import re
from pathlib import Path

from inferplan.planner.catalog.gpus import load_gpu_catalog

REPO = Path(__file__).resolve().parents[2]


def test_the_threat_models_grid_bound_counts_the_catalogs_gpu_types() -> None:
    text = " ".join((REPO / "docs" / "security.md").read_text().split())
    [count] = re.findall(r"at most the catalog's (\d+) GPU types", text)
    assert int(count) == len(load_gpu_catalog())
