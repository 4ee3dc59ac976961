"""The example plans (examples/plans, examples/platform and the bundled copy of the chat example) are files a user
runs both ways: `inferplan plan FILE` and `kubectl apply -f FILE` (applied on a real API server in
tests/e2e/test_crd_validation.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from inferplan.planner.spec_parsing import load_plan_file
from inferplan.resource import GROUP, KIND, VERSION

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "examples").glob("*/*.yaml"))
BUNDLED = REPO / "inferplan" / "planner" / "data" / "example-plan.yaml"  # `inferplan plan` without a file
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")  # rendered Deployments and Services take the name


@pytest.mark.parametrize("path", [*EXAMPLES, BUNDLED], ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_example_is_a_manifest_kubectl_applies_in_any_namespace(path: Path) -> None:
    """A whole manifest (a bare spec is refused by kubectl: no apiVersion or kind), named, without a namespace: kubectl
    puts it in the current namespace or the one -n names (a namespace in the file fails where it does not exist,
    and beside any other -n). `inferplan plan` reads the same file."""
    manifest = yaml.safe_load(path.read_text())
    assert (manifest.get("apiVersion"), manifest.get("kind")) == (f"{GROUP}/{VERSION}", KIND)
    assert set(manifest) == {"apiVersion", "kind", "metadata", "spec"}
    assert set(manifest["metadata"]) == {"name"}, "only a name: no namespace"
    assert DNS_LABEL.match(manifest["metadata"]["name"])
    load_plan_file(path)


def test_example_names_are_unique_so_applying_a_folder_keeps_every_plan() -> None:
    names = [yaml.safe_load(path.read_text())["metadata"]["name"] for path in EXAMPLES]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
