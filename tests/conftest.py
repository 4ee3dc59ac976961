from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PUBLISHED = REPO.parent / "shared" / "accuracy" / "scenarios.jsonl"

pytest_plugins = ["tests.support.tempdirs", "tests.support.fixtures"]


@pytest.fixture(scope="session")
def published_scenarios() -> Path:
    """The published measurements (../shared/accuracy/scenarios.jsonl beside the repository)."""
    if not PUBLISHED.is_file():
        pytest.skip(f"published scenarios not found at {PUBLISHED}")
    return PUBLISHED
