"""The docs say what the operator may do to plans as the chart grants it (deploy/base/rbac.yaml, the chart's
default rendering: tests/project/test_packaging.py keeps them equal). They used to say it may patch plans, where
the role grants only their status."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "docs" / "install.md", REPO / "docs" / "security.md"]


def _plan_verbs() -> dict[str, set[str]]:
    """Resource (inferencecapacityplans, .../status) -> the verbs the operator's ClusterRole grants on it."""
    documents = yaml.safe_load_all((REPO / "deploy" / "base" / "rbac.yaml").read_text())
    role = next(d for d in documents if d and d["kind"] == "ClusterRole")
    verbs: dict[str, set[str]] = {}
    for rule in role["rules"]:
        if "inferplan.io" in rule.get("apiGroups", []):
            for resource in rule["resources"]:
                verbs.setdefault(resource, set()).update(rule["verbs"])
    return verbs


def test_the_chart_grants_no_write_to_plans_only_to_their_status() -> None:
    assert _plan_verbs() == {"inferencecapacityplans": {"list", "watch"},
                             "inferencecapacityplans/status": {"patch"}}


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_the_docs_grant_what_the_chart_grants(doc: Path) -> None:
    text = " ".join(doc.read_text().split())  # sentences across line breaks
    assert "list and watch plans and patch their status" in text
    for claim in ("patch plans and", "list, watch and patch plans", "list/watch/patch plans"):
        assert claim not in text, f"{doc.name} says the operator may {claim!r}"
