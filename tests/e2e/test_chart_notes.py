"""The chart's install notes, rendered by helm against a real API server (`helm install --dry-run=client` asks the
server for its version; `helm template` renders no notes)."""

from __future__ import annotations

from typing import Any

from tests.support.helm import CHART, NAMESPACE, RELEASE, helm


def _notes(k8s: dict[str, Any], *sets: str) -> str:
    done = helm("install", "--dry-run=client", "--kubeconfig", str(k8s["kubeconfig"]), RELEASE, str(CHART),
                "--namespace", NAMESPACE, "--set", "crds.install=false", *sets)  # the session applied the CRD
    return done.stdout.split("NOTES:", 1)[1]


def test_the_notes_apply_the_example_plan_in_a_namespace_the_operator_watches(k8s: dict[str, Any]) -> None:
    # With watchNamespaces, the example applied without -n lands in the kubeconfig's namespace, which the operator
    # does not watch: nothing ever answers it.
    watched = _notes(k8s, "--set", "watchNamespaces={llm,team-a}")
    assert "kubectl apply -n llm -f deploy/examples/chat-assistant-8b.yaml" in watched
    assert "the namespaces llm, team-a" in watched
    everywhere = _notes(k8s)
    assert "kubectl apply -f deploy/examples/chat-assistant-8b.yaml" in everywhere and "all namespaces" in everywhere
