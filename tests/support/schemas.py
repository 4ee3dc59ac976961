"""Rendered objects checked against the Kubernetes API schemas: `kubernetes-validate --strict`."""

from __future__ import annotations

import functools
import json
from typing import Any

import pytest

KUBERNETES_VERSIONS = ("1.29.0", "1.37.0")  # the oldest and newest the chart supports (tests/project/test_packaging.py)


@functools.cache
def _invalid(obj: str, version: str) -> str | None:
    import kubernetes_validate

    try:
        kubernetes_validate.validate(json.loads(obj), version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return str(exc)[:1500]
    return None


def assert_valid(obj: dict[str, Any]) -> None:
    """kubernetes-validate --strict for every supported Kubernetes version (skipped without the package)."""
    pytest.importorskip("kubernetes_validate", reason="kubernetes-validate not installed (pip install -e '.[dev]')")
    for version in KUBERNETES_VERSIONS:
        problem = _invalid(json.dumps(obj, sort_keys=True), version)
        assert problem is None, f"{obj['kind']} is invalid for Kubernetes {version}: {problem}"
