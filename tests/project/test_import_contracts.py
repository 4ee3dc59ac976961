"""The import contracts (pyproject.toml, [tool.importlinter]; docs/development.md, "Import contracts"): the layers of
the house and of the planner, a planner without kopf, Kubernetes, Prometheus or logging, nothing but the operator
talking to the cluster, and no import circle. lint-imports comes from the dev extra (import-linter); without it the
check is skipped, except in CI (CI=true), where it must run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]


def contracts() -> dict[str, dict[str, Any]]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    return {contract["id"]: contract for contract in config["tool"]["importlinter"]["contracts"]}


def lint_imports() -> str:
    path = Path(sys.executable).with_name("lint-imports")
    if path.is_file():
        return str(path)
    found = shutil.which("lint-imports")
    if found is None:
        reason = "lint-imports not installed (pip install -e '.[dev]' brings import-linter)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason} (CI=true: the import contracts must be checked, not skipped)", pytrace=False)
        pytest.skip(reason)
    return found


def test_the_import_contracts_hold() -> None:
    done = subprocess.run(
        [lint_imports(), "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def test_the_planner_may_not_import_the_cluster_or_logging() -> None:
    pure = contracts()["planner-pure"]
    assert pure["type"] == "forbidden"
    assert pure["source_modules"] == ["inferplan.planner"]
    assert {"kopf", "kubernetes", "logging"} <= set(pure["forbidden_modules"])


def test_every_top_level_module_and_planner_module_takes_a_layer() -> None:
    found = contracts()
    for name, container in (("house", "inferplan"), ("planner-rooms", "inferplan.planner")):
        assert found[name]["type"] == "layers"
        assert found[name]["containers"] == [container]
        assert found[name]["exhaustive"] is True
